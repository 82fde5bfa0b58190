//! A notebook file for `run-notebook`: read and checked (nbformat 4), its cells' outputs built
//! from the kernel's iopub messages as nbclient builds them, and written as nbformat writes it.

use std::collections::HashMap;
use std::path::Path;

use jupyter_protocol::{JupyterMessageContent, Stdio};
use serde_json::{Map, Value, json};

/// A notebook as read: its JSON, and the index of each code cell in `cells`.
pub struct Notebook {
    pub json: Value,
    pub code_cells: Vec<usize>,
}

impl Notebook {
    /// Reads `path`; every problem says what the file is not.
    pub fn read(path: &Path) -> Result<Notebook, String> {
        let shown = path.display();
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
        let json: Value = serde_json::from_str(&text)
            .map_err(|e| format!("{shown} is not a notebook: it is not JSON ({e})"))?;
        match json.get("nbformat").and_then(Value::as_u64) {
            Some(4) => {}
            Some(v) => {
                return Err(format!(
                    "{shown} is a version {v} notebook; run-notebook reads version 4 (save it \
                     from JupyterLab, or `jupyter nbconvert --to notebook` it, to upgrade it)"
                ));
            }
            None => return Err(format!("{shown} is not a notebook: it has no \"nbformat\"")),
        }
        let Some(cells) = json.get("cells").and_then(Value::as_array) else {
            return Err(format!(
                "{shown} is not a notebook: it has no \"cells\" list"
            ));
        };
        let code_cells = (cells.iter().enumerate())
            .filter(|(_, c)| c.get("cell_type").and_then(Value::as_str) == Some("code"))
            .map(|(i, _)| i)
            .collect();
        Ok(Notebook { json, code_cells })
    }

    pub fn cell(&self, index: usize) -> &Value {
        &self.json["cells"][index]
    }

    pub fn cell_mut(&mut self, index: usize) -> &mut Value {
        &mut self.json["cells"][index]
    }

    /// A cell's source: a string, or a list of lines as nbformat writes it.
    pub fn source(&self, index: usize) -> String {
        joined(&self.cell(index)["source"])
    }

    /// The cell's id, else its place ("cell 3"): how a message names it.
    pub fn name(&self, index: usize) -> String {
        match self.cell(index).get("id").and_then(Value::as_str) {
            Some(id) => format!("cell {id}"),
            None => format!("cell {}", index + 1),
        }
    }

    /// Whether the cell's error is its lesson (tag `raises-exception`, as nbclient reads it).
    pub fn may_fail(&self, index: usize) -> bool {
        let tags = &self.cell(index)["metadata"]["tags"];
        (tags.as_array().into_iter().flatten()).any(|t| t == "raises-exception")
    }

    /// Writes the notebook as nbformat does: one-space indent, keys sorted, text split in lines.
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let mut json = self.json.clone();
        split_lines(&mut json);
        let mut bytes = Vec::new();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b" ");
        let mut writer = serde_json::Serializer::with_formatter(&mut bytes, formatter);
        serde::Serialize::serialize(&sorted(json), &mut writer)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        bytes.push(b'\n');
        std::fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// A string, or the lines of a list of strings joined.
fn joined(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(lines) => lines.iter().filter_map(Value::as_str).collect(),
        _ => String::new(),
    }
}

/// Sorted keys at every level, whatever order the map kept.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// nbformat's `split_lines`: a cell's source, a stream's text and every non-JSON media value
/// are written as lists of lines, so a diff of two runs shows the lines that changed.
fn split_lines(notebook: &mut Value) {
    let lines = |v: &mut Value| {
        if let Value::String(s) = v {
            *v = Value::Array(s.split_inclusive('\n').map(|l| json!(l)).collect());
        }
    };
    // `get_mut`, not indexing, which would add the keys it does not find (a markdown cell's
    // outputs, as null).
    let cells = notebook.get_mut("cells").and_then(Value::as_array_mut);
    for cell in cells.into_iter().flatten() {
        if let Some(source) = cell.get_mut("source") {
            lines(source);
        }
        let outputs = cell.get_mut("outputs").and_then(Value::as_array_mut);
        for output in outputs.into_iter().flatten() {
            if let Some(text) = output.get_mut("text") {
                lines(text);
            }
            let media = output.get_mut("data").and_then(Value::as_object_mut);
            for (mime, value) in media.into_iter().flatten() {
                if !mime.ends_with("json") {
                    lines(value);
                }
            }
        }
    }
}

