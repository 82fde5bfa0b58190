//! The progress bar of the first start: while the engine compiles inside evcxr, cargo's
//! `Compiling NAME` lines (which evcxr writes to this process's stderr) become an indicatif bar,
//! `[████████░░░░░░] 12/28 compiling cudarc`, on a terminal, or plain lines in a log. indicatif
//! draws; this module's own job is reading cargo's lines off stderr, which it must take over
//! for that (the bar draws on the real stderr, saved before).
//!
//! Stderr is routed through a pipe for the rest of the process: processes started during the
//! compile (rust-analyzer's helpers) inherit it and may outlive the compile, so the pipe is never
//! closed; after the compile its lines pass straight through.

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

/// Runs `f` with stderr shown as a progress display; returns what `f` returned and how many
/// crates of the engine (crates other than the cell's) cargo compiled meanwhile.
pub fn while_compiling<R>(cache: &Path, f: impl FnOnce() -> R) -> (R, usize) {
    let count_file = cache.join("engine-crates.txt");
    // The number of crates the last cold start compiled (28 on this project today).
    let total: usize = std::fs::read_to_string(&count_file)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(28);
    let tty = std::io::stderr().is_terminal();
    let mut fds = [0; 2];
    // SAFETY: plain POSIX calls on descriptors this function owns.
    let saved = unsafe { libc::dup(2) };
    if saved < 0 || unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        // No pipe, so no count: as if the engine had been compiled, which only republishes it.
        return (f(), usize::MAX);
    }
    unsafe { libc::dup2(fds[1], 2) };
    unsafe { libc::close(fds[1]) };
    let (finished, done) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    {
        let (finished, done) = (finished.clone(), done.clone());
        std::thread::spawn(move || {
            // SAFETY: fds[0] and `saved` are ours and wrapped once each.
            let pipe = unsafe { std::fs::File::from_raw_fd(fds[0]) };
            let out = SavedStderr(Arc::new(Mutex::new(unsafe {
                std::fs::File::from_raw_fd(saved)
            })));
            let bar = tty.then(|| {
                let bar = ProgressBar::with_draw_target(
                    Some(total as u64),
                    ProgressDrawTarget::term_like(Box::new(out.clone())),
                );
                bar.set_style(
                    ProgressStyle::with_template(
                        "building the engine for the REPL (first start only) [{bar:30}] {pos}/{len} compiling {msg}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("█░"),
                );
                bar
            });
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                // The cell's own crate (`ctx`) is not the engine.
                let compiling = line
                    .trim_start()
                    .strip_prefix("Compiling ")
                    .filter(|name| !name.starts_with("ctx "));
                match (compiling, &bar) {
                    (Some(name), _) if !finished.load(Ordering::Relaxed) => {
                        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                        let name = name.split_whitespace().next().unwrap_or("").to_string();
                        let all = total.max(n);
                        match &bar {
                            Some(bar) => {
                                bar.set_length(all as u64);
                                bar.set_position(n as u64);
                                bar.set_message(name);
                            }
                            None => {
                                let _ = out.write_line(&format!(
                                    "building the engine for the REPL: {n}/{all} compiling {name}"
                                ));
                            }
                        }
                    }
                    (_, Some(bar)) if !bar.is_finished() => {
                        if finished.load(Ordering::Relaxed) {
                            bar.finish_and_clear();
                            let _ = out.write_line(&line);
                        } else {
                            bar.suspend(|| out.write_line(&line)).ok();
                        }
                    }
                    _ => {
                        let _ = out.write_line(&line);
                    }
                }
            }
        });
    }
    let result = f();
    finished.store(true, Ordering::Relaxed);
    let n = done.load(Ordering::Relaxed);
    if n > 0 {
        if tty {
            eprintln!(
                "built the engine ({n} crate{}); later starts reuse it",
                if n == 1 { "" } else { "s" }
            );
        }
        if n > total / 2 {
            let _ = std::fs::write(&count_file, n.to_string());
        }
    }
    (result, n)
}

/// The process's real stderr (saved before stderr was routed through the pipe), as indicatif's
/// terminal.
#[derive(Debug, Clone)]
struct SavedStderr(Arc<Mutex<std::fs::File>>);

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
