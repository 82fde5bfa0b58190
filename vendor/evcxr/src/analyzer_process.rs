// placelab's patch (PATCH.md): rust-analyzer in a process of its own.
//
// A loaded rust-analyzer holds the sources of std and of every dependency, and all it derived
// from them: hundreds of MiB. Freed in the process that loaded it, most of that stays with
// malloc. In a child process it goes back to the system whole when the child ends, so an
// embedding program that lets it go after a quiet spell keeps only its own memory.
//
// The child is the embedding program itself (the binary that runs cells, which calls
// `runtime_hook`), started with `EVCXR_ANALYZER_ROOT` naming the evcxr directory it analyses.
// Requests and replies are length-prefixed frames on its stdin and stdout.

use crate::rust_analyzer::Completion;
use crate::rust_analyzer::Completions;
use crate::rust_analyzer::RustAnalyzer;
use crate::rust_analyzer::TypeName;
use crate::rust_analyzer::VariableInfo;
use anyhow::Result;
use anyhow::anyhow;
use anyhow::bail;
use ra_ap_syntax::TextRange;
use std::collections::HashMap;
use std::io::Read;
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::ChildStdin;
use std::process::ChildStdout;
use std::process::Command;
use std::process::Stdio;

/// Set in the child's environment: the directory whose Cargo.toml and src/lib.rs it analyses.
pub(crate) const ANALYZER_ROOT_VAR: &str = "EVCXR_ANALYZER_ROOT";

/// What rust-analyzer is asked. Each carries the whole source, which the analyzer takes as
/// src/lib.rs before it answers.
pub(crate) enum Request {
    Completions {
        source: String,
        position: usize,
    },
    /// Hover at an offset, as plain text and as Markdown.
    Hover {
        source: String,
        offset: u32,
    },
    /// The variables declared at the top of `function`, with their types.
    Variables {
        source: String,
        function: String,
    },
}

pub(crate) enum Reply {
    Completions(Completions),
    Hover(Option<(String, String)>),
    Variables(HashMap<String, VariableInfo>),
}

/// rust-analyzer, in this process (evcxr's way) or in a child process.
pub(crate) enum Analyzer {
    InProcess(RustAnalyzer),
    Child(AnalyzerProcess),
}

impl Analyzer {
    pub(crate) fn in_process(root: &Path) -> Result<Analyzer> {
        Ok(Analyzer::InProcess(RustAnalyzer::new(root)?))
    }

    /// A child process started from `program` on the first request.
    pub(crate) fn child(program: PathBuf, root: PathBuf) -> Analyzer {
        Analyzer::Child(AnalyzerProcess {
            program,
            root,
            running: None,
        })
    }

    /// Whether a workspace (Cargo.toml, std) has been loaded.
    pub(crate) fn is_loaded(&self) -> bool {
        match self {
            Analyzer::InProcess(ra) => ra.is_loaded(),
            Analyzer::Child(p) => p.running.as_ref().is_some_and(|r| r.answered),
        }
    }

    /// Lets everything rust-analyzer loaded go; the next request loads it again.
    pub(crate) fn release(&mut self, root: &Path) -> Result<()> {
        match self {
            Analyzer::InProcess(ra) => *ra = RustAnalyzer::new(root)?,
            Analyzer::Child(p) => {
                p.stop();
            }
        }
        Ok(())
    }

    pub(crate) fn completions(&mut self, source: String, position: usize) -> Result<Completions> {
        match self.ask(Request::Completions { source, position })? {
            Reply::Completions(c) => Ok(c),
            _ => bail!("rust-analyzer's process answered a completion with something else"),
        }
    }

    pub(crate) fn hover(
        &mut self,
        source: String,
        offset: u32,
    ) -> Result<Option<(String, String)>> {
        match self.ask(Request::Hover { source, offset })? {
            Reply::Hover(h) => Ok(h),
            _ => bail!("rust-analyzer's process answered a hover with something else"),
        }
    }

    pub(crate) fn top_level_variables(
        &mut self,
        source: String,
        function: &str,
    ) -> Result<HashMap<String, VariableInfo>> {
        let function = function.to_owned();
        match self.ask(Request::Variables { source, function })? {
            Reply::Variables(v) => Ok(v),
            _ => bail!("rust-analyzer's process answered a type query with something else"),
        }
    }

    fn ask(&mut self, request: Request) -> Result<Reply> {
        match self {
            Analyzer::InProcess(ra) => answer(ra, request),
            Analyzer::Child(p) => p.ask(&wire::request(&request)),
        }
    }
}

