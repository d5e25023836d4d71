#!/usr/bin/env python3
"""gguf-py (0.19.0) reference side of pocket-formats' GGUF round-trip tests.

  gguf_pyref.py read PATH    print JSON: metadata (types and values) and tensors (type, dims, bytes as hex)
  gguf_pyref.py write PATH   write a GGUF with GGUFWriter holding every value type and a few tensors
"""
import json
import sys

import numpy as np
import gguf


def field_json(field):
    types = [t.name for t in field.types]
    if field.types and field.types[0] == gguf.GGUFValueType.ARRAY and len(field.types) > 2:
        # Nested arrays: gguf-py flattens them; report the innermost values in order.
        inner = field.types[-1]
        vals = []
        for idx in field.data:
            part = field.parts[idx]
            if inner == gguf.GGUFValueType.STRING:
                vals.append(bytes(part).decode("utf-8"))
            else:
                vals.extend(part.tolist())
        return {"types": types, "value": vals}
    value = field.contents()
    if isinstance(value, float) and value != value:
        value = "nan"
    return {"types": types, "value": value}


def read(path):
    r = gguf.GGUFReader(path)
    fields = {}
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        fields[name] = field_json(field)
    tensors = []
    for t in r.tensors:
        tensors.append({
            "name": t.name,
            "type": t.tensor_type.name,
            "dims": [int(d) for d in t.shape],
            "n_bytes": int(t.n_bytes),
            "data_offset": int(t.data_offset),
            "hex": t.data.tobytes().hex(),
        })
    print(json.dumps({"alignment": int(r.alignment), "data_offset": int(r.data_offset),
                      "version": int(r.fields["GGUF.version"].parts[-1][0]),
                      "fields": fields, "tensors": tensors}))


def write(path):
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 1.5)
    w.add_uint64("t.u64", 18000000000000000000)
    w.add_int64("t.i64", -9000000000000000000)
    w.add_float64("t.f64", -2.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo wörld")
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_str", ["a", "bc", ""])
    w.add_array("t.arr_f32", [0.5, 0.25])
    w.add_array("t.nested", [[1, 2], [3]])
    w.add_block_count(2)
    w.add_context_length(128)
    w.add_custom_alignment(64)
    w.add_tensor("f32.tensor", np.arange(6, dtype=np.float32).reshape(2, 3))
    w.add_tensor("f16.tensor", np.array([[1.0, -2.0], [0.5, 8.0]], dtype=np.float16))
    q = np.arange(2 * 18, dtype=np.uint8).reshape(2, 18)  # 2 rows of one Q8_0-sized... Q4_0 block each
    w.add_tensor("q4.tensor", q, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    w.add_tensor("i32.tensor", np.array([7, -7, 9], dtype=np.int32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    {"read": read, "write": write}[sys.argv[1]](sys.argv[2])
