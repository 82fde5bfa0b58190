//! `placelab kernel --connection-file F`: the Jupyter kernel, a thin shell over the same
//! `Session` as the REPL. Tasks on a tokio runtime own the sockets (heartbeat, iopub on XPUB with
//! `iopub_welcome`, control, shell, stdin); the `Session` lives on its own thread (`evaluator`).
//! The control channel is never blocked by a running cell, so interrupts and `kernel_info` are
//! answered at once.

pub mod evaluator;
mod execute;
pub mod install;
mod replies;
mod streams;
mod wire;

use std::path::Path;

use jupyter_protocol::{
    ConnectionInfo, InterruptReply, IoPubWelcome, JupyterMessage, JupyterMessageContent,
    ReplyStatus, ShutdownReply, Status,
};
use jupyter_zmq_client::{
    RouterSendConnection, SubscriptionEvent, create_kernel_control_connection,
    create_kernel_heartbeat_connection, create_kernel_iopub_xpub_connection,
    create_kernel_shell_connection, create_kernel_stdin_connection,
};
use tokio::sync::mpsc;

use super::history::History;
use super::session::Prepared;
use evaluator::Evaluator;
use streams::Streams;
use wire::Incoming;

/// What the kernel logs goes to its stderr, which Jupyter servers keep in their log.
fn log(what: impl std::fmt::Display) {
    eprintln!("[placelab kernel] {what}");
}

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

/// Sends iopub messages from any task or thread; the iopub task owns the socket.
#[derive(Clone)]
pub struct Iopub(mpsc::UnboundedSender<JupyterMessage>);

impl Iopub {
    pub fn send(&self, content: impl Into<JupyterMessageContent>, parent: &JupyterMessage) {
        let mut message = JupyterMessage::new(content, Some(parent));
        // iopub messages are broadcast: no ROUTER identities in the topic frame.
        message.zmq_identities.clear();
        let _ = self.0.send(message);
    }
}

/// Runs the kernel until a `shutdown_request`; returns the process's exit code.
pub fn run(info: ConnectionInfo, prepared: Prepared) -> i32 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            log(format!("cannot start the async runtime: {e}"));
            return 1;
        }
    };
    let (code, evaluator) = runtime.block_on(serve(info, prepared));
    // Tasks still reading sockets are abandoned, and with them their handles on the evaluator.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    if let Some(evaluator) = evaluator {
        // An interrupted cell may take its grace to stop.
        evaluator.finish(super::interrupter::interrupt_grace() + std::time::Duration::from_secs(3));
    }
    code
}

/// Resolves when the process that started the kernel (Jupyter's server) is gone: the kernel then
/// ends too, as ipykernel does, instead of holding its memory with no one to talk to.
async fn parent_gone() {
    // SAFETY: getppid cannot fail.
    let parent = unsafe { libc::getppid() };
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        if unsafe { libc::getppid() } != parent {
            return;
        }
    }
}

