//! The cell process's stdout and stderr, passed through a thread that tells the front end when a
//! cell failed. evcxr reports a cell's `?` error and its panic only to itself (a marker line on
//! stdout, after the message went to stderr) and calls the cell a success; here the marker makes
//! the stderr written just before it into one marked block, so the session can show it as the
//! cell's error (an `error` message in Jupyter, a failed cell everywhere).
//!
//! Stderr is held back until stdout moves, a marker arrives, or `HOLD` passes quietly: a message
//! and its marker are written back to back, so the message is what was held when the marker came.

use std::os::fd::RawFd;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// evcxr's markers on the cell process's stdout (`evcxr_internal_runtime::USER_ERROR_OCCURRED`,
/// and the line its generated code prints after catching a panic).
pub const EVCXR_USER_ERROR: &str = "EVCXR_ERROR_OCCURRED";
pub const EVCXR_PANIC: &str = "EVCXR_PANIC_NOTIFICATION";

/// On stderr, around the text of a failed cell: `PLACELAB_CELL_FAILED error|interrupted|panic`,
/// the text, then `PLACELAB_CELL_FAILED_END`.
pub const FAILED_BEGIN: &str = "PLACELAB_CELL_FAILED";
pub const FAILED_END: &str = "PLACELAB_CELL_FAILED_END";

/// How a cell failed, as the cell process knows it and the failure marker carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The cell returned an `Err` (with `?`).
    Error,
    /// The cell returned an `Err` after Ctrl-C: the interrupt's.
    Interrupted,
    /// The cell panicked.
    Panic,
}

impl Failure {
    /// The word after `FAILED_BEGIN`.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Error => "error",
            Failure::Interrupted => "interrupted",
            Failure::Panic => "panic",
        }
    }

    /// The failure a marker's word names; `None` for a word this version does not write.
    pub fn parse(word: &str) -> Option<Failure> {
        [Failure::Error, Failure::Interrupted, Failure::Panic]
            .into_iter()
            .find(|f| f.as_str() == word)
    }
}
/// On stderr: everything the cell wrote before this line has been passed on.
pub const SYNC: &str = "PLACELAB_SYNC";

const HOLD: Duration = Duration::from_millis(30);
/// After a panic's first line, how long its message and backtrace are held for the marker that
/// follows them (printing a backtrace resolves symbols: tens to hundreds of milliseconds).
const HOLD_PANIC: Duration = Duration::from_secs(10);

/// Puts the pass-through thread between the process and its stdout and stderr (once).
pub fn install() {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        // SAFETY: plain POSIX calls on descriptors this function creates or duplicates.
        unsafe {
            let (mut out, mut err) = ([0; 2], [0; 2]);
            if libc::pipe(out.as_mut_ptr()) != 0 || libc::pipe(err.as_mut_ptr()) != 0 {
                return false;
            }
            let (real_out, real_err) = (libc::dup(1), libc::dup(2));
            if real_out < 0 || real_err < 0 {
                return false;
            }
            libc::dup2(out[1], 1);
            libc::dup2(err[1], 2);
            libc::close(out[1]);
            libc::close(err[1]);
            std::thread::Builder::new()
                .name("placelab-cell-io".into())
                .spawn(move || pass_through(out[0], err[0], real_out, real_err))
                .is_ok()
        }
    });
}

/// Writes a sync line to stderr; the front end waits for it to know it has seen all output.
pub fn sync(token: u64) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{SYNC} {token}");
}

fn write_all(fd: RawFd, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: writing from a live slice to a descriptor this thread owns.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

/// Complete lines taken off the front of `buf` (with their newlines).
fn take_lines(buf: &mut Vec<u8>) -> Vec<Vec<u8>> {
    let mut lines = Vec::new();
    while let Some(at) = buf.iter().position(|&b| b == b'\n') {
        lines.push(buf.drain(..=at).collect());
    }
    lines
}

fn pass_through(out: RawFd, err: RawFd, real_out: RawFd, real_err: RawFd) {
    let (mut out_buf, mut err_buf) = (Vec::new(), Vec::new());
    // Stderr lines not yet passed on, and when the last one came.
    let mut held: Vec<u8> = Vec::new();
    let mut held_since: Option<Instant> = None;
    let mut panicking = false;
    let mut chunk = vec![0u8; 64 * 1024];
    let mut err_open = true;
    loop {
        let timeout = match held_since {
            Some(t) => {
                let hold = if panicking { HOLD_PANIC } else { HOLD };
                hold.saturating_sub(t.elapsed()).as_millis() as i32
            }
            None if !out_buf.is_empty() || !err_buf.is_empty() => HOLD.as_millis() as i32,
            None => -1,
        };
        let mut fds = [
            libc::pollfd {
                fd: out,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if err_open { err } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: polling two descriptors this thread owns.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
        if ready < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if ready == 0 {
            // Quiet: pass on what was held, and a partial stdout line (a prompt without `\n`).
            write_all(real_err, &std::mem::take(&mut held));
            write_all(real_err, &std::mem::take(&mut err_buf));
            held_since = None;
            panicking = false;
            write_all(real_out, &std::mem::take(&mut out_buf));
            continue;
        }
        // Stderr first: whatever was written before a stdout marker is read before the marker.
        if fds[1].revents != 0 {
            // SAFETY: reading into a live buffer from a descriptor this thread owns.
            let n = unsafe { libc::read(err, chunk.as_mut_ptr().cast(), chunk.len()) };
            if n <= 0 {
                err_open = false;
            } else {
                err_buf.extend_from_slice(&chunk[..n as usize]);
                for line in take_lines(&mut err_buf) {
                    if line.starts_with(SYNC.as_bytes()) {
                        write_all(real_err, &std::mem::take(&mut held));
                        held_since = None;
                        write_all(real_err, &line);
                    } else {
                        let text = String::from_utf8_lossy(&line);
                        panicking |= text.starts_with("thread '") && text.contains("panicked at");
                        held.extend_from_slice(&line);
                        held_since = Some(Instant::now());
                    }
                }
            }
        }
        if fds[0].revents != 0 {
            // SAFETY: as above.
            let n = unsafe { libc::read(out, chunk.as_mut_ptr().cast(), chunk.len()) };
            if n <= 0 {
                return;
            }
            out_buf.extend_from_slice(&chunk[..n as usize]);
            for line in take_lines(&mut out_buf) {
                let text = String::from_utf8_lossy(&line);
                let kind = match text.trim_end() {
                    // An `Err` after Ctrl-C is the interrupt's (the flag stays up until the
                    // next cell begins): the front end names it so without reading its text.
                    EVCXR_USER_ERROR if crate::interrupt::is_requested() => {
                        Some(Failure::Interrupted)
                    }
                    EVCXR_USER_ERROR => Some(Failure::Error),
                    EVCXR_PANIC => Some(Failure::Panic),
                    _ => None,
                };
                // The held stderr goes first: as the failure's text, or as plain output.
                let held_text = std::mem::take(&mut held);
                held_since = None;
                panicking = false;
                match kind {
                    Some(kind) => {
                        let mut block = format!("{FAILED_BEGIN} {}\n", kind.as_str()).into_bytes();
                        block.extend_from_slice(&held_text);
                        block.extend_from_slice(format!("{FAILED_END}\n").as_bytes());
                        write_all(real_err, &block);
                    }
                    None => write_all(real_err, &held_text),
                }
                write_all(real_out, &line);
            }
        }
    }
}
