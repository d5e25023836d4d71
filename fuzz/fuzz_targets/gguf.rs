//! Fuzz target: arbitrary bytes through the GGUF parser; every tensor slice and typed getter is
//! touched. Any panic, overflow or out-of-memory is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pocket_formats::{GgufFile, TensorStore};

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = GgufFile::from_bytes(data.to_vec()) {
        let m = f.metadata();
        let _ = m.arch_key("block_count").and_then(|k| m.get_u32(&k));
        for (k, _) in m.iter() {
            let _ = m.get_u64(k);
            let _ = m.get_f32(k);
            let _ = m.get_str(k);
            let _ = m.get_str_array(k);
            let _ = m.get_u32_or_first(k);
        }
        let store = TensorStore::from_gguf(f);
        for t in store.tensors() {
            assert_eq!(t.data.len() as u64, t.format.bytes_for(t.n_elements()).unwrap());
        }
    }
});
