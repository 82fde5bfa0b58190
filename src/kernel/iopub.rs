//! The iopub channel: one task owns the XPUB socket and sends what every other task and thread
//! hands it; a new subscriber is welcomed first (JEP 65), so it loses no output.

use jupyter_protocol::{IoPubWelcome, JupyterMessage, JupyterMessageContent, Media, MediaType};
use jupyter_zmq_client::{KernelIoPubXPubConnection, SubscriptionEvent};
use tokio::sync::mpsc;

use super::log::log;
use crate::report::Output;

/// Sends iopub messages from any task or thread.
#[derive(Clone)]
pub struct Iopub(mpsc::UnboundedSender<JupyterMessage>);

impl Iopub {
    /// Starts the task that owns `socket`.
    pub fn start(mut socket: KernelIoPubXPubConnection) -> Iopub {
        let (tx, mut rx) = mpsc::unbounded_channel::<JupyterMessage>();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    message = rx.recv() => match message {
                        Some(m) => if let Err(e) = socket.send(m).await {
                            log(format!("iopub send failed: {e}"));
                        },
                        None => break,
                    },
                    event = socket.recv_subscription() => match event {
                        Ok(SubscriptionEvent::Subscribe(topic)) => {
                            let welcome: JupyterMessage = IoPubWelcome::new(topic).into();
                            let _ = socket.send(welcome).await;
                        }
                        Ok(SubscriptionEvent::Unsubscribe(_)) => {}
                        Err(e) => log(format!("iopub subscription: {e}")),
                    },
                }
            }
        });
        Iopub(tx)
    }

    /// An iopub whose messages are kept in a channel instead of sent (`run-notebook`).
    pub fn recording() -> (Iopub, mpsc::UnboundedReceiver<JupyterMessage>) {
        let (tx, rx) = mpsc::unbounded_channel::<JupyterMessage>();
        (Iopub(tx), rx)
    }

    pub fn send(&self, content: impl Into<JupyterMessageContent>, parent: &JupyterMessage) {
        let mut message = JupyterMessage::new(content, Some(parent));
        // iopub messages are broadcast: no ROUTER identities in the topic frame.
        message.zmq_identities.clear();
        let _ = self.0.send(message);
    }
}

/// How a value, a card, a table or a plot is shown: its text, beside its HTML (a plot's SVG);
/// `None` for a session's message (sent as stdout) and an error (sent as `error`).
pub fn media_of(output: &Output) -> Option<Media> {
    match output {
        Output::Value { plain, html, .. } | Output::Card { plain, html, .. } => {
            Some(plain_and_html(plain, html.as_deref()))
        }
        Output::Table { plain, html } => Some(plain_and_html(plain, Some(html))),
        Output::Plot { svg, path } => Some(Media::new(vec![
            MediaType::Plain(format!("plot (also written to {})", path.display())),
            MediaType::Svg(svg.clone()),
        ])),
        Output::Info(_) | Output::Error { .. } => None,
    }
}

/// Text, and HTML beside it when there is some: how a value, a card or an inspection is sent.
pub fn plain_and_html(plain: &str, html: Option<&str>) -> Media {
    let mut media = vec![MediaType::Plain(plain.to_string())];
    media.extend(html.map(|h| MediaType::Html(h.to_string())));
    Media::new(media)
}
