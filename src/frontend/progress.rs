//! The progress bar of the first start: while the engine compiles inside evcxr, cargo's
//! `Compiling NAME` lines (which evcxr writes to this process's stderr) become an indicatif bar,
//! `[████████░░░░░░] 12/28 compiling cudarc`, on a terminal, or plain lines in a log. indicatif
//! draws; this module's own job is reading cargo's lines off stderr, which it must take over
//! for that (the bar draws on the real stderr, saved before).
//!
//! Stderr is routed through a pipe for the rest of the process: processes started during the
//! compile (rust-analyzer's helpers) inherit it and may outlive the compile, so the pipe is never
//! closed; after the compile its lines pass straight through.

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

/// Runs `f` with stderr shown as a progress display; returns what `f` returned and how many
/// crates of the engine (crates other than the cell's) cargo compiled meanwhile.
pub fn while_compiling<R>(cache: &Path, f: impl FnOnce() -> R) -> (R, usize) {
    let count_file = cache.join("engine-crates.txt");
    let total = last_count(&count_file);
    // Asked before stderr becomes the pipe.
    let tty = std::io::stderr().is_terminal();
    let Some((pipe, saved)) = route_stderr() else {
        // No pipe, so no count: as if the engine had been compiled, which only republishes it.
        return (f(), usize::MAX);
    };
    let count = Arc::new(Count::default());
    let relay = Relay {
        out: SavedStderr(Arc::new(Mutex::new(saved))),
        bar: None,
        total,
        count: count.clone(),
    };
    std::thread::spawn(move || relay.run(pipe, tty));
    let result = f();
    count.finished.store(true, Ordering::Relaxed);
    let n = count.done.load(Ordering::Relaxed);
    if n > total / 2 {
        let _ = std::fs::write(&count_file, n.to_string());
    }
    (result, n)
}

/// The number of crates the last cold start compiled (28 on this project today).
fn last_count(count_file: &Path) -> usize {
    std::fs::read_to_string(count_file)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(28)
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

/// What the compile and the thread reading the pipe share.
#[derive(Debug, Default)]
struct Count {
    /// `f` has returned: later `Compiling` lines are not the engine's.
    finished: AtomicBool,
    /// Engine crates compiled so far.
    done: AtomicUsize,
}

/// The thread that reads the pipe: cargo's `Compiling` lines move the bar (or become log
/// lines), every other line passes through to the real stderr.
struct Relay {
    out: SavedStderr,
    /// Drawn on a terminal only.
    bar: Option<ProgressBar>,
    total: usize,
    count: Arc<Count>,
}

impl Relay {
    /// Relays the pipe's lines until it closes (never, in practice), with a bar on a terminal.
    fn run(mut self, pipe: File, tty: bool) {
        if tty {
            self.bar = Some(self.new_bar());
        }
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            self.relay(&line);
        }
    }

    fn new_bar(&self) -> ProgressBar {
        let bar = ProgressBar::with_draw_target(
            Some(self.total as u64),
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

    /// One line that reached stderr: a crate of the engine moves the progress while the
    /// compile runs; other lines pass through (above the bar, or clearing it once it is done).
    fn relay(&self, line: &str) {
        match (engine_crate(line), &self.bar) {
            (Some(name), _) if !self.count.finished.load(Ordering::Relaxed) => self.compiling(name),
            (_, Some(bar)) if !bar.is_finished() => {
                if self.count.finished.load(Ordering::Relaxed) {
                    bar.finish_and_clear();
                    let _ = self.out.write_line(line);
                } else {
                    bar.suspend(|| self.out.write_line(line)).ok();
                }
            }
            _ => {
                let _ = self.out.write_line(line);
            }
        }
    }

    /// Counts one more engine crate and shows it.
    fn compiling(&self, name: &str) {
        let n = self.count.done.fetch_add(1, Ordering::Relaxed) + 1;
        let all = self.total.max(n);
        match &self.bar {
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
        assert_eq!(last_count(&file), 28);
        std::fs::write(&file, "31\n").unwrap();
        assert_eq!(last_count(&file), 31);
        std::fs::write(&file, "many").unwrap();
        assert_eq!(last_count(&file), 28);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Without a terminal: `Compiling` lines become log lines while the compile runs, and every
    /// line passes through as it is after it.
    #[test]
    fn a_log_gets_one_line_per_engine_crate() {
        let path = std::env::temp_dir().join(format!("placelab-relay-{}.log", std::process::id()));
        let count = Arc::new(Count::default());
        let relay = Relay {
            out: SavedStderr(Arc::new(Mutex::new(File::create(&path).unwrap()))),
            bar: None,
            total: 2,
            count: count.clone(),
        };
        for line in [
            "   Compiling libc v0.2.170",
            "   Compiling ctx v0.1.0 (/tmp/evcxr)",
            "note: something else",
            "   Compiling cudarc v0.16.6",
            "   Compiling half v2.4.1",
        ] {
            relay.relay(line);
        }
        count.finished.store(true, Ordering::Relaxed);
        relay.relay("   Compiling ctx v0.1.0 (/tmp/evcxr)");
        relay.relay("   Compiling late v1.0.0");
        assert_eq!(count.done.load(Ordering::Relaxed), 3);
        let log = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            log,
            "building the engine for the REPL: 1/2 compiling libc\n   \
             Compiling ctx v0.1.0 (/tmp/evcxr)\n\
             note: something else\n\
             building the engine for the REPL: 2/2 compiling cudarc\n\
             building the engine for the REPL: 3/3 compiling half\n   \
             Compiling ctx v0.1.0 (/tmp/evcxr)\n   \
             Compiling late v1.0.0\n"
        );
    }
}
