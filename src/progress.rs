//! The progress bar of the first start: while the engine compiles inside evcxr, cargo's
//! `Compiling NAME` lines (which evcxr writes to this process's stderr) become an indicatif bar,
//! `[████████░░░░░░] 12/27 compiling cudarc`, on a terminal, or plain lines in a log. indicatif
//! draws; this module's own job is reading cargo's lines off stderr, which it must take over
//! for that (the bar draws on the real stderr, saved before).
//!
//! Stderr is routed through a pipe, once, for the rest of the process: processes started during
//! the compile (rust-analyzer's helpers) inherit it and may outlive the compile, so the pipe is
//! never closed; outside a compile its lines pass straight through. A line written to it reaches
//! the real stderr only when the relay thread has read it, so whatever must be seen before the
//! process ends (its last error) is followed by [`flush_stderr`].

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

/// The relay of stderr's pipe, made on the first compile; `None` if stderr could not be routed.
static ROUTED: OnceLock<Option<Arc<Relay>>> = OnceLock::new();

/// A line the relay swallows and answers: every line written before it has been relayed. The
/// control character keeps it from being anything a compiler prints.
const FLUSH_MARK: &str = "\u{1}placelab: flush stderr ";

/// Runs `f` with stderr shown as a progress display; returns what `f` returned and how many
/// crates of the engine (crates other than the cell's) cargo compiled meanwhile.
pub fn while_compiling<R>(cache: &Path, f: impl FnOnce() -> R) -> (R, usize) {
    let count_file = cache.join("engine-crates.txt");
    let total = last_count(&count_file);
    let Some(relay) = routed() else {
        // No pipe, so no count: as if the engine had been compiled, which only republishes it.
        return (f(), usize::MAX);
    };
    relay.begin(total);
    let result = f();
    // cargo's last `Compiling` lines may still be in the pipe: count them before the end.
    flush_stderr();
    let n = relay.end();
    if n > total / 2 {
        let _ = std::fs::write(&count_file, n.to_string());
    }
    (result, n)
}

/// Whether this process's stderr is a terminal: the real stderr's answer, also once stderr is
/// the pipe.
pub fn stderr_is_terminal() -> bool {
    match ROUTED.get() {
        Some(Some(relay)) => relay.tty,
        _ => std::io::stderr().is_terminal(),
    }
}

/// Waits (a second at most) until every line this process wrote to stderr has reached the real
/// stderr. Call it before the process exits, or a last message can be lost in the pipe.
pub fn flush_stderr() {
    let Some(Some(relay)) = ROUTED.get() else {
        return;
    };
    let asked = relay.flush.asked.fetch_add(1, Ordering::Relaxed) + 1;
    // One write: a line of under PIPE_BUF bytes is not mixed with another process's.
    let mark = format!("{FLUSH_MARK}{asked}\n");
    if std::io::stderr().write_all(mark.as_bytes()).is_err() {
        return;
    }
    let seen = relay.flush.seen.lock().unwrap_or_else(|e| e.into_inner());
    let _ = relay
        .flush
        .changed
        .wait_timeout_while(seen, Duration::from_secs(1), |seen| *seen < asked);
}

/// The relay, routing stderr through it on the first call; after a panic's message, which the
/// default hook writes to the pipe, the process may end at once: the hook flushes it.
fn routed() -> Option<Arc<Relay>> {
    ROUTED
        .get_or_init(|| {
            // Asked before stderr becomes the pipe.
            let tty = std::io::stderr().is_terminal();
            let (pipe, saved) = route_stderr()?;
            let relay = Arc::new(Relay {
                out: SavedStderr(Arc::new(Mutex::new(saved))),
                tty,
                compile: Mutex::new(None),
                flush: Flush::default(),
            });
            let reader = relay.clone();
            std::thread::spawn(move || reader.run(pipe));
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                previous(info);
                flush_stderr();
            }));
            Some(relay)
        })
        .clone()
}

/// The number of crates the last cold start compiled (27 on this project today).
fn last_count(count_file: &Path) -> usize {
    std::fs::read_to_string(count_file)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(27)
}

/// Makes stderr (fd 2) the write end of a new pipe; returns the pipe's read end and the real
/// stderr, saved before. `None`, with stderr unchanged, when either cannot be had.
fn route_stderr() -> Option<(File, File)> {
    let mut fds = [0; 2];
    // SAFETY: plain POSIX calls on descriptors this function owns; each one it returns is
    // wrapped once, and the pipe's write end is closed once it is fd 2.
    unsafe {
        let saved = libc::dup(2);
        if saved < 0 {
            return None;
        }
        let saved = File::from(OwnedFd::from_raw_fd(saved));
        if libc::pipe(fds.as_mut_ptr()) != 0 {
            return None;
        }
        libc::dup2(fds[1], 2);
        libc::close(fds[1]);
        Some((File::from(OwnedFd::from_raw_fd(fds[0])), saved))
    }
}

