//! The `placelab` command: the REPL (default), `run-script FILE`, `devices`.

use placelab::frontend::{repl, script, session, setup};
use placelab::{Device, cuda, display::human_bytes, memory};

const USAGE: &str = "usage: placelab [repl]            start the REPL (the default)
       placelab run-script FILE  run the cells of FILE (separated by `// %%` lines) and print what they show
       placelab devices          list the devices and exit
environment: PLACELAB_SIMULATE_CUDA=N[,CAPACITY] gives N simulated CUDA devices (e.g. 2,8GiB)";

fn main() {
    // First: this binary is also evcxr's cell runner and rustc wrapper.
    setup::hooks();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] | ["repl"] => match session::prepare() {
            Ok(p) => repl::run(banner(), p),
            Err(e) => fail(&e),
        },
        ["run-script", file] => match std::fs::read_to_string(file) {
            Err(e) => fail(&format!("cannot read {file}: {e}")),
            Ok(text) => match session::prepare() {
                Err(e) => fail(&e),
                Ok(p) => {
                    let sink: session::Sink = std::sync::Arc::new(|is_err, line| {
                        if is_err {
                            eprintln!("{line}")
                        } else {
                            println!("{line}")
                        }
                    });
                    match session::Session::start(p, sink) {
                        Err(e) => fail(&e),
                        Ok(mut s) => i32::from(!script::run(&mut s, &text)),
                    }
                }
            },
        },
        ["devices"] => {
            println!("{}", banner());
            0
        }
        ["-h" | "--help" | "help"] => {
            println!("{USAGE}");
            0
        }
        ["--version" | "-V"] => {
            println!("placelab {}", env!("CARGO_PKG_VERSION"));
            0
        }
        _ => fail(&format!("unknown arguments {args:?}\n{USAGE}")),
    };
    std::process::exit(code);
}

fn fail(msg: &str) -> i32 {
    eprintln!("placelab: {msg}");
    2
}

/// `placelab 0.1 · devices: cpu (2 threads), cuda:0 NVIDIA H100 80GB HBM3 (79.1 GiB free)`.
fn banner() -> String {
    let mut parts = vec![format!("cpu ({} threads)", placelab::cpu_threads())];
    for i in 0..cuda::device_count() {
        let name = cuda::device_name(i).unwrap_or_else(|e| e.to_string());
        // A simulated device's name already gives its capacity.
        let free = match Device::Cuda(i).is_simulated() {
            true => String::new(),
            false => memory::mem_get_info(&Device::Cuda(i))
                .map(|(f, _)| format!(" ({} free)", human_bytes(f)))
                .unwrap_or_default(),
        };
        parts.push(format!("{} {name}{free}", Device::Cuda(i).label()));
    }
    if let Some(why) = cuda::unavailable_reason() {
        parts.push(format!("no CUDA: {why}"));
    }
    format!(
        "placelab {} · devices: {}",
        env!("CARGO_PKG_VERSION"),
        parts.join(", ")
    )
}
