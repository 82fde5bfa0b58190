//! A cell's memory strip in a notebook: shown live (one `display_data`, then updates in place)
//! while the cell runs past a second, and its final state when it ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use jupyter_protocol::{
    DisplayData, JupyterMessage, Media, MediaType, Transient, UpdateDisplayData,
};

use super::iopub::Iopub;
use crate::strip::MemoryChange;

/// The memory strip of one cell: shown live (one `display_data`, then updates in place) while
/// the cell runs, and its final state when it ends.
pub struct Strip {
    iopub: Iopub,
    parent: JupyterMessage,
    display_id: String,
    silent: bool,
    /// Whether the live strip is already on the page (then the end updates it in place).
    shown: Arc<Mutex<bool>>,
    /// Raised when the cell's `clear_output` took the strip off the page.
    cleared: Arc<AtomicBool>,
}

impl Strip {
    pub fn new(
        iopub: Iopub,
        parent: &JupyterMessage,
        silent: bool,
        cleared: Arc<AtomicBool>,
    ) -> Strip {
        Strip {
            iopub,
            parent: parent.clone(),
            display_id: format!("placelab-memory-{}", parent.header.msg_id),
            silent,
            shown: Arc::default(),
            cleared,
        }
    }

    fn media(change: &MemoryChange, running: bool) -> Media {
        let mut lines = change.lines();
        let html = if running {
            lines.insert(0, "── running…".into());
            change.html_while_running()
        } else {
            change.html()
        };
        Media::new(vec![
            MediaType::Plain(lines.join("\n")),
            MediaType::Html(html),
        ])
    }

    fn show(&self, change: &MemoryChange, running: bool) {
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        if self.cleared.swap(false, Ordering::AcqRel) {
            *shown = false;
        }
        let transient = Transient {
            display_id: Some(self.display_id.clone()),
        };
        let media = Self::media(change, running);
        if *shown {
            let update = UpdateDisplayData {
                data: media,
                metadata: Default::default(),
                transient,
            };
            self.iopub.send(update, &self.parent);
        } else {
            let mut display = DisplayData::new(media);
            display.transient = Some(transient);
            self.iopub.send(display, &self.parent);
            *shown = true;
        }
    }

    /// The callback the evaluator calls while the cell runs.
    pub fn live(&self) -> Box<dyn FnMut(MemoryChange) + Send> {
        if self.silent {
            return Box::new(|_| {});
        }
        let strip = Strip {
            iopub: self.iopub.clone(),
            parent: self.parent.clone(),
            display_id: self.display_id.clone(),
            silent: false,
            shown: self.shown.clone(),
            cleared: self.cleared.clone(),
        };
        // Shown once the cell's memory moves: a cell still compiling has nothing to watch yet.
        Box::new(move |change| {
            if change.changed() {
                strip.show(&change, true)
            }
        })
    }

    pub fn finish(&self, change: Option<&MemoryChange>) {
        if let Some(c) = change {
            self.show(c, false);
        }
    }
}
