//! A safetensors checkpoint: one file, or a folder of shards with `model.safetensors.index.json`,
//! plus `config.json` when present.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::config::ModelConfig;
use super::file::SafetensorsFile;
use super::header::SafetensorsTensorInfo;
use crate::error::{FormatError, Result};

/// The standard index name of a sharded checkpoint.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// All tensors of a safetensors checkpoint, across shards, by name.
#[derive(Debug)]
pub struct SafetensorsCheckpoint {
    files: Vec<SafetensorsFile>,
    entries: Vec<(usize, usize)>,
    index: HashMap<String, usize>,
    config: Option<ModelConfig>,
    root: PathBuf,
}

impl SafetensorsCheckpoint {
    /// Opens a `.safetensors` file (with a sibling `config.json` if any), or a folder: sharded
    /// through its `*.safetensors.index.json`, otherwise every `*.safetensors` file in it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if path.is_dir() {
            let files = match find_index(path)? {
                Some(index) => open_indexed(&index)?,
                None => {
                    let names = list_with_suffix(path, ".safetensors")?;
                    if names.is_empty() {
                        return Err(FormatError::UnknownFormat {
                            path: path.to_path_buf(),
                            reason: "folder has no .safetensors, .gguf or index file".into(),
                        });
                    }
                    names
                        .iter()
                        .map(SafetensorsFile::open)
                        .collect::<Result<Vec<_>>>()?
                }
            };
            Self::from_files(files, load_config(&path.join("config.json"))?, path)
        } else {
            let file = SafetensorsFile::open(path)?;
            let dir = path.parent().unwrap_or(Path::new("."));
            Self::from_files(vec![file], load_config(&dir.join("config.json"))?, path)
        }
    }

    /// Builds a checkpoint from opened files; a tensor name in two files is an error.
    pub fn from_files(
        files: Vec<SafetensorsFile>,
        config: Option<ModelConfig>,
        root: &Path,
    ) -> Result<Self> {
        let mut entries = Vec::new();
        let mut index = HashMap::new();
        for (fi, f) in files.iter().enumerate() {
            for (ti, t) in f.tensor_infos().iter().enumerate() {
                if index.insert(t.name.clone(), entries.len()).is_some() {
                    return Err(FormatError::DuplicateTensor(t.name.clone()));
                }
                entries.push((fi, ti));
            }
        }
        Ok(SafetensorsCheckpoint {
            files,
            entries,
            index,
            config,
            root: root.to_path_buf(),
        })
    }

    /// The path it was opened from.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The shard files.
    pub fn files(&self) -> &[SafetensorsFile] {
        &self.files
    }

    /// `config.json`, when present.
    pub fn config(&self) -> Option<&ModelConfig> {
        self.config.as_ref()
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every tensor as (shard index, entry), shard by shard in file order.
    pub fn tensor_infos(&self) -> impl Iterator<Item = (usize, &SafetensorsTensorInfo)> {
        self.entries
            .iter()
            .map(|&(f, t)| (f, &self.files[f].tensor_infos()[t]))
    }

    /// The entry and shard index of `name`.
    pub fn tensor_info(&self, name: &str) -> Option<(usize, &SafetensorsTensorInfo)> {
        let &(f, t) = self.entries.get(*self.index.get(name)?)?;
        Some((f, &self.files[f].tensor_infos()[t]))
    }

    /// The bytes of tensor `name`, or [`FormatError::TensorNotFound`].
    pub fn tensor_data(&self, name: &str) -> Result<&[u8]> {
        let (f, info) = self
            .tensor_info(name)
            .ok_or_else(|| FormatError::TensorNotFound(name.to_string()))?;
        Ok(self.files[f].data_of(info))
    }
}

fn load_config(path: &Path) -> Result<Option<ModelConfig>> {
    if path.is_file() {
        ModelConfig::open(path).map(Some)
    } else {
        Ok(None)
    }
}

fn list_with_suffix(dir: &Path, suffix: &str) -> Result<Vec<PathBuf>> {
    let rd = std::fs::read_dir(dir).map_err(|e| FormatError::io(dir, e))?;
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| FormatError::io(dir, e))?;
        let p = entry.path();
        if p.is_file()
            && p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(suffix))
        {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

fn find_index(dir: &Path) -> Result<Option<PathBuf>> {
    let standard = dir.join(INDEX_FILE);
    if standard.is_file() {
        return Ok(Some(standard));
    }
    let mut found = list_with_suffix(dir, ".safetensors.index.json")?;
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(FormatError::UnknownFormat {
            path: dir.to_path_buf(),
            reason: format!("several safetensors index files: {found:?}"),
        }),
    }
}

/// Reads an index and opens its shards, checking that every listed tensor is in its shard.
pub fn open_indexed(index_path: &Path) -> Result<Vec<SafetensorsFile>> {
    let bad = |reason: String| FormatError::BadIndex {
        path: index_path.to_path_buf(),
        reason,
    };
    let text = std::fs::read(index_path).map_err(|e| FormatError::io(index_path, e))?;
    let json: Value = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    let map = json
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("no `weight_map` object".into()))?;
    let dir = index_path.parent().unwrap_or(Path::new("."));
    let mut shard_names: Vec<&str> = Vec::new();
    for (tensor, file) in map {
        let file = file
            .as_str()
            .ok_or_else(|| bad(format!("weight_map entry `{tensor}` is not a file name")))?;
        let rel = Path::new(file);
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(bad(format!(
                "shard path `{file}` leaves the checkpoint folder"
            )));
        }
        if !shard_names.contains(&file) {
            shard_names.push(file);
        }
    }
    shard_names.sort();
    let files = shard_names
        .iter()
        .map(|n| SafetensorsFile::open(dir.join(n)))
        .collect::<Result<Vec<_>>>()?;
    for (tensor, file) in map {
        let file = file.as_str().unwrap_or_default();
        let shard = shard_names.iter().position(|n| *n == file).unwrap_or(0);
        if files[shard].tensor_info(tensor).is_none() {
            return Err(bad(format!(
                "tensor `{tensor}` is not in its shard `{file}`"
            )));
        }
    }
    Ok(files)
}
