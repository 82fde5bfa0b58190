//! The cell process's stdout and stderr, passed through a thread that tells the front end when a
//! cell failed. evcxr reports a cell's `?` error and its panic only to itself (a marker line on
//! stdout, after the message went to stderr) and calls the cell a success; here the marker makes
//! the stderr written just before it into one marked block, so the session can show it as the
//! cell's error (an `error` message in Jupyter, a failed cell everywhere).
//!
//! Stderr is held back until stdout moves, a marker arrives, or `HOLD` passes quietly. A failure's
//! text starts with a line of its own (evcxr's `EVCXR_ERROR_TEXT_FOLLOWS` before a `?` error, a
//! panic's `thread '…' panicked at`): from there stderr is held for the marker alone, since
//! stdout printed before the failure can be read after its text (both streams ready at once).

use std::os::fd::RawFd;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// evcxr's markers on the cell process's stdout (`evcxr_internal_runtime::USER_ERROR_OCCURRED`,
/// and the line its generated code prints after catching a panic).
pub const EVCXR_USER_ERROR: &str = "EVCXR_ERROR_OCCURRED";
pub const EVCXR_PANIC: &str = "EVCXR_PANIC_NOTIFICATION";
/// On stderr, just before a `?` error's text (`evcxr_internal_runtime::USER_ERROR_TEXT_FOLLOWS`,
/// placelab's patch of evcxr).
pub const EVCXR_USER_ERROR_TEXT: &str = "EVCXR_ERROR_TEXT_FOLLOWS";

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
/// After a failure's first line, how long its text is held for the marker that follows it
/// (printing a panic's backtrace resolves symbols: tens to hundreds of milliseconds).
const HOLD_FAILURE: Duration = Duration::from_secs(10);

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

/// The stderr lines not yet passed on: held until stdout moves, a marker arrives or the streams
/// go quiet, so that a failure's text can go out as one block with its marker.
struct HeldStderr {
    real_err: RawFd,
    text: Vec<u8>,
    /// When the last held line came.
    since: Option<Instant>,
    /// The held text is a failure's, waiting for its marker.
    failing: bool,
}

impl HeldStderr {
    /// How long `poll` may wait before the held text goes out as plain output (-1: forever);
    /// `partial`: a line without its newline is buffered.
    fn poll_timeout(&self, partial: bool) -> i32 {
        match self.since {
            Some(t) => {
                let hold = if self.failing { HOLD_FAILURE } else { HOLD };
                hold.saturating_sub(t.elapsed()).as_millis() as i32
            }
            None if partial => HOLD.as_millis() as i32,
            None => -1,
        }
    }

    /// Passes the held text on as plain output.
    fn release(&mut self) {
        write_all(self.real_err, &std::mem::take(&mut self.text));
        self.since = None;
        self.failing = false;
    }

