//! Model store tests: a fake pip (a shell script that copies wheels built here) stands in for the
//! package index; one real fetch of SmolLM2 runs when POCKET_TEST_REAL_FETCH=1.

use std::io::Write;
use std::path::{Path, PathBuf};

use pocket_models::store::{CatalogEntry, ModelFormat, ModelStore, StoreError, WheelPart};
use sha2::{Digest, Sha256};

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Writes a wheel (zip, deflated) holding `files`.
fn build_wheel(path: &Path, files: &[(&str, &[u8])]) {
    let f = std::fs::File::create(path).unwrap();
    let mut z = zip::ZipWriter::new(f);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in files {
        z.start_file(*name, opts).unwrap();
        z.write_all(data).unwrap();
    }
    z.finish().unwrap();
}

/// A fake pip that copies `<wheels>/<spec-name>` wheels into --dest, logs each call, and
/// reports unknown packages the way pip does when the index has none.
fn fake_pip(dir: &Path, wheels: &Path) -> PathBuf {
    let script = dir.join("fake-pip");
    let log = dir.join("pip.log");
    std::fs::write(
        &script,
        format!(
            r#"#!/bin/sh
echo "$@" >> '{log}'
dest=""; spec=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dest|-d) dest="$2"; shift 2;;
    download|--*) shift;;
    *) spec="$1"; shift;;
  esac
done
name="${{spec%%==*}}"; ver="${{spec##*==}}"
whl='{wheels}'/"$(echo "$name" | tr '-' '_')-$ver-py3-none-any.whl"
if [ -f "$whl" ]; then cp "$whl" "$dest/"; echo "Saved $whl"; exit 0; fi
echo "ERROR: No matching distribution found for $spec" >&2
exit 1
"#,
            log = log.display(),
            wheels = wheels.display()
        ),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    script
}

