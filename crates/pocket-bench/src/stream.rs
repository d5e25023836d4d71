//! Streams generated tensor bytes to a file: chunks are generated in parallel (rayon) while the
//! previous batch is written, so output speed is bound by the disk, not the generator.

use std::io::Write;

use pocket_formats::GgmlType;
use rayon::prelude::*;

use crate::blocks::{fill_fp8, fill_ggml, fill_nvfp4_scales, fp8_scale_inv, Init};
use crate::error::Result;
use crate::rng::Rng;

/// How a tensor's bytes are made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Gen {
    /// Random blocks (or floats) of a GGML type.
    Ggml(GgmlType, Init),
    /// FP8 E4M3 codes with a normal shape.
    Fp8,
    /// f32 FP8 block scales giving weights of spread `std`.
    Fp8ScaleInv(f32),
    /// Random packed E2M1 nibbles.
    Nvfp4Packed,
    /// E4M3 per-16 NVFP4 scales in [1, 2).
    Nvfp4Scales,
    /// Every f32 equal to this value.
    F32Const(f32),
}

impl Gen {
    /// Bytes of the smallest independent unit.
    fn unit(&self) -> u64 {
        match self {
            Gen::Ggml(t, _) => t.block_bytes() as u64,
            Gen::Fp8ScaleInv(_) | Gen::F32Const(_) => 4,
            Gen::Fp8 | Gen::Nvfp4Packed | Gen::Nvfp4Scales => 1,
        }
    }

    fn fill(&self, rng: &mut Rng, out: &mut [u8]) -> Result<()> {
        match *self {
            Gen::Ggml(t, init) => fill_ggml(t, init, rng, out)?,
            Gen::Fp8 => fill_fp8(rng, out),
            Gen::Fp8ScaleInv(std) => {
                for c in out.chunks_exact_mut(4) {
                    c.copy_from_slice(&fp8_scale_inv(std, rng).to_le_bytes());
                }
            }
            Gen::Nvfp4Packed => rng.fill_bytes(out),
            Gen::Nvfp4Scales => fill_nvfp4_scales(rng, out),
            Gen::F32Const(v) => {
                for c in out.chunks_exact_mut(4) {
                    c.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        Ok(())
    }
}

/// A tensor to stream: its name (seeds its randomness), size and generator.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamTensor {
    /// Name.
    pub name: String,
    /// Bytes.
    pub bytes: u64,
    /// Generator.
    pub gen: Gen,
}

const CHUNK: u64 = 4 << 20;
const BATCH: u64 = 256 << 20;

struct Item {
    tensor: usize,
    chunk: u64,
    len: u64,
    last: bool,
}

/// Writes every tensor's bytes in order, each padded with zeros to `align`; returns bytes written.
pub fn stream_tensors<W: Write + Send>(
    out: &mut W,
    tensors: &[StreamTensor],
    align: u64,
    seed: u64,
) -> Result<u64> {
    let mut items = Vec::new();
    for (ti, t) in tensors.iter().enumerate() {
        let unit = t.gen.unit();
        let step = (CHUNK / unit).max(1) * unit;
        let n = t.bytes.div_ceil(step).max(1);
        for c in 0..n {
            let len = (t.bytes - c * step).min(step);
            items.push(Item {
                tensor: ti,
                chunk: c,
                len,
                last: c + 1 == n,
            });
        }
    }
    let mut batches: Vec<&[Item]> = Vec::new();
    let mut start = 0;
    let mut acc = 0;
    for (i, it) in items.iter().enumerate() {
        acc += it.len;
        if acc >= BATCH {
            batches.push(&items[start..=i]);
            start = i + 1;
            acc = 0;
        }
    }
    if start < items.len() {
        batches.push(&items[start..]);
    }
    let generate = |batch: &[Item]| -> Result<Vec<Vec<u8>>> {
        batch
            .par_iter()
            .map(|it| {
                let t = &tensors[it.tensor];
                let mut buf = vec![0u8; it.len as usize];
                let mut rng = Rng::for_chunk(seed, &t.name, it.chunk);
                t.gen.fill(&mut rng, &mut buf)?;
                Ok(buf)
            })
            .collect()
    };
    let mut written = 0u64;
    let mut write = |batch: &[Item], bufs: Vec<Vec<u8>>| -> Result<()> {
        for (it, buf) in batch.iter().zip(bufs) {
            out.write_all(&buf)?;
            written += buf.len() as u64;
            if it.last {
                let size = tensors[it.tensor].bytes;
                let pad = size.div_ceil(align) * align - size;
                out.write_all(&vec![0u8; pad as usize])?;
                written += pad;
            }
        }
        Ok(())
    };
    let mut pending: Option<(&[Item], Vec<Vec<u8>>)> = None;
    for batch in batches {
        let (w, g) = rayon::join(
            || match pending.take() {
                Some((b, bufs)) => write(b, bufs),
                None => Ok(()),
            },
            || generate(batch),
        );
        w?;
        pending = Some((batch, g?));
    }
    if let Some((b, bufs)) = pending.take() {
        write(b, bufs)?;
    }
    out.flush()?;
    Ok(written)
}