    fn stderr_line(&mut self, line: &[u8]) {
        if line.starts_with(SYNC.as_bytes()) {
            self.release();
            write_all(self.real_err, line);
            return;
        }
        let text = String::from_utf8_lossy(line);
        let error_follows = text.trim_end() == EVCXR_USER_ERROR_TEXT;
        let panic = text.starts_with("thread '") && text.contains("panicked at");
        if (error_follows || panic) && !self.failing {
            // What came before is plain output, not the failure's text; but std's panic message
            // starts with a newline of its own, read as a blank line before it, which stays.
            if let Some(last) = self.text.iter().rposition(|b| !b.is_ascii_whitespace()) {
                let line_end = self.text[last..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(self.text.len(), |at| last + at + 1);
                let blank_tail = self.text.split_off(line_end);
                self.release();
                self.text = blank_tail;
            }
            self.failing = true;
        }
        if !error_follows {
            self.text.extend_from_slice(line);
        }
        self.since = Some(Instant::now());
    }

    /// Before a stdout line goes out: the held text goes first, as the failure's text if the
    /// line is a failure's marker, else as plain output (but a failure's text waits for its
    /// marker: stdout written before the failure may be read after its text).
    fn stdout_line(&mut self, line: &[u8]) {
        let kind = match String::from_utf8_lossy(line).trim_end() {
            // An `Err` after Ctrl-C is the interrupt's (the flag stays up until the next cell
            // begins): the front end names it so without reading its text.
            EVCXR_USER_ERROR if crate::device::interrupt::is_requested() => {
                Some(Failure::Interrupted)
            }
            EVCXR_USER_ERROR => Some(Failure::Error),
            EVCXR_PANIC => Some(Failure::Panic),
            _ => None,
        };
        match kind {
            Some(kind) => {
                let mut block = format!("{FAILED_BEGIN} {}\n", kind.as_str()).into_bytes();
                block.extend_from_slice(&std::mem::take(&mut self.text));
                block.extend_from_slice(format!("{FAILED_END}\n").as_bytes());
                write_all(self.real_err, &block);
                self.since = None;
                self.failing = false;
            }
            None if !self.failing => self.release(),
            None => {}
        }
    }
}

/// Reads `fd` once into `buf`; false at its end (or on an error).
fn read_some(fd: RawFd, chunk: &mut [u8], buf: &mut Vec<u8>) -> bool {
    // SAFETY: reading into a live buffer from a descriptor this thread owns.
    let n = unsafe { libc::read(fd, chunk.as_mut_ptr().cast(), chunk.len()) };
    if n <= 0 {
        return false;
    }
    buf.extend_from_slice(&chunk[..n as usize]);
    true
}

fn pass_through(out: RawFd, err: RawFd, real_out: RawFd, real_err: RawFd) {
    let (mut out_buf, mut err_buf) = (Vec::new(), Vec::new());
    let mut held = HeldStderr {
        real_err,
        text: Vec::new(),
        since: None,
        failing: false,
    };
    let mut chunk = vec![0u8; 64 * 1024];
    let mut err_open = true;
    loop {
        let timeout = held.poll_timeout(!out_buf.is_empty() || !err_buf.is_empty());
        let mut fds = [out, if err_open { err } else { -1 }].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: polling two descriptors this thread owns.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
        if ready < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if ready == 0 {
            // Quiet: pass on what was held, and a partial line (a prompt without `\n`).
            held.release();
            write_all(real_err, &std::mem::take(&mut err_buf));
            write_all(real_out, &std::mem::take(&mut out_buf));
            continue;
        }
        // Stderr first: whatever was written before a stdout marker is read before the marker.
        if fds[1].revents != 0 {
            err_open = read_some(err, &mut chunk, &mut err_buf);
            for line in take_lines(&mut err_buf) {
                held.stderr_line(&line);
            }
        }
        if fds[0].revents != 0 {
            let mut streams = Streams {
                err_open: &mut err_open,
                chunk: &mut chunk,
                err_buf: &mut err_buf,
                out_buf: &mut out_buf,
            };
            if !streams.stdout_ready(out, err, real_out, &mut held) {
                return;
            }
        }
    }
}

/// The pass-through's buffers, for its reads.
struct Streams<'a> {
    err_open: &'a mut bool,
    chunk: &'a mut Vec<u8>,
    err_buf: &'a mut Vec<u8>,
    out_buf: &'a mut Vec<u8>,
}

impl Streams<'_> {
    /// Reads stdout, which `poll` said is ready, and passes its lines on; false at its end.
    /// What stderr holds by then is read first. `poll` may have seen stdout alone, and the cell
    /// then written its error's text and the marker after it: reading stdout finds the marker,
    /// while the text, written before it, waits unread on stderr, and would go out as plain
    /// output after a failure with none (CI, notebook 02's mismatch cell, 2026-12-02).
    fn stdout_ready(
        &mut self,
        out: RawFd,
        err: RawFd,
        real_out: RawFd,
        held: &mut HeldStderr,
    ) -> bool {
        if !read_some(out, self.chunk, self.out_buf) {
            return false;
        }
        while *self.err_open && readable_now(err) {
            *self.err_open = read_some(err, self.chunk, self.err_buf);
            for line in take_lines(self.err_buf) {
                held.stderr_line(&line);
            }
        }
        for line in take_lines(self.out_buf) {
            held.stdout_line(&line);
            write_all(real_out, &line);
        }
        true
    }
}

