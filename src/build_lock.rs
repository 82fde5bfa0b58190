//! One engine build at a time. Sessions that start on a machine with no engine (a class's eight
//! kernels opened at once on a fresh server) would each compile it, eight times the work on
//! the same cores, and then publish in turn. Instead the first takes a lock in the engine
//! directory and builds; the others wait for it and then link to what it published. The lock is
//! a `flock`, so a build that dies (killed, out of memory) frees it at once and the next waiting
//! session builds in its place.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

const LOCK_FILE: &str = ".build.lock";

/// Held while this session builds the engine; dropping it lets the waiting sessions go on.
pub struct BuildLock {
    _held: File,
}

fn open(engine: &Path) -> io::Result<File> {
    fs::create_dir_all(engine)?;
    fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(engine.join(LOCK_FILE))
}

fn flock(file: &File, flags: i32) -> bool {
    // SAFETY: flock on a descriptor `file` owns; released when it closes.
    unsafe { libc::flock(file.as_raw_fd(), flags) == 0 }
}

/// Takes the build lock of `engine`. When another session holds it, `waiting` is called once and
/// this blocks until that session's build ends (published, failed or killed).
pub fn take(engine: &Path, waiting: impl FnOnce()) -> io::Result<BuildLock> {
    let file = open(engine)?;
    if !flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
        waiting();
        if !flock(&file, libc::LOCK_EX) {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(BuildLock { _held: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_builder_waits_for_the_first_and_goes_on_when_it_ends() {
        let engine = std::env::temp_dir().join(format!("placelab-lock-{}", std::process::id()));
        let _ = fs::remove_dir_all(&engine);
        let first = take(&engine, || panic!("nobody builds yet")).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let dir = engine.clone();
        let second = std::thread::spawn(move || {
            let lock = take(&dir, || tx.send("waiting").unwrap()).unwrap();
            tx.send("building").unwrap();
            lock
        });
        assert_eq!(rx.recv().unwrap(), "waiting");
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            rx.try_recv().is_err(),
            "the second went on while the first held the lock"
        );
        drop(first);
        assert_eq!(rx.recv().unwrap(), "building");
        drop(second.join().unwrap());
        let _ = fs::remove_dir_all(&engine);
    }
}
