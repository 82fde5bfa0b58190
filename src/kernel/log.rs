//! The kernel's log: its stderr, which Jupyter servers keep in their log.

use jupyter_protocol::JupyterMessage;

pub fn log(what: impl std::fmt::Display) {
    eprintln!("[placelab kernel] {what}");
}

/// Unknown message types are logged and ignored, as ipykernel does: a reply of an invented
/// type could be taken by a client for the answer to its next request.
pub fn ignore(message: &JupyterMessage, channel: &str) {
    log(format!(
        "ignored a {} message on {channel}",
        message.header.msg_type
    ));
}
