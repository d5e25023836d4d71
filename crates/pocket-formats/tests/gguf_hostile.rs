//! Hostile GGUF input: each malformation gives its typed error, never a panic; proptest mutates
//! and truncates valid files.

mod common;

use pocket_formats::gguf::{parse_layout, GgufArray};
use pocket_formats::{FormatError, GgmlType, GgufFile, GgufWriter};
use proptest::prelude::*;

/// Raw little-endian GGUF byte builder, independent of the crate's writer.
#[derive(Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, tensors: u64, kvs: u64) -> Raw {
        let mut r = Raw::default();
        r.0.extend_from_slice(b"GGUF");
        r.u32(version).u64(tensors).u64(kvs);
        r
    }
    fn u32(&mut self, x: u32) -> &mut Self {
        self.0.extend_from_slice(&x.to_le_bytes());
        self
    }
    fn u64(&mut self, x: u64) -> &mut Self {
        self.0.extend_from_slice(&x.to_le_bytes());
        self
    }
    fn str(&mut self, s: &[u8]) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s);
        self
    }
    fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key.as_bytes()).u32(4).u32(v)
    }
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name.as_bytes()).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    /// Pads to 32 and appends `data_len` zero bytes of tensor data.
    fn data(&mut self, data_len: usize) -> Vec<u8> {
        let mut b = self.0.clone();
        b.resize(b.len().div_ceil(32) * 32 + data_len, 0);
        b
    }
}

fn err(bytes: Vec<u8>) -> FormatError {
    GgufFile::from_bytes(bytes).expect_err("malformed input must be rejected")
}

#[test]
fn valid_raw_file_parses() {
    let mut r = Raw::header(3, 2, 1);
    r.kv_u32("k", 7)
        .tensor("a", &[32, 2], GgmlType::Q8_0.id(), 0)
        .tensor("b", &[4], 0, 96);
    let f = GgufFile::from_bytes(r.data(112)).unwrap();
    assert_eq!(f.tensor("a").unwrap().data.len(), 68);
    assert_eq!(f.tensor("b").unwrap().info.shape(), vec![4]);
}

#[test]
fn bad_magic_and_versions() {
    let mut b = Raw::header(3, 0, 0).data(0);
    b[0] = b'X';
    assert!(matches!(err(b), FormatError::BadMagic { found } if &found == b"XGUF"));
    for v in [0, 1, 4, 99] {
        assert!(
            matches!(err(Raw::header(v, 0, 0).data(0)), FormatError::UnsupportedVersion(x) if x == v)
        );
    }
    assert!(matches!(
        err(Raw::header(3u32.swap_bytes(), 0, 0).data(0)),
        FormatError::BigEndian(3)
    ));
    assert!(matches!(
        err(b"GGU".to_vec()),
        FormatError::Truncated { .. }
    ));
    assert!(matches!(err(Vec::new()), FormatError::Truncated { .. }));
}

#[test]
fn absurd_counts_and_lengths() {
    let e = err(Raw::header(3, u64::MAX, 0).data(0));
    assert!(
        matches!(e, FormatError::AbsurdCount { ref what, .. } if what == "tensor count"),
        "{e}"
    );
    let e = err(Raw::header(3, 0, 1 << 60).data(0));
    assert!(
        matches!(e, FormatError::AbsurdCount { ref what, .. } if what == "metadata key count"),
        "{e}"
    );
    // A key whose length runs past the end.
    let mut r = Raw::header(3, 0, 1);
    r.u64(u64::MAX - 3);
    let e = err(r.data(64));
    assert!(
        matches!(e, FormatError::Truncated { ref what, .. } if what.contains("metadata key #0")),
        "{e}"
    );
    // An array whose element count cannot fit.
    let mut r = Raw::header(3, 0, 1);
    r.str(b"arr").u32(9).u32(6).u64(1 << 40);
    let e = err(r.data(0));
    assert!(
        matches!(e, FormatError::AbsurdCount { ref what, .. } if what.contains("`arr`")),
        "{e}"
    );
    // An array of strings claiming more strings than bytes / 8.
    let mut r = Raw::header(3, 0, 1);
    r.str(b"toks").u32(9).u32(8).u64(1000).u64(0);
    assert!(matches!(err(r.data(0)), FormatError::AbsurdCount { .. }));
}

