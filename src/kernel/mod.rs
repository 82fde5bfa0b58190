//! `placelab kernel --connection-file F`: the Jupyter kernel, a thin shell over the same
//! `Session` as the REPL. Tasks on a tokio runtime own the sockets (heartbeat, iopub on XPUB with
//! `iopub_welcome`, control, shell, stdin); the `Session` lives on its own thread (`evaluator`).
//! The control channel is never blocked by a running cell, so interrupts and `kernel_info` are
//! answered at once.

mod control;
mod execute;
mod folded;
pub mod install;
mod iopub;
mod live_strip;
mod log;
pub mod notebook_file;
mod replies;
pub mod run_notebook;
mod shell;
mod streams;
mod wire;

use std::path::Path;
use std::time::Duration;

use jupyter_protocol::ConnectionInfo;
use jupyter_zmq_client::{
    KernelControlConnection, KernelHeartbeatConnection, KernelIoPubXPubConnection,
    KernelShellConnection, KernelStdinConnection, create_kernel_control_connection,
    create_kernel_heartbeat_connection, create_kernel_iopub_xpub_connection,
    create_kernel_shell_connection, create_kernel_stdin_connection,
};
use tokio::sync::mpsc;

use super::evaluator::Evaluator;
use super::interrupter::interrupt_grace;
use super::session::Prepared;
use execute::Executor;
use iopub::Iopub;
use log::log;
use shell::Shell;
use wire::Incoming;

/// Reads and checks the connection file a client wrote; every problem says what to do.
pub fn read_connection_file(path: &Path) -> Result<ConnectionInfo, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read the connection file {}: {e}. Jupyter writes this file and passes its path \
             (`placelab kernel --connection-file FILE`); start the kernel from Jupyter, or write one \
             with ip, transport, the five ports and key.",
            path.display()
        )
    })?;
    serde_json::from_str(&text).map_err(|e| {
        format!(
            "the connection file {} is not a Jupyter connection file: {e}",
            path.display()
        )
    })
}

/// Runs the kernel until a `shutdown_request` or SIGTERM; returns the process's exit code.
pub fn run(info: ConnectionInfo, prepared: Prepared) -> i32 {
    let runtime = match runtime() {
        Ok(r) => r,
        Err(e) => {
            log(e);
            return 1;
        }
    };
    let (code, evaluator) = runtime.block_on(serve(info, prepared));
    // Tasks still reading sockets are abandoned, and with them their handles on the evaluator.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    if let Some(evaluator) = evaluator {
        // An interrupted cell may take its grace to stop.
        evaluator.finish(interrupt_grace() + Duration::from_secs(3));
    }
    code
}

/// The runtime the channels' tasks run on (two threads: a cell never stops the control channel).
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

/// The five sockets, bound before the evaluator starts, so a busy port fails fast and clearly.
struct Sockets {
    heartbeat: KernelHeartbeatConnection,
    shell: KernelShellConnection,
    control: KernelControlConnection,
    stdin: KernelStdinConnection,
    iopub: KernelIoPubXPubConnection,
}

async fn bind(info: &ConnectionInfo, id: &str) -> Result<Sockets, String> {
    Ok(Sockets {
        heartbeat: bound(
            "heartbeat",
            info.hb_url(),
            create_kernel_heartbeat_connection(info),
        )
        .await?,
        shell: bound(
            "shell",
            info.shell_url(),
            create_kernel_shell_connection(info, id),
        )
        .await?,
        control: bound(
            "control",
            info.control_url(),
            create_kernel_control_connection(info, id),
        )
        .await?,
        stdin: bound(
            "stdin",
            info.stdin_url(),
            create_kernel_stdin_connection(info, id),
        )
        .await?,
        iopub: bound(
            "iopub",
            info.iopub_url(),
            create_kernel_iopub_xpub_connection(info, id),
        )
        .await?,
    })
}

/// One socket, or what to do when its port is taken.
async fn bound<T, E: std::fmt::Display>(
    channel: &str,
    url: String,
    binding: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    binding.await.map_err(|e| {
        format!(
            "cannot listen on {url} for the {channel} channel: {e}. Is another kernel using this \
             connection file? Start a new kernel so Jupyter picks free ports."
        )
    })
}

/// Serves the channels until a `shutdown_request` (or the end of the process that started the
/// kernel); returns the exit code and the evaluator, to finish.
async fn serve(info: ConnectionInfo, prepared: Prepared) -> (i32, Option<Evaluator>) {
    let session_id = uuid::Uuid::new_v4().to_string();
    let sockets = match bind(&info, &session_id).await {
        Ok(s) => s,
        Err(why) => {
            log(why);
            return (1, None);
        }
    };
    let Sockets {
        mut heartbeat,
        shell,
        control,
        stdin: _stdin,
        iopub,
    } = sockets;
    let iopub = Iopub::start(iopub);
    tokio::spawn(async move { while heartbeat.single_heartbeat().await.is_ok() {} });
    let cells = Executor::start(iopub.clone(), prepared);
    let evaluator = cells.evaluator.clone();
    let (reply, shell_recv) = shell.split();
    let banner = replies::banner();
    let mut shell = Shell {
        reply,
        requests: read_requests(shell_recv),
        cells,
        banner: banner.clone(),
    };
    tokio::spawn(async move { shell.serve().await });
    let code = control::serve(control, iopub, &evaluator, &banner).await;
    (code, Some(evaluator))
}

/// The shell socket's requests, read by their own task so a running cell never stops reading.
fn read_requests(
    mut socket: jupyter_zmq_client::RouterRecvConnection,
) -> mpsc::UnboundedReceiver<Incoming> {
    let (tx, requests) = mpsc::unbounded_channel::<Incoming>();
    tokio::spawn(async move {
        loop {
            match wire::read(&mut socket).await {
                Ok(Incoming::Dropped(why)) => log(format!("dropped a shell message: {why}")),
                Ok(incoming) => {
                    if tx.send(incoming).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    log(format!("the shell socket failed: {e}"));
                    break;
                }
            }
        }
    });
    requests
}
