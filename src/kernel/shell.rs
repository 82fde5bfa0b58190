//! The shell channel: requests one at a time, each between `busy` and `idle` on iopub (clients
//! wait for that `idle`); cells go to `execute.rs`, everything else to `replies.rs`.

use jupyter_protocol::{JupyterMessage, JupyterMessageContent, Status};
use jupyter_zmq_client::RouterSendConnection;
use tokio::sync::mpsc;

use super::execute::Executor;
use super::log::{ignore, log};
use super::replies;
use super::wire::{self, Incoming};

pub struct Shell {
    pub reply: RouterSendConnection,
    pub requests: mpsc::UnboundedReceiver<Incoming>,
    pub cells: Executor,
    pub banner: String,
}

impl Shell {
    pub async fn serve(&mut self) {
        while let Some(incoming) = self.requests.recv().await {
            let (message, problem) = match incoming {
                Incoming::Request(m) => (m, None),
                Incoming::Malformed(m, why) => match replies::lenient_history(&m) {
                    Some(fixed) => (fixed, None),
                    None => (m, Some(why)),
                },
                Incoming::Dropped(_) => continue,
            };
            self.cells.iopub.send(Status::busy(), &message);
            match problem {
                Some(why) => {
                    self.send(wire::error_reply(&message, "BadRequest", &why))
                        .await
                }
                None => self.dispatch(&message).await,
            }
            self.cells.iopub.send(Status::idle(), &message);
        }
    }

    async fn dispatch(&mut self, message: &JupyterMessage) {
        let reply: JupyterMessage = match &message.content {
            JupyterMessageContent::ExecuteRequest(req) => {
                let reply = self.cells.execute(message, req).await;
                // Taken before the reply goes out: a request sent after the client saw the error
                // (Shift-Enter right after a Ctrl-C) is the learner's next step, and runs.
                let waiting = match reply.error.is_some() && req.stop_on_error {
                    true => self.take_waiting().await,
                    false => Vec::new(),
                };
                self.send(reply.as_child_of(message)).await;
                self.abort(waiting).await;
                return;
            }
            JupyterMessageContent::KernelInfoRequest(_) => {
                replies::kernel_info(&self.banner).as_child_of(message)
            }
            JupyterMessageContent::IsCompleteRequest(req) => {
                replies::is_complete(&req.code).as_child_of(message)
            }
            JupyterMessageContent::CompleteRequest(req) => {
                replies::complete(&self.cells.evaluator, req)
                    .await
                    .as_child_of(message)
            }
            JupyterMessageContent::InspectRequest(req) => {
                replies::inspect(&self.cells.evaluator, req)
                    .await
                    .as_child_of(message)
            }
            JupyterMessageContent::HistoryRequest(req) => {
                replies::history(&self.cells.history, req).as_child_of(message)
            }
            JupyterMessageContent::CommInfoRequest(_) => replies::comm_info().as_child_of(message),
            _ => {
                ignore(message, "shell");
                return;
            }
        };
        self.send(reply).await;
    }

    /// The requests waiting now: those sent while the cell that just failed ran.
    async fn take_waiting(&mut self) -> Vec<Incoming> {
        tokio::task::yield_now().await;
        std::iter::from_fn(|| self.requests.try_recv().ok()).collect()
    }

    /// After a failed cell with `stop_on_error`, the execute requests that were waiting are
    /// answered `aborted` without running (as ipykernel does); other requests are served.
    async fn abort(&mut self, waiting: Vec<Incoming>) {
        for incoming in waiting {
            let Incoming::Request(message) = incoming else {
                continue;
            };
            self.cells.iopub.send(Status::busy(), &message);
            match &message.content {
                JupyterMessageContent::ExecuteRequest(_) => {
                    let reply = self.cells.aborted();
                    self.send(reply.as_child_of(&message)).await;
                }
                _ => Box::pin(self.dispatch(&message)).await,
            }
            self.cells.iopub.send(Status::idle(), &message);
        }
    }

    /// Sends a reply; a failed send is logged (the client went away), never fatal.
    async fn send(&mut self, reply: JupyterMessage) {
        if let Err(e) = self.reply.send(reply).await {
            log(format!("shell reply failed: {e}"));
        }
    }
}