#[test]
fn unknown_types_and_bad_utf8() {
    let mut r = Raw::header(3, 0, 1);
    r.str(b"k").u32(13).u32(0);
    let e = err(r.data(0));
    assert!(
        matches!(e, FormatError::UnknownValueType { id: 13, ref key, .. } if key == "k"),
        "{e}"
    );
    let mut r = Raw::header(3, 0, 1);
    r.str(b"k").u32(9).u32(77).u64(0);
    assert!(matches!(
        err(r.data(0)),
        FormatError::UnknownValueType { id: 77, .. }
    ));
    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[32], 4, 0);
    let e = err(r.data(64));
    assert!(
        matches!(e, FormatError::UnknownTensorType { id: 4, ref tensor } if tensor == "t"),
        "{e}"
    );
    let mut r = Raw::header(3, 0, 1);
    r.str(&[0x66, 0xff, 0xfe]).u32(4).u32(0);
    assert!(matches!(err(r.data(0)), FormatError::InvalidUtf8 { .. }));
    let mut r = Raw::header(3, 0, 1);
    r.str(b"s").u32(8).str(&[0xc3]);
    let e = err(r.data(0));
    assert!(
        matches!(e, FormatError::InvalidUtf8 { ref what, .. } if what.contains("`s`")),
        "{e}"
    );
    let mut r = Raw::header(3, 0, 1);
    r.str(b"b").u32(7);
    r.0.push(2);
    assert!(matches!(err(r.data(0)), FormatError::WrongType { .. }));
}

#[test]
fn empty_tensor_past_the_end_of_a_truncated_file() {
    // Found by cargo-fuzz: a zero-byte tensor whose data region (after padding) starts beyond the
    // end of the file was accepted, and slicing it panicked.
    let mut r = Raw::header(3, 1, 0);
    r.tensor("", &[0], 0, 0);
    r.0.push(0);
    let e = err(r.0.clone());
    assert!(
        matches!(e, FormatError::Truncated { ref what, .. } if what.contains("padding")),
        "{e}"
    );
}

#[test]
fn nesting_limit() {
    let mut r = Raw::header(3, 0, 1);
    r.str(b"deep").u32(9);
    for _ in 0..40 {
        r.u32(9).u64(1);
    }
    r.u32(4).u64(0);
    let e = err(r.data(0));
    assert!(matches!(e, FormatError::NestingTooDeep { .. }), "{e}");
}

#[test]
fn tensor_extent_checks() {
    let q8 = GgmlType::Q8_0.id();
    let mut r = Raw::header(3, 1, 0);
    r.tensor("big", &[32, 1000], q8, 0);
    let e = err(r.data(64));
    assert!(
        matches!(e, FormatError::TensorOutOfBounds { ref tensor, .. } if tensor == "big"),
        "{e}"
    );
    let mut r = Raw::header(3, 1, 0);
    r.tensor("far", &[4], 0, u64::MAX - 31);
    assert!(matches!(
        err(r.data(64)),
        FormatError::TensorOutOfBounds { .. }
    ));
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[32, 2], q8, 0).tensor("b", &[16], 0, 64);
    let e = err(r.data(256));
    assert!(
        matches!(e, FormatError::TensorOverlap { ref first, ref second } if first == "a" && second == "b"),
        "{e}"
    );
    let mut r = Raw::header(3, 1, 0);
    r.tensor("m", &[4], 0, 4);
    assert!(matches!(
        err(r.data(64)),
        FormatError::TensorMisaligned {
            offset: 4,
            alignment: 32,
            ..
        }
    ));
    let mut r = Raw::header(3, 1, 0);
    r.tensor("odd", &[33], q8, 0);
    let e = err(r.data(128));
    assert!(
        matches!(e, FormatError::BadShape { ref reason, .. } if reason.contains("block size")),
        "{e}"
    );
    let mut r = Raw::header(3, 1, 0);
    r.tensor("five", &[1, 1, 1, 1, 1], 0, 0);
    assert!(matches!(err(r.data(64)), FormatError::BadShape { .. }));
    let mut r = Raw::header(3, 1, 0);
    r.tensor("ovf", &[1 << 40, 1 << 40], 0, 0);
    assert!(matches!(err(r.data(64)), FormatError::BadShape { .. }));
    let mut r = Raw::header(3, 2, 0);
    r.tensor("d", &[4], 0, 0).tensor("d", &[4], 0, 32);
    assert!(matches!(err(r.data(64)), FormatError::DuplicateTensor(_)));
    let mut r = Raw::header(3, 0, 2);
    r.kv_u32("k", 1).kv_u32("k", 2);
    assert!(matches!(err(r.data(0)), FormatError::DuplicateKey(_)));
    for a in [0, 3, 1 << 31] {
        let mut r = Raw::header(3, 0, 1);
        r.kv_u32("general.alignment", a);
        assert!(
            matches!(err(r.data(0)), FormatError::BadAlignment(_)),
            "alignment {a}"
        );
    }
}