/// Serves the channels until a `shutdown_request` (or the end of the process that started the
/// kernel); returns the exit code and the evaluator, to finish.
async fn serve(info: ConnectionInfo, prepared: Prepared) -> (i32, Option<Evaluator>) {
    let session_id = uuid::Uuid::new_v4().to_string();
    // Bind everything before the evaluator starts, so a busy port fails fast and clearly.
    macro_rules! bind {
        ($what:literal, $url:expr, $make:expr) => {
            match $make.await {
                Ok(c) => c,
                Err(e) => {
                    log(format!(
                        "cannot listen on {} for the {} channel: {e}. Is another kernel using this \
                         connection file? Start a new kernel so Jupyter picks free ports.",
                        $url, $what
                    ));
                    return (1, None);
                }
            }
        };
    }
    let mut heartbeat = bind!(
        "heartbeat",
        info.hb_url(),
        create_kernel_heartbeat_connection(&info)
    );
    let shell = bind!(
        "shell",
        info.shell_url(),
        create_kernel_shell_connection(&info, &session_id)
    );
    let mut control = bind!(
        "control",
        info.control_url(),
        create_kernel_control_connection(&info, &session_id)
    );
    let _stdin = bind!(
        "stdin",
        info.stdin_url(),
        create_kernel_stdin_connection(&info, &session_id)
    );
    let mut iopub_socket = bind!(
        "iopub",
        info.iopub_url(),
        create_kernel_iopub_xpub_connection(&info, &session_id)
    );

    let (iopub_tx, mut iopub_rx) = mpsc::unbounded_channel::<JupyterMessage>();
    let iopub = Iopub(iopub_tx);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                message = iopub_rx.recv() => match message {
                    Some(m) => if let Err(e) = iopub_socket.send(m).await {
                        log(format!("iopub send failed: {e}"));
                    },
                    None => break,
                },
                event = iopub_socket.recv_subscription() => match event {
                    // JEP 65: a new subscriber learns it is connected before any output is lost.
                    Ok(SubscriptionEvent::Subscribe(topic)) => {
                        let welcome: JupyterMessage = IoPubWelcome::new(topic).into();
                        let _ = iopub_socket.send(welcome).await;
                    }
                    Ok(SubscriptionEvent::Unsubscribe(_)) => {}
                    Err(e) => log(format!("iopub subscription: {e}")),
                },
            }
        }
    });
    tokio::spawn(async move { while heartbeat.single_heartbeat().await.is_ok() {} });

    let streams = Streams::start(iopub.clone());
    let evaluator = Evaluator::spawn(prepared, streams.sink(), streams.clear_sink());
    let history = History::open(match std::env::var_os("PLACELAB_HISTORY") {
        Some(path) => path.into(),
        None => super::setup::cache_dir().join("kernel-history.jsonl"),
    });

    // SIGINT (a terminal's Ctrl-C, or a client using interrupt_mode "signal") interrupts the
    // running cell instead of killing the kernel.
    {
        let evaluator = evaluator.clone();
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                evaluator.interrupt();
            }
        });
    }

    let (shell_send, mut shell_recv) = shell.split();
    let (requests_tx, requests) = mpsc::unbounded_channel::<Incoming>();
    tokio::spawn(async move {
        loop {
            match wire::read(&mut shell_recv).await {
                Ok(Incoming::Dropped(why)) => log(format!("dropped a shell message: {why}")),
                Ok(incoming) => {
                    if requests_tx.send(incoming).is_err() {
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
    let banner = replies::banner();
    let mut shell_worker = replies::Shell {
        reply: shell_send,
        iopub: iopub.clone(),
        evaluator: evaluator.clone(),
        streams,
        history,
        execution_count: 0,
        requests,
        banner: banner.clone(),
    };
    tokio::spawn(async move { shell_worker.serve().await });

    // Control: answered while a cell runs; the kernel ends when it says so.
    let parent_gone = parent_gone();
    tokio::pin!(parent_gone);
    loop {
        let read = tokio::select! {
            read = wire::read(&mut control) => read,
            () = &mut parent_gone => {
                log("the process that started this kernel has ended: ending the kernel too");
                evaluator.interrupt();
                return (0, Some(evaluator));
            }
        };
        let message = match read {
            Ok(Incoming::Request(m)) => m,
            Ok(Incoming::Malformed(m, why)) => {
                let _ = control
                    .send(wire::error_reply(&m, "BadRequest", &why))
                    .await;
                continue;
            }
            Ok(Incoming::Dropped(why)) => {
                log(format!("dropped a control message: {why}"));
                continue;
            }
            Err(e) => {
                log(format!("the control socket failed: {e}"));
                return (1, Some(evaluator));
            }
        };
        match &message.content {
            JupyterMessageContent::KernelInfoRequest(_) => {
                iopub.send(Status::busy(), &message);
                let _ = control
                    .send(replies::kernel_info(&banner).as_child_of(&message))
                    .await;
                iopub.send(Status::idle(), &message);
            }
            JupyterMessageContent::InterruptRequest(_) => {
                let running = evaluator.interrupt();
                log(if running {
                    "interrupt: stopping the running cell"
                } else {
                    "interrupt: no cell is running"
                });
                let reply = InterruptReply {
                    status: ReplyStatus::Ok,
                    error: None,
                };
                let _ = control.send(reply.as_child_of(&message)).await;
            }
            JupyterMessageContent::ShutdownRequest(req) => {
                evaluator.interrupt();
                let reply = ShutdownReply {
                    restart: req.restart,
                    status: ReplyStatus::Ok,
                    error: None,
                };
                // Also broadcast on iopub, so every client learns the kernel is going.
                iopub.send(reply.clone(), &message);
                let _ = control.send(reply.as_child_of(&message)).await;
                // Let the iopub task flush the broadcast.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                return (0, Some(evaluator));
            }
            _ => ignore(&message, "control"),
        }
    }
}

/// Unknown message types are logged and ignored, as ipykernel does: a reply of an invented
/// type could be taken by a client for the answer to its next request.
fn ignore(message: &JupyterMessage, channel: &str) {
    log(format!(
        "ignored a {} message on {channel}",
        message.header.msg_type
    ));
}

/// Sends a shell reply; a failed send is logged (the client went away), never fatal.
async fn send_reply(socket: &mut RouterSendConnection, reply: JupyterMessage) {
    if let Err(e) = socket.send(reply).await {
        log(format!("shell reply failed: {e}"));
    }
}
