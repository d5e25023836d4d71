//! The tiled flash-attention prefill kernel (kernels/attention_prefill.cu) against the CPU backend
//! on the same data: the GQA shapes of SmolLM2-135M (9/3 x 64), Qwen2.5-0.5B (14/2 x 64),
//! Llama-3-8B (32/8 x 128) and Qwen3.5 (24/4 x 256), plus a group of 1 with a soft cap; f32, f16
//! and bf16 caches; a single prompt, a varlen batch (a prompt continuing a cached prefix, a short
//! prompt, and a decode row), a sliding window, and a short chunk. The kernel is forced for every
//! batch (`force_prefill_kernel`), so batches below its default row threshold test it too; the
//! default choice is checked to give the same result; the TF32 tensor-core variant is compared
//! with the f32 kernel on TF32-exact inputs. Skipped without a GPU.
#![cfg(feature = "cuda")]

use std::sync::Mutex;

use pocket_kernels::cuda::attn_prefill::{force_prefill_kernel, PrefillKernel};
use pocket_kernels::{AttentionMeta, AttentionParams, DType, Device, DeviceKind};

/// Metadata of sequences with total lengths `lens`, the last `new[s]` of each being queries.
fn meta(d: &Device, lens: &[usize], new: &[usize], tables: &[u32], mb: usize) -> AttentionMeta {
    let mut qs = vec![0u32];
    for &n in new {
        qs.push(qs.last().unwrap() + n as u32);
    }
    AttentionMeta {
        query_start: d.upload_u32(&qs, &[lens.len() + 1]).unwrap(),
        seq_lens: d
            .upload_u32(
                &lens.iter().map(|&l| l as u32).collect::<Vec<_>>(),
                &[lens.len()],
            )
            .unwrap(),
        block_tables: d.upload_u32(tables, &[lens.len(), mb]).unwrap(),
        slot_mapping: d.upload_u32(&[0], &[1]).unwrap(),
        num_seqs: lens.len(),
        max_seq_len: *lens.iter().max().unwrap(),
    }
}

/// One batch: total lengths, new rows per sequence, sliding window.
type Batch = (Vec<usize>, Vec<usize>, Option<usize>);

/// The kernel choice is process-wide: tests that force it run one at a time.
static FORCE: Mutex<()> = Mutex::new(());

#[test]
fn tiled_prefill_matches_cpu() {
    let _one = FORCE.lock().unwrap_or_else(|e| e.into_inner());
    let gpu = match Device::open(DeviceKind::Cuda(0)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let cpu = Device::cpu();
    let bs = 16usize;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    // (heads, kv_heads, head_dim, softcap, q gain): the gain of 4 makes the softmax peaked
    // (scores up to ~10), so the online max and rescaling are exercised, not just averaging.
    let configs = [
        (9usize, 3usize, 64usize, None, 1.0f32),
        (14, 2, 64, None, 4.0),
        (32, 8, 128, None, 1.0),
        (24, 4, 256, None, 4.0),
        (4, 4, 64, Some(5.0f32), 4.0),
    ];
    let batches: [Batch; 4] = [
        (vec![300], vec![300], None),
        // A prompt after a cached prefix of 50, a fresh prompt of 37, a decode row.
        (vec![250, 37, 90], vec![200, 37, 1], None),
        (vec![300, 140], vec![300, 100], Some(64)),
        (vec![70], vec![5], None),
    ];
    for (heads, kvh, hd, softcap, gain) in configs {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for (lens, new, window) in &batches {
                let mb = lens.iter().map(|l| l.div_ceil(bs)).max().unwrap();
                let nblocks = mb * lens.len();
                // Blocks in reverse order, so the table lookups matter.
                let tables: Vec<u32> = (0..nblocks as u32).rev().collect();
                let row = kvh * hd;
                let kv: Vec<f32> = (0..nblocks * bs * row).map(|_| rnd()).collect();
                let vv: Vec<f32> = (0..nblocks * bs * row).map(|_| rnd()).collect();
                let nq: usize = new.iter().sum();
                let q: Vec<f32> = (0..nq * heads * hd).map(|_| gain * rnd()).collect();
                let p = AttentionParams {
                    num_heads: heads,
                    num_kv_heads: kvh,
                    head_dim: hd,
                    scale: 1.0 / (hd as f32).sqrt(),
                    sliding_window: *window,
                    softcap,
                };
                let mut outs = Vec::new();
                for (d, force) in [
                    (&cpu, None),
                    (&gpu, Some(PrefillKernel::Tiled)),
                    (&gpu, None),
                ] {
                    force_prefill_kernel(force);
                    let shape = [nblocks, bs, kvh, hd];
                    let mut kc = d.alloc(dtype, &shape).unwrap();
                    let mut vc = d.alloc(dtype, &shape).unwrap();
                    let all: Vec<u32> = (0..(nblocks * bs) as u32).collect();
                    let mut fill = meta(d, lens, new, &tables, mb);
                    fill.slot_mapping = d.upload_u32(&all, &[all.len()]).unwrap();
                    let kt = d.upload_f32(&kv, &[nblocks * bs, kvh, hd]).unwrap();
                    let vt = d.upload_f32(&vv, &[nblocks * bs, kvh, hd]).unwrap();
                    d.kv_write(&kt, &vt, &mut kc, &mut vc, &fill).unwrap();
                    let m = meta(d, lens, new, &tables, mb);
                    let qt = d.upload_f32(&q, &[nq, heads, hd]).unwrap();
                    let mut out = d.alloc(DType::F32, &[nq, heads, hd]).unwrap();
                    // Poison the output so an unwritten element cannot pass.
                    d.write_f32(&mut out, &vec![f32::NAN; nq * heads * hd], &[nq, heads, hd])
                        .unwrap();
                    d.attention(&qt, &kc, &vc, &m, &p, &mut out).unwrap();
                    outs.push(d.read_f32(&out).unwrap());
                    force_prefill_kernel(None);
                }
                let label = format!(
                    "{heads}/{kvh}x{hd} softcap {softcap:?} {dtype:?} lens {lens:?} new {new:?} window {window:?}"
                );
                let mut worst = 0.0f32;
                for (which, got) in [("tiled", &outs[1]), ("default", &outs[2])] {
                    for (i, (c, g)) in outs[0].iter().zip(got).enumerate() {
                        let err = (c - g).abs();
                        assert!(
                            err <= 2e-5 + 1e-4 * c.abs(),
                            "{label} {which}: out[{i}] (row {}, head {}) cuda {g} vs cpu {c}",
                            i / (heads * hd),
                            i / hd % heads
                        );
                        worst = worst.max(err);
                    }
                }
                eprintln!("{label}: max |cuda - cpu| = {worst:e}");
            }
        }
    }
}

