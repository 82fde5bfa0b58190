//! The progress bar of the first start: while the engine compiles inside evcxr, cargo's
//! `Compiling NAME` lines (which evcxr writes to this process's stderr) become
//! `[████████░░░░░░] 12/28 compiling cudarc` on a terminal, or plain lines in a log.

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::path::Path;

/// Runs `f` with stderr captured into a progress display; returns what `f` returned.
pub fn while_compiling<R>(cache: &Path, f: impl FnOnce() -> R) -> R {
    let count_file = cache.join("engine-crates.txt");
    // The number of crates the last cold start compiled (28 on this project today).
    let total: usize = std::fs::read_to_string(&count_file)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(28);
    let tty = std::io::stderr().is_terminal();
    let mut fds = [0; 2];
    // SAFETY: plain POSIX calls on descriptors this function owns; fd 2 is restored below.
    let saved = unsafe { libc::dup(2) };
    if saved < 0 || unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return f();
    }
    unsafe { libc::dup2(fds[1], 2) };
    unsafe { libc::close(fds[1]) };
    let reader = std::thread::spawn(move || {
        // SAFETY: fds[0] and `saved` are ours; each is wrapped once.
        let pipe = unsafe { std::fs::File::from_raw_fd(fds[0]) };
        let mut out = unsafe { std::fs::File::from_raw_fd(saved) };
        let mut done = 0usize;
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let Some(name) = line.trim_start().strip_prefix("Compiling ") else {
                let _ = writeln!(
                    out,
                    "{}{line}",
                    if tty && done > 0 { "\r\x1b[K" } else { "" }
                );
                continue;
            };
            done += 1;
            let name = name.split_whitespace().next().unwrap_or("");
            if tty {
                let width = 30;
                let filled = (done * width / total.max(done)).min(width);
                let _ = write!(
                    out,
                    "\r\x1b[Kbuilding the engine for the REPL (first start only) [{}{}] {done}/{} compiling {name}",
                    "█".repeat(filled),
                    "░".repeat(width - filled),
                    total.max(done)
                );
            } else {
                let _ = writeln!(
                    out,
                    "building the engine for the REPL: {done}/{} compiling {name}",
                    total.max(done)
                );
            }
            let _ = out.flush();
        }
        if tty && done > 0 {
            let _ = writeln!(
                out,
                "\r\x1b[Kbuilt the engine ({done} crates); later starts reuse it"
            );
        }
        (done, out.into_raw_fd())
    });
    let result = f();
    // Restore stderr; closing our copy of the pipe's write end ends the reader.
    unsafe { libc::dup2(saved, 2) };
    if let Ok((done, _)) = reader.join()
        && done > total / 2
    {
        let _ = std::fs::write(&count_file, done.to_string());
    }
    result
}
