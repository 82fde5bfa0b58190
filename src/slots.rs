//! The per-session compile directories (`<cache>/sessions/session-N/work`): claiming a free one
//! (a file lock marks it in use), sweeping those that sessions which ended or died left behind,
//! and, when the session that left one was this one's predecessor (a kernel Jupyter restarted
//! after it died), saying what happened to it.

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// A claimed slot: the compile directory, the lock that holds it, and what happened to the
/// session before this one, if it died.
pub struct Claimed {
    pub work: PathBuf,
    pub lock: File,
    pub predecessor_died: Option<String>,
    /// Why the engine's build could not be linked to, when it was there but unusable.
    pub engine_unusable: Option<String>,
    /// Whether the compile directory links to the engine's build (else the session builds it).
    pub linked: bool,
    /// What the session says when the engine it links to is for another CUDA major.
    pub engine_other_cuda: Option<String>,
}

/// How many sessions of one user (one `PLACELAB_CACHE`) can run at once.
const SLOTS: usize = 64;

/// Claims a compile directory no other live session uses. It is new: on the way, the directories
/// of sessions that ended or died (their slot is no longer locked) are removed. It links to the
/// shared engine's build when there is one (`engine::link`). `owner` names the session (a
/// kernel's connection file, which Jupyter reuses when it restarts a kernel that died).
pub fn claim(root: &Path, engine: &Path, owner: &str) -> std::io::Result<Claimed> {
    let mut claimed: Option<Claimed> = None;
    let mut predecessor_died = None;
    for slot in 0..SLOTS {
        let dir = root.join(format!("session-{slot}"));
        if claimed.is_some() && !dir.exists() {
            break;
        }
        fs::create_dir_all(&dir)?;
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(".lock"))?;
        // SAFETY: flock on a file descriptor we own.
        let free = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if !free {
            continue;
        }
        // Left by a session that ended without removing it: it was killed. The lock file itself
        // stays: removing it could let two sessions lock two different files for one slot.
        let work = dir.join("work");
        if work.exists() {
            if let Some(record) = Record::read(&dir)
                && record.owner == owner
            {
                predecessor_died = Some(record.what_happened());
            }
            fs::remove_dir_all(&work)?;
        }
        if claimed.is_none() {
            Record::now(owner).write(&dir);
            // A failed link leaves a session that builds the engine itself, as on a first start.
            let linked = super::engine::link(engine, &work);
            if linked.is_err() {
                let _ = fs::remove_dir_all(&work);
            }
            claimed = Some(Claimed {
                work,
                lock,
                predecessor_died: None,
                linked: matches!(
                    linked,
                    Ok(super::engine::Linked::Yes | super::engine::Linked::OtherCuda { .. })
                ),
                engine_other_cuda: match linked {
                    Ok(super::engine::Linked::OtherCuda { built, wanted }) => {
                        Some(super::engine::other_cuda_notice(engine, built, wanted))
                    }
                    _ => None,
                },
                engine_unusable: match linked {
                    Ok(super::engine::Linked::Unusable(why)) => Some(why),
                    _ => None,
                },
            });
        }
    }
    let mut claimed = claimed.ok_or_else(|| {
        std::io::Error::other(format!(
            "all {SLOTS} placelab session directories are in use (in {}): end a session (a REPL, a \
             script or a notebook's kernel), or start this one with its own PLACELAB_CACHE",
            root.display()
        ))
    })?;
    claimed.predecessor_died = predecessor_died;
    Ok(claimed)
}

/// Who holds a slot, and the out-of-memory kills its cgroup had seen when it started.
struct Record {
    owner: String,
    oom_kills: Option<u64>,
}

impl Record {
    fn now(owner: &str) -> Record {
        Record {
            owner: owner.to_string(),
            oom_kills: cgroup_oom_kills(),
        }
    }

    fn write(&self, slot: &Path) {
        let kills = self.oom_kills.map(|k| k.to_string()).unwrap_or_default();
        let _ = fs::write(slot.join("owner"), format!("{kills}\n{}", self.owner));
    }

    fn read(slot: &Path) -> Option<Record> {
        let text = fs::read_to_string(slot.join("owner")).ok()?;
        let (kills, owner) = text.split_once('\n')?;
        Some(Record {
            owner: owner.to_string(),
            oom_kills: kills.parse().ok(),
        })
    }

    /// Why the session that held the slot died, as far as can be told.
    fn what_happened(&self) -> String {
        let oom =
            matches!((self.oom_kills, cgroup_oom_kills()), (Some(then), Some(now)) if now > then);
        let how = if oom {
            let limit = cgroup_memory_limit()
                .map(|b| {
                    format!(
                        " (this server's memory limit is {})",
                        placelab::units::human_bytes(b)
                    )
                })
                .unwrap_or_default();
            format!("was killed by the out-of-memory killer{limit}")
        } else {
            "was killed before it could end (out of memory, or stopped from outside)".to_string()
        };
        format!(
            "The previous kernel of this notebook {how}. Its variables are gone: run the cells \
             above this one again."
        )
    }
}

/// This process's cgroup (v2) directory.
fn cgroup_dir() -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')))
}

/// The `oom_kill` count of this process's cgroup (it counts kills in the cgroup and below).
fn cgroup_oom_kills() -> Option<u64> {
    let events = fs::read_to_string(cgroup_dir()?.join("memory.events")).ok()?;
    events
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))?
        .trim()
        .parse()
        .ok()
}

fn cgroup_memory_limit() -> Option<usize> {
    fs::read_to_string(cgroup_dir()?.join("memory.max"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sixty-four live sessions hold every directory; the next is refused with what to do, and
    /// gets one as soon as a session ends.
    #[test]
    fn a_sixty_fifth_session_is_told_what_to_do() {
        let root = std::env::temp_dir().join(format!("placelab-slots-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let engine = root.join("no-engine");
        let mut live: Vec<Claimed> = (0..SLOTS)
            .map(|i| claim(&root, &engine, &format!("s{i}")).unwrap())
            .collect();
        let refused = claim(&root, &engine, "one more").err().unwrap().to_string();
        assert!(
            refused.starts_with("all 64 placelab session directories are in use")
                && refused.contains("PLACELAB_CACHE"),
            "{refused}"
        );
        drop(live.pop());
        assert!(claim(&root, &engine, "one more").is_ok());
        drop(live);
        let _ = fs::remove_dir_all(&root);
    }
}
