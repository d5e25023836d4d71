//! Round trips with the independent reference, gguf-py 0.19.0: files we write are read by its
//! GGUFReader, files its GGUFWriter writes are read by us.

mod common;

use common::{bytes, hex, run_py, temp_dir};
use pocket_formats::gguf::GgufArray;
use pocket_formats::{GgmlType, GgufFile, GgufValue, GgufWriter};
use serde_json::{json, Value};

fn our_file(version: u32, alignment: Option<u64>) -> (GgufWriter, Vec<Vec<u8>>) {
    let mut w = GgufWriter::new();
    w.set_version(version).unwrap();
    if let Some(a) = alignment {
        w.set_alignment(a).unwrap();
    }
    w.add("general.architecture", "llama")
        .add("t.u8", 250u8)
        .add("t.i8", -120i8)
        .add("t.u16", 65000u16)
        .add("t.i16", -32000i16)
        .add("t.u32", 4_100_000_000u32)
        .add("t.i32", -2_100_000_000i32)
        .add("t.f32", 0.125f32)
        .add("t.u64", u64::MAX - 5)
        .add("t.i64", i64::MIN + 7)
        .add("t.f64", 1e300f64)
        .add("t.bool", false)
        .add("t.str", "añb 中文 🦀")
        .add("t.empty_str", "")
        .add("t.arr_u8", vec![1u8, 2, 255])
        .add("t.arr_i16", vec![-1i16, 7])
        .add("t.arr_u64", vec![u64::MAX, 0])
        .add("t.arr_f64", vec![0.5f64, -0.75])
        .add("t.arr_bool", vec![true, false, true])
        .add("t.arr_str", vec!["x", "", "ünï"])
        .add("t.arr_empty", GgufArray::F32(vec![]))
        .add(
            "t.nested",
            GgufArray::Array(vec![GgufArray::U32(vec![1, 2]), GgufArray::U32(vec![3])]),
        );
    let shapes: &[(&str, GgmlType, &[usize])] = &[
        ("tok_embd.weight", GgmlType::F32, &[3, 5]),
        ("a.f16", GgmlType::F16, &[7]),
        ("b.q4_0", GgmlType::Q4_0, &[2, 64]),
        ("c.q8_0", GgmlType::Q8_0, &[1, 32]),
        ("d.q4_k", GgmlType::Q4_K, &[2, 256]),
        ("e.bf16", GgmlType::BF16, &[2, 2, 3]),
    ];
    let mut data = Vec::new();
    for (i, (name, ty, shape)) in shapes.iter().enumerate() {
        w.add_tensor(name, *ty, shape).unwrap();
        let size = w.tensor_infos().last().unwrap().size as usize;
        data.push(bytes(size, i as u64 + 1));
    }
    (w, data)
}

