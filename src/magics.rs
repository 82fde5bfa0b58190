//! The session's own commands, as a table of (name, usage, help, handler). Anything else that
//! starts with `:` goes to evcxr (`:vars`, `:dep`, `:opt`, …).

use std::time::{Duration, Instant};

use placelab::device_label;
use placelab::units::{human_bytes, human_duration, human_rate};

use super::plot::TransferAxis;
use super::probe_client::{Reply, Request};
use super::report::{CellReport, ErrorKind, Output};
use super::session::Session;

type Handler = fn(&mut Session, &str) -> CellReport;

/// Said when a magic needs the cell process (after a crash, before it is started again).
const NOT_ANSWERING: &str = "the cell process is not answering; run a cell and try again";

/// One command: what it is called, how it is written, what it does (for `:help`), and the
/// function that runs it.
pub struct Magic {
    pub name: &'static str,
    pub usage: &'static str,
    pub help: &'static str,
    pub run: Handler,
}

pub const MAGICS: &[Magic] = &[
    Magic {
        name: ":del",
        usage: ":del NAME…",
        help: "drop variables and say what memory they gave back, on which device",
        run: del,
    },
    Magic {
        name: ":mem",
        usage: ":mem",
        help: "memory of every device in use: allocated, reserved, peak, live tensors, free",
        run: mem,
    },
    Magic {
        name: ":devices",
        usage: ":devices",
        help: "the devices this session can use",
        run: devices,
    },
    Magic {
        name: ":transfers",
        usage: ":transfers",
        help: "every copy between devices (each .to(), each value read back): route, bytes, time",
        run: transfers,
    },
    Magic {
        name: ":empty_cache",
        usage: ":empty_cache",
        help: "return cached, unused device memory to the device",
        run: empty_cache,
    },
    Magic {
        name: ":simulate",
        usage: ":simulate cuda N [CAPACITY | GPU] [--if-no-gpu] [--emulate]",
        help: "use N simulated CUDA devices of CAPACITY each (default 16GiB; e.g. `:simulate cuda 2 8GiB`), as PLACELAB_SIMULATE_CUDA=N,CAPACITY; with a GPU's name instead (`:simulate cuda 2 h100`, or `--as h100`; a100, t4, …), standing for that GPU: its memory, and beside each measured copy what it would take there (predicted); with --if-no-gpu, only where no real GPU exists and no emulated one is in use; with --emulate, run the real CUDA kernels on the CPU (slower; for checking GPU code)",
        run: simulate,
    },
    Magic {
        name: ":plot",
        usage: ":plot transfers|bandwidth|memory",
        help: "draw transfer time or bandwidth against size, or memory after each cell (an SVG file)",
        run: plot,
    },
    Magic {
        name: ":time",
        usage: ":time CODE",
        help: "run CODE and report how long it took",
        run: time,
    },
    Magic {
        name: ":profile",
        usage: ":profile CODE",
        help: "run CODE once and show where its time and memory went: each op's time (and, on a device standing for a named GPU, its predicted time there) by phase, and the memory timeline with its peak; then CODE's value below it, or its error",
        run: profile,
    },
    Magic {
        name: ":timeline",
        usage: ":timeline CODE",
        help: "run CODE once and draw its lanes of time: the host, then each GPU stream's kernels and copies (CUDA events on a GPU or an emulated one), with the share of the copies hidden behind compute; then CODE's value below it, or its error",
        run: timeline,
    },
    Magic {
        name: ":fmt",
        usage: ":fmt FORMAT",
        help: "how a cell's last value prints: {:?} (default), {:#?}, or either with a precision ({:.3?})",
        run: fmt,
    },
    Magic {
        name: ":vars",
        usage: ":vars",
        help: "the session's variables and their types, by name",
        run: vars,
    },
    Magic {
        name: ":help",
        usage: ":help",
        help: "this list (evcxr's own commands, like :dep and :opt, work too)",
        run: help,
    },
];

