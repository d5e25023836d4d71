//! CUDA `matmul` against independent references on random blocks of every format the GPU reads:
//! a float64 dot over pocket-quant's reference dequantizer, and pocket-quant's CPU matmul.
//! Tolerances are derived from each path's arithmetic (see `tolerance`), never tuned to pass.
//! Skipped (with a message) where no CUDA device opens.
#![cfg(feature = "cuda")]

use pocket_kernels::cuda::CudaBackend;
use pocket_kernels::{Backend, DType, Device, DeviceKind, HostBytes};
use pocket_quant::{GgmlType, QuantFormat};

#[path = "cuda_common/gemv_ref.rs"]
mod gemv_ref;

use gemv_ref::{check_against_references, quant_matrix, random_matrix, random_weight, Rng};

const FORMATS: [GgmlType; 15] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

#[test]
fn gemv_matches_references_on_random_blocks() {
    let dev = match Device::open(DeviceKind::Cuda(0)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("skipped: no CUDA device ({e})");
            return;
        }
    };
    let mut failures = Vec::new();
    for (fi, &t) in FORMATS.iter().enumerate() {
        let format = QuantFormat::Ggml(t);
        let mut rng = Rng::new(100 + fi as u64);
        // 67 rows: not a multiple of the 4 rows a GEMV block handles. 4352 columns (17 blocks
        // of 256): several passes of the multi-row kernel's loop, the last one partial.
        for &(rows, cols) in &[(67usize, 512usize), (35, 2048), (13, 4352)] {
            let (bytes, deq, w) = random_matrix(&*dev, t, rows, cols, &mut rng);
            let m = quant_matrix(t, rows, cols, &bytes);
            for n in [1usize, 2, 8, 9, 17] {
                let x: Vec<f32> = (0..n * cols).map(|_| rng.f32()).collect();
                let xt = dev.upload_f32(&x, &[n, cols]).unwrap();
                let mut out = dev.alloc(DType::F32, &[n, rows]).unwrap();
                // Poison the output so an unwritten element cannot pass.
                dev.write_f32(&mut out, &vec![f32::NAN; n * rows], &[n, rows])
                    .unwrap();
                dev.matmul(&xt, &w, &mut out).unwrap();
                let got = dev.read_f32(&out).unwrap();
                let mut cpu = vec![0f32; n * rows];
                pocket_quant::matmul(&m, &x, n, &mut cpu).unwrap();
                let what = format!("{} [{rows}x{cols}] n={n}", format.name());
                let worst = check_against_references(
                    t,
                    &what,
                    &deq,
                    &x,
                    (n, rows, cols),
                    &got,
                    &cpu,
                    &mut failures,
                );
                eprintln!(
                    "{:7} [{rows:3}x{cols:4}] n={n:2}: worst error / bound = {worst:.3}",
                    format.name()
                );
            }
        }
    }
    assert!(
        failures.is_empty(),
        "GEMV mismatches:\n{}",
        failures.join("\n")
    );
}