fn check_py_reads(version: u32, alignment: Option<u64>) {
    let dir = temp_dir("ours-to-py");
    let path = dir.join("ours.gguf");
    let (w, data) = our_file(version, alignment);
    // Stream the first tensor in two chunks through the callback writer, the rest as slices.
    let mut s = w.begin(std::fs::File::create(&path).unwrap()).unwrap();
    let (first, rest) = data.split_first().unwrap();
    s.write_tensor_with("tok_embd.weight", |out| {
        out.write_all(&first[..7])?;
        out.write_all(&first[7..])
    })
    .unwrap();
    for d in rest {
        s.write_next(d).unwrap();
    }
    s.finish().unwrap();

    let ours = GgufFile::open(&path).unwrap();
    let py: Value =
        serde_json::from_str(&run_py("gguf_pyref.py", &["read", path.to_str().unwrap()])).unwrap();
    assert_eq!(py["version"], json!(version));
    assert_eq!(py["alignment"], json!(alignment.unwrap_or(32)));
    assert_eq!(py["data_offset"], json!(ours.data_offset()));
    let f = &py["fields"];
    let expect = |k: &str, types: Value, value: Value| {
        assert_eq!(f[k]["types"], types, "types of {k}");
        assert_eq!(f[k]["value"], value, "value of {k}");
    };
    expect("t.u8", json!(["UINT8"]), json!(250));
    expect("t.i8", json!(["INT8"]), json!(-120));
    expect("t.u16", json!(["UINT16"]), json!(65000));
    expect("t.i16", json!(["INT16"]), json!(-32000));
    expect("t.u32", json!(["UINT32"]), json!(4_100_000_000u32));
    expect("t.i32", json!(["INT32"]), json!(-2_100_000_000i32));
    expect("t.f32", json!(["FLOAT32"]), json!(0.125));
    expect("t.u64", json!(["UINT64"]), json!(u64::MAX - 5));
    expect("t.i64", json!(["INT64"]), json!(i64::MIN + 7));
    expect("t.f64", json!(["FLOAT64"]), json!(1e300));
    expect("t.bool", json!(["BOOL"]), json!(false));
    expect("t.str", json!(["STRING"]), json!("añb 中文 🦀"));
    expect("t.empty_str", json!(["STRING"]), json!(""));
    expect("t.arr_u8", json!(["ARRAY", "UINT8"]), json!([1, 2, 255]));
    expect("t.arr_i16", json!(["ARRAY", "INT16"]), json!([-1, 7]));
    expect(
        "t.arr_u64",
        json!(["ARRAY", "UINT64"]),
        json!([u64::MAX, 0]),
    );
    expect(
        "t.arr_f64",
        json!(["ARRAY", "FLOAT64"]),
        json!([0.5, -0.75]),
    );
    expect(
        "t.arr_bool",
        json!(["ARRAY", "BOOL"]),
        json!([true, false, true]),
    );
    expect(
        "t.arr_str",
        json!(["ARRAY", "STRING"]),
        json!(["x", "", "ünï"]),
    );
    expect("t.arr_empty", json!(["ARRAY"]), json!([]));
    expect(
        "t.nested",
        json!(["ARRAY", "ARRAY", "UINT32"]),
        json!([1, 2, 3]),
    );
    let tensors = py["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), data.len());
    for (t, (info, d)) in tensors.iter().zip(ours.tensor_infos().iter().zip(&data)) {
        assert_eq!(t["name"], json!(info.name));
        assert_eq!(t["type"], json!(info.ggml_type.name()));
        assert_eq!(
            t["dims"],
            json!(info.dims),
            "gguf-py shape is the file's ne order"
        );
        assert_eq!(t["n_bytes"], json!(info.size));
        assert_eq!(t["data_offset"], json!(ours.data_offset() + info.offset));
        assert_eq!(t["hex"].as_str().unwrap(), hex(d), "bytes of {}", info.name);
        assert_eq!(ours.tensor(&info.name).unwrap().data, &d[..]);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn gguf_py_reads_our_v3_file() {
    check_py_reads(3, None);
}

#[test]
fn gguf_py_reads_our_v2_file_with_custom_alignment() {
    check_py_reads(2, Some(64));
}

#[test]
fn we_read_gguf_py_file() {
    let dir = temp_dir("py-to-ours");
    let path = dir.join("py.gguf");
    run_py("gguf_pyref.py", &["write", path.to_str().unwrap()]);
    let f = GgufFile::open(&path).unwrap();
    let m = f.metadata();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 64);
    assert_eq!(m.architecture().unwrap(), "llama");
    assert_eq!(m.get("t.u8"), Some(&GgufValue::U8(200)));
    assert_eq!(m.get("t.i8"), Some(&GgufValue::I8(-100)));
    assert_eq!(m.get("t.u16"), Some(&GgufValue::U16(60000)));
    assert_eq!(m.get("t.i16"), Some(&GgufValue::I16(-30000)));
    assert_eq!(m.get("t.u32"), Some(&GgufValue::U32(4_000_000_000)));
    assert_eq!(m.get("t.i32"), Some(&GgufValue::I32(-2_000_000_000)));
    assert_eq!(m.get("t.f32"), Some(&GgufValue::F32(1.5)));
    assert_eq!(
        m.get("t.u64"),
        Some(&GgufValue::U64(18_000_000_000_000_000_000))
    );
    assert_eq!(
        m.get("t.i64"),
        Some(&GgufValue::I64(-9_000_000_000_000_000_000))
    );
    assert_eq!(m.get("t.f64"), Some(&GgufValue::F64(-2.25)));
    assert!(m.get_bool("t.bool").unwrap());
    assert_eq!(m.get_str("t.str").unwrap(), "héllo wörld");
    assert_eq!(m.get_i32_array("t.arr_i32").unwrap(), &[1, -2, 3]);
    assert_eq!(m.get_str_array("t.arr_str").unwrap(), &["a", "bc", ""]);
    assert_eq!(m.get_f32_array("t.arr_f32").unwrap(), &[0.5, 0.25]);
    assert_eq!(
        m.get_array("t.nested").unwrap(),
        &GgufArray::Array(vec![GgufArray::I32(vec![1, 2]), GgufArray::I32(vec![3])])
    );
    assert_eq!(m.get_u32(&m.arch_key("block_count").unwrap()).unwrap(), 2);
    assert_eq!(m.get_u32("llama.context_length").unwrap(), 128);

    let t = f.tensor("f32.tensor").unwrap();
    assert_eq!(t.info.dims, vec![3, 2]);
    assert_eq!(t.info.shape(), vec![2, 3]);
    let vals: Vec<f32> = t
        .data
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(vals, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let h = f.tensor("f16.tensor").unwrap();
    let vals: Vec<f32> = h
        .data
        .chunks(2)
        .map(|c| half::f16::from_le_bytes(c.try_into().unwrap()).to_f32())
        .collect();
    assert_eq!(vals, vec![1.0, -2.0, 0.5, 8.0]);
    let q = f.tensor("q4.tensor").unwrap();
    assert_eq!(q.info.ggml_type, GgmlType::Q4_0);
    assert_eq!(
        q.info.dims,
        vec![32, 2],
        "gguf-py converts the byte shape back to elements"
    );
    assert_eq!(q.data, (0u8..36).collect::<Vec<_>>().as_slice());
    let i = f.tensor("i32.tensor").unwrap();
    assert_eq!(i.data, &[7, 0, 0, 0, 0xf9, 0xff, 0xff, 0xff, 9, 0, 0, 0]);
    for t in f.tensor_infos() {
        assert_eq!(
            (f.data_offset() + t.offset) % 64,
            0,
            "{} aligned to 64",
            t.name
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}
