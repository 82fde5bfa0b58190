//! The control channel: `kernel_info`, `interrupt_request` and `shutdown_request`, answered
//! while a cell runs (the evaluator's own thread runs cells). The kernel ends when control says
//! so, or when the process that started it is gone.

use jupyter_protocol::{
    InterruptReply, JupyterMessage, JupyterMessageContent, ReplyStatus, ShutdownReply, Status,
};
use jupyter_zmq_client::KernelControlConnection;

use super::iopub::Iopub;
use super::log::{ignore, log};
use super::replies;
use super::wire::{self, Incoming, stamp};
use crate::evaluator::Evaluator;
use crate::interrupter::{Asker, Stopped};

/// Serves control until a `shutdown_request`, a SIGTERM or the end of the process that started
/// the kernel; returns the exit code.
pub async fn serve(
    mut control: KernelControlConnection,
    iopub: Iopub,
    evaluator: &Evaluator,
    banner: &str,
) -> i32 {
    let parent_gone = parent_gone();
    tokio::pin!(parent_gone);
    let terminated = terminated();
    tokio::pin!(terminated);
    loop {
        let read = tokio::select! {
            read = wire::read(&mut control) => read,
            () = &mut terminated => {
                log("SIGTERM: stopping the cell's process and removing the compile directory");
                evaluator.interrupt(&Asker::Kernel);
                return 0;
            }
            () = &mut parent_gone => {
                log("the process that started this kernel has ended: ending the kernel too");
                evaluator.interrupt(&Asker::Kernel);
                return 0;
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
                return 1;
            }
        };
        let reply = match &message.content {
            JupyterMessageContent::KernelInfoRequest(_) => {
                iopub.send(Status::busy(), &message);
                let _ = control
                    .send(replies::kernel_info(banner).as_child_of(&message))
                    .await;
                iopub.send(Status::idle(), &message);
                continue;
            }
            JupyterMessageContent::InterruptRequest(_) => interrupt(evaluator, &message),
            JupyterMessageContent::ShutdownRequest(req) => {
                shutdown(&mut control, &iopub, evaluator, &message, req.restart).await;
                return 0;
            }
            _ => {
                ignore(&message, "control");
                continue;
            }
        };
        let _ = control.send(reply.as_child_of(&message)).await;
    }
}

fn interrupt(evaluator: &Evaluator, message: &JupyterMessage) -> InterruptReply {
    log(match evaluator.interrupt(&Asker::Client(stamp(message))) {
        Stopped::Running => "interrupt: stopping the running cell",
        Stopped::BeforeItRan => "interrupt: stopping the cell before it runs",
        Stopped::NotMeantForIt => {
            "interrupt: sent before the cell that runs now was asked for: nothing stopped"
        }
        Stopped::NoCell => "interrupt: no cell is running",
    });
    InterruptReply {
        status: ReplyStatus::Ok,
        error: None,
    }
}

async fn shutdown(
    control: &mut KernelControlConnection,
    iopub: &Iopub,
    evaluator: &Evaluator,
    message: &JupyterMessage,
    restart: bool,
) {
    evaluator.interrupt(&Asker::Kernel);
    let reply = ShutdownReply {
        restart,
        status: ReplyStatus::Ok,
        error: None,
    };
    // Also broadcast on iopub, so every client learns the kernel is going.
    iopub.send(reply.clone(), message);
    let _ = control.send(reply.as_child_of(message)).await;
    // Let the iopub task flush the broadcast.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
}

/// Resolves on SIGTERM. A kernel manager sends it when a kernel is still there some time after
/// its `shutdown_request` (jupyter_client: half of its 5 s wait, SIGKILL at the end of it), and
/// a server stopping sends it too. Ended by the default action, the kernel would leave its
/// compile directory half deleted (that takes seconds on a loaded machine: a thousand links to
/// the engine's build) and could leave its cell's process. Handled, it is the same shutdown as
/// the request's; and the handler stays for the life of the process, so a SIGTERM that comes
/// while that cleanup runs lets it finish (it is bounded: `kernel::run`).
async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut sigterm) => {
            sigterm.recv().await;
        }
        Err(e) => {
            log(format!(
                "cannot handle SIGTERM ({e}): it will end the kernel at once"
            ));
            std::future::pending::<()>().await;
        }
    }
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