/// One cell's outputs, built from its iopub messages as nbclient builds them: `display_data` with
/// a display id is updated in place by `update_display_data`, `clear_output(wait)` clears at the
/// next output, and a stream's lines join the stream output just before them of the same name
/// (what JupyterLab shows as one block).
#[derive(Default)]
pub struct CellOutputs {
    pub outputs: Vec<Value>,
    /// Display id → the indices of the outputs that show it.
    displays: HashMap<String, Vec<usize>>,
    clear_at_next: bool,
}

impl CellOutputs {
    pub fn take(&mut self, content: &JupyterMessageContent) {
        use JupyterMessageContent as M;
        let (output, display_id) = match content {
            M::StreamContent(s) => {
                let name = match s.name {
                    Stdio::Stdout => "stdout",
                    Stdio::Stderr => "stderr",
                };
                self.stream(name, &s.text);
                return;
            }
            M::DisplayData(d) => {
                let id = d.transient.as_ref().and_then(|t| t.display_id.clone());
                let data =
                    json!({"output_type": "display_data", "data": d.data, "metadata": d.metadata});
                (data, id)
            }
            M::ExecuteResult(r) => {
                let id = r.transient.as_ref().and_then(|t| t.display_id.clone());
                let data = json!({"output_type": "execute_result", "data": r.data,
                    "metadata": r.metadata, "execution_count": r.execution_count.0});
                (data, id)
            }
            M::UpdateDisplayData(u) => {
                if let Some(id) = &u.transient.display_id {
                    self.update(id, &json!(u.data), &Value::Object(u.metadata.clone()));
                }
                return;
            }
            M::ErrorOutput(e) => {
                let error = json!({"output_type": "error", "ename": e.ename, "evalue": e.evalue,
                    "traceback": e.traceback});
                (error, None)
            }
            M::ClearOutput(c) if c.wait => {
                self.clear_at_next = true;
                return;
            }
            M::ClearOutput(_) => {
                self.clear();
                return;
            }
            _ => return,
        };
        if let Some(id) = &display_id {
            self.update(id, &output["data"], &output["metadata"]);
        }
        self.push(output, display_id);
    }

    fn stream(&mut self, name: &str, text: &str) {
        if self.clear_at_next {
            self.clear();
        }
        if let Some(last) = self.outputs.last_mut()
            && last["output_type"] == "stream"
            && last["name"] == name
        {
            let joined = format!("{}{text}", last["text"].as_str().unwrap_or_default());
            last["text"] = json!(joined);
            return;
        }
        self.push(
            json!({"output_type": "stream", "name": name, "text": text}),
            None,
        );
    }

    fn push(&mut self, output: Value, display_id: Option<String>) {
        if self.clear_at_next {
            self.clear();
        }
        if let Some(id) = display_id {
            self.displays
                .entry(id)
                .or_default()
                .push(self.outputs.len());
        }
        self.outputs.push(output);
    }

    fn update(&mut self, id: &str, data: &Value, metadata: &Value) {
        for &i in self.displays.get(id).into_iter().flatten() {
            let output = &mut self.outputs[i];
            output["data"] = data.clone();
            output["metadata"] = metadata.clone();
        }
    }

    fn clear(&mut self) {
        self.outputs.clear();
        self.displays.clear();
        self.clear_at_next = false;
    }
}