#[test]
fn errors_name_missing_or_mistyped_keys() {
    let mut w = GgufWriter::new();
    w.add("general.architecture", "qwen2")
        .add("qwen2.block_count", "many");
    let f = GgufFile::from_bytes(w.to_vec(&[]).unwrap()).unwrap();
    let m = f.metadata();
    let e = m.get_u32(&m.arch_key("block_count").unwrap()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "metadata key `qwen2.block_count` has type string, expected u32"
    );
    let e = m.get_f32("qwen2.rope.freq_base").unwrap_err();
    assert_eq!(
        e.to_string(),
        "metadata key `qwen2.rope.freq_base` is missing"
    );
    assert_eq!(m.get_u32_opt("nope").unwrap(), None);
    let e = m.get_str_array("general.architecture").unwrap_err();
    assert!(e.to_string().contains("expected array"), "{e}");
}

#[test]
fn path_errors_name_the_file() {
    let dir = common::temp_dir("hostile");
    let p = dir.join("broken.gguf");
    std::fs::write(&p, b"GGUF\x03\x00\x00\x00").unwrap();
    let e = GgufFile::open(&p).unwrap_err();
    assert!(e.to_string().starts_with(&p.display().to_string()), "{e}");
    assert!(matches!(e.root(), FormatError::Truncated { .. }));
    std::fs::remove_dir_all(dir).unwrap();
}

fn valid_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add("general.architecture", "llama")
        .add("llama.block_count", 2u32)
        .add("tokenizer.ggml.tokens", vec!["a", "bb", "ccc"])
        .add("tokenizer.ggml.scores", vec![0.5f32, 1.5, 2.5])
        .add(
            "nested",
            GgufArray::Array(vec![
                GgufArray::I64(vec![1, 2]),
                GgufArray::Bool(vec![true]),
            ]),
        )
        .add("f", 1.0f64);
    w.add_tensor("a", GgmlType::Q4_0, &[2, 32]).unwrap();
    w.add_tensor("b", GgmlType::F32, &[3]).unwrap();
    w.add_tensor("c", GgmlType::Q6_K, &[256]).unwrap();
    let sizes: Vec<usize> = w.tensor_infos().iter().map(|t| t.size as usize).collect();
    let data: Vec<Vec<u8>> = sizes.iter().map(|&s| common::bytes(s, 9)).collect();
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    w.to_vec(&refs).unwrap()
}

/// Opens `bytes` and touches every tensor; must not panic whatever the input.
fn exercise(bytes: Vec<u8>) -> Result<usize, FormatError> {
    let f = GgufFile::from_bytes(bytes)?;
    let mut total = 0;
    for t in f.tensors() {
        total += t.data.len();
        assert_eq!(t.data.len() as u64, t.info.size);
    }
    for (k, _) in f.metadata().iter() {
        let _ = f.metadata().get_u32(k);
        let _ = f.metadata().get_str(k);
    }
    Ok(total)
}

#[test]
fn every_truncation_is_an_error() {
    let b = valid_file();
    let layout = parse_layout(&b).unwrap();
    let data_end = layout
        .tensors
        .iter()
        .map(|t| layout.data_offset + t.offset + t.size)
        .max()
        .unwrap();
    for len in 0..b.len() {
        let r = exercise(b[..len].to_vec());
        if (len as u64) < data_end {
            assert!(r.is_err(), "prefix of {len} bytes accepted");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn mutated_files_never_panic(
        muts in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        do_cut in any::<bool>(),
    ) {
        let mut b = valid_file();
        for (i, v) in &muts {
            let i = i.index(b.len());
            b[i] = *v;
        }
        if do_cut {
            let n = cut.index(b.len());
            b.truncate(n);
        }
        let _ = exercise(b);
    }

    #[test]
    fn header_field_mutations_never_panic(pos in 0usize..200, v in any::<u64>()) {
        // Overwrite 8 bytes anywhere in the header region with an arbitrary (often huge) value.
        let mut b = valid_file();
        let pos = pos.min(b.len() - 8);
        b[pos..pos + 8].copy_from_slice(&v.to_le_bytes());
        let _ = exercise(b);
    }
}