/// Whether a cell asks to leave: `:exit`, `:quit`, `:q`, or IPython's `exit` and `quit` (with
/// or without `()`). Each shell says what leaving is: the REPL and a script end, the kernel asks
/// its client (a console leaves, a notebook stays).
pub fn is_exit(cell: &str) -> bool {
    matches!(
        cell.trim(),
        "exit" | "quit" | "exit()" | "quit()" | ":exit" | ":quit" | ":q"
    )
}

/// Runs `cell` if it is one of the session's commands.
pub fn dispatch(s: &mut Session, cell: &str) -> Option<CellReport> {
    if !cell.starts_with(':') {
        return None;
    }
    let (name, args) = cell.split_once(char::is_whitespace).unwrap_or((cell, ""));
    MAGICS
        .iter()
        .find(|m| m.name == name)
        .map(|m| (m.run)(s, args.trim()))
}

fn del(s: &mut Session, args: &str) -> CellReport {
    let names: Vec<&str> = args
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() {
        return CellReport::error(
            ":del needs the names of variables to drop, e.g. `:del x` or `:del x y`",
        );
    }
    let vars = s.variables();
    let mut out = Vec::new();
    for name in names {
        let Some((_, ty)) = vars.iter().find(|(n, _)| n == name) else {
            let known: Vec<&str> = vars.iter().map(|(n, _)| n.as_str()).collect();
            out.push(Output::error(
                ErrorKind::Error,
                format!(
                    "no variable `{name}` in this session{}",
                    if known.is_empty() {
                        String::new()
                    } else {
                        format!("; defined: {}", known.join(", "))
                    }
                ),
            ));
            continue;
        };
        let before = s.snapshot();
        let report = s.run_code(&format!("drop({name});"));
        if !report.ok() {
            out.extend(report.outputs);
            continue;
        }
        let after = s.snapshot();
        let freed: Vec<String> = after
            .devices
            .iter()
            .filter_map(|(dev, a)| {
                let b = before.devices.get(dev)?;
                let gone = b.allocated.saturating_sub(a.allocated);
                (gone > 0).then(|| {
                    let label = device_label(dev, a.kind);
                    format!(
                        "{} on {label} (kept in the cache: reserved stays {}; `:empty_cache` releases it)",
                        human_bytes(gone as usize),
                        human_bytes(a.reserved as usize)
                    )
                })
            })
            .collect();
        out.push(Output::Info(if freed.is_empty() {
            if ty.contains("Tensor") {
                format!("dropped {name}: no memory freed (something else still holds its storage: another variable or view, an autograd graph that saved it for backward, or an optimizer)")
            } else {
                format!("dropped {name} (a `{ty}`, not a tensor: no device memory involved)")
            }
        } else {
            format!("freed {name}: {}", freed.join(", "))
        }));
    }
    CellReport {
        outputs: out,
        ..Default::default()
    }
}

fn vars(s: &mut Session, _: &str) -> CellReport {
    let mut vars = s.variables();
    if vars.is_empty() {
        return CellReport::info("no variables yet: a cell's `let` makes one");
    }
    vars.sort();
    let lines: Vec<String> = vars.iter().map(|(n, t)| format!("{n}: {t}")).collect();
    CellReport::info(lines.join("\n"))
}

fn mem(s: &mut Session, _: &str) -> CellReport {
    let snap = s.snapshot();
    if snap.devices.is_empty() {
        return CellReport::info("no device memory used yet");
    }
    const HEAD: [&str; 6] = [
        "device",
        "allocated",
        "reserved",
        "peak",
        "tensors",
        "free / total",
    ];
    let rows: Vec<[String; 6]> = snap
        .devices
        .values()
        .map(|d| {
            [
                super::strip::label(d),
                human_bytes(d.allocated as usize),
                human_bytes(d.reserved as usize),
                human_bytes(d.peak as usize),
                d.tensors.to_string(),
                if d.name == super::probe_client::PINNED {
                    "–".into() // page-locked host memory: no size of its own
                } else {
                    format!(
                        "{} / {}",
                        human_bytes(d.free as usize),
                        human_bytes(d.total as usize)
                    )
                },
            ]
        })
        .collect();
    let line = |r: [&str; 6]| {
        format!(
            "{:<20} {:>12} {:>12} {:>12} {:>8} {:>22}",
            r[0], r[1], r[2], r[3], r[4], r[5]
        )
    };
    let mut plain = vec![line(HEAD)];
    plain.extend(rows.iter().map(|r| line(r.each_ref().map(String::as_str))));
    CellReport {
        outputs: vec![Output::Table {
            plain: plain.join("\n"),
            html: html_table(&HEAD, &rows),
        }],
        ..Default::default()
    }
}

