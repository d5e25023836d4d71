//! Shared scaffolding of the paged-attention tests (cuda_attention.rs, cuda_attention_prefill.rs):
//! the GPU-or-skip device open, the xorshift data generator, the paged-cache layout with its
//! `AttentionMeta`, the K/V cache fill and a poisoned-output attention call.
#![allow(dead_code)]

use pocket_kernels::{AttentionMeta, AttentionParams, DType, Device, DeviceKind, Tensor};

/// Tokens per cache block in these tests.
pub const BLOCK: usize = 16;

/// Opens CUDA device 0, or prints why not (`skipped: ...`) and returns `None`.
pub fn gpu_or_skip() -> Option<Device> {
    match Device::open(DeviceKind::Cuda(0)) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// A xorshift64 generator of uniform values in [-1, 1) from `seed`: the same sequence for the
/// same seed, so each test keeps its data.
pub fn xorshift(mut seed: u64) -> impl FnMut() -> f32 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// The paged layout of a batch with total lengths `lens`: `mb` blocks per sequence, `nblocks` in
/// all, handed out in reverse order so the table lookups matter.
pub struct Paged {
    pub lens: Vec<usize>,
    pub new: Vec<usize>,
    pub mb: usize,
    pub nblocks: usize,
    pub tables: Vec<u32>,
}

impl Paged {
    /// The layout of sequences with total lengths `lens`, the last `new[s]` of each being queries.
    pub fn new(lens: &[usize], new: &[usize]) -> Paged {
        let mb = lens.iter().map(|l| l.div_ceil(BLOCK)).max().unwrap();
        let nblocks = mb * lens.len();
        Paged {
            lens: lens.to_vec(),
            new: new.to_vec(),
            mb,
            nblocks,
            tables: (0..nblocks as u32).rev().collect(),
        }
    }

    /// Cache slots in all (`nblocks * BLOCK`): the row count of the K and V data.
    pub fn slots(&self) -> usize {
        self.nblocks * BLOCK
    }

    /// Query rows in all.
    pub fn queries(&self) -> usize {
        self.new.iter().sum()
    }

    /// The longest sequence: `max_seq_len` when no larger bound is passed.
    pub fn max_len(&self) -> usize {
        *self.lens.iter().max().unwrap()
    }

    /// The metadata uploaded to `d`, with `max_seq_len` = `bound` and a dummy slot mapping.
    pub fn meta(&self, d: &Device, bound: usize) -> AttentionMeta {
        let mut qs = vec![0u32];
        for &n in &self.new {
            qs.push(qs.last().unwrap() + n as u32);
        }
        let n = self.lens.len();
        AttentionMeta {
            query_start: d.upload_u32(&qs, &[n + 1]).unwrap(),
            seq_lens: d
                .upload_u32(
                    &self.lens.iter().map(|&l| l as u32).collect::<Vec<_>>(),
                    &[n],
                )
                .unwrap(),
            block_tables: d.upload_u32(&self.tables, &[n, self.mb]).unwrap(),
            slot_mapping: d.upload_u32(&[0], &[1]).unwrap(),
            num_seqs: n,
            max_seq_len: bound,
        }
    }

    /// `dtype` K and V caches on `d` holding `kv` and `vv` (`slots() x kvh x hd` each, with
    /// `(kvh, hd)` = `kv_shape`), written through `kv_write` to every slot in order; the fill's
    /// metadata carries `max_seq_len` = `bound`.
    pub fn caches(
        &self,
        d: &Device,
        dtype: DType,
        (kvh, hd): (usize, usize),
        (kv, vv): (&[f32], &[f32]),
        bound: usize,
    ) -> (Tensor, Tensor) {
        let shape = [self.nblocks, BLOCK, kvh, hd];
        let mut kc = d.alloc(dtype, &shape).unwrap();
        let mut vc = d.alloc(dtype, &shape).unwrap();
        let all: Vec<u32> = (0..self.slots() as u32).collect();
        let mut fill = self.meta(d, bound);
        fill.slot_mapping = d.upload_u32(&all, &[all.len()]).unwrap();
        let kt = d.upload_f32(kv, &[self.slots(), kvh, hd]).unwrap();
        let vt = d.upload_f32(vv, &[self.slots(), kvh, hd]).unwrap();
        d.kv_write(&kt, &vt, &mut kc, &mut vc, &fill).unwrap();
        (kc, vc)
    }
}

/// Runs `d.attention` of `q` (an uploaded `nq x heads x hd` tensor) over the caches into an f32
/// output poisoned with NaN first, so an unwritten element cannot pass; returns the output.
pub fn attend(
    d: &Device,
    q: &Tensor,
    kc: &Tensor,
    vc: &Tensor,
    m: &AttentionMeta,
    p: &AttentionParams,
    nq: usize,
) -> Vec<f32> {
    let shape = [nq, p.num_heads, p.head_dim];
    let mut out = d.alloc(DType::F32, &shape).unwrap();
    d.write_f32(&mut out, &vec![f32::NAN; shape.iter().product()], &shape)
        .unwrap();
    d.attention(q, kc, vc, m, p, &mut out).unwrap();
    d.read_f32(&out).unwrap()
}