/// The compile the relay is showing: its bar (on a terminal) and count.
#[derive(Debug)]
struct Compile {
    bar: Option<ProgressBar>,
    /// Crates the last cold start compiled: the bar's length until more are seen.
    total: usize,
    /// Engine crates compiled so far.
    done: usize,
}

/// Flushes asked for, and answered by the relay.
#[derive(Debug, Default)]
struct Flush {
    asked: AtomicU64,
    seen: Mutex<u64>,
    changed: Condvar,
}

/// What reads the pipe, on a thread of its own: during a compile, cargo's `Compiling` lines
/// move the bar (or become log lines); every other line passes through to the real stderr.
#[derive(Debug)]
struct Relay {
    out: SavedStderr,
    /// Whether the real stderr is a terminal (a bar is drawn there).
    tty: bool,
    /// The compile under way, if any.
    compile: Mutex<Option<Compile>>,
    flush: Flush,
}

impl Relay {
    /// Relays the pipe's lines until it closes (never, in practice).
    fn run(&self, pipe: File) {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            self.relay(&line);
        }
    }

    /// A compile starts: a bar on a terminal, and a count from zero.
    fn begin(&self, total: usize) {
        let bar = self.tty.then(|| self.new_bar(total));
        *self.compile.lock().unwrap_or_else(|e| e.into_inner()) = Some(Compile {
            bar,
            total,
            done: 0,
        });
    }

    /// The compile has ended: its bar is cleared; returns how many engine crates it compiled.
    fn end(&self) -> usize {
        let ended = self
            .compile
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        ended.map_or(0, |c| {
            if let Some(bar) = c.bar {
                bar.finish_and_clear();
            }
            c.done
        })
    }

    fn new_bar(&self, total: usize) -> ProgressBar {
        let bar = ProgressBar::with_draw_target(
            Some(total as u64),
            ProgressDrawTarget::term_like(Box::new(self.out.clone())),
        );
        bar.set_style(
            ProgressStyle::with_template(
                "building the engine for the REPL (first start only) [{bar:30}] {pos}/{len} compiling {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("█░"),
        );
        bar
    }

    /// One line that reached stderr: a flush is answered; a crate of the engine moves the
    /// progress while a compile runs; other lines pass through (above the bar, if one is drawn).
    fn relay(&self, line: &str) {
        if let Some(asked) = line.strip_prefix(FLUSH_MARK) {
            let mut seen = self.flush.seen.lock().unwrap_or_else(|e| e.into_inner());
            *seen = (*seen).max(asked.trim().parse().unwrap_or(0));
            self.flush.changed.notify_all();
            return;
        }
        let mut compile = self.compile.lock().unwrap_or_else(|e| e.into_inner());
        match (engine_crate(line), compile.as_mut()) {
            (Some(name), Some(c)) => self.compiling(c, name),
            (_, Some(Compile { bar: Some(bar), .. })) => {
                bar.suspend(|| self.out.write_line(line)).ok();
            }
            _ => {
                let _ = self.out.write_line(line);
            }
        }
    }

    /// Counts one more engine crate and shows it.
    fn compiling(&self, c: &mut Compile, name: &str) {
        c.done += 1;
        let (n, all) = (c.done, c.total.max(c.done));
        match &c.bar {
            Some(bar) => {
                bar.set_length(all as u64);
                bar.set_position(n as u64);
                bar.set_message(name.to_string());
            }
            None => {
                let _ = self.out.write_line(&format!(
                    "building the engine for the REPL: {n}/{all} compiling {name}"
                ));
            }
        }
    }
}

/// The crate a cargo `Compiling NAME vX.Y.Z` line names, unless it is the cell's own crate
/// (`ctx`), which is not the engine.
fn engine_crate(line: &str) -> Option<&str> {
    line.trim_start()
        .strip_prefix("Compiling ")
        .filter(|rest| !rest.starts_with("ctx "))
        .map(|rest| rest.split_whitespace().next().unwrap_or(""))
}

/// The process's real stderr (saved before stderr was routed through the pipe), as indicatif's
/// terminal.
#[derive(Debug, Clone)]
struct SavedStderr(Arc<Mutex<File>>);

impl SavedStderr {
    fn write(&self, s: &str) -> std::io::Result<()> {
        let mut f = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f.write_all(s.as_bytes())?;
        f.flush()
    }
}

