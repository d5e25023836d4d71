#!/usr/bin/env python3
"""safetensors (Python, 0.6.2) reference side of pocket-formats' safetensors tests.

  gguf_st_pyref.py write PATH   write a file with safetensors.numpy.save_file
  gguf_st_pyref.py read PATH    print JSON {name: {dtype, shape, hex}} read with safetensors.safe_open
"""
import json
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file


def write(path):
    tensors = {
        "model.embed_tokens.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
        "model.norm.weight": np.array([1.0, -0.5, 2.0], dtype=np.float16),
        "ids": np.array([[1, -2], [3, 2**40]], dtype=np.int64),
        "mask": np.array([True, False, True]),
        "bytes": np.array([[1, 2, 3], [250, 251, 252]], dtype=np.uint8),
        "scalar": np.array(3.5, dtype=np.float64),
    }
    save_file(tensors, path, metadata={"format": "pt", "note": "from python"})


def read(path):
    out = {}
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
        for k in f.keys():
            a = f.get_tensor(k)
            out[k] = {"dtype": str(a.dtype), "shape": list(a.shape), "hex": a.tobytes().hex()}
    print(json.dumps({"metadata": meta, "tensors": out}))


if __name__ == "__main__":
    {"read": read, "write": write}[sys.argv[1]](sys.argv[2])
