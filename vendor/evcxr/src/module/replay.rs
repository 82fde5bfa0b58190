// placelab's patch: a cell compiled without cargo when nothing but the cell changed.
//
// Every cell is a new `src/lib.rs` in the same crate. Once cargo has built it, cargo's work for
// the next cell is the same each time: read Cargo.toml and the lock file, check that every
// dependency is fresh, and start rustc with the same command line. That no-op part cost 40-50
// ms a compile (`benches/RESULTS.md`, "REPL latency"). The rustc wrapper (`wrap_rustc_helper`)
// writes down the command it ran for the cell's crate; as long as everything cargo reads is
// unchanged (Cargo.toml, .cargo/config.toml and cargo's own command line and environment), the
// next compile starts that rustc directly. Anything else (a `:dep`, another opt level, a
// failure that is not a compile error) goes back to cargo.

use serde::Deserialize;
use serde::Serialize;
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::time::SystemTime;

/// Set by `Module::compile` for a cargo build whose rustc command should be written down: the
/// file to write it to.
pub(crate) const RECORD_FILE_ENV: &str = "EVCXR_RUSTC_RECORD_FILE";
pub(crate) const RECORD_FILE: &str = ".evcxr-rustc-command.json";

/// What rustc was started with for the cell's crate.
#[derive(Serialize, Deserialize)]
pub(crate) struct RustcCommand {
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    cwd: String,
}

/// A written-down rustc command and what it was written under.
pub(crate) struct Replay {
    /// What cargo read when it started that rustc (see [`cargo_inputs`]).
    inputs: String,
    command: RustcCommand,
    /// The crates the cell links (`--extern`), as they were then: a crate rebuilt since (the
    /// engine, by an admin's `prebuild`) sends the next compile through cargo.
    externs: Vec<(PathBuf, Option<SystemTime>)>,
}

impl Replay {
    /// The command written by the wrapper during the cargo build that had `inputs`.
    pub(crate) fn read(record: &Path, inputs: String) -> Option<Replay> {
        let text = std::fs::read_to_string(record).ok()?;
        let command: RustcCommand = serde_json::from_str(&text).ok()?;
        let externs = extern_files(&command.args)
            .map(|p| (p.clone(), modified(&p)))
            .collect();
        Some(Replay {
            inputs,
            command,
            externs,
        })
    }

    /// Whether a compile with `inputs` may skip cargo.
    pub(crate) fn fits(&self, inputs: &str) -> bool {
        self.inputs == inputs && self.externs.iter().all(|(p, then)| modified(p) == *then)
    }

    /// The rustc command, in the environment cargo gave it; the caller adds the process group.
    pub(crate) fn command(&self) -> Command {
        let c = &self.command;
        let mut command = Command::new(&c.program);
        command
            .args(&c.args)
            .env_clear()
            .envs(c.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&c.cwd);
        command
    }

    /// The arguments, to find the shared object rustc writes.
    pub(crate) fn as_command(&self) -> Command {
        let mut command = Command::new(&self.command.program);
        command.args(&self.command.args);
        command
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The files of `--extern name=path` and `--extern=name=path` arguments.
fn extern_files(args: &[String]) -> impl Iterator<Item = PathBuf> + '_ {
    let mut after_extern = false;
    args.iter().filter_map(move |arg| {
        let value = match arg.strip_prefix("--extern=") {
            Some(v) => Some(v),
            None if after_extern => Some(arg.as_str()),
            None => None,
        };
        after_extern = arg == "--extern";
        Some(PathBuf::from(value?.split_once('=')?.1))
    })
}

/// Everything cargo's decision rests on, as text: its command line, the environment it inherits
/// (`:env` changes it) and the one it is given, the manifest and the config file. Two compiles
/// with the same inputs start the same rustc.
pub(crate) fn cargo_inputs(cargo: &Command, crate_dir: &Path) -> String {
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    let inherited: Vec<_> = std::env::vars_os().collect();
    format!(
        "{cargo:?}\n{inherited:?}\n{}\n{}",
        read(crate_dir.join("Cargo.toml")),
        read(crate_dir.join(".cargo").join("config.toml"))
    )
}

/// In the rustc wrapper: writes down `rustc` (the command about to run) when cargo's caller asked
/// for it. Nothing is written when a part is not UTF-8 (that cell's successors use cargo).
pub(crate) fn record(rustc: &Command) {
    let Some(file) = std::env::var_os(RECORD_FILE_ENV) else {
        return;
    };
    let text = |s: &std::ffi::OsStr| s.to_str().map(str::to_owned);
    // The jobserver cargo shares with rustc is gone once cargo ends: a rustc started later on
    // its own must not look for it.
    let jobserver = |k: &str| matches!(k, "CARGO_MAKEFLAGS" | "MAKEFLAGS" | "MFLAGS");
    let env: Option<Vec<(String, String)>> = std::env::vars_os()
        .filter(|(k, _)| !k.to_str().is_some_and(jobserver))
        .map(|(k, v)| Some((text(&k)?, text(&v)?)))
        .collect();
    let command = (|| {
        Some(RustcCommand {
            program: text(rustc.get_program())?,
            args: rustc.get_args().map(text).collect::<Option<_>>()?,
            env: env?,
            cwd: text(std::env::current_dir().ok()?.as_os_str())?,
        })
    })();
    if let Some(json) = command.and_then(|c| serde_json::to_string(&c).ok()) {
        let _ = std::fs::write(file, json);
    }
}

/// rustc's JSON diagnostics with the ANSI colour codes taken out of their text (`\u001b[…m` in
/// the JSON), as cargo passes them on: readers of `rendered` find `= note: ` lines in it.
pub(crate) fn without_colours(json_lines: &[u8]) -> Vec<u8> {
    static COLOUR: once_cell::sync::Lazy<regex::bytes::Regex> =
        once_cell::sync::Lazy::new(|| regex::bytes::Regex::new(r"\\u001b\[[0-9;]*m").unwrap());
    COLOUR.replace_all(json_lines, &b""[..]).into_owned()
}
