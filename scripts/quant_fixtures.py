#!/usr/bin/env python3
"""Reference data for pocket-quant, produced with the `gguf` Python package 0.19.0 (gguf/quants.py).

    python scripts/quant_fixtures.py            # writes crates/pocket-quant/tests/data/*
    python scripts/quant_fixtures.py --grids    # (re)writes crates/pocket-quant/src/grids/*.rs
    python scripts/quant_fixtures.py --ggml [LIB] # K-quant quantizer fixtures (see below)

Fixtures: for every GGUF type gguf-py dequantizes, random blocks (with their scale fields set
deliberately to finite, moderate f16 values) and gguf-py's `dequantize` output; for every type it
quantizes, random f32 input and gguf-py's `quantize` bytes. Each case is a raw .bin pair listed in
index.json. Deterministic (fixed seed).

gguf-py 0.19.0 does not quantize the K-quants (Q2_K..Q6_K). For those, `--ggml` calls llama.cpp's
reference quantizers `quantize_row_qN_K_ref` in a CPU build of ggml's `libggml-base.so` through
ctypes (default /tmp/lcpp/build-cpu/bin/libggml-base.so; the functions are byte-identical in the
vendored llama.cpp of llama-cpp-python 0.3.36 and in .cache/llamacpp/llama.cpp-0c1e570) and writes
their bytes as `<type>.ggmlref.*` cases listed in ggml_index.json (its own seed, so the gguf-py
cases are unaffected).
"""
import ctypes
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants as q

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "crates", "pocket-quant", "tests", "data")
GRIDS = os.path.join(ROOT, "crates", "pocket-quant", "src", "grids")

# Byte offsets of the f16 scale fields of each block type (ggml struct layouts).
F16_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ2_XXS": [0], "IQ2_XS": [0], "IQ2_S": [0], "IQ3_XXS": [0], "IQ3_S": [0], "IQ1_S": [0],
    "IQ4_NL": [0], "IQ4_XS": [0], "TQ1_0": [52], "TQ2_0": [64],
}

DEQUANT_TYPES = [
    "BF16", "F16", "F32", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
    "Q6_K", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_NL",
    "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4",
]
QUANT_TYPES = ["BF16", "F16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0", "MXFP4"]


def rand_f16(rng, n):
    """Finite f16 values with magnitudes spread over 2^-14 .. 2^2, both signs."""
    mag = 2.0 ** rng.uniform(-14, 2, size=n)
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return (mag * sign).astype(np.float16)