fn pip_calls(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("pip.log"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    store: ModelStore,
    content: Vec<u8>,
}

/// Two-part model "tiny-split": part files concatenated give `content`.
fn fixture(sha_override: Option<&str>) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let wheels = root.join("index");
    std::fs::create_dir_all(&wheels).unwrap();
    let mut content = b"GGUF".to_vec();
    content.extend((0..200_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    let (a, b) = content.split_at(70_001);
    build_wheel(
        &wheels.join("tiny_split_a-1.0-py3-none-any.whl"),
        &[
            ("tiny_split_a/__init__.py", b""),
            ("tiny_split_a/data/part01.bin", a),
        ],
    );
    build_wheel(
        &wheels.join("tiny_split_b-1.0-py3-none-any.whl"),
        &[("tiny_split_b/data/part02.bin", b)],
    );
    build_wheel(
        &wheels.join("tiny_hollow-1.0-py3-none-any.whl"),
        &[("tiny_hollow/readme.txt", b"no model here")],
    );
    let pip = fake_pip(&root, &wheels);
    let sha = sha_override.map(str::to_string).unwrap_or_else(|| {
        Sha256::digest(&content)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    });
    let entry = CatalogEntry {
        alias: "tiny-split",
        file_name: "tiny.gguf",
        parts: Box::leak(Box::new([
            WheelPart {
                package: "tiny-split-a",
                version: "1.0",
                file: "tiny_split_a/data/part01.bin",
            },
            WheelPart {
                package: "tiny-split-b",
                version: "1.0",
                file: "tiny_split_b/data/part02.bin",
            },
        ])),
        sha256: leak(sha),
        size: content.len() as u64,
    };
    let hollow = CatalogEntry {
        alias: "tiny-hollow",
        file_name: "hollow.gguf",
        parts: &[WheelPart {
            package: "tiny-hollow",
            version: "1.0",
            file: "tiny_hollow/data/model.gguf",
        }],
        sha256: "00",
        size: 1,
    };
    let missing = CatalogEntry {
        alias: "tiny-missing",
        file_name: "missing.gguf",
        parts: &[WheelPart {
            package: "tiny-not-on-index",
            version: "1.0",
            file: "x/model.gguf",
        }],
        sha256: "00",
        size: 1,
    };
    let store = ModelStore::new()
        .with_cache_dir(root.join("cache"))
        .with_pip([pip.to_string_lossy().to_string()])
        .with_progress(false)
        .with_entry(entry)
        .with_entry(hollow)
        .with_entry(missing);
    Fixture {
        _tmp: tmp,
        root,
        store,
        content,
    }
}

#[test]
fn fetch_reassembles_verifies_and_reuses_the_cache() {
    let f = fixture(None);
    let m = f.store.resolve("tiny-split").unwrap();
    assert_eq!(m.alias.as_deref(), Some("tiny-split"));
    assert_eq!(m.format, ModelFormat::Gguf);
    assert_eq!(std::fs::read(&m.path).unwrap(), f.content);
    assert!(m.path.starts_with(f.root.join("cache")));
    assert_eq!(pip_calls(&f.root), 2);
    // second resolve: no pip at all, same file
    let again = f.store.resolve("TINY-SPLIT").unwrap();
    assert_eq!(again.path, m.path);
    assert_eq!(pip_calls(&f.root), 2);
    // no partial files left behind, wheels cleaned up
    let leftovers: Vec<_> = std::fs::read_dir(m.path.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("partial"))
        .collect();
    assert!(leftovers.is_empty());
    // a corrupted cached file is detected and fetched again
    std::fs::write(&m.path, vec![0u8; f.content.len()]).unwrap();
    std::fs::remove_file(format!("{}.sha256", m.path.display())).unwrap();
    let fixed = f.store.resolve("tiny-split").unwrap();
    assert_eq!(std::fs::read(&fixed.path).unwrap(), f.content);
    assert_eq!(pip_calls(&f.root), 4);
}

/// Threads resolving one alias at once (as parallel tests do on a cold cache): one download per
/// part, every thread gets the verified file. Without the fetch lock they wrote the same
/// temporary file, and a thread whose file another had renamed away failed with "not found".
#[test]
fn concurrent_fetches_of_one_model_download_it_once() {
    let f = fixture(None);
    let paths: Vec<PathBuf> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| f.store.resolve("tiny-split").map(|m| m.path)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    });
    for p in &paths {
        assert_eq!(p, &paths[0]);
    }
    assert_eq!(std::fs::read(&paths[0]).unwrap(), f.content);
    assert_eq!(pip_calls(&f.root), 2, "one download per part");
}

#[test]
fn checksum_mismatch_is_an_error_and_leaves_no_file() {
    let f = fixture(Some("deadbeef"));
    match f.store.resolve("tiny-split") {
        Err(StoreError::ChecksumMismatch {
            expected, actual, ..
        }) => {
            assert_eq!(expected, "deadbeef");
            assert_eq!(actual.len(), 64);
        }
        other => panic!("expected checksum mismatch, got {other:?}"),
    }
    // Only the fetch lock stays (deleting a lock file others may wait on would let two fetch).
    let dir = f.root.join("cache/models/tiny-split");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "tiny.gguf.lock")
        .collect();
    assert!(files.is_empty(), "left {files:?}");
}

#[test]
fn offline_missing_pip_and_bad_wheels_are_typed_errors() {
    let f = fixture(None);
    match f.store.resolve("tiny-missing") {
        Err(e @ StoreError::Offline { .. }) => {
            assert!(e.to_string().contains("tiny-not-on-index==1.0"))
        }
        other => panic!("expected offline error, got {other:?}"),
    }
    match f.store.resolve("tiny-hollow") {
        Err(StoreError::MissingInWheel { file, .. }) => {
            assert_eq!(file, "tiny_hollow/data/model.gguf")
        }
        other => panic!("expected missing-in-wheel, got {other:?}"),
    }
    let no_pip = f.store.clone().with_pip(["/nonexistent/pip-for-test"]);
    match no_pip.resolve("tiny-split") {
        Err(e @ StoreError::PipNotFound { .. }) => assert!(e.to_string().contains("POCKET_PIP")),
        other => panic!("expected pip-not-found, got {other:?}"),
    }
    let failing = f.store.clone().with_pip(["false"]);
    assert!(matches!(
        failing.resolve("tiny-split"),
        Err(StoreError::PipFailed { .. })
    ));
}