/// A plain HTML table: a header row, then text cells (escaped), numbers right-aligned.
fn html_table<const N: usize>(head: &[&str; N], rows: &[[String; N]]) -> String {
    use placelab::display::html::{El, el};
    fn row<'a>(tag: &'static str, cells: impl Iterator<Item = &'a str>) -> El {
        el("tr").children(cells.enumerate().map(|(i, text)| {
            let align = if i == 0 { "left" } else { "right" };
            el(tag)
                .style(&format!("text-align:{align};padding:1px 10px"))
                .text(text)
        }))
    }
    let body = rows.iter().map(|r| row("td", r.iter().map(String::as_str)));
    el("table")
        .class("placelab-table")
        .style("font-family:ui-monospace,monospace;font-size:12px;border-collapse:collapse")
        .child(row("th", head.iter().copied()))
        .children(body)
        .into_string()
}

/// The cell process decides (simulation may have been switched on there): it is asked.
fn devices(s: &mut Session, _: &str) -> CellReport {
    match s.devices() {
        Some(list) => CellReport::info(list.lines().join("\n")),
        None => CellReport::error(NOT_ANSWERING),
    }
}

fn transfers(s: &mut Session, _: &str) -> CellReport {
    let Some(snap) = s.probe.snapshot(0) else {
        return CellReport::info("no transfers yet");
    };
    if snap.transfers.is_empty() {
        return CellReport::info("no transfers yet");
    }
    let lines: Vec<String> = snap
        .transfers
        .iter()
        .map(|t| {
            let d = Duration::from_nanos(t.nanos);
            format!(
                "#{:<4} {:>8} → {:<8} {:>12} {:>10} {:>10} {}{}",
                t.seq,
                t.from,
                t.to,
                human_bytes(t.bytes as usize),
                human_duration(d),
                human_rate(t.bytes as f64 / d.as_secs_f64().max(1e-12)),
                match (t.from.is_cuda(), t.to.is_cuda(), t.pinned) {
                    (true, true, _) => "GPU to GPU",
                    (_, _, true) => "pinned",
                    _ => "pageable",
                },
                match t.clock.stand_in_note() {
                    Some(note) => format!(" ({note})"),
                    None => String::new(),
                }
            ) + &predicted_line(std::slice::from_ref(t))
                + &measured_line(t)
        })
        .collect();
    let total = predicted_line(&snap.transfers);
    let total = if !total.is_empty() && lines.len() > 1 {
        format!("\nin all{total}")
    } else {
        String::new()
    };
    CellReport::info(lines.join("\n") + &total)
}

/// ` ≈ 0.22 ms on an H100 SXM, predicted` for the transfers that have a prediction, else empty.
fn predicted_line(lines: &[crate::probe_client::TransferLine]) -> String {
    super::strip::predicted_total(lines)
        .map(|t| t.replacen(';', "", 1))
        .unwrap_or_default()
}

/// ` · measured by placelab on an H100 SXM: 378.6 µs for 16.00 MiB (2026-11-27)`: the copy
/// placelab measured on the predicted GPU's kind nearest in size, where it has a run there.
fn measured_line(t: &crate::probe_client::TransferLine) -> String {
    use placelab::cost::CopyRoute;
    let (from_gpu, to_gpu) = (t.from.is_cuda(), t.to.is_cuda());
    let Some(gpu) = t
        .predicted
        .as_ref()
        .and_then(|(key, _)| placelab::cost::find(key))
    else {
        return String::new();
    };
    if from_gpu == to_gpu {
        return String::new();
    }
    let route = CopyRoute::host(t.pinned, to_gpu);
    placelab::transfer::predicted::measured_near(gpu, route, to_gpu, t.bytes)
        .map(|m| {
            format!(
                " · measured by placelab on {}: {} for {} ({})",
                gpu.with_article(),
                human_duration(m.duration),
                human_bytes(m.bytes as usize),
                m.date
            )
        })
        .unwrap_or_default()
}