/// Answers one request with an analyzer of this process.
fn answer(ra: &mut RustAnalyzer, request: Request) -> Result<Reply> {
    match request {
        Request::Completions { source, position } => {
            ra.set_source(source)?;
            Ok(Reply::Completions(ra.completions(position)?))
        }
        Request::Hover { source, offset } => {
            ra.set_source(source)?;
            let range = TextRange::new(offset.into(), offset.into());
            let hover = match (ra.hover(range, false)?, ra.hover(range, true)?) {
                (Some(text), Some(markdown)) => {
                    Some((text.info.markup.into(), markdown.info.markup.into()))
                }
                _ => None,
            };
            Ok(Reply::Hover(hover))
        }
        Request::Variables { source, function } => {
            ra.set_source(source)?;
            Ok(Reply::Variables(ra.top_level_variables(&function)))
        }
    }
}

pub(crate) struct AnalyzerProcess {
    program: PathBuf,
    root: PathBuf,
    running: Option<Running>,
}

struct Running {
    child: Child,
    to_child: ChildStdin,
    from_child: ChildStdout,
    /// Whether it has answered a request (and so loaded the workspace).
    answered: bool,
}

impl AnalyzerProcess {
    /// Sends a request frame and reads the reply. A child that ended (killed, crashed) is
    /// started again once, for this request.
    fn ask(&mut self, frame: &[u8]) -> Result<Reply> {
        let mut ended = String::new();
        for _ in 0..2 {
            if self.running.is_none() {
                self.running = Some(self.start()?);
            }
            let running = self.running.as_mut().expect("started above");
            let exchanged = running
                .to_child
                .write_all(frame)
                .and_then(|()| running.to_child.flush())
                .and_then(|()| wire::read_frame(&mut running.from_child));
            match exchanged {
                Ok(Some(body)) => {
                    running.answered = true;
                    return wire::reply(&body)?;
                }
                Ok(None) | Err(_) => ended = self.stop(),
            }
        }
        bail!("rust-analyzer's process ended twice in a row ({ended}); completions are unavailable")
    }

    fn start(&self) -> Result<Running> {
        let mut command = Command::new(&self.program);
        command
            .env(ANALYZER_ROOT_VAR, &self.root)
            .env_remove(crate::runtime::EVCXR_IS_RUNTIME_VAR)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            // A terminal's Ctrl-C is for the cell, not for the analyzer.
            command.process_group(0);
        }
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            let parent = std::process::id() as libc::pid_t;
            // SAFETY: prctl and getppid are async-signal-safe; nothing is allocated.
            unsafe {
                command.pre_exec(move || {
                    // Killed with the thread that started it: no orphan holds the memory.
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                    if libc::getppid() != parent {
                        libc::_exit(0);
                    }
                    Ok(())
                });
            }
        }
        let mut child = command.spawn().map_err(|e| {
            anyhow!(
                "could not start rust-analyzer's process ({}): {e}",
                self.program.display()
            )
        })?;
        let to_child = child.stdin.take().expect("piped stdin");
        let from_child = child.stdout.take().expect("piped stdout");
        Ok(Running {
            child,
            to_child,
            from_child,
            answered: false,
        })
    }

    /// Ends the child, if one runs; says how it had ended.
    fn stop(&mut self) -> String {
        let Some(mut running) = self.running.take() else {
            return "not started".to_owned();
        };
        let _ = running.child.kill();
        match running.child.wait() {
            Ok(status) => status.to_string(),
            Err(e) => e.to_string(),
        }
    }
}

impl Drop for AnalyzerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// In the child: answers requests on stdin until it closes, then exits.
pub(crate) fn serve(root: &Path) -> ! {
    let replies = private_stdout();
    let code = match serve_on(root, std::io::stdin().lock(), replies) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("rust-analyzer's process: {e:#}");
            1
        }
    };
    std::process::exit(code)
}

/// This process's stdout for replies alone: whatever else writes to stdout goes to stderr.
fn private_stdout() -> Box<dyn Write> {
    #[cfg(unix)]
    {
        use std::os::fd::FromRawFd;
        // SAFETY: duplicates descriptors this process owns; the new one is owned by the File.
        unsafe {
            let replies = libc::dup(1);
            if replies >= 0 && libc::dup2(2, 1) >= 0 {
                return Box::new(std::fs::File::from_raw_fd(replies));
            }
        }
    }
    Box::new(std::io::stdout())
}

