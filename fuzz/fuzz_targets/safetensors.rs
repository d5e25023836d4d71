//! Fuzz target: arbitrary bytes through the safetensors header parser and the store view (with
//! companion pairing). Any panic, overflow or out-of-memory is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pocket_formats::{SafetensorsCheckpoint, SafetensorsFile, TensorStore};

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = SafetensorsFile::from_bytes(data.to_vec()) {
        for t in f.tensor_infos() {
            assert_eq!(f.data_of(t).len() as u64, t.size());
        }
        if let Ok(ckpt) = SafetensorsCheckpoint::from_files(vec![f], None, std::path::Path::new("")) {
            let store = TensorStore::from_safetensors(ckpt);
            for t in store.tensors() {
                let _ = (t.scheme, t.companions.len());
            }
        }
    }
});
