//! [`TensorStore`]: one view of a GGUF file or a safetensors checkpoint — names, row-major shapes,
//! element formats, zero-copy bytes, companions and metadata.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::companion::{CompanionRole, WeightScheme};
use crate::error::{FormatError, Result};
use crate::format::TensorFormat;
use crate::gguf::{GgufFile, GgufMetadata, GGUF_MAGIC};
use crate::safetensors::{ModelConfig, SafetensorsCheckpoint};

/// Which file format a store reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// A GGUF file.
    Gguf,
    /// A safetensors file or checkpoint folder.
    Safetensors,
}

#[derive(Debug)]
enum Source {
    Gguf(GgufFile),
    Safetensors(SafetensorsCheckpoint),
}

#[derive(Debug)]
struct Entry {
    name: String,
    shape: Vec<usize>,
    format: TensorFormat,
    file: usize,
    offset: u64,
    size: u64,
    companions: Vec<(CompanionRole, usize)>,
    companion_of: Option<usize>,
}

/// A GGUF file or safetensors checkpoint seen as named tensors.
#[derive(Debug)]
pub struct TensorStore {
    source: Source,
    entries: Vec<Entry>,
    index: HashMap<String, usize>,
    path: PathBuf,
}

/// A companion tensor (scales) attached to a weight.
#[derive(Debug, Clone, Copy)]
pub struct Companion<'a> {
    /// What it is to the weight.
    pub role: CompanionRole,
    /// Its own name.
    pub name: &'a str,
    /// Row-major shape, outermost first.
    pub shape: &'a [usize],
    /// Element format.
    pub format: TensorFormat,
    /// Its bytes, borrowed from the mapping.
    pub data: &'a [u8],
}

/// One tensor of a [`TensorStore`], borrowed from the mapping.
#[derive(Debug, Clone)]
pub struct TensorView<'a> {
    /// Tensor name as stored.
    pub name: &'a str,
    /// Row-major shape, outermost first (for a GGUF weight `[n_out, n_in]`, the reverse of `dims`).
    pub shape: &'a [usize],
    /// Element format.
    pub format: TensorFormat,
    /// The tensor's bytes, borrowed from the mapping (no copy).
    pub data: &'a [u8],
    /// Absolute offset of the first byte in its file.
    pub file_offset: u64,
    /// Index of the file holding it ([`TensorStore::files`]).
    pub file_index: usize,
    /// Companion tensors (scales) paired with this weight.
    pub companions: Vec<Companion<'a>>,
    /// Quantization scheme judged from format and companions.
    pub scheme: WeightScheme,
    /// For a companion tensor: the weight it belongs to.
    pub companion_of: Option<&'a str>,
}

impl TensorView<'_> {
    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().map(|&d| d as u64).product()
    }

    /// Dimensions innermost first (GGUF/ggml `ne` order).
    pub fn dims(&self) -> Vec<usize> {
        self.shape.iter().rev().copied().collect()
    }

    /// The companion with `role`, if any.
    pub fn companion(&self, role: CompanionRole) -> Option<&Companion<'_>> {
        self.companions.iter().find(|c| c.role == role)
    }
}

/// Metadata of a store: GGUF key-values, or `config.json` plus the safetensors `__metadata__`.
#[derive(Debug, Clone, Copy)]
pub enum StoreMetadata<'a> {
    /// GGUF key-value metadata.
    Gguf(&'a GgufMetadata),
    /// A safetensors checkpoint's config and the first shard's header metadata.
    Safetensors {
        /// `config.json`, when present.
        config: Option<&'a ModelConfig>,
        /// `__metadata__` of the first file.
        header: Option<&'a BTreeMap<String, String>>,
    },
}

