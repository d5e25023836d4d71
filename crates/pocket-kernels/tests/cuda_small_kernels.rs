//! The one-pass decode norms, the silu_mul_halves quantizing kernel and the multi-block greedy
//! pick (kernels/norm.cu, split.cu, greedy.cuh) at the model sizes they run at: norm outputs
//! against an f64 reference, their int8 blocks bit-identical to pocket-quant's quantization of
//! the very floats the kernel wrote, and greedy ids equal to a host scan (lowest index on ties,
//! NaN never wins) with log-probabilities against an f64 log-sum-exp; decode attention with the
//! query heads of a group spread over blocks and its fused Q8 output. Skipped without a GPU.
#![cfg(feature = "cuda")]

use pocket_kernels::cuda::CudaBackend;
use pocket_kernels::{Backend, DType};

#[path = "rng/mod.rs"]
mod rng;
use rng::Rng;

fn gpu() -> Option<CudaBackend> {
    match CudaBackend::new(0) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("skipped: no CUDA device ({e})");
            None
        }
    }
}

/// The device's cached quantization of `h` (both kinds where d % 256 == 0) equals pocket-quant's
/// quantization of the floats in `hv`, bit for bit.
fn check_quant(be: &CudaBackend, h: &pocket_kernels::Tensor, hv: &[f32], d: usize, what: &str) {
    let (q, ds, ss) = be.quantized_activation(h, false).unwrap();
    let mut blocks = Vec::new();
    pocket_quant::quantize_act_q8(hv, &mut blocks);
    for (bi, b) in blocks.iter().enumerate() {
        assert_eq!(
            &q[bi * 32..bi * 32 + 32],
            &b.qs[..],
            "{what}: q8 block {bi}"
        );
        assert_eq!(ds[bi].to_bits(), b.d.to_bits(), "{what}: q8 scale {bi}");
        assert_eq!(ss[bi].to_bits(), b.s.to_bits(), "{what}: q8 sum {bi}");
    }
    if !d.is_multiple_of(256) {
        return;
    }
    let (q, ds, ss) = be.quantized_activation(h, true).unwrap();
    let mut blocks = Vec::new();
    pocket_quant::quantize_act_q8k(hv, &mut blocks);
    for (bi, b) in blocks.iter().enumerate() {
        assert_eq!(
            &q[bi * 256..bi * 256 + 256],
            &b.qs[..],
            "{what}: q8k block {bi}"
        );
        for j in 0..8 {
            let sum: i32 = b.qs[32 * j..32 * j + 32].iter().map(|&v| v as i32).sum();
            assert_eq!(
                ds[bi * 8 + j].to_bits(),
                b.d.to_bits(),
                "{what}: q8k scale {bi}"
            );
            assert_eq!(
                ss[bi * 8 + j].to_bits(),
                (b.d * sum as f32).to_bits(),
                "{what}: q8k sum {bi}.{j}"
            );
        }
    }
}