fn empty_cache(s: &mut Session, _: &str) -> CellReport {
    match s.probe.ask(Request::EmptyCache) {
        Some(Reply::Released { bytes }) => CellReport::info(format!(
            "released {} of cached memory back to the devices",
            human_bytes(bytes as usize)
        )),
        Some(Reply::Error(why)) => CellReport::info(format!("could not empty the cache: {why}")),
        // Not answering: no cell has run yet.
        _ => CellReport::info("no device memory used yet"),
    }
}

/// What `:simulate` was asked for.
#[derive(Debug, PartialEq)]
struct SimulateArgs<'a> {
    n: usize,
    /// `Some(bytes)` as the code the cell process runs (`None` for the default).
    capacity: String,
    /// The named GPU the devices stand for (`h100` or `--as h100`).
    gpu: Option<&'a str>,
    /// `--if-no-gpu`: a notebook's first cell, which must run unchanged on a machine with a GPU.
    only_without_gpu: bool,
    emulate: bool,
}

/// Said for a `:simulate` that cannot be read; the table's usage, with examples.
const SIMULATE_USAGE: &str = "usage: :simulate cuda N [CAPACITY | GPU] [--if-no-gpu] [--emulate], e.g. `:simulate cuda 2`, `:simulate cuda 1 8GiB` or `:simulate cuda 2 h100` (0 turns simulation off; a GPU, also written `--as h100`, is for simulated devices, not emulated ones)";

fn parse_simulate(args: &str) -> Result<SimulateArgs<'_>, String> {
    let mut words: Vec<&str> = args.split_whitespace().collect();
    let only_without_gpu = words.contains(&"--if-no-gpu");
    let emulate = words.contains(&"--emulate");
    words.retain(|w| *w != "--if-no-gpu" && *w != "--emulate");
    let (n, cap, gpu) = match words.as_slice() {
        ["cuda", n] => (n.parse::<usize>().ok(), None, None),
        ["cuda", n, "--as", gpu] if !emulate => (n.parse::<usize>().ok(), None, Some(*gpu)),
        ["cuda", n, cap] if !cap.starts_with('-') => (n.parse::<usize>().ok(), Some(*cap), None),
        _ => (None, None, None),
    };
    let Some(n) = n else {
        return Err(SIMULATE_USAGE.into());
    };
    if let Some(name) = gpu
        && placelab::cost::find(name).is_none()
    {
        return Err(placelab::cost::unknown(name));
    }
    // A CAPACITY or a GPU's name, read as PLACELAB_SIMULATE_CUDA=N,WORD (PLACELAB_EMULATE_CUDA
    // with --emulate) reads it: the same sizes, the same names, the same errors.
    let (capacity, gpu) = match cap {
        None => ("None".to_string(), gpu),
        Some(word) => {
            use placelab::DeviceKind;
            use placelab::cuda::{parse_emulated, parse_simulated};
            let parse = match emulate {
                true => parse_emulated,
                false => parse_simulated,
            };
            // The count is given apart; 1 here only makes the setting one that is on.
            match parse(&format!("1,{word}"))?.map(|sim| sim.each) {
                Some(DeviceKind::SimulatedGpu {
                    stands_for: Some(g),
                    ..
                }) => ("None".to_string(), Some(g.key)),
                Some(
                    DeviceKind::SimulatedGpu { capacity, .. }
                    | DeviceKind::EmulatedGpu { capacity },
                ) => (format!("Some({capacity})"), None),
                Some(DeviceKind::Cpu | DeviceKind::Gpu) | None => ("None".to_string(), None),
            }
        }
    };
    Ok(SimulateArgs {
        n,
        capacity,
        gpu,
        only_without_gpu,
        emulate,
    })
}