/// Whether `fd` has data (or its end) to read now, without waiting.
fn readable_now(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polling one descriptor this thread owns, without waiting.
    unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents != 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipe() -> (RawFd, RawFd) {
        let mut ends = [0; 2];
        // SAFETY: creating a pipe into a live array.
        assert_eq!(unsafe { libc::pipe(ends.as_mut_ptr()) }, 0);
        (ends[0], ends[1])
    }

    fn read_to_end(fd: RawFd) -> String {
        let (mut all, mut chunk) = (Vec::new(), [0u8; 4096]);
        loop {
            // SAFETY: reading into a live buffer from a pipe this test owns.
            let n = unsafe { libc::read(fd, chunk.as_mut_ptr().cast(), chunk.len()) };
            if n <= 0 {
                // SAFETY: closing a descriptor this test owns, once.
                unsafe { libc::close(fd) };
                return String::from_utf8(all).unwrap();
            }
            all.extend_from_slice(&chunk[..n as usize]);
        }
    }

    /// What the pass-through sends on (stdout, stderr) when the cell wrote `writes` (1: stdout,
    /// 2: stderr) in this order, all before it read any: as on a busy machine, where the thread
    /// wakes once to find both streams ready.
    fn passed_on(writes: &[(u8, &str)]) -> (String, String) {
        let ((out, out_w), (err, err_w)) = (pipe(), pipe());
        let ((real_out_r, real_out), (real_err_r, real_err)) = (pipe(), pipe());
        for (stream, text) in writes {
            write_all(if *stream == 1 { out_w } else { err_w }, text.as_bytes());
        }
        // SAFETY: closing the write ends this test made; the reads then end.
        unsafe {
            libc::close(out_w);
            libc::close(err_w);
        }
        pass_through(out, err, real_out, real_err);
        // SAFETY: closing descriptors this test owns, once.
        unsafe {
            for fd in [out, err, real_out, real_err] {
                libc::close(fd);
            }
        }
        (read_to_end(real_out_r), read_to_end(real_err_r))
    }

    #[test]
    fn an_error_keeps_its_text_when_a_line_printed_before_it_is_read_with_it() {
        let (out, err) = passed_on(&[
            (
                1,
                "&x + &y copies one of them over: false, not true as you predicted.\n",
            ),
            (
                2,
                "EVCXR_ERROR_TEXT_FOLLOWS\ndevice mismatch in add: cpu and cuda:0\n",
            ),
            (1, "EVCXR_ERROR_OCCURRED\n"),
        ]);
        assert_eq!(
            err,
            "PLACELAB_CELL_FAILED error\ndevice mismatch in add: cpu and cuda:0\nPLACELAB_CELL_FAILED_END\n"
        );
        assert_eq!(
            out,
            "&x + &y copies one of them over: false, not true as you predicted.\nEVCXR_ERROR_OCCURRED\n"
        );
    }

    /// The race CI met: `poll` saw stdout alone (the check's line), then the cell wrote its
    /// error's text and the marker before stdout was read. The read of stdout finds the marker
    /// with the text still on stderr: it is read first, and the failure keeps it.
    #[test]
    fn an_error_keeps_its_text_when_stdout_is_read_after_it_was_written() {
        let ((out, out_w), (err, err_w)) = (pipe(), pipe());
        let ((real_out_r, real_out), (real_err_r, real_err)) = (pipe(), pipe());
        write_all(out_w, b"a check's line\n");
        write_all(err_w, b"EVCXR_ERROR_TEXT_FOLLOWS\ndevice mismatch in add\n");
        write_all(out_w, b"EVCXR_ERROR_OCCURRED\n");
        let mut held = HeldStderr {
            real_err,
            text: Vec::new(),
            since: None,
            failing: false,
        };
        let (mut err_open, mut chunk) = (true, vec![0u8; 4096]);
        let (mut err_buf, mut out_buf) = (Vec::new(), Vec::new());
        let mut streams = Streams {
            err_open: &mut err_open,
            chunk: &mut chunk,
            err_buf: &mut err_buf,
            out_buf: &mut out_buf,
        };
        assert!(streams.stdout_ready(out, err, real_out, &mut held));
        // SAFETY: closing descriptors this test owns, once; the reads then end.
        unsafe {
            for fd in [out, out_w, err, err_w, real_out, real_err] {
                libc::close(fd);
            }
        }
        assert_eq!(
            read_to_end(real_err_r),
            "PLACELAB_CELL_FAILED error\ndevice mismatch in add\nPLACELAB_CELL_FAILED_END\n"
        );
        assert_eq!(
            read_to_end(real_out_r),
            "a check's line\nEVCXR_ERROR_OCCURRED\n"
        );
    }

    #[test]
    fn a_panic_keeps_its_text_and_stderr_written_before_a_failure_stays_plain_output() {
        let (_, err) = passed_on(&[
            (2, "loading\n"),
            (1, "step 1\n"),
            // As std writes it: a newline first.
            (2, "\nthread 'main' panicked at src/lib.rs:1:1:\nboom\n"),
            (1, "EVCXR_PANIC_NOTIFICATION\n"),
        ]);
        assert_eq!(
            err,
            "loading\nPLACELAB_CELL_FAILED panic\n\nthread 'main' panicked at src/lib.rs:1:1:\nboom\nPLACELAB_CELL_FAILED_END\n"
        );
        // A panic with nothing before it: the whole message is the failure's, none plain.
        let (_, err) = passed_on(&[
            (2, "\nthread 'main' panicked at src/lib.rs:1:1:\nboom\n"),
            (1, "EVCXR_PANIC_NOTIFICATION\n"),
        ]);
        assert!(err.starts_with("PLACELAB_CELL_FAILED panic\n"), "{err:?}");
    }
}
