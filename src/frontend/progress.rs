//! The progress bar of the first start: while the engine compiles inside evcxr, cargo's
//! `Compiling NAME` lines (which evcxr writes to this process's stderr) become
//! `[████████░░░░░░] 12/28 compiling cudarc` on a terminal, or plain lines in a log.
//!
//! Stderr is routed through a pipe for the rest of the process: processes started during the
//! compile (rust-analyzer's helpers) inherit it and may outlive the compile, so the pipe is never
//! closed; after the compile its lines pass straight through.

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::os::fd::FromRawFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Runs `f` with stderr shown as a progress display; returns what `f` returned.
pub fn while_compiling<R>(cache: &Path, f: impl FnOnce() -> R) -> R {
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
        return f();
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
            let mut out = unsafe { std::fs::File::from_raw_fd(saved) };
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let compiling = line.trim_start().strip_prefix("Compiling ");
                match compiling {
                    Some(name) if !finished.load(Ordering::Relaxed) => {
                        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                        let name = name.split_whitespace().next().unwrap_or("");
                        let all = total.max(n);
                        let _ = if tty {
                            let filled = n * 30 / all;
                            write!(
                                out,
                                "\r\x1b[Kbuilding the engine for the REPL (first start only) [{}{}] {n}/{all} compiling {name}",
                                "█".repeat(filled),
                                "░".repeat(30 - filled)
                            )
                        } else {
                            writeln!(
                                out,
                                "building the engine for the REPL: {n}/{all} compiling {name}"
                            )
                        };
                    }
                    _ => {
                        let clear = if tty
                            && !finished.load(Ordering::Relaxed)
                            && done.load(Ordering::Relaxed) > 0
                        {
                            "\r\x1b[K"
                        } else {
                            ""
                        };
                        let _ = writeln!(out, "{clear}{line}");
                    }
                }
                let _ = out.flush();
            }
        });
    }
    let result = f();
    finished.store(true, Ordering::Relaxed);
    let n = done.load(Ordering::Relaxed);
    if n > 0 {
        if tty {
            eprintln!("\r\x1b[Kbuilt the engine ({n} crates); later starts reuse it");
        }
        if n > total / 2 {
            let _ = std::fs::write(&count_file, n.to_string());
        }
    }
    result
}