fn simulate(s: &mut Session, args: &str) -> CellReport {
    let a = match parse_simulate(args) {
        Ok(a) => a,
        Err(refused) => return CellReport::error(refused),
    };
    // Only `--if-no-gpu` needs to know the machine's real GPUs: the cell process is asked.
    let no_real_gpu = match a.only_without_gpu {
        false => None,
        true => match s.devices() {
            Some(list) if list.real > 0 => {
                return CellReport::info(format!(
                    "this machine has {} real CUDA device(s): nothing simulated, the lessons run on them",
                    list.real
                ));
            }
            // Emulated devices were asked for (PLACELAB_EMULATE_CUDA, `--emulate`): they run
            // the real GPU code path, which the notebook's simulated devices would replace.
            Some(list) if list.emulated > 0 => {
                return CellReport::info(format!(
                    "this session has {} emulated CUDA device(s): nothing simulated, the lessons run on them (the real kernels, on the CPU)",
                    list.emulated
                ));
            }
            Some(list) => list.no_real_gpu,
            None => {
                return CellReport::error(NOT_ANSWERING);
            }
        },
    };
    let (n, cap) = (a.n, &a.capacity);
    let call = match a.gpu {
        Some(name) => format!("simulate_as({n}, {name:?})"),
        None if a.emulate => format!("emulate({n}, {cap})"),
        None => format!("simulate({n}, {cap})"),
    };
    let r = s.run_code(&format!("cuda::{call}.map(|_| cuda::device_count())"));
    if !r.ok() {
        return r;
    }
    s.set_stand_ins((n > 0).then_some(call));
    let why = match no_real_gpu {
        Some(why) => format!(" (no real GPU here: {why})"),
        None => String::new(),
    };
    let what = match a.gpu.and_then(placelab::cost::find) {
        Some(g) => format!(
            "simulated CUDA device(s) standing for {} (memory less a context's; copies show what they would take there, predicted)",
            g.with_article()
        ),
        None if a.emulate => "emulated CUDA device(s), the real kernels run on the CPU".into(),
        None => "simulated CUDA device(s)".into(),
    };
    CellReport::info(format!(
        "{n} {what} on host memory: cuda:0 … cuda:{}{why}",
        n.saturating_sub(1)
    ))
}

fn plot(s: &mut Session, what: &str) -> CellReport {
    let dir = s
        .workdir()
        .parent()
        .map(|p| p.join("plots"))
        .unwrap_or_else(|| super::setup::cache_dir().join("plots"));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return CellReport::error(format!("cannot create {}: {e}", dir.display()));
    }
    let drawn = match what {
        "transfers" | "bandwidth" => {
            let axis = match what {
                "transfers" => TransferAxis::Time,
                _ => TransferAxis::Bandwidth,
            };
            s.probe
                .snapshot(0)
                .map(|snap| snap.transfers)
                .ok_or_else(|| "no transfers yet".to_string())
                .and_then(|log| super::plot::transfers(&dir, &log, axis))
        }
        "memory" => super::plot::memory(&dir, &s.history),
        _ => {
            return CellReport::error("usage: :plot transfers, :plot bandwidth or :plot memory");
        }
    };
    match drawn.and_then(|path| {
        std::fs::read_to_string(&path)
            .map(|svg| (svg, path.clone()))
            .map_err(|e| format!("cannot read back {}: {e}", path.display()))
    }) {
        Ok((svg, path)) => CellReport {
            outputs: vec![Output::Plot { svg, path }],
            ..Default::default()
        },
        Err(e) => CellReport::error(e),
    }
}

fn time(s: &mut Session, code: &str) -> CellReport {
    if code.is_empty() {
        return CellReport::error("usage: :time CODE, e.g. `:time x.matmul(&x)?.sum_all()?`");
    }
    let start = Instant::now();
    let compiles = s.compile_count();
    let mut r = s.run_code(code);
    let compiles = s.compile_count() - compiles;
    let plural = if compiles == 1 { "" } else { "s" };
    r.outputs.push(Output::Info(format!(
        "took {} ({compiles} compile{plural} and the run)",
        human_duration(start.elapsed())
    )));
    r
}