fn serve_on(root: &Path, mut input: impl Read, mut output: impl Write) -> Result<()> {
    let mut ra = RustAnalyzer::new(root)?;
    // The process exists to answer completions, and has nothing else to do meanwhile.
    ra.prime_after_load = true;
    while let Some(body) = wire::read_frame(&mut input)? {
        let reply = wire::decode_request(&body).and_then(|request| answer(&mut ra, request));
        output.write_all(&wire::encode_reply(&reply))?;
        output.flush()?;
    }
    Ok(())
}

/// The frames: a little-endian u64 length, then the body. Strings are a u64 length and UTF-8.
mod wire {
    use super::*;

    const COMPLETIONS: u8 = 1;
    const HOVER: u8 = 2;
    const VARIABLES: u8 = 3;
    const FAILED: u8 = 0;

    /// The next frame's body; `None` at the end of the stream.
    pub(super) fn read_frame(input: &mut impl Read) -> std::io::Result<Option<Vec<u8>>> {
        let mut len = [0u8; 8];
        match input.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let mut body = vec![0u8; u64::from_le_bytes(len) as usize];
        input.read_exact(&mut body)?;
        Ok(Some(body))
    }

    fn frame(body: Body) -> Vec<u8> {
        let mut out = (body.0.len() as u64).to_le_bytes().to_vec();
        out.extend(body.0);
        out
    }

    #[derive(Default)]
    struct Body(Vec<u8>);

    impl Body {
        fn byte(mut self, b: u8) -> Self {
            self.0.push(b);
            self
        }
        fn num(mut self, n: u64) -> Self {
            self.0.extend(n.to_le_bytes());
            self
        }
        fn text(self, s: &str) -> Self {
            let mut this = self.num(s.len() as u64);
            this.0.extend(s.as_bytes());
            this
        }
    }