/// The TF32 tensor-core variant (`POCKET_ATTN_PREFILL=tc`) against the f32 tiled kernel on f32
/// caches. Inputs are exact in TF32 and give exact f32 scores in both kernels: q on a 1/16 grid in
/// [-4, 4], K and V on a 1/64 grid in [-1, 1], scale 1/8 (every product is a multiple of 2^-13,
/// every score below 2^6, so 19 bits suffice). The scores, maxima and probabilities are then the
/// same in both kernels, and the one difference is P rounded to TF32 before P.V: each weight
/// moves by at most 2^-11 relative, so |tc - f32| <= 2^-11 max|v| = 4.9e-4, plus f32 summation
/// order (~1e-6). Tolerance 6e-4; a fragment-layout error moves outputs by ~1e-2 or more. On GPUs
/// without the sm_90 cubin the variant falls back to the f32 kernel and this compares it with
/// itself. Skipped without a GPU.
#[test]
fn tensor_core_prefill_matches_f32_kernel() {
    let _one = FORCE.lock().unwrap_or_else(|e| e.into_inner());
    let gpu = match Device::open(DeviceKind::Cuda(0)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let bs = 16usize;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let configs = [
        (9usize, 3usize, 64usize, None),
        (14, 2, 64, Some(5.0f32)),
        (32, 8, 128, None),
    ];
    let batches: [Batch; 3] = [
        (vec![512], vec![512], None),
        (vec![250, 37, 90], vec![200, 37, 1], None),
        (vec![300, 140], vec![300, 100], Some(64)),
    ];
    for (heads, kvh, hd, softcap) in configs {
        for (lens, new, window) in &batches {
            let mb = lens.iter().map(|l| l.div_ceil(bs)).max().unwrap();
            let nblocks = mb * lens.len();
            let tables: Vec<u32> = (0..nblocks as u32).rev().collect();
            let row = kvh * hd;
            let grid64 = |x: f32| (x * 64.0).round() / 64.0;
            let kv: Vec<f32> = (0..nblocks * bs * row).map(|_| grid64(rnd())).collect();
            let vv: Vec<f32> = (0..nblocks * bs * row).map(|_| grid64(rnd())).collect();
            let nq: usize = new.iter().sum();
            let q: Vec<f32> = (0..nq * heads * hd)
                .map(|_| (rnd() * 64.0).round() / 16.0)
                .collect();
            let p = AttentionParams {
                num_heads: heads,
                num_kv_heads: kvh,
                head_dim: hd,
                scale: 0.125,
                sliding_window: *window,
                softcap,
            };
            let shape = [nblocks, bs, kvh, hd];
            let mut kc = gpu.alloc(DType::F32, &shape).unwrap();
            let mut vc = gpu.alloc(DType::F32, &shape).unwrap();
            let all: Vec<u32> = (0..(nblocks * bs) as u32).collect();
            let mut fill = meta(&gpu, lens, new, &tables, mb);
            fill.slot_mapping = gpu.upload_u32(&all, &[all.len()]).unwrap();
            let kt = gpu.upload_f32(&kv, &[nblocks * bs, kvh, hd]).unwrap();
            let vt = gpu.upload_f32(&vv, &[nblocks * bs, kvh, hd]).unwrap();
            gpu.kv_write(&kt, &vt, &mut kc, &mut vc, &fill).unwrap();
            let m = meta(&gpu, lens, new, &tables, mb);
            let qt = gpu.upload_f32(&q, &[nq, heads, hd]).unwrap();
            let mut outs = Vec::new();
            for k in [PrefillKernel::Tiled, PrefillKernel::TensorCore] {
                force_prefill_kernel(Some(k));
                let mut out = gpu.alloc(DType::F32, &[nq, heads, hd]).unwrap();
                gpu.write_f32(&mut out, &vec![f32::NAN; nq * heads * hd], &[nq, heads, hd])
                    .unwrap();
                gpu.attention(&qt, &kc, &vc, &m, &p, &mut out).unwrap();
                outs.push(gpu.read_f32(&out).unwrap());
                force_prefill_kernel(None);
            }
            let label =
                format!("tc {heads}/{kvh}x{hd} softcap {softcap:?} lens {lens:?} new {new:?} window {window:?}");
            let mut worst = 0.0f32;
            for (i, (f, t)) in outs[0].iter().zip(&outs[1]).enumerate() {
                let err = (f - t).abs();
                assert!(
                    err <= 6e-4,
                    "{label}: out[{i}] (row {}, head {}) tc {t} vs f32 {f}",
                    i / (heads * hd),
                    i / hd % heads
                );
                worst = worst.max(err);
            }
            eprintln!("{label}: max |tc - f32| = {worst:e}");
        }
    }
}