/// `code` profiled: its profile shown, then its value as the cell's (`show::profiled`). A
/// failure fails the cell as it would unprofiled, below the profile up to it: an interrupt stops
/// Run All and a script there, an error or a panic too.
fn profile(s: &mut Session, code: &str) -> CellReport {
    if code.is_empty() {
        return CellReport::error(
            "usage: :profile CODE, e.g. `:profile let loss = loss_fn.forward(&model.forward(&x)?, &y)?; loss.backward()?; opt.step()?`",
        );
    }
    s.run_code(&profile_cell(code))
}

/// `code` profiled, its lanes of time shown (`show::timelined`), then its value as the cell's;
/// a failure fails the cell as under `:profile`.
fn timeline(s: &mut Session, code: &str) -> CellReport {
    if code.is_empty() {
        return CellReport::error(
            "usage: :timeline CODE, e.g. `:timeline let next = cuda::with_stream(&side, || batch.to_non_blocking(&gpu))?; let y = model.forward(&x)?;`",
        );
    }
    s.run_code(&profiled_cell("timelined", code))
}

/// The cell `:profile CODE` runs: one expression, so nothing `code` declares becomes a session
/// variable. `code` is a closure's body, so `?` works in it: statements, an expression or a
/// block, its value (the block's) the cell's value; a last `let` without its `;` is forgiven,
/// as in a cell.
fn profile_cell(code: &str) -> String {
    profiled_cell("profiled", code)
}

/// `code` as the closure `placelab::show::{runner}` profiles (`profile_cell` says how).
fn profiled_cell(runner: &str, code: &str) -> String {
    let code = super::cell_check::forgive(code);
    format!("placelab::show::{runner}(|| -> placelab::Result<_> {{ Ok({{\n{code}\n}}) }})?")
}

/// evcxr's `:fmt`, kept in step with the prelude's `ShowDebug`, which prints most values in the
/// cell's process (evcxr's own format applies to the rest).
fn fmt(s: &mut Session, args: &str) -> CellReport {
    let current = s.value_format().unwrap_or("{:?}");
    if args.is_empty() {
        return CellReport::info(format!("values print with {current}"));
    }
    if placelab::show::parse_value_format(args).is_none() {
        return CellReport::error(format!(
            "`:fmt` takes a Debug format: {{:?}}, {{:#?}}, or either with a precision such as \
             {{:.3?}}; got `{args}` (values still print with {current})"
        ));
    }
    if let Err(e) = s.set_value_format(args) {
        return CellReport::error(e);
    }
    CellReport::info(format!("values now print with {args}"))
}

