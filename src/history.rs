//! The inputs a notebook or console ran, kept across restarts (JSON lines under the cache
//! directory), answering Jupyter's `history_request`: the last N, a range of one session, or a
//! glob search.

use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    pub session: usize,
    pub line: usize,
    pub input: String,
    /// The cell's value as text, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

pub struct History {
    path: PathBuf,
    /// This process's session number: one more than the last one on file.
    pub session: usize,
    entries: Vec<Entry>,
}

/// Kept in memory and on file; older entries are dropped (from the file when it is read).
const KEEP: usize = 10_000;
/// A value longer than this is kept cut, with "…": history answers are for reading back, and a
/// session of thousands of cells that print big values must stay small.
const OUTPUT_KEEP: usize = 4096;

impl History {
    /// Reads `path` (a missing or damaged file is an empty history; a damaged line is skipped).
    pub fn open(path: PathBuf) -> History {
        let mut entries: Vec<Entry> = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if entries.len() > KEEP {
            entries.drain(..entries.len() - KEEP);
            let text: String = entries
                .iter()
                .filter_map(|e| serde_json::to_string(e).ok())
                .map(|l| l + "\n")
                .collect();
            let _ = std::fs::write(&path, text);
        }
        let session = entries.iter().map(|e| e.session).max().unwrap_or(0) + 1;
        History {
            path,
            session,
            entries,
        }
    }

    /// Records input `line` of this session and its value (in memory, and on file when it can
    /// be written).
    pub fn add(&mut self, line: usize, input: &str, mut output: Option<String>) {
        if let Some(text) = &mut output
            && text.len() > OUTPUT_KEEP
        {
            let cut = text.floor_char_boundary(OUTPUT_KEEP);
            text.truncate(cut);
            text.push('…');
        }
        let entry = Entry {
            session: self.session,
            line,
            input: input.to_string(),
            output,
        };
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let (Ok(mut f), Ok(json)) = (
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path),
            serde_json::to_string(&entry),
        ) {
            let _ = writeln!(f, "{json}");
        }
        if self.entries.len() == KEEP {
            self.entries.remove(0);
        }
        self.entries.push(entry);
    }

    /// The last `n` inputs, oldest first.
    pub fn tail(&self, n: usize) -> Vec<Entry> {
        self.entries[self.entries.len().saturating_sub(n)..].to_vec()
    }

    /// Lines `start..stop` of `session` (IPython's convention: a session ≤ 0 counts back from
    /// this one, 0 being this one; `stop` 0 means to the end).
    pub fn range(&self, session: i64, start: usize, stop: usize) -> Vec<Entry> {
        let session = if session <= 0 {
            self.session.saturating_sub(session.unsigned_abs() as usize)
        } else {
            session as usize
        };
        self.entries
            .iter()
            .filter(|e| e.session == session && e.line >= start && (stop == 0 || e.line < stop))
            .cloned()
            .collect()
    }

    /// The last `n` inputs matching a glob (`*` any run, `?` one character), oldest first;
    /// `unique` keeps only the latest of equal inputs.
    pub fn search(&self, pattern: &str, n: usize, unique: bool) -> Vec<Entry> {
        let pattern: Vec<char> = pattern.chars().collect();
        let mut found: Vec<Entry> = Vec::new();
        for e in self.entries.iter().rev() {
            if n > 0 && found.len() >= n {
                break;
            }
            let text: Vec<char> = e.input.chars().collect();
            if glob(&pattern, &text) && !(unique && found.iter().any(|f| f.input == e.input)) {
                found.push(e.clone());
            }
        }
        found.reverse();
        found
    }
}

fn glob(p: &[char], t: &[char]) -> bool {
    match (p.first(), t.first()) {
        (None, None) => true,
        (Some('*'), _) => glob(&p[1..], t) || (!t.is_empty() && glob(p, &t[1..])),
        (Some('?'), Some(_)) => glob(&p[1..], &t[1..]),
        (Some(a), Some(b)) if a == b => glob(&p[1..], &t[1..]),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::History;

    #[test]
    fn history_survives_a_restart_and_answers_tail_range_and_search() {
        let path = std::env::temp_dir().join(format!(
            "placelab-history-test-{}.jsonl",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let mut first = History::open(path.clone());
        assert_eq!(first.session, 1);
        first.add(1, "let x = 1;", None);
        first.add(2, "x + 1", Some("2".into()));
        let mut second = History::open(path.clone());
        assert_eq!(second.session, 2, "a new process is a new session");
        second.add(1, "let y = x.cuda()?;", None);
        assert_eq!(second.tail(2)[0].output.as_deref(), Some("2"));
        let inputs = |v: Vec<super::Entry>| v.into_iter().map(|e| e.input).collect::<Vec<_>>();
        assert_eq!(inputs(second.tail(2)), ["x + 1", "let y = x.cuda()?;"]);
        assert_eq!(inputs(second.range(1, 2, 0)), ["x + 1"]);
        assert_eq!(inputs(second.range(-1, 1, 3)), ["let x = 1;", "x + 1"]);
        assert_eq!(inputs(second.range(0, 1, 0)), ["let y = x.cuda()?;"]);
        assert_eq!(
            inputs(second.search("let *", 10, false)),
            ["let x = 1;", "let y = x.cuda()?;"]
        );
        assert_eq!(
            inputs(second.search("?+ 1", 10, false)),
            Vec::<String>::new()
        );
        assert_eq!(inputs(second.search("x ? 1", 1, true)), ["x + 1"]);
        let _ = std::fs::remove_file(&path);
    }

    /// A long session keeps the latest `KEEP` inputs, and a big value's text cut.
    #[test]
    fn a_long_session_keeps_a_bounded_history() {
        let path = std::env::temp_dir().join(format!(
            "placelab-history-long-{}.jsonl",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let mut h = History::open(path.clone());
        let big = "é".repeat(super::OUTPUT_KEEP);
        for line in 1..=super::KEEP + 3 {
            h.add(line, &format!("cell {line}"), Some(big.clone()));
        }
        let all = h.tail(usize::MAX);
        assert_eq!(all.len(), super::KEEP);
        assert_eq!(all[0].input, "cell 4");
        let kept = all[0].output.as_deref().unwrap();
        assert!(kept.len() <= super::OUTPUT_KEEP + '…'.len_utf8() && kept.ends_with('…'));
        let _ = std::fs::remove_file(&path);
    }
}
