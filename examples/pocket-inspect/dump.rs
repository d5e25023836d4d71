//! `dump PATH TENSOR --out FILE.npy`: a tensor's values as little-endian f32 in a `.npy` file,
//! shaped like the tensor (row-major), streamed in chunks so big tensors need no full copy.

use std::io::Write;
use std::path::Path;

use pocket_formats::{GgmlType, TensorFormat, TensorView};

/// Elements converted per chunk.
const CHUNK_ELEMENTS: usize = 1 << 16;

/// Writes `view` as f32 `.npy` to `out`; returns the number of values written.
pub fn dump(view: &TensorView<'_>, out: &Path) -> Result<u64, String> {
    if !view.companions.is_empty() {
        return Err(format!(
            "tensor `{}` is {} with companion scales; dump of scaled formats is not supported yet",
            view.name,
            view.scheme.name()
        ));
    }
    let n = view.n_elements() as usize;
    let block = view.format.block_size();
    let block_bytes = view
        .format
        .bytes_for(block as u64)
        .ok_or_else(|| format!("format {} has no byte size per block", view.format))?
        as usize;
    let file = std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut w = std::io::BufWriter::new(file);
    let io = |e: std::io::Error| format!("{}: {e}", out.display());
    w.write_all(&npy_header(view.shape)).map_err(io)?;
    let blocks_per_chunk = (CHUNK_ELEMENTS / block).max(1);
    let mut buf = vec![0f32; blocks_per_chunk * block];
    let mut done = 0usize;
    for chunk in view.data.chunks(blocks_per_chunk * block_bytes) {
        let m = chunk.len() / block_bytes * block;
        to_f32(view.format, chunk, &mut buf[..m])?;
        for x in &buf[..m] {
            w.write_all(&x.to_le_bytes()).map_err(io)?;
        }
        done += m;
    }
    if done != n {
        return Err(format!(
            "tensor `{}`: converted {done} of {n} values",
            view.name
        ));
    }
    w.flush().map_err(io)?;
    Ok(done as u64)
}

/// Converts whole blocks of `format` to f32. F32/F16/BF16 are done here; everything else goes
/// through pocket-quant's reference dequantizer.
fn to_f32(format: TensorFormat, src: &[u8], out: &mut [f32]) -> Result<(), String> {
    match format {
        TensorFormat::Ggml(GgmlType::F32) => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        TensorFormat::Ggml(GgmlType::F16) => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        TensorFormat::Ggml(GgmlType::BF16) => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = half::bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        // HOOK: pocket-quant's dequantizers for every other format.
        other => {
            let q = match other {
                TensorFormat::Ggml(t) => pocket_quant::QuantFormat::from_ggml(t),
                f => f
                    .safetensors_name()
                    .and_then(pocket_quant::QuantFormat::from_safetensors_dtype)
                    .ok_or_else(|| format!("dump does not support {f} yet"))?,
            };
            pocket_quant::dequantize(q, src, out)
                .map_err(|e| format!("dequantize {other}: {e}"))?;
        }
    }
    Ok(())
}

/// A version-1.0 `.npy` header for little-endian f32 of `shape`, padded to 64 bytes.
pub fn npy_header(shape: &[usize]) -> Vec<u8> {
    let dims = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {dims}, }}");
    let total = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat(total.div_ceil(64) * 64 - total));
    dict.push('\n');
    let mut h = b"\x93NUMPY\x01\x00".to_vec();
    h.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    h.extend_from_slice(dict.as_bytes());
    h
}