fn help(_: &mut Session, _: &str) -> CellReport {
    let mut lines: Vec<String> = MAGICS
        .iter()
        .map(|m| format!("{:<30} {}", m.usage, m.help))
        .collect();
    lines.push(format!("{:<30} {}", ":dep, :opt, …", "evcxr's commands"));
    lines.push(format!(
        "{:<30} {}",
        ":exit, :quit, exit, quit", "leave (in a notebook: ask the client; a console leaves)"
    ));
    lines.push(format!(
        "{:<30} {}",
        "Ctrl-C / Ctrl-D", "interrupt a running cell / leave"
    ));
    CellReport::info(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use placelab::cuda::{parse_emulated, parse_simulated};

    /// `:transfers` sets, beside a copy predicted for an H100, what placelab measured on a real
    /// one for the nearest size on the same route; nothing for the CPU's copies.
    #[test]
    fn transfers_show_the_nearest_copy_measured_on_the_predicted_gpu() {
        let line = |from: &str, to: &str, pinned: bool, predicted: bool| {
            crate::probe_client::TransferLine {
                seq: 1,
                from: from.parse().unwrap(),
                to: to.parse().unwrap(),
                bytes: 1 << 20,
                nanos: 1,
                pinned,
                clock: placelab::transfer::Clock::SimulatedHostCopy,
                predicted: predicted.then(|| ("h100".into(), 1)),
            }
        };
        let up = measured_line(&line("cpu", "cuda:0", true, true));
        assert!(
            up.starts_with(" · measured by placelab on an H100 SXM: ")
                && up.ends_with(" for 1.00 MiB (2026-11-27)"),
            "{up}"
        );
        let down = measured_line(&line("cuda:0", "cpu", false, true));
        assert_ne!(up, down, "each route has its own measurement");
        assert_eq!(measured_line(&line("cpu", "cuda:0", true, false)), "");
    }

    /// `:profile`'s cell is one expression, the profiled code's value: its statements, last
    /// expression or block inside a closure, a last `let` without its `;` forgiven.
    #[test]
    fn a_profile_cell_is_one_expression_with_the_codes_value() {
        assert_eq!(
            profile_cell("x.matmul(&y)?"),
            "placelab::show::profiled(|| -> placelab::Result<_> { Ok({\nx.matmul(&y)?\n}) })?"
        );
        assert!(profile_cell("let y = x.relu()?").contains("{\nlet y = x.relu()?;\n}"));
        assert_eq!(
            profiled_cell("timelined", "x.matmul(&y)?"),
            "placelab::show::timelined(|| -> placelab::Result<_> { Ok({\nx.matmul(&y)?\n}) })?"
        );
        for code in [
            "{ let w = x.relu()?; w.sum_all()? }",
            "let l = f()?; l.backward()?;",
        ] {
            assert_eq!(
                crate::cell_check::check(&profile_cell(code)),
                crate::cell_check::Completeness::Complete,
                "{code}"
            );
        }
    }

    #[test]
    fn simulate_takes_a_capacity_or_a_gpu_as_the_environment_variable_does() {
        let sim = parse_simulate("cuda 2 8GiB").unwrap();
        assert_eq!(
            (sim.n, sim.capacity.as_str(), sim.gpu),
            (2, "Some(8589934592)", None)
        );
        let sim = parse_simulate("cuda 2").unwrap();
        assert_eq!((sim.n, sim.capacity.as_str(), sim.gpu), (2, "None", None));
        // A GPU's name where a size would go, as PLACELAB_SIMULATE_CUDA=2,h100: `--as h100`.
        let named = parse_simulate("cuda 2 h100").unwrap();
        assert_eq!(named, parse_simulate("cuda 2 --as h100").unwrap());
        assert_eq!((named.n, named.capacity.as_str()), (2, "None"));
        assert_eq!(named.gpu, Some("h100"));
        // Aliases and case as the environment variable takes them.
        assert_eq!(
            parse_simulate("cuda 1 A100 --if-no-gpu").unwrap().gpu,
            Some("a100")
        );
        assert!(
            parse_simulate("cuda 1 A100 --if-no-gpu")
                .unwrap()
                .only_without_gpu
        );
        let emulated = parse_simulate("cuda 1 512MiB --emulate").unwrap();
        assert!(emulated.emulate);
        assert_eq!(emulated.capacity, format!("Some({})", 512 << 20));
        assert!(
            parse_simulate("cuda two")
                .unwrap_err()
                .starts_with("usage: :simulate cuda N")
        );
        assert!(parse_simulate("cuda 2 --as").is_err());
    }

    #[test]
    fn simulate_refuses_what_the_environment_variable_refuses_in_the_same_words() {
        // Emulated devices take sizes only.
        let e = parse_simulate("cuda 1 lots --emulate").unwrap_err();
        assert_eq!(
            e,
            "\"lots\" is not a size; write e.g. 8GiB, 512MiB or a byte count"
        );
        assert_eq!(e, placelab::units::parse_size("lots").unwrap_err());
        assert_eq!(Err(e), parse_emulated("1,lots").map(|_| ()));
        let e = parse_simulate("cuda 1 h100 --emulate").unwrap_err();
        assert_eq!(Err(e.clone()), parse_emulated("1,h100").map(|_| ()));
        assert!(e.contains("is not a size"), "{e}");
        // Simulated devices: neither a size nor a GPU in the table lists the GPUs.
        let e = parse_simulate("cuda 2 lots").unwrap_err();
        assert_eq!(Err(e.clone()), parse_simulated("2,lots").map(|_| ()));
        assert!(
            e.contains("no GPU named \"lots\"") && e.contains("h100"),
            "{e}"
        );
        assert_eq!(
            parse_simulate("cuda 2 --as lots").unwrap_err(),
            placelab::cost::unknown("lots")
        );
    }
}
