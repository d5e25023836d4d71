//! `tensors PATH [--filter REGEX]`: one line (or JSON object) per tensor.

use pocket_formats::TensorStore;
use serde_json::{json, Value};

/// The rows, filtered by `filter` (a regex matched anywhere in the name).
pub fn rows(store: &TensorStore, filter: Option<&str>) -> Result<Vec<Value>, String> {
    let re = filter
        .map(regex::Regex::new)
        .transpose()
        .map_err(|e| format!("bad --filter regex: {e}"))?;
    let files = store.files();
    Ok(store
        .tensors()
        .filter(|t| re.as_ref().is_none_or(|r| r.is_match(t.name)))
        .map(|t| {
            let mut v = json!({
                "name": t.name,
                "format": t.format.name(),
                "shape": t.shape,
                "bytes": t.data.len(),
                "offset": t.file_offset,
            });
            if files.len() > 1 {
                let f = files[t.file_index]
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned());
                v["file"] = json!(f);
            }
            if let Some(w) = t.companion_of {
                v["companion_of"] = json!(w);
            }
            v
        })
        .collect())
}

/// Renders the rows as an aligned table.
pub fn render_human(rows: &[Value]) -> String {
    use std::fmt::Write;
    let cell = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let w = rows
        .iter()
        .map(|r| cell(&r["name"]).len())
        .max()
        .unwrap_or(4)
        .max(4);
    let sw = rows
        .iter()
        .map(|r| cell(&r["shape"]).len())
        .max()
        .unwrap_or(5)
        .max(5);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:w$}  {:>8}  {:>sw$}  {:>12}  {:>12}",
        "name", "format", "shape", "bytes", "offset"
    );
    for r in rows {
        let _ = writeln!(
            o,
            "{:w$}  {:>8}  {:>sw$}  {:>12}  {:>12}",
            cell(&r["name"]),
            cell(&r["format"]),
            cell(&r["shape"]),
            cell(&r["bytes"]),
            cell(&r["offset"])
        );
    }
    o
}
