//! What runs inside a REPL cell's process beside the user's code: `show()` and evcxr's display
//! hooks, the pass-through of its stdout and stderr that marks failed cells (`streams.rs`), the
//! probe the front end asks over its side channel (`probe/`, with its one wire protocol), and
//! the learner's exercises (a written prediction checked against what ran).

pub mod exercise;
pub mod probe;
pub mod show;
pub mod streams;
