//! The names of variables' types: the public path of a type the cell process named at run time
//! (so a cell with a new `let` compiles once), and the short form `:vars` and inspection show.
//!
//! A cell stores a new variable through a generic function that reports
//! `std::any::type_name` of it (evcxr, `vendor/evcxr/src/learned_types.rs`). That name writes
//! each type where it is defined (`alloc::vec::Vec<f32>`, `placelab::tensor::Tensor`), often in
//! a private module, and the next cell must name the type to take the variable back. Paths of
//! the standard library and of the engine are made public from the tables here, and the cells'
//! own types are written by name; a name with any other path (a closure, a function, a private
//! type) gets `None`, and evcxr asks rustc, as it did for every new variable before.

use std::any::type_name;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Where `std::any::type_name` writes a standard library type, and its public path.
const STD_PATHS: &[(&str, &str)] = &[
    ("alloc::boxed::Box", "std::boxed::Box"),
    (
        "alloc::collections::btree::map::BTreeMap",
        "std::collections::BTreeMap",
    ),
    (
        "alloc::collections::btree::set::BTreeSet",
        "std::collections::BTreeSet",
    ),
    (
        "alloc::collections::vec_deque::VecDeque",
        "std::collections::VecDeque",
    ),
    ("alloc::rc::Rc", "std::rc::Rc"),
    ("alloc::string::String", "std::string::String"),
    ("alloc::sync::Arc", "std::sync::Arc"),
    ("alloc::vec::Vec", "std::vec::Vec"),
    ("alloc::vec::into_iter::IntoIter", "std::vec::IntoIter"),
    ("core::cell::Cell", "std::cell::Cell"),
    ("core::cell::RefCell", "std::cell::RefCell"),
    ("core::marker::Send", "std::marker::Send"),
    ("core::marker::Sync", "std::marker::Sync"),
    ("core::ops::function::Fn", "std::ops::Fn"),
    ("core::ops::function::FnMut", "std::ops::FnMut"),
    ("core::ops::function::FnOnce", "std::ops::FnOnce"),
    ("core::ops::range::Range", "std::ops::Range"),
    (
        "core::ops::range::RangeInclusive",
        "std::ops::RangeInclusive",
    ),
    ("core::option::Option", "std::option::Option"),
    ("core::result::Result", "std::result::Result"),
    ("core::time::Duration", "std::time::Duration"),
    (
        "std::collections::hash::map::HashMap",
        "std::collections::HashMap",
    ),
    (
        "std::collections::hash::set::HashSet",
        "std::collections::HashSet",
    ),
    ("std::sync::poison::mutex::Mutex", "std::sync::Mutex"),
    ("std::time::Instant", "std::time::Instant"),
];

/// The engine's types a cell's variable commonly holds, by the path `type_name` writes (this
/// process links the same engine as the cell's) and the public path the compiler checks here.
fn engine_paths() -> &'static HashMap<&'static str, &'static str> {
    static PATHS: OnceLock<HashMap<&'static str, &'static str>> = OnceLock::new();
    macro_rules! public {
        ($($path:path),* $(,)?) => {
            HashMap::from([$((type_name::<$path>(), stringify!($path))),*])
        };
    }
    PATHS.get_or_init(|| {
        public![
            placelab::Tensor,
            placelab::Device,
            placelab::DeviceKind,
            placelab::DType,
            placelab::Error,
            placelab::TensorOptions,
            placelab::amp::GradScaler,
            placelab::cost::measured::Run,
            placelab::data::DataLoader,
            placelab::memory::caching::MemoryStats,
            placelab::nn::CrossEntropyLoss,
            placelab::nn::Dropout,
            placelab::nn::Flatten,
            placelab::nn::Linear,
            placelab::nn::MoveReport,
            placelab::nn::MSELoss,
            placelab::nn::NLLLoss,
            placelab::nn::ReLU,
            placelab::nn::Sequential,
            placelab::nn::Sigmoid,
            placelab::nn::Tanh,
            placelab::optim::Adam,
            placelab::optim::Sgd,
            placelab::parallel::DataParallel,
            placelab::profile::Profile,
            placelab::transfer::Transfer,
        ]
    })
}

/// Words a type name holds besides paths: primitive types and the keywords of type syntax.
const PLAIN_WORDS: &[&str] = &[
    "bool", "char", "str", "f32", "f64", "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16",
    "u32", "u64", "u128", "usize", "dyn", "mut", "fn", "const",
];

