//! The embedded kernel artifacts match the CUDA sources they were built from.
//!
//! `cargo xtask build-ptx` records a hash over every `kernels/*.cu[h]` and the hash of every
//! artifact it wrote. This test (which needs no GPU, so CI runs it) recomputes both, so an edited
//! kernel without rebuilt artifacts, or an artifact edited by hand, fails here.
#![cfg(feature = "cuda")]

use std::path::PathBuf;

use pocket_kernels::cuda::artifacts::{ModuleId, SOURCE_SET_HASH};
use sha2::{Digest, Sha256};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Same definition as xtask's `source_set_hash`: sorted names, each name and its bytes.
fn source_set_hash() -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("kernels"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cu" || e == "cuh"))
        .collect();
    files.sort();
    let mut h = Sha256::new();
    for p in files {
        h.update(p.file_name().unwrap().to_string_lossy().as_bytes());
        h.update([0u8]);
        h.update(std::fs::read(&p).unwrap());
        h.update([0u8]);
    }
    hex(&h.finalize())
}

#[test]
fn embedded_artifacts_match_kernel_sources() {
    assert_eq!(
        SOURCE_SET_HASH,
        source_set_hash(),
        "kernels/ changed since the embedded PTX was built: run `cargo xtask build-ptx`"
    );
}

#[test]
fn manifest_hashes_match_embedded_bytes() {
    let manifest =
        std::fs::read_to_string(root().join("crates/pocket-kernels/ptx/MANIFEST")).unwrap();
    assert!(manifest.contains(&format!("source-set {SOURCE_SET_HASH}")));
    for &m in ModuleId::ALL {
        let ptx = hex(&Sha256::digest(m.ptx().as_bytes()));
        let cubin = hex(&Sha256::digest(m.sm90_cubin()));
        assert!(
            manifest.contains(&format!("artifact {}.ptx {ptx}", m.name())),
            "{}.ptx differs from the manifest",
            m.name()
        );
        assert!(
            manifest.contains(&format!("artifact {}.sm90.cubin {cubin}", m.name())),
            "{}.sm90.cubin differs from the manifest",
            m.name()
        );
        assert!(
            m.ptx().contains(".target sm_75"),
            "{} PTX must target sm_75",
            m.name()
        );
    }
}

#[test]
fn every_kernel_source_has_a_module() {
    let mut stems: Vec<String> = std::fs::read_dir(root().join("kernels"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().to_string())
        .collect();
    stems.sort();
    let mut names: Vec<String> = ModuleId::ALL.iter().map(|m| m.name().to_string()).collect();
    names.sort();
    assert_eq!(stems, names);
}

#[test]
fn opening_cuda_fails_cleanly_or_works() {
    // On a machine without a driver this must be an error, never a crash.
    match pocket_kernels::Device::open(pocket_kernels::DeviceKind::Cuda(0)) {
        Ok(d) => eprintln!("opened {d:?}"),
        Err(e) => eprintln!("CUDA unavailable (expected without a GPU): {e}"),
    }
    assert!(pocket_kernels::Device::open(pocket_kernels::DeviceKind::Cuda(4096)).is_err());
}