/// The notebook's `language_info`, as the kernel tells clients (nbclient writes it so too).
pub fn language_info(info: &jupyter_protocol::LanguageInfo) -> Value {
    let mut map = Map::new();
    if let Ok(Value::Object(fields)) = serde_json::to_value(info) {
        map.extend(fields.into_iter().filter(|(_, v)| !v.is_null()));
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jupyter_protocol::{
        ClearOutput, DisplayData, ErrorOutput, Media, MediaType, StreamContent, Transient,
        UpdateDisplayData,
    };

    fn scratch(name: &str) -> std::path::PathBuf {
        let id = std::process::id();
        let dir = std::env::temp_dir().join(format!("placelab-notebook-{name}-{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn plain(text: &str) -> Media {
        Media::new(vec![MediaType::Plain(text.into())])
    }

    fn shown(id: &str, text: &str) -> JupyterMessageContent {
        let mut d = DisplayData::new(plain(text));
        d.transient = Some(Transient {
            display_id: Some(id.into()),
        });
        d.into()
    }

    /// The memory strip's live display, updated in place; lines of one stream in one output;
    /// the error last; every output in nbformat's shape.
    #[test]
    fn outputs_are_built_as_nbclient_builds_them() {
        let mut cell = CellOutputs::default();
        cell.take(&StreamContent::stdout("a\n").into());
        cell.take(&StreamContent::stdout("b\n").into());
        cell.take(&StreamContent::stderr("warning\n").into());
        cell.take(&shown("strip", "── running…"));
        cell.take(&UpdateDisplayData::new(plain("cuda:0 4.00 MiB"), "strip").into());
        let error = ErrorOutput {
            ename: "Error".into(),
            evalue: "wrong".into(),
            traceback: vec!["wrong".into()],
        };
        cell.take(&error.into());
        let kinds: Vec<&str> = (cell.outputs.iter())
            .map(|o| o["output_type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["stream", "stream", "display_data", "error"]);
        assert_eq!(cell.outputs[0]["text"], "a\nb\n");
        assert_eq!(cell.outputs[1]["name"], "stderr");
        assert_eq!(cell.outputs[2]["data"]["text/plain"], "cuda:0 4.00 MiB");
        assert_eq!(cell.outputs[3]["evalue"], "wrong");
    }

    /// `clear_output(wait=true)` clears when the next output comes, so the page never blinks.
    #[test]
    fn a_waiting_clear_clears_at_the_next_output() {
        let mut cell = CellOutputs::default();
        cell.take(&StreamContent::stdout("step 1\n").into());
        cell.take(&ClearOutput { wait: true }.into());
        assert_eq!(cell.outputs.len(), 1);
        cell.take(&StreamContent::stdout("step 2\n").into());
        assert_eq!(cell.outputs.len(), 1);
        assert_eq!(cell.outputs[0]["text"], "step 2\n");
        cell.take(&shown("strip", "old"));
        cell.take(&ClearOutput { wait: false }.into());
        cell.take(&UpdateDisplayData::new(plain("new"), "strip").into());
        assert!(
            cell.outputs.is_empty(),
            "a cleared display is not updated back"
        );
    }

    #[test]
    fn a_notebook_is_written_as_nbformat_writes_it() {
        let dir = scratch("written");
        let path = dir.join("n.ipynb");
        let source = json!({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
            "cells": [{"cell_type": "code", "id": "a", "source": ["let x = 1;\n", "x"],
                "metadata": {"tags": ["raises-exception"]}, "outputs": [], "execution_count": null},
                {"cell_type": "markdown", "source": "# Title", "metadata": {}}]});
        std::fs::write(&path, source.to_string()).unwrap();
        let mut nb = Notebook::read(&path).unwrap();
        assert_eq!(nb.code_cells, [0]);
        assert_eq!(nb.source(0), "let x = 1;\nx");
        assert!(nb.may_fail(0) && nb.name(0) == "cell a");
        nb.cell_mut(0)["outputs"] = json!([{"output_type": "stream", "name": "stdout",
            "text": "one\ntwo\n"}]);
        nb.write(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("{\n \"cells\": [\n  {\n   \"cell_type\": \"code\""),
            "{text}"
        );
        assert!(
            text.contains("\"text\": [\n      \"one\\n\",\n      \"two\\n\"\n     ]"),
            "{text}"
        );
        let back = Notebook::read(&path).unwrap();
        assert_eq!(back.source(0), "let x = 1;\nx");
        assert_eq!(
            back.cell(1).get("outputs"),
            None,
            "a markdown cell has no outputs"
        );
    }

    #[test]
    fn what_is_not_a_version_4_notebook_is_refused_with_what_it_is() {
        let dir = scratch("refused");
        let read = |text: &str| {
            let path = dir.join("x.ipynb");
            std::fs::write(&path, text).unwrap();
            Notebook::read(&path).err().unwrap()
        };
        assert!(read("let x = 1;").contains("not JSON"));
        assert!(read(r#"{"nbformat": 3, "worksheets": []}"#).contains("version 3"));
        assert!(read(r#"{"nbformat": 4}"#).contains("no \"cells\""));
        let missing = Notebook::read(&dir.join("none.ipynb")).err().unwrap();
        assert!(missing.starts_with("cannot read"), "{missing}");
    }
}
