//! Reading requests off a kernel socket without ever losing one silently. A message whose
//! signature is wrong, or whose frames are not a Jupyter message, is dropped and logged (the
//! client is not trusted with a reply). A signed message whose content does not fit its type is
//! kept as an `UnknownMessage`, so the kernel can still answer it with an error.

use jupyter_protocol::{Header, JupyterMessage, JupyterMessageContent, UnknownMessage};
use jupyter_zmq_client::{Connection, RawMessage};
use zeromq::SocketRecv;

use crate::interrupter::Stamp;

pub enum Incoming {
    Request(JupyterMessage),
    /// Signed and addressed, but its content is not what its type needs: (message, why).
    Malformed(JupyterMessage, String),
    /// Not trusted or not a message at all: logged and dropped.
    Dropped(String),
}

/// The next request; `Err` only when the socket itself is gone.
pub async fn read<S: SocketRecv>(conn: &mut Connection<S>) -> Result<Incoming, zeromq::ZmqError> {
    let frames = conn.socket.recv().await?;
    let raw = match RawMessage::from_multipart(frames, &conn.mac) {
        Ok(raw) => raw,
        Err(e) => return Ok(Incoming::Dropped(e.to_string())),
    };
    Ok(decode(raw))
}

fn decode(raw: RawMessage) -> Incoming {
    let part = |i: usize| -> Result<serde_json::Value, String> {
        serde_json::from_slice(&raw.jparts[i]).map_err(|e| format!("frame {i} is not JSON: {e}"))
    };
    let header: Header = match serde_json::from_slice(&raw.jparts[0]) {
        Ok(h) => h,
        Err(e) => return Incoming::Dropped(format!("unreadable header: {e}")),
    };
    let (content, metadata) = match (part(3), part(2)) {
        (Ok(c), Ok(serde_json::Value::Object(m))) => (c, m),
        (Err(e), _) | (_, Err(e)) => return Incoming::Dropped(e),
        (_, Ok(_)) => return Incoming::Dropped("metadata is not an object".into()),
    };
    let typed = JupyterMessageContent::from_type_and_content(&header.msg_type, content.clone());
    let (content, problem) = match typed {
        Ok(c) => (c, None),
        Err(e) => (
            JupyterMessageContent::UnknownMessage(UnknownMessage {
                msg_type: header.msg_type.clone(),
                content,
            }),
            Some(format!(
                "the content of this {} is not valid: {e}",
                header.msg_type
            )),
        ),
    };
    let message = JupyterMessage {
        zmq_identities: raw.zmq_identities,
        // An empty parent header (`{}`) is no header.
        parent_header: serde_json::from_slice(&raw.jparts[1]).ok(),
        header,
        metadata: serde_json::Value::Object(metadata),
        content,
        buffers: raw.jparts[4..].to_vec(),
        channel: None,
    };
    match problem {
        None => Incoming::Request(message),
        Some(why) => Incoming::Malformed(message, why),
    }
}

/// An error reply of type `<name>_reply` to a request we cannot serve, parented to it.
pub fn error_reply(request: &JupyterMessage, ename: &str, evalue: &str) -> JupyterMessage {
    let msg_type = request.header.msg_type.as_str();
    let reply_type = match msg_type.strip_suffix("_request") {
        Some(base) => format!("{base}_reply"),
        None => format!("{msg_type}_reply"),
    };
    JupyterMessage::new(
        UnknownMessage {
            msg_type: reply_type,
            content: serde_json::json!({
                "status": "error",
                "ename": ename,
                "evalue": evalue,
                "traceback": [format!("{ename}: {evalue}")],
            }),
        },
        Some(request),
    )
}

/// Who sent `message`, and when by its clock: what tells an interrupt sent before this request
/// from one sent after. A message without a date (some clients leave it out; the protocol
/// crate then reads the epoch) compares with nothing.
pub fn stamp(message: &JupyterMessage) -> Stamp {
    let date = message.header.date;
    Stamp {
        session: message.header.session.clone(),
        sent_us: (date.timestamp() != 0).then(|| date.timestamp_micros()),
    }
}