/// `name`, as `std::any::type_name` writes it, with every path public, and a path `own` says is
/// to a type the cells defined written by its name; `None` when a path is none of these, or the
/// name holds a closure (`{{closure}}`) or anything else not plain.
pub fn public_type(name: &str, own: &dyn Fn(&str) -> bool) -> Option<String> {
    if name.contains(['{', '"']) {
        return None;
    }
    let mut out = String::with_capacity(name.len() + 16);
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if !(c.is_ascii_alphabetic() || c == '_') {
            out.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        let word = &rest[..end];
        // A lifetime (`'static`, `'_`) or a primitive stays as it is.
        if out.ends_with('\'') || PLAIN_WORDS.contains(&word) {
            out.push_str(word);
        } else if own(word) {
            out.push_str(word.rsplit("::").next().unwrap_or(word));
        } else {
            let std = STD_PATHS.iter().find(|(at, _)| *at == word);
            out.push_str(std.map(|(_, p)| *p).or(engine_paths().get(word).copied())?);
        }
        rest = &rest[end..];
    }
    Some(out)
}

/// A type as a person reads it: each path shortened to its last name
/// (`std::result::Result<placelab::Tensor, placelab::Error>` is `Result<Tensor, Error>`).
pub fn short(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut word = String::new();
    for c in name.chars().chain(std::iter::once(' ')) {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        // `a::b::C` keeps `C`; a leading `::` (`::core::…`) goes with it.
        out.push_str(word.rsplit("::").next().unwrap_or(&word));
        word.clear();
        out.push(c);
    }
    out.pop();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As in a session whose cells defined `struct Scaled`.
    fn public(name: &str) -> Option<String> {
        public_type(name, &|path| path == "ctx::Scaled")
    }

    #[test]
    fn standard_and_engine_paths_become_public() {
        let tensor = type_name::<placelab::Tensor>();
        let result = type_name::<placelab::Result<placelab::Tensor>>();
        assert_eq!(public(tensor).as_deref(), Some("placelab::Tensor"));
        assert_eq!(
            public(result).as_deref(),
            Some("std::result::Result<placelab::Tensor, placelab::Error>")
        );
        let map = type_name::<std::collections::HashMap<String, [usize; 3]>>();
        assert_eq!(
            public(map).as_deref(),
            Some("std::collections::HashMap<std::string::String, [usize; 3]>")
        );
        let tuple = type_name::<(u8, f64, &'static str, Vec<placelab::nn::Linear>)>();
        assert_eq!(
            public(tuple).as_deref(),
            Some("(u8, f64, &str, std::vec::Vec<placelab::nn::Linear>)")
        );
        let boxed = type_name::<Box<dyn Fn(f32) -> f32 + Send>>();
        assert_eq!(
            public(boxed).as_deref(),
            Some("std::boxed::Box<dyn std::ops::Fn(f32) -> f32 + std::marker::Send>")
        );
    }

    #[test]
    fn other_paths_and_closures_are_left_to_rustc() {
        struct Mine;
        let closure = |x: i32| x + 1;
        let name_of = |_: &dyn Fn(i32) -> i32| type_name_of(&closure);
        fn type_name_of<T>(_: &T) -> &'static str {
            type_name::<T>()
        }
        assert_eq!(public(type_name::<Mine>()), None);
        assert_eq!(
            public("alloc::vec::Vec<ctx::Scaled>").as_deref(),
            Some("std::vec::Vec<Scaled>")
        );
        assert_eq!(public("ctx::triple"), None);
        assert_eq!(public(type_name::<Vec<Mine>>()), None);
        assert_eq!(public(name_of(&closure)), None);
        assert_eq!(public(type_name::<std::str::Chars<'static>>()), None);
    }

    #[test]
    fn short_names_drop_the_paths() {
        assert_eq!(
            short("std::result::Result<placelab::Tensor, placelab::Error>"),
            "Result<Tensor, Error>"
        );
        assert_eq!(short("(placelab::Tensor, u8)"), "(Tensor, u8)");
        assert_eq!(
            short("std::boxed::Box<dyn Fn(f32) -> f32>"),
            "Box<dyn Fn(f32) -> f32>"
        );
        assert_eq!(short("::core::convert::Infallible"), "Infallible");
        assert_eq!(short("[f32; 3]"), "[f32; 3]");
    }
}