/// f64 RMSNorm of `rows` rows of `w.len()`, compared with a relative tolerance.
fn check_norm(got: &[f32], x: &[f64], w: &[f32], eps: f32, what: &str) {
    for (r, (g, xr)) in got.chunks(w.len()).zip(x.chunks(w.len())).enumerate() {
        let ms = xr.iter().map(|v| v * v).sum::<f64>() / w.len() as f64;
        let inv = 1.0 / (ms + eps as f64).sqrt();
        for i in 0..w.len() {
            let want = xr[i] * inv * w[i] as f64;
            assert!(
                (g[i] as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "{what}: row {r} element {i}: {} vs {want}",
                g[i]
            );
        }
    }
}

/// Decode norms at the hidden sizes of SmolLM2 (576), Qwen2.5-0.5B (896), Llama-3-8B (4096),
/// Qwen3.5-27B (5120) and one past the one-pass limit (17408: the strided path), 1, 3 and 8 rows.
#[test]
fn decode_norms_write_the_reference_and_its_exact_quantization() {
    let Some(be) = gpu() else { return };
    let mut rng = Rng::new(7);
    for d in [576usize, 896, 4096, 5120, 17408] {
        for n in [1usize, 3, 8] {
            let w: Vec<f32> = (0..d).map(|_| 1.0 + 0.5 * rng.f32()).collect();
            let (x, delta) = (rng.scaled(n * d, 2.0), rng.scaled(n * d, 0.5));
            let wt = be.upload_f32(&w, &[d]).unwrap();
            let xt = be.upload_f32(&x, &[n, d]).unwrap();
            let mut h = be.alloc(DType::F32, &[n, d]).unwrap();
            be.rms_norm(&xt, &wt, 1e-5, &mut h).unwrap();
            let hv = be.read_f32(&h).unwrap();
            let xd: Vec<f64> = x.iter().map(|&v| v as f64).collect();
            check_norm(&hv, &xd, &w, 1e-5, &format!("rms_norm d={d} n={n}"));
            check_quant(&be, &h, &hv, d, &format!("rms_norm_q8 d={d} n={n}"));

            let mut res = be.upload_f32(&x, &[n, d]).unwrap();
            let dt = be.upload_f32(&delta, &[n, d]).unwrap();
            be.add_rms_norm(&mut res, &dt, &wt, 1e-6, &mut h).unwrap();
            let sum: Vec<f32> = x.iter().zip(&delta).map(|(a, b)| a + b).collect();
            assert_eq!(be.read_f32(&res).unwrap(), sum, "residual d={d} n={n}");
            let hv = be.read_f32(&h).unwrap();
            let sd: Vec<f64> = sum.iter().map(|&v| v as f64).collect();
            check_norm(&hv, &sd, &w, 1e-6, &format!("add_rms_norm d={d} n={n}"));
            check_quant(&be, &h, &hv, d, &format!("add_rms_norm_q8 d={d} n={n}"));
        }
    }
}

/// silu_mul_halves at decode sizes (the intermediate sizes of the same models and a partial
/// 256-chunk) equals the split path's silu_mul bit for bit, and its quantization is exact.
#[test]
fn silu_mul_halves_matches_the_split_path_and_quantizes_exactly() {
    let Some(be) = gpu() else { return };
    let mut rng = Rng::new(8);
    for d in [96usize, 1536, 4864, 14336, 17408] {
        for n in [1usize, 3] {
            let (g, u) = (rng.scaled(n * d, 4.0), rng.scaled(n * d, 2.0));
            let mut x = Vec::with_capacity(2 * n * d);
            for r in 0..n {
                x.extend_from_slice(&g[r * d..(r + 1) * d]);
                x.extend_from_slice(&u[r * d..(r + 1) * d]);
            }
            let xt = be.upload_f32(&x, &[n, 2 * d]).unwrap();
            let mut h = be.alloc(DType::F32, &[n, d]).unwrap();
            be.silu_mul_halves(&xt, &mut h).unwrap();
            let hv = be.read_f32(&h).unwrap();
            check_quant(&be, &h, &hv, d, &format!("silu_mul_halves_q8 d={d} n={n}"));
            let (gt, ut) = (
                be.upload_f32(&g, &[n, d]).unwrap(),
                be.upload_f32(&u, &[n, d]).unwrap(),
            );
            let mut s = be.alloc(DType::F32, &[n, d]).unwrap();
            be.silu_mul(&gt, &ut, &mut s).unwrap();
            assert_eq!(hv, be.read_f32(&s).unwrap(), "fused vs split d={d} n={n}");
        }
    }
}

/// Decode attention over f32 caches with random contents: the f64 reference of sequence `s`,
/// query head `h` (lengths `lens`, block tables `tables` of `mb` blocks of `bs`).
#[allow(clippy::too_many_arguments)]
fn attn_reference(
    q: &[f32],
    kc: &[f32],
    vc: &[f32],
    tables: &[u32],
    (heads, kvh, hd): (usize, usize, usize),
    (bs, mb): (usize, usize),
    lens: &[usize],
    s: usize,
    h: usize,
) -> Vec<f64> {
    let g = heads / kvh;
    let scale = 1.0 / (hd as f64).sqrt();
    let at = |j: usize| (tables[s * mb + j / bs] as usize * bs + j % bs) * kvh * hd + (h / g) * hd;
    let qr = &q[(s * heads + h) * hd..(s * heads + h + 1) * hd];
    let sc: Vec<f64> = (0..lens[s])
        .map(|j| {
            let k = &kc[at(j)..at(j) + hd];
            qr.iter()
                .zip(k)
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum::<f64>()
                * scale
        })
        .collect();
    let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = sc.iter().map(|v| (v - m).exp()).collect();
    let l: f64 = w.iter().sum();
    (0..hd)
        .map(|i| {
            (0..lens[s])
                .map(|j| w[j] * vc[at(j) + i] as f64)
                .sum::<f64>()
                / l
        })
        .collect()
}

/// Decode attention with a GQA group's query heads spread over blocks (1 or 2 heads per block,
/// `set_attn_heads_per_block`; 1 is the default up to 256-key bounds, unsplit where that is a
/// few key-loop iterations) and with the whole group per block (0) matches an f64 reference,
/// and the Q8 quantization that the kernel writing
/// `out` (the decode kernel with one split, else attn_combine, or on sm_90 the cluster kernel's
/// merge, `set_attn_cluster`, each run here) leaves for the output projection
/// is pocket-quant's quantization of those floats, bit for bit. The q8 scratch is filled with
/// another tensor's quantization first, so a block the kernels failed to write would show.
/// Shapes: SmolLM2-135M (9/3, head_dim 64), Qwen2.5-0.5B (14/2, 64), groups of 5 and 7 at 128
/// (rows not a multiple of 256: the fused Q8 applies); one and three sequences, contexts from
/// 1 key to several splits, split bounds exact and a 256-key graph bucket.
#[test]
fn decode_attention_head_split_and_fused_q8() {
    use pocket_kernels::{AttentionMeta, AttentionParams};
    let Some(be) = gpu() else { return };
    let mut rng = Rng::new(10);
    let bs = 16usize;
    for (heads, kvh, hd) in [
        (9usize, 3usize, 64usize),
        (14, 2, 64),
        (5, 1, 128),
        (7, 1, 128),
    ] {
        for lens in [vec![1usize], vec![5], vec![40], vec![200], vec![3, 70, 17]] {
            let n = lens.len();
            let mb = 256 / bs;
            let nblocks = n * mb;
            // Blocks in reverse order, so the tables matter.
            let tables: Vec<u32> = (0..nblocks as u32).rev().collect();
            let cache_len = nblocks * bs * kvh * hd;
            let (kv, vv) = (rng.scaled(cache_len, 1.0), rng.scaled(cache_len, 1.0));
            let qv = rng.scaled(n * heads * hd, 2.0);
            let kc = be.upload_f32(&kv, &[nblocks, bs, kvh, hd]).unwrap();
            let vc = be.upload_f32(&vv, &[nblocks, bs, kvh, hd]).unwrap();
            let q = be.upload_f32(&qv, &[n, heads, hd]).unwrap();
            let p = AttentionParams {
                num_heads: heads,
                num_kv_heads: kvh,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
                sliding_window: None,
                softcap: None,
            };
            let row = heads * hd;
            let qs: Vec<u32> = (0..=n as u32).collect();
            let sl: Vec<u32> = lens.iter().map(|&l| l as u32).collect();
            let max_len = *lens.iter().max().unwrap();
            for bound in [max_len, 256] {
                let meta = AttentionMeta {
                    query_start: be.upload_u32(&qs, &[n + 1]).unwrap(),
                    seq_lens: be.upload_u32(&sl, &[n]).unwrap(),
                    block_tables: be.upload_u32(&tables, &[n, mb]).unwrap(),
                    slot_mapping: be.upload_u32(&vec![0; n], &[n]).unwrap(),
                    num_seqs: n,
                    max_seq_len: bound,
                };
                for (hpb, cluster) in [(0usize, true), (0, false), (1, true), (2, true)] {
                    let what = format!(
                        "{heads}/{kvh} hd {hd} lens {lens:?} bound {bound} heads/block {hpb} cluster {cluster}"
                    );
                    be.set_attn_cluster(Some(cluster));
                    let z = be.upload_f32(&rng.scaled(n * row, 3.0), &[n, row]).unwrap();
                    be.quantized_activation(&z, false).unwrap();
                    be.set_attn_heads_per_block(hpb);
                    let mut out = be.alloc(DType::F32, &[n, row]).unwrap();
                    be.attention(&q, &kc, &vc, &meta, &p, &mut out).unwrap();
                    let ov = be.read_f32(&out).unwrap();
                    for s in 0..n {
                        for h in 0..heads {
                            let want = attn_reference(
                                &qv,
                                &kv,
                                &vv,
                                &tables,
                                (heads, kvh, hd),
                                (bs, mb),
                                &lens,
                                s,
                                h,
                            );
                            for (i, w) in want.iter().enumerate() {
                                let got = ov[(s * heads + h) * hd + i] as f64;
                                assert!(
                                    (got - w).abs() <= 1e-5 + 1e-4 * w.abs(),
                                    "{what}: seq {s} head {h} dim {i}: {got} vs {w}"
                                );
                            }
                        }
                    }
                    check_quant(&be, &out, &ov, row, &format!("attention q8 {what}"));
                }
            }
        }
    }
    be.set_attn_heads_per_block(1);
    be.set_attn_cluster(None);
}

/// The host's greedy pick: largest value, lowest index on ties, NaN never wins (0 if none).
fn host_pick(row: &[f32]) -> usize {
    let mut best: Option<usize> = None;
    for (i, &v) in row.iter().enumerate() {
        if !v.is_nan() && best.is_none_or(|b| v > row[b]) {
            best = Some(i);
        }
    }
    best.unwrap_or(0)
}

/// Multi-block greedy picks (argmax and argmax_logprob) at vocabularies from one block to 122
/// blocks per row, a length that is not a multiple of 4 (the scalar path), and 70 rows (two
/// launches of the 64-row partials): ties across blocks, NaN, an all -inf row (argmax: its first
/// index; argmax_logprob: 0, as the one-block sampler) and an all-NaN row. Each call runs twice,
/// so a counter the kernel failed to reset would show in the second.
#[test]
fn multi_block_greedy_matches_a_host_scan() {
    let Some(be) = gpu() else { return };
    let mut rng = Rng::new(9);
    for (n, vocab) in [
        (1usize, 1000usize),
        (3, 50_001),
        (2, 128_256),
        (3, 248_320),
        (70, 49_152),
    ] {
        let mut l = rng.scaled(n * vocab, 4.0);
        let r0 = &mut l[..vocab];
        // The maximum twice, far apart (different blocks): the first wins. A NaN before it.
        r0[vocab / 2 + 1] = 9.0;
        r0[vocab - 1] = 9.0;
        r0[1] = f32::NAN;
        if n >= 3 {
            l[vocab..2 * vocab].fill(f32::NEG_INFINITY);
            l[vocab] = f32::NAN;
            l[2 * vocab..3 * vocab].fill(f32::NAN);
        }
        let lt = be.upload_f32(&l, &[n, vocab]).unwrap();
        for _ in 0..2 {
            let mut ids = be.alloc(DType::U32, &[n]).unwrap();
            be.argmax(&lt, &mut ids).unwrap();
            let got = be.read_u32(&ids).unwrap();
            let mut lps = be.alloc(DType::F32, &[n]).unwrap();
            be.argmax_logprob(&lt, &mut ids, &mut lps).unwrap();
            let (got_lp, lpv) = (be.read_u32(&ids).unwrap(), be.read_f32(&lps).unwrap());
            for r in 0..n {
                let row = &l[r * vocab..(r + 1) * vocab];
                let want = host_pick(row);
                assert_eq!(got[r] as usize, want, "argmax vocab={vocab} row {r}");
                if row.iter().all(|v| v.is_nan() || *v == f32::NEG_INFINITY) {
                    assert_eq!(got_lp[r], 0, "argmax_logprob of an empty row {r}");
                    continue;
                }
                assert_eq!(
                    got_lp[r] as usize, want,
                    "argmax_logprob vocab={vocab} row {r}"
                );
                let m = row[want] as f64;
                let z = m + row
                    .iter()
                    .filter(|v| !v.is_nan())
                    .map(|&v| (v as f64 - m).exp())
                    .sum::<f64>()
                    .ln();
                let lp = lpv[r] as f64;
                assert!(
                    (lp - (m - z)).abs() < 1e-4,
                    "logprob row {r}: {lp} vs {}",
                    m - z
                );
            }
            assert_eq!(got[0] as usize, vocab / 2 + 1, "ties pick the first index");
        }
    }
}