def random_blocks(rng, name, n_blocks):
    qt = T[name]
    bs, ts = gguf.GGML_QUANT_SIZES[qt]
    if name in ("F32", "F16", "BF16"):
        vals = rng.standard_normal(n_blocks).astype(np.float32) * 3
        if name == "F32":
            return vals.view(np.uint8).reshape(n_blocks, ts)
        if name == "F16":
            return vals.astype(np.float16).view(np.uint8).reshape(n_blocks, ts)
        return (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(n_blocks, ts)
    blocks = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
    for off in F16_FIELDS.get(name, []):
        blocks[:, off:off + 2] = rand_f16(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    if name == "IQ1_M":
        # the f16 super-block scale is split over the top nibbles of the four u16 scale words
        d = rand_f16(rng, n_blocks).view(np.uint16)
        sc = blocks[:, 48:56].copy().view(np.uint16)
        for k in range(4):
            nib = (d >> np.uint16(4 * k)) & np.uint16(0xF)
            sc[:, k] = (sc[:, k] & np.uint16(0x0FFF)) | (nib << np.uint16(12))
        blocks[:, 48:56] = sc.view(np.uint8)
    if name == "MXFP4":
        e = rng.integers(100, 150, size=n_blocks, dtype=np.uint8)
        e[:4] = [0, 1, 2, 127]  # the subnormal branch of e8m0_to_fp32_half, and 1.0
        blocks[:, 0] = e
    return blocks


def quant_input(rng, name, n):
    bs = gguf.GGML_QUANT_SIZES[T[name]][0]
    x = rng.standard_normal(n).astype(np.float32)
    # vary the block scales, and keep a zero block and a constant block
    scale = (2.0 ** rng.uniform(-8, 4, size=n // bs)).astype(np.float32)
    x = (x.reshape(-1, bs) * scale[:, None]).reshape(-1)
    x[:bs] = 0.0
    x[bs:2 * bs] = 1.25
    return x


def write_fixtures():
    os.makedirs(DATA, exist_ok=True)
    rng = np.random.default_rng(20260503)
    index = []
    for name in DEQUANT_TYPES:
        qt = T[name]
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        n_el = 4096 if bs >= 256 else 2048
        blocks = random_blocks(rng, name, n_el // bs)
        out = q.dequantize(blocks.reshape(-1), qt).astype(np.float32).reshape(-1)
        assert out.size == n_el
        base = f"{name.lower()}.dequant"
        blocks.tofile(os.path.join(DATA, base + ".in.bin"))
        out.tofile(os.path.join(DATA, base + ".out.bin"))
        index.append({"type": name, "op": "dequantize", "elements": n_el,
                      "input": base + ".in.bin", "output": base + ".out.bin"})
    for name in QUANT_TYPES:
        qt = T[name]
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        n_el = 4096 if bs >= 256 else 2048
        x = quant_input(rng, name, n_el)
        out = q.quantize(x, qt)
        out = np.ascontiguousarray(out).view(np.uint8).reshape(-1)
        base = f"{name.lower()}.quant"
        x.tofile(os.path.join(DATA, base + ".in.bin"))
        out.tofile(os.path.join(DATA, base + ".out.bin"))
        index.append({"type": name, "op": "quantize", "elements": n_el,
                      "input": base + ".in.bin", "output": base + ".out.bin"})
    with open(os.path.join(DATA, "index.json"), "w") as f:
        json.dump({"generator": "scripts/quant_fixtures.py", "gguf": gguf.__version__ if hasattr(gguf, "__version__") else "0.19.0",
                   "cases": index}, f, indent=1)
    total = sum(os.path.getsize(os.path.join(DATA, p)) for p in os.listdir(DATA))
    print(f"wrote {len(index)} cases, {total} bytes to {DATA}")


GRID_HEADER = """//! {doc}
//!
//! Format data: the `{ggml}` codebook of ggml. Generated by `scripts/quant_fixtures.py --grids` from
//! the packed `grid_hex` of gguf-py 0.19.0 (`gguf/quants.py`, class `{cls}`), which holds the same
//! table as ggml's `{ggml}`. Do not edit by hand.

"""


def write_grids():
    os.makedirs(GRIDS, exist_ok=True)
    specs = [
        ("iq2xxs", q.IQ2_XXS, "IQ2XXS_GRID", "u64", "256 entries of 8 magnitudes (bytes 0x08/0x19/0x2b), IQ2_XXS."),
        ("iq2xs", q.IQ2_XS, "IQ2XS_GRID", "u64", "512 entries of 8 magnitudes (bytes 0x08/0x19/0x2b), IQ2_XS."),
        ("iq2s", q.IQ2_S, "IQ2S_GRID", "u64", "1024 entries of 8 magnitudes (bytes 0x08/0x19/0x2b), IQ2_S."),
        ("iq3xxs", q.IQ3_XXS, "IQ3XXS_GRID", "u32", "256 entries of 4 magnitudes, IQ3_XXS."),
        ("iq3s", q.IQ3_S, "IQ3S_GRID", "u32", "512 entries of 4 magnitudes (odd 1..15), IQ3_S."),
        ("iq1s", q.IQ1_S, "IQ1S_GRID", "u64", "2048 entries of 8 values in {-1, 0, 1} (bytes as i8), IQ1_S and IQ1_M."),
    ]
    for mod, cls, const, ty, doc in specs:
        cls.init_grid()
        g = cls.grid.reshape(cls.grid_shape).astype(np.int64)
        width = g.shape[1]
        vals = []
        for row in g:
            v = 0
            for k, e in enumerate(row):
                v |= (int(e) & 0xFF) << (8 * k)
            vals.append(v)
        digits = 16 if ty == "u64" else 8
        per_line = 4 if ty == "u64" else 6
        lines = []
        for i in range(0, len(vals), per_line):
            lines.append("    " + " ".join(f"0x{v:0{digits}x}," for v in vals[i:i + per_line]))
        body = GRID_HEADER.format(doc=doc, ggml=const.lower(), cls=cls.__name__)
        body += f"/// The `{const.lower()}` table: entry i holds {width} bytes, element k in byte k.\n"
        # rustfmt would put every u64 literal on a line of its own (2048 lines for IQ1_S); the
        # table is data, so keep it packed.
        body += "#[rustfmt::skip]\n"
        body += f"pub(crate) static {const}: [{ty}; {len(vals)}] = [\n" + "\n".join(lines) + "\n];\n"
        with open(os.path.join(GRIDS, mod + ".rs"), "w") as f:
            f.write(body)
    print(f"wrote grids to {GRIDS}")


GGML_REF_TYPES = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
DEFAULT_GGML_LIB = "/tmp/lcpp/build-cpu/bin/libggml-base.so"


def ggml_ref_input(rng, n):
    """Gaussian blocks at spread scales, plus the quantizers' special cases: an all-zero block,
    a constant block, an all-positive block (min clamps to 0), an all-negative block, a block with
    one large outlier, and a block of tiny values (f16 scale underflow)."""
    x = quant_input(rng, "Q4_K", n)
    blocks = x.reshape(-1, 256)
    blocks[2] = np.abs(blocks[2]) + 0.5
    blocks[3] = -np.abs(blocks[3]) - 0.25
    blocks[4, 17] = 40.0 * np.abs(blocks[4]).max()
    blocks[5] = blocks[5] * np.float32(1e-7)
    return blocks.reshape(-1).astype(np.float32)


def write_ggml_fixtures(lib_path):
    lib = ctypes.CDLL(lib_path)
    rng = np.random.default_rng(20261130)
    index = []
    for name in GGML_REF_TYPES:
        bs, ts = gguf.GGML_QUANT_SIZES[T[name]]
        n_el = 256 * 32
        x = ggml_ref_input(rng, n_el)
        out = np.zeros(n_el // bs * ts, dtype=np.uint8)
        fn = getattr(lib, f"quantize_row_{name[:2].lower()}_K_ref")
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn.restype = None
        fn(x.ctypes.data, out.ctypes.data, n_el)
        # cross-check: gguf-py dequantizes what ggml quantized to something near the input
        deq = q.dequantize(out, T[name]).astype(np.float32).reshape(-1)
        assert deq.size == n_el and np.all(np.isfinite(deq)), name
        base = f"{name.lower()}.ggmlref"
        x.tofile(os.path.join(DATA, base + ".in.bin"))
        out.tofile(os.path.join(DATA, base + ".out.bin"))
        index.append({"type": name, "op": "quantize", "elements": n_el,
                      "input": base + ".in.bin", "output": base + ".out.bin"})
    with open(os.path.join(DATA, "ggml_index.json"), "w") as f:
        json.dump({"generator": "scripts/quant_fixtures.py --ggml",
                   "reference": "llama.cpp ggml-quants.c quantize_row_qN_K_ref via ctypes",
                   "library": os.path.basename(lib_path), "cases": index}, f, indent=1)
    print(f"wrote {len(index)} ggml reference cases to {DATA}")


if __name__ == "__main__":
    if "--grids" in sys.argv:
        write_grids()
    elif "--ggml" in sys.argv:
        i = sys.argv.index("--ggml")
        write_ggml_fixtures(sys.argv[i + 1] if len(sys.argv) > i + 1 else DEFAULT_GGML_LIB)
    else:
        write_fixtures()