impl TensorStore {
    /// Opens a GGUF file, a safetensors file, or a checkpoint folder (sharded or not; a folder
    /// holding exactly one `.gguf` and no safetensors opens that GGUF).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if path.is_dir() {
            let ggufs = gguf_files_in(path)?;
            let has_st = std::fs::read_dir(path)
                .map_err(|e| FormatError::io(path, e))?
                .filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().ends_with(".safetensors"));
            if !has_st && ggufs.len() == 1 {
                return Ok(Self::from_gguf(GgufFile::open(&ggufs[0])?));
            }
            return Ok(Self::from_safetensors(SafetensorsCheckpoint::open(path)?));
        }
        if !path.exists() {
            return Err(FormatError::io(
                path,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
            ));
        }
        let is_gguf_name = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
        if is_gguf_name || starts_with_magic(path)? {
            return Ok(Self::from_gguf(GgufFile::open(path)?));
        }
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".index.json"))
        {
            let dir = path.parent().unwrap_or(Path::new("."));
            return Ok(Self::from_safetensors(SafetensorsCheckpoint::open(dir)?));
        }
        Ok(Self::from_safetensors(SafetensorsCheckpoint::open(path)?))
    }

    /// A store over an opened GGUF file.
    pub fn from_gguf(file: GgufFile) -> Self {
        let base = file.data_offset();
        let entries = file
            .tensor_infos()
            .iter()
            .map(|t| Entry {
                name: t.name.clone(),
                shape: t.shape(),
                format: TensorFormat::Ggml(t.ggml_type),
                file: 0,
                offset: base + t.offset,
                size: t.size,
                companions: Vec::new(),
                companion_of: None,
            })
            .collect();
        let path = file.path().map(Path::to_path_buf).unwrap_or_default();
        Self::build(Source::Gguf(file), entries, path)
    }

    /// A store over an opened safetensors checkpoint; companions are paired with their weights.
    pub fn from_safetensors(ckpt: SafetensorsCheckpoint) -> Self {
        let entries = ckpt
            .tensor_infos()
            .map(|(f, t)| Entry {
                name: t.name.clone(),
                shape: t.shape.clone(),
                format: t.format,
                file: f,
                offset: ckpt.files()[f].data_offset() + t.start,
                size: t.size(),
                companions: Vec::new(),
                companion_of: None,
            })
            .collect();
        let path = ckpt.root().to_path_buf();
        let mut store = Self::build(Source::Safetensors(ckpt), entries, path);
        store.pair_companions();
        store
    }

    fn build(source: Source, entries: Vec<Entry>, path: PathBuf) -> Self {
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.name.clone(), i))
            .collect();
        TensorStore {
            source,
            entries,
            index,
            path,
        }
    }

    fn pair_companions(&mut self) {
        for i in 0..self.entries.len() {
            let Some((role, weight)) = CompanionRole::classify(&self.entries[i].name) else {
                continue;
            };
            if let Some(&w) = self.index.get(&weight) {
                self.entries[w].companions.push((role, i));
                self.entries[i].companion_of = Some(w);
            }
        }
    }

    /// The path it was opened from (empty for in-memory files).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Which format it reads.
    pub fn kind(&self) -> StoreKind {
        match self.source {
            Source::Gguf(_) => StoreKind::Gguf,
            Source::Safetensors(_) => StoreKind::Safetensors,
        }
    }

    /// The GGUF file, for a GGUF store.
    pub fn gguf(&self) -> Option<&GgufFile> {
        match &self.source {
            Source::Gguf(f) => Some(f),
            Source::Safetensors(_) => None,
        }
    }

    /// The safetensors checkpoint, for a safetensors store.
    pub fn safetensors(&self) -> Option<&SafetensorsCheckpoint> {
        match &self.source {
            Source::Safetensors(c) => Some(c),
            Source::Gguf(_) => None,
        }
    }

    /// Paths of the files behind the store, indexed by [`TensorView::file_index`].
    pub fn files(&self) -> Vec<PathBuf> {
        match &self.source {
            Source::Gguf(f) => vec![f.path().map(Path::to_path_buf).unwrap_or_default()],
            Source::Safetensors(c) => c
                .files()
                .iter()
                .map(|f| f.path().map(Path::to_path_buf).unwrap_or_default())
                .collect(),
        }
    }

    /// GGUF metadata or safetensors config.
    pub fn metadata(&self) -> StoreMetadata<'_> {
        match &self.source {
            Source::Gguf(f) => StoreMetadata::Gguf(f.metadata()),
            Source::Safetensors(c) => StoreMetadata::Safetensors {
                config: c.config(),
                header: c.files().first().map(|f| f.metadata()),
            },
        }
    }

    /// Number of tensors (companions included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Tensor names in file order (companions included).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.name.as_str())
    }

    /// Whether a tensor named `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Tensor `name` (for MXFP4, the logical name `X` also finds `X_blocks`), or
    /// [`FormatError::TensorNotFound`].
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let i = self
            .index
            .get(name)
            .or_else(|| self.index.get(&format!("{name}_blocks")))
            .ok_or_else(|| FormatError::TensorNotFound(name.to_string()))?;
        Ok(self.view(*i))
    }

    /// Every tensor in file order (companions included; see [`TensorView::companion_of`]).
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> {
        (0..self.entries.len()).map(|i| self.view(i))
    }

    /// Every tensor that is not a companion of another, in file order.
    pub fn weights(&self) -> impl Iterator<Item = TensorView<'_>> {
        (0..self.entries.len())
            .filter(|&i| self.entries[i].companion_of.is_none())
            .map(|i| self.view(i))
    }

    fn bytes_of(&self, e: &Entry) -> &[u8] {
        let file: &[u8] = match &self.source {
            Source::Gguf(f) => f.bytes(),
            Source::Safetensors(c) => c.files()[e.file].bytes(),
        };
        // Extents were validated when the file was parsed; `get` keeps this panic-free regardless.
        file.get(e.offset as usize..e.offset.saturating_add(e.size) as usize)
            .unwrap_or_default()
    }

    fn view(&self, i: usize) -> TensorView<'_> {
        let e = &self.entries[i];
        let companions: Vec<Companion<'_>> = e
            .companions
            .iter()
            .map(|&(role, c)| {
                let ce = &self.entries[c];
                Companion {
                    role,
                    name: &ce.name,
                    shape: &ce.shape,
                    format: ce.format,
                    data: self.bytes_of(ce),
                }
            })
            .collect();
        let roles: Vec<CompanionRole> = companions.iter().map(|c| c.role).collect();
        TensorView {
            name: &e.name,
            shape: &e.shape,
            format: e.format,
            data: self.bytes_of(e),
            file_offset: e.offset,
            file_index: e.file,
            scheme: WeightScheme::classify(e.format, &roles),
            companions,
            companion_of: e.companion_of.map(|w| self.entries[w].name.as_str()),
        }
    }
}

fn starts_with_magic(path: &Path) -> Result<bool> {
    let mut f = std::fs::File::open(path).map_err(|e| FormatError::io(path, e))?;
    let mut magic = [0u8; 4];
    match f.read_exact(&mut magic) {
        Ok(()) => Ok(magic == GGUF_MAGIC),
        Err(_) => Ok(false),
    }
}

fn gguf_files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| FormatError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        })
        .collect();
    out.sort();
    Ok(out)
}