#[test]
fn local_paths_resolve_without_the_store() {
    let f = fixture(None);
    let never = f.store.clone().with_pip(["/nonexistent/pip-for-test"]);
    let gguf = f.root.join("local.gguf");
    std::fs::write(&gguf, b"GGUF\x03\0\0\0rest").unwrap();
    let m = never.resolve(gguf.to_str().unwrap()).unwrap();
    assert_eq!((m.format, m.alias), (ModelFormat::Gguf, None));
    let st = f.root.join("st-model");
    std::fs::create_dir_all(&st).unwrap();
    std::fs::write(st.join("model.safetensors"), b"{}").unwrap();
    assert_eq!(
        never.resolve(st.to_str().unwrap()).unwrap().format,
        ModelFormat::SafetensorsDir
    );
    let txt = f.root.join("notes.txt");
    std::fs::write(&txt, b"hello").unwrap();
    assert!(matches!(
        never.resolve(txt.to_str().unwrap()),
        Err(StoreError::NotAModel { .. })
    ));
    assert!(matches!(
        never.resolve(f.root.to_str().unwrap()),
        Err(StoreError::NotAModel { .. })
    ));
    match never.resolve("no-such-model") {
        Err(e @ StoreError::UnknownModel { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("smollm2-135m-instruct")
                    && msg.contains("qwen2.5-coder-0.5b-instruct"),
                "{msg}"
            );
        }
        other => panic!("expected unknown model, got {other:?}"),
    }
}

/// One real fetch from the package index (set POCKET_TEST_REAL_FETCH=1; scripts/test does).
#[test]
fn real_fetch_smollm2() {
    if std::env::var("POCKET_TEST_REAL_FETCH").as_deref() != Ok("1") {
        eprintln!("skipped: set POCKET_TEST_REAL_FETCH=1 to fetch SmolLM2 for real");
        return;
    }
    let store = ModelStore::new();
    let m = store
        .resolve("smollm2-135m-instruct")
        .expect("real fetch failed");
    assert_eq!(std::fs::metadata(&m.path).unwrap().len(), 98_362_432);
    let tok = pocket_models::tokenizer::Tokenizer::from_gguf_path(&m.path).unwrap();
    let ids = tok.encode("Hello, world!", false, false).unwrap();
    assert_eq!(tok.decode(&ids, false).unwrap(), "Hello, world!");
    // the GGUF's own chat template renders, and its control-token text becomes control tokens
    use pocket_models::chat_template::{ChatMessage, ChatTemplate, RenderOptions};
    let tpl = ChatTemplate::new(
        tok.chat_template()
            .expect("SmolLM2 GGUF carries a chat template"),
    )
    .unwrap();
    let prompt = tpl
        .render(
            &[ChatMessage::user("Hi")],
            &RenderOptions::for_tokenizer(&tok, true),
        )
        .unwrap();
    assert!(
        prompt.contains("<|im_start|>user\nHi<|im_end|>"),
        "{prompt:?}"
    );
    assert!(prompt.ends_with("<|im_start|>assistant\n"), "{prompt:?}");
    let ids = tok.encode(&prompt, false, true).unwrap();
    let im_start = tok.token_id("<|im_start|>").unwrap();
    assert_eq!(
        ids.iter().filter(|&&i| i == im_start).count(),
        prompt.matches("<|im_start|>").count()
    );
    assert!(tok
        .stop_token_ids()
        .contains(&tok.token_id("<|im_end|>").unwrap()));
}