    struct Cursor<'a>(&'a [u8]);

    impl Cursor<'_> {
        fn take(&mut self, n: usize) -> Result<&[u8]> {
            if self.0.len() < n {
                bail!("a truncated message from rust-analyzer's process");
            }
            let (head, rest) = self.0.split_at(n);
            self.0 = rest;
            Ok(head)
        }
        fn byte(&mut self) -> Result<u8> {
            Ok(self.take(1)?[0])
        }
        fn num(&mut self) -> Result<u64> {
            Ok(u64::from_le_bytes(self.take(8)?.try_into()?))
        }
        fn text(&mut self) -> Result<String> {
            let n = self.num()? as usize;
            Ok(String::from_utf8(self.take(n)?.to_vec())?)
        }
    }

    pub(super) fn request(request: &Request) -> Vec<u8> {
        frame(match request {
            Request::Completions { source, position } => Body::default()
                .byte(COMPLETIONS)
                .text(source)
                .num(*position as u64),
            Request::Hover { source, offset } => Body::default()
                .byte(HOVER)
                .text(source)
                .num(u64::from(*offset)),
            Request::Variables { source, function } => {
                Body::default().byte(VARIABLES).text(source).text(function)
            }
        })
    }

    pub(super) fn decode_request(body: &[u8]) -> Result<Request> {
        let mut c = Cursor(body);
        Ok(match c.byte()? {
            COMPLETIONS => Request::Completions {
                source: c.text()?,
                position: c.num()? as usize,
            },
            HOVER => Request::Hover {
                source: c.text()?,
                offset: u32::try_from(c.num()?)?,
            },
            VARIABLES => Request::Variables {
                source: c.text()?,
                function: c.text()?,
            },
            other => bail!("an unknown request ({other}) to rust-analyzer's process"),
        })
    }

    pub(super) fn encode_reply(reply: &Result<Reply>) -> Vec<u8> {
        frame(match reply {
            Err(e) => Body::default().byte(FAILED).text(&format!("{e:#}")),
            Ok(Reply::Completions(c)) => {
                let mut body = Body::default()
                    .byte(COMPLETIONS)
                    .num(c.start_offset as u64)
                    .num(c.end_offset as u64)
                    .num(c.completions.len() as u64);
                for one in &c.completions {
                    body = body.text(&one.code).text(one.kind).text(&one.label);
                }
                body
            }
            Ok(Reply::Hover(None)) => Body::default().byte(HOVER).byte(0),
            Ok(Reply::Hover(Some((plain, markdown)))) => Body::default()
                .byte(HOVER)
                .byte(1)
                .text(plain)
                .text(markdown),
            Ok(Reply::Variables(variables)) => {
                let mut body = Body::default().byte(VARIABLES).num(variables.len() as u64);
                for (name, info) in variables {
                    body = match &info.type_name {
                        TypeName::Named(t) => body.text(name).byte(0).text(t),
                        TypeName::Closure => body.text(name).byte(1),
                        TypeName::Unknown => body.text(name).byte(2),
                    }
                    .byte(u8::from(info.is_mutable));
                }
                body
            }
        })
    }

    /// A reply, or the error the child answered with.
    pub(super) fn reply(body: &[u8]) -> Result<Result<Reply>> {
        let mut c = Cursor(body);
        Ok(match c.byte()? {
            FAILED => Err(anyhow!(c.text()?)),
            COMPLETIONS => {
                let start_offset = c.num()? as usize;
                let end_offset = c.num()? as usize;
                let n = c.num()?;
                let mut completions = Vec::new();
                for _ in 0..n {
                    completions.push(Completion {
                        code: c.text()?,
                        kind: jupyter_kind_named(&c.text()?),
                        label: c.text()?,
                    });
                }
                Ok(Reply::Completions(Completions {
                    completions,
                    start_offset,
                    end_offset,
                }))
            }
            HOVER => Ok(Reply::Hover(match c.byte()? {
                0 => None,
                _ => Some((c.text()?, c.text()?)),
            })),
            VARIABLES => {
                let n = c.num()?;
                let mut variables = HashMap::new();
                for _ in 0..n {
                    let name = c.text()?;
                    let type_name = match c.byte()? {
                        0 => TypeName::Named(c.text()?),
                        1 => TypeName::Closure,
                        _ => TypeName::Unknown,
                    };
                    let is_mutable = c.byte()? != 0;
                    variables.insert(
                        name,
                        VariableInfo {
                            type_name,
                            is_mutable,
                        },
                    );
                }
                Ok(Reply::Variables(variables))
            }
            other => bail!("an unknown reply ({other}) from rust-analyzer's process"),
        })
    }

    /// The `&'static str` a completion's kind is (`rust_analyzer::jupyter_kind`'s names).
    fn jupyter_kind_named(kind: &str) -> &'static str {
        match kind {
            "function" => "function",
            "class" => "class",
            "module" => "module",
            "keyword" => "keyword",
            _ => "instance",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(reply: Result<Reply>) -> Result<Reply> {
        let frame = wire::encode_reply(&reply);
        let body = wire::read_frame(&mut &frame[..]).unwrap().unwrap();
        wire::reply(&body).unwrap()
    }

    #[test]
    fn completions_cross_the_pipe_whole() {
        let sent = Completions {
            completions: vec![Completion {
                code: "shape()".into(),
                kind: "function",
                label: "shape(…)".into(),
            }],
            start_offset: 2,
            end_offset: 5,
        };
        let Ok(Reply::Completions(got)) = round_trip(Ok(Reply::Completions(sent))) else {
            panic!("not completions");
        };
        assert_eq!((got.start_offset, got.end_offset), (2, 5));
        assert_eq!(got.completions[0].code, "shape()");
        assert_eq!(got.completions[0].kind, "function");
        assert_eq!(got.completions[0].label, "shape(…)");
    }

    #[test]
    fn variables_and_errors_cross_the_pipe_whole() {
        let mut sent = HashMap::new();
        let info = |type_name, is_mutable| VariableInfo {
            type_name,
            is_mutable,
        };
        sent.insert(
            "a".to_owned(),
            info(TypeName::Named("Vec<i32>".into()), true),
        );
        sent.insert("f".to_owned(), info(TypeName::Closure, false));
        let Ok(Reply::Variables(got)) = round_trip(Ok(Reply::Variables(sent))) else {
            panic!("not variables");
        };
        assert_eq!(got["a"].type_name, TypeName::Named("Vec<i32>".into()));
        assert!(got["a"].is_mutable);
        assert_eq!(got["f"].type_name, TypeName::Closure);
        let failed = round_trip(Err(anyhow!("Failed to read Cargo.toml")));
        assert_eq!(
            failed.err().unwrap().to_string(),
            "Failed to read Cargo.toml"
        );
    }

    #[test]
    fn a_request_survives_encoding() {
        let frame = wire::request(&Request::Hover {
            source: "let x = 1;".into(),
            offset: 4,
        });
        let body = wire::read_frame(&mut &frame[..]).unwrap().unwrap();
        let Request::Hover { source, offset } = wire::decode_request(&body).unwrap() else {
            panic!("not a hover");
        };
        assert_eq!((source.as_str(), offset), ("let x = 1;", 4));
    }
}