/// Q4_K, which upload reorders by sub-block (cuda/repack.rs), through every path that reads it:
/// the one-row dp4a GEMV (the `auto` choice: one row per block under 2048 rows, else 4 rows per
/// block), the 2..8-row GEMV, the cuBLAS prefill's dequantization (n = 9, 40) and the embedding
/// gather. Shapes: one super-block per row, rows not a multiple of 4 (5, 131, 2053), 5 and 56
/// super-blocks per row (several passes of the multi-row loop at 14336 columns). The GEMVs
/// against the float64 dot and the CPU matmul within their bounds; the embedding bit for bit
/// against pocket-quant's dequantization.
#[test]
fn q4_k_reordered_layout_matches_references_on_odd_shapes() {
    let dev = match Device::open(DeviceKind::Cuda(0)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("skipped: no CUDA device ({e})");
            return;
        }
    };
    let t = GgmlType::Q4_K;
    let mut failures = Vec::new();
    let mut rng = Rng::new(4242);
    for &(rows, cols) in &[
        (1usize, 256usize),
        (5, 1280),
        (131, 1280),
        (2053, 512),
        (7, 14336),
    ] {
        let (bytes, deq, w) = random_matrix(&*dev, t, rows, cols, &mut rng);
        let m = quant_matrix(t, rows, cols, &bytes);
        for n in [1usize, 3, 8, 9, 40] {
            let x: Vec<f32> = (0..n * cols).map(|_| rng.f32()).collect();
            let xt = dev.upload_f32(&x, &[n, cols]).unwrap();
            let mut out = dev.alloc(DType::F32, &[n, rows]).unwrap();
            dev.write_f32(&mut out, &vec![f32::NAN; n * rows], &[n, rows])
                .unwrap();
            dev.matmul(&xt, &w, &mut out).unwrap();
            let got = dev.read_f32(&out).unwrap();
            let mut cpu = vec![0f32; n * rows];
            pocket_quant::matmul(&m, &x, n, &mut cpu).unwrap();
            let what = format!("Q4_K [{rows}x{cols}] n={n}");
            let worst = check_against_references(
                t,
                &what,
                &deq,
                &x,
                (n, rows, cols),
                &got,
                &cpu,
                &mut failures,
            );
            eprintln!("{what}: worst error / bound = {worst:.3}");
        }
        // Embedding: the first and last rows, one repeated, one in the middle.
        let ids = [rows as u32 - 1, 0, (rows / 2) as u32, rows as u32 - 1];
        let idt = dev.upload_u32(&ids, &[ids.len()]).unwrap();
        let mut out = dev.alloc(DType::F32, &[ids.len(), cols]).unwrap();
        dev.embedding(&w, &idt, &mut out).unwrap();
        let got = dev.read_f32(&out).unwrap();
        for (i, &id) in ids.iter().enumerate() {
            let want = &deq[id as usize * cols..(id as usize + 1) * cols];
            let row = &got[i * cols..(i + 1) * cols];
            if let Some(c) = (0..cols).find(|&c| row[c].to_bits() != want[c].to_bits()) {
                failures.push(format!(
                    "Q4_K [{rows}x{cols}] embedding of row {id}: column {c} is {} not {}",
                    row[c], want[c]
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "Q4_K mismatches:\n{}",
        failures.join("\n")
    );
}

/// Consecutive GEMVs over one input reuse its 8-bit quantization; any write to that input must
/// force a new one. Each result is compared bit for bit with the same GEMV on a fresh upload of
/// the same values (which always quantizes).
#[test]
fn reused_activation_quantization_tracks_writes() {
    let dev = match Device::open(DeviceKind::Cuda(0)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("skipped: no CUDA device ({e})");
            return;
        }
    };
    let mut rng = Rng::new(77);
    let d = 512;
    let up = |t: GgmlType, rng: &mut Rng| {
        let b = random_weight(t, d, d, rng);
        dev.upload_weight(
            QuantFormat::Ggml(t),
            d,
            d,
            HostBytes::from_vec(b),
            None,
            None,
        )
        .unwrap()
    };
    let (w1, w2, wf) = (
        up(GgmlType::Q4_0, &mut rng),
        up(GgmlType::Q4_K, &mut rng),
        up(GgmlType::F16, &mut rng),
    );
    let fresh = |x: &[f32], w: &pocket_kernels::Weight| {
        let xt = dev.upload_f32(x, &[1, d]).unwrap();
        let mut o = dev.alloc(DType::F32, &[1, d]).unwrap();
        dev.matmul(&xt, w, &mut o).unwrap();
        dev.read_f32(&o).unwrap()
    };
    let x0: Vec<f32> = (0..d).map(|_| rng.f32()).collect();
    let mut x = dev.upload_f32(&x0, &[1, d]).unwrap();
    let mut o1 = dev.alloc(DType::F32, &[1, d]).unwrap();
    let mut o2 = dev.alloc(DType::F32, &[1, d]).unwrap();
    dev.matmul(&x, &w1, &mut o1).unwrap();
    dev.matmul(&x, &w2, &mut o2).unwrap(); // reuses x's quantization
    assert_eq!(dev.read_f32(&o1).unwrap(), fresh(&x0, &w1));
    assert_eq!(dev.read_f32(&o2).unwrap(), fresh(&x0, &w2));
    // A host write to x.
    let x1: Vec<f32> = (0..d).map(|_| rng.f32()).collect();
    dev.matmul(&x, &w1, &mut o1).unwrap();
    dev.write_f32(&mut x, &x1, &[1, d]).unwrap();
    dev.matmul(&x, &w2, &mut o2).unwrap();
    assert_eq!(dev.read_f32(&o2).unwrap(), fresh(&x1, &w2));
    // A matmul (float path) that writes x.
    dev.matmul(&x, &w1, &mut o1).unwrap();
    let o1v = dev.read_f32(&o1).unwrap();
    dev.matmul(&o1, &wf, &mut x).unwrap();
    let xv = dev.read_f32(&x).unwrap();
    dev.matmul(&x, &w2, &mut o2).unwrap();
    assert_eq!(dev.read_f32(&o2).unwrap(), fresh(&xv, &w2));
    assert_eq!(o1v, fresh(&x1, &w1));
    // An elementwise op that writes x.
    dev.matmul(&x, &w1, &mut o1).unwrap();
    dev.add_assign(&mut x, &o2).unwrap();
    let xv = dev.read_f32(&x).unwrap();
    dev.matmul(&x, &w1, &mut o1).unwrap();
    assert_eq!(dev.read_f32(&o1).unwrap(), fresh(&xv, &w1));
}

/// A decode-sized RMSNorm (alone or with the residual add) writes its output's 8-bit quantization
/// for the GEMVs that read it: their results must be bit-identical to a fresh quantization of the
/// same values, for 1 and 3 rows, and for both dp4a GEMV layouts' formats.
#[test]
fn norm_quantization_matches_a_fresh_one() {
    let dev = match Device::open(DeviceKind::Cuda(0)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("skipped: no CUDA device ({e})");
            return;
        }
    };
    let mut rng = Rng::new(91);
    let (d, rows_w) = (1024usize, 96usize);
    let weights: Vec<_> = [GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_0]
        .iter()
        .map(|&t| {
            let b = random_weight(t, rows_w, d, &mut rng);
            dev.upload_weight(
                QuantFormat::Ggml(t),
                rows_w,
                d,
                HostBytes::from_vec(b),
                None,
                None,
            )
            .unwrap()
        })
        .collect();
    let fresh = |x: &[f32], n: usize, w: &pocket_kernels::Weight| {
        let xt = dev.upload_f32(x, &[n, d]).unwrap();
        let mut o = dev.alloc(DType::F32, &[n, rows_w]).unwrap();
        dev.matmul(&xt, w, &mut o).unwrap();
        dev.read_f32(&o).unwrap()
    };
    for n in [1usize, 3] {
        let norm_w: Vec<f32> = (0..d).map(|_| 1.0 + 0.5 * rng.f32()).collect();
        let nw = dev.upload_f32(&norm_w, &[d]).unwrap();
        let x0: Vec<f32> = (0..n * d).map(|_| rng.f32()).collect();
        let x = dev.upload_f32(&x0, &[n, d]).unwrap();
        let mut h = dev.alloc(DType::F32, &[n, d]).unwrap();
        let mut o = dev.alloc(DType::F32, &[n, rows_w]).unwrap();
        dev.rms_norm(&x, &nw, 1e-5, &mut h).unwrap();
        let hv = dev.read_f32(&h).unwrap();
        for w in &weights {
            dev.write_f32(&mut o, &vec![f32::NAN; n * rows_w], &[n, rows_w])
                .unwrap();
            dev.rms_norm(&x, &nw, 1e-5, &mut h).unwrap();
            dev.matmul(&h, w, &mut o).unwrap();
            assert_eq!(
                dev.read_f32(&o).unwrap(),
                fresh(&hv, n, w),
                "rms_norm n={n}"
            );
        }
        let delta: Vec<f32> = (0..n * d).map(|_| rng.f32()).collect();
        let dt = dev.upload_f32(&delta, &[n, d]).unwrap();
        for w in &weights {
            let mut res = dev.upload_f32(&x0, &[n, d]).unwrap();
            dev.add_rms_norm(&mut res, &dt, &nw, 1e-5, &mut h).unwrap();
            let hv = dev.read_f32(&h).unwrap();
            let rv = dev.read_f32(&res).unwrap();
            let want: Vec<f32> = x0.iter().zip(&delta).map(|(a, b)| a + b).collect();
            assert_eq!(rv, want, "add_rms_norm residual n={n}");
            dev.add_rms_norm(&mut res, &dt, &nw, 1e-5, &mut h).unwrap();
            dev.matmul(&h, w, &mut o).unwrap();
            let hv2 = dev.read_f32(&h).unwrap();
            assert_eq!(
                dev.read_f32(&o).unwrap(),
                fresh(&hv2, n, w),
                "add_rms_norm n={n}"
            );
            assert_ne!(hv, hv2, "the second add moved the residual");
        }
    }
}

/// Activation rows that exercise the quantizers' edge cases: random values, a zero block, exact
/// rounding ties (a block with amax 127, so q = v exactly, and halves), the Q8K maximum tie
/// (equal |v| of opposite signs: the first one sets the sign of the scale), subnormal blocks.
fn act_rows(n: usize, cols: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x: Vec<f32> = (0..n * cols).map(|_| rng.f32() * 3.0).collect();
    for r in 0..n {
        let row = &mut x[r * cols..(r + 1) * cols];
        if r % 3 == 1 {
            row[..32].fill(0.0);
        }
        if cols >= 64 {
            let b = &mut row[32..64];
            for (i, v) in b.iter_mut().enumerate() {
                *v = (i as f32 - 16.0) + 0.5;
            }
            b[31] = -127.0; // amax 127: d = 1, id = 1, every v.5 is an exact tie
        }
        if cols >= 512 && r % 2 == 0 {
            // Second 256 block: largest |v| at 300 (+5) and 290 (-5); the first (-5) wins.
            for v in &mut row[256..512] {
                *v = v.clamp(-4.0, 4.0);
            }
            row[300] = 5.0;
            row[290] = -5.0;
        }
        if r % 4 == 3 {
            // A tail of subnormal values: d is subnormal, 1 / d and -127 / max overflow to
            // infinity, and both sides give all-zero quants (not a saturated pattern).
            let t = cols.min(256);
            for (j, v) in row[cols - t..].iter_mut().enumerate() {
                *v = 1e-38 * ((j % 5) as f32 - 2.0);
            }
        }
    }
    x
}

/// The device's activation quantizers (the GEMV's quantize launch and the ones fused into the
/// decode norms and silu_mul) produce byte-identical int8 blocks, scales and scaled sums to pocket-quant's
/// `quantize_act_q8` (32-element formats) and `quantize_act_q8k` (K formats), so a CUDA GEMV and
/// the CPU's dot read the same integers.
#[test]
fn activation_quantization_is_bit_identical_to_the_cpu() {
    let be = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipped: no CUDA device ({e})");
            return;
        }
    };
    let mut rng = Rng::new(4242);
    let check = |x: &[f32],
                 n: usize,
                 cols: usize,
                 got: (Vec<i8>, Vec<f32>, Vec<f32>),
                 k: bool,
                 what: &str| {
        let (q, d, s) = got;
        if k {
            let mut blocks = Vec::new();
            pocket_quant::quantize_act_q8k(x, &mut blocks);
            for (bi, b) in blocks.iter().enumerate() {
                assert_eq!(
                    &q[bi * 256..(bi + 1) * 256],
                    &b.qs[..],
                    "{what} q8k quants of block {bi} ({n}x{cols})"
                );
                for j in 0..8 {
                    let sum: i32 = b.qs[32 * j..32 * j + 32].iter().map(|&v| v as i32).sum();
                    assert_eq!(
                        d[bi * 8 + j].to_bits(),
                        b.d.to_bits(),
                        "{what} q8k scale of block {bi}"
                    );
                    assert_eq!(
                        s[bi * 8 + j].to_bits(),
                        (b.d * sum as f32).to_bits(),
                        "{what} q8k sum of block {bi}.{j}"
                    );
                }
            }
        } else {
            let mut blocks = Vec::new();
            pocket_quant::quantize_act_q8(x, &mut blocks);
            for (bi, b) in blocks.iter().enumerate() {
                assert_eq!(
                    &q[bi * 32..(bi + 1) * 32],
                    &b.qs[..],
                    "{what} q8 quants of block {bi} ({n}x{cols})"
                );
                assert_eq!(
                    d[bi].to_bits(),
                    b.d.to_bits(),
                    "{what} q8 scale of block {bi}"
                );
                assert_eq!(
                    s[bi].to_bits(),
                    b.s.to_bits(),
                    "{what} q8 sum of block {bi}"
                );
            }
        }
    };
    // 96 columns: Q8 only (not a multiple of 256), with a partial 256-element chunk.
    for &(n, cols) in &[(1usize, 96usize), (1, 512), (3, 4352), (8, 4096), (5, 96)] {
        let x = act_rows(n, cols, &mut rng);
        let xt = be.upload_f32(&x, &[n, cols]).unwrap();
        for k in [false, true] {
            if k && cols % 256 != 0 {
                continue;
            }
            let got = be.quantized_activation(&xt, k).unwrap();
            check(&x, n, cols, got, k, "quantize_q8");
        }
        // The decode norms quantize their output in the same launch: compare with pocket-quant
        // on the very floats the norm wrote.
        let nw: Vec<f32> = (0..cols).map(|_| 1.0 + 0.5 * rng.f32()).collect();
        let nwt = be.upload_f32(&nw, &[cols]).unwrap();
        let mut h = be.alloc(DType::F32, &[n, cols]).unwrap();
        for k in [false, true] {
            if k && cols % 256 != 0 {
                continue;
            }
            be.rms_norm(&xt, &nwt, 1e-5, &mut h).unwrap();
            let got = be.quantized_activation(&h, k).unwrap();
            let hv = be.read_f32(&h).unwrap();
            check(&hv, n, cols, got, k, "rms_norm_q8");
        }
        // silu_mul at decode sizes quantizes its output in the same launch too.
        let gate: Vec<f32> = (0..n * cols).map(|_| 4.0 * rng.f32()).collect();
        let (gt, ut) = (
            be.upload_f32(&gate, &[n, cols]).unwrap(),
            be.upload_f32(&x, &[n, cols]).unwrap(),
        );
        for k in [false, true] {
            if k && cols % 256 != 0 {
                continue;
            }
            be.silu_mul(&gt, &ut, &mut h).unwrap();
            let got = be.quantized_activation(&h, k).unwrap();
            let hv = be.read_f32(&h).unwrap();
            check(&hv, n, cols, got, k, "silu_mul_q8");
        }
    }
}