impl TermLike for SavedStderr {
    fn width(&self) -> u16 {
        let f = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: TIOCGWINSZ fills a winsize we own.
        let mut size: libc::winsize = unsafe { std::mem::zeroed() };
        let ok = unsafe { libc::ioctl(f.as_raw_fd(), libc::TIOCGWINSZ, &mut size) } == 0;
        if ok && size.ws_col > 0 {
            size.ws_col
        } else {
            100
        }
    }
    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.write(&format!("\x1b[{n}A"))
        } else {
            Ok(())
        }
    }
    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.write(&format!("\x1b[{n}B"))
        } else {
            Ok(())
        }
    }
    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.write(&format!("\x1b[{n}C"))
        } else {
            Ok(())
        }
    }
    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.write(&format!("\x1b[{n}D"))
        } else {
            Ok(())
        }
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.write(&format!("{s}\n"))
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.write(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        self.write("\r\x1b[2K")
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiling_lines_name_engine_crates_but_not_the_cell() {
        assert_eq!(engine_crate("   Compiling cudarc v0.16.6"), Some("cudarc"));
        assert_eq!(
            engine_crate("Compiling placelab v0.1.0 (/x)"),
            Some("placelab")
        );
        assert_eq!(engine_crate("   Compiling ctx v0.1.0 (/tmp/evcxr)"), None);
        assert_eq!(engine_crate("warning: unused variable"), None);
        assert_eq!(engine_crate("    Finished dev [unoptimized]"), None);
    }

    #[test]
    fn the_expected_count_is_the_last_cold_starts() {
        let dir = std::env::temp_dir().join(format!("placelab-progress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("engine-crates.txt");
        assert_eq!(last_count(&file), 27);
        std::fs::write(&file, "31\n").unwrap();
        assert_eq!(last_count(&file), 31);
        std::fs::write(&file, "many").unwrap();
        assert_eq!(last_count(&file), 27);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A relay writing to a file, as a log's stderr would be (no terminal, no bar).
    fn relay_to(path: &Path) -> Relay {
        Relay {
            out: SavedStderr(Arc::new(Mutex::new(File::create(path).unwrap()))),
            tty: false,
            compile: Mutex::new(None),
            flush: Flush::default(),
        }
    }

    /// Without a terminal: `Compiling` lines become log lines while the compile runs, and every
    /// line passes through as it is outside it.
    #[test]
    fn a_log_gets_one_line_per_engine_crate() {
        let path = std::env::temp_dir().join(format!("placelab-relay-{}.log", std::process::id()));
        let relay = relay_to(&path);
        relay.relay("   Compiling early v1.0.0");
        relay.begin(2);
        for line in [
            "   Compiling libc v0.2.170",
            "   Compiling ctx v0.1.0 (/tmp/evcxr)",
            "note: something else",
            "   Compiling cudarc v0.16.6",
            "   Compiling half v2.4.1",
        ] {
            relay.relay(line);
        }
        assert_eq!(relay.end(), 3);
        relay.relay("   Compiling ctx v0.1.0 (/tmp/evcxr)");
        relay.relay("   Compiling late v1.0.0");
        let log = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            log,
            "   Compiling early v1.0.0\n\
             building the engine for the REPL: 1/2 compiling libc\n   \
             Compiling ctx v0.1.0 (/tmp/evcxr)\n\
             note: something else\n\
             building the engine for the REPL: 2/2 compiling cudarc\n\
             building the engine for the REPL: 3/3 compiling half\n   \
             Compiling ctx v0.1.0 (/tmp/evcxr)\n   \
             Compiling late v1.0.0\n"
        );
    }

    /// Through a real pipe: a flush is answered once every line written before it is out, and
    /// its mark is not shown.
    #[test]
    fn a_flush_is_answered_after_the_lines_before_it() {
        let path = std::env::temp_dir().join(format!("placelab-flush-{}.log", std::process::id()));
        let relay = Arc::new(relay_to(&path));
        let mut fds = [0; 2];
        // SAFETY: a new pipe; each end is wrapped once.
        let (read, mut write) = unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            (
                File::from(OwnedFd::from_raw_fd(fds[0])),
                File::from(OwnedFd::from_raw_fd(fds[1])),
            )
        };
        let reader = relay.clone();
        let thread = std::thread::spawn(move || reader.run(read));
        write
            .write_all(format!("the last words\n{FLUSH_MARK}7\n").as_bytes())
            .unwrap();
        let seen = relay.flush.seen.lock().unwrap();
        let (seen, waited) = relay
            .flush
            .changed
            .wait_timeout_while(seen, Duration::from_secs(10), |seen| *seen < 7)
            .unwrap();
        assert!(!waited.timed_out() && *seen == 7);
        drop(seen);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "the last words\n");
        drop(write);
        thread.join().unwrap();
        std::fs::remove_file(&path).unwrap();
    }
}
