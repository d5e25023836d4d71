//! CUDA `matmul` against independent references on random blocks of every format the GPU reads:
//! a float64 dot over pocket-quant's reference dequantizer, and pocket-quant's CPU matmul.
//! Tolerances are derived from each path's arithmetic (see `tolerance`), never tuned to pass.
//! Skipped (with a message) where no CUDA device opens.
#![cfg(feature = "cuda")]

use pocket_kernels::cuda::CudaBackend;
use pocket_kernels::{Backend, DType, Device, DeviceKind, HostBytes};
use pocket_quant::{GgmlType, QuantFormat, QuantMatrix};

struct Rng(u64);
impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Offsets of the f16 scales inside one block (ggml layouts), to overwrite with finite values.
pub fn scale_offsets(t: GgmlType) -> &'static [usize] {
    use GgmlType as G;
    match t {
        G::Q4_0 | G::Q5_0 | G::Q8_0 | G::IQ4_NL | G::IQ4_XS => &[0],
        G::Q4_1 | G::Q5_1 | G::Q4_K | G::Q5_K => &[0, 2],
        G::Q2_K => &[80, 82],
        G::Q3_K => &[108],
        G::Q6_K => &[208],
        _ => &[],
    }
}

/// Random valid blocks: random quants and sub-scales, small finite f16 scales; float formats
/// through their quantizer.
fn random_weight(t: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    let f = QuantFormat::Ggml(t);
    if matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        let w: Vec<f32> = (0..rows * cols).map(|_| rng.f32()).collect();
        return pocket_quant::quantize(f, &w).unwrap();
    }
    let bb = f.block_bytes();
    let nb = rows * cols / f.block_size();
    let mut out: Vec<u8> = (0..nb * bb).map(|_| rng.next_u64() as u8).collect();
    for b in out.chunks_exact_mut(bb) {
        for &o in scale_offsets(t) {
            let v = half::f16::from_f32(0.002 + 0.01 * rng.f32().abs());
            b[o..o + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// Whether `POCKET_PREFILL_ACT=f16` selects plain f16 prefill activations (no int8 rounding).
fn plain_f16_prefill() -> bool {
    std::env::var("POCKET_PREFILL_ACT").is_ok_and(|v| v == "f16")
}

/// The error bounds of the path the GPU takes for `n` rows of `format`, (against the exact f64
/// dot, against pocket-quant's CPU matmul):
/// * dp4a GEMV (n <= 8, quantized formats): the int8 rounding of each activation block (half a
///   step of amax/127 per element, times |w|; blocks of 32, or 256 for the formats the CPU pairs
///   with Q8_K activations), plus f32 accumulation. The GPU's int8 blocks equal the CPU's, so
///   against the CPU only the f32 accumulation order remains.
/// * f32 GEMV (float formats): f32 accumulation only, against both.
/// * cuBLAS prefill (n > 8, quantized formats): the same int8 rounding as the CPU (unless
///   `POCKET_PREFILL_ACT=f16`), then W and q * d rounded to f16 (2^-11 relative each).
fn tolerance(t: GgmlType, n: usize, w: &[f32], x: &[f32]) -> (f64, f64) {
    let abs: f64 = w
        .iter()
        .zip(x)
        .map(|(a, b)| (*a as f64 * *b as f64).abs())
        .sum();
    let accum = 1e-5 * abs + 1e-6;
    if matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        return (accum, accum);
    }
    let qk = if matches!(
        t,
        GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::IQ4_NL
    ) {
        32
    } else {
        256
    };
    let act: f64 = w
        .chunks(qk)
        .zip(x.chunks(qk))
        .map(|(w, x)| {
            let amax = x.iter().fold(0.0f64, |m, v| m.max(v.abs() as f64));
            w.iter().map(|v| v.abs() as f64).sum::<f64>() * amax / 254.0
        })
        .sum();
    let f16 = abs * 2.0f64.powi(-10) * 1.01;
    if n <= 8 {
        (act + accum, accum)
    } else if plain_f16_prefill() {
        // Plain f16 activations: exact up to f16 rounding, the CPU's int8 rounding apart.
        (f16 + accum, act + f16 + accum)
    } else {
        // The f16 rounding applies to x' = q * d, within act of x.
        (act + f16 * 1.01 + accum, f16 * 1.01 + accum)
    }
}

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

/// Compares a GEMV result `got` (`[n, rows]`) with the float64 dot over the dequantized weight
/// `deq` and with pocket-quant's CPU matmul `cpu` of the same `x` (`[n, cols]`), each within its
/// `tolerance`; a NaN (an unwritten, poisoned element) always fails. Records up to 20 failures
/// labelled with `what` and returns the worst error / bound ratio.
#[allow(clippy::too_many_arguments)]
fn check_against_references(
    t: GgmlType,
    what: &str,
    deq: &[f32],
    x: &[f32],
    (n, rows, cols): (usize, usize, usize),
    got: &[f32],
    cpu: &[f32],
    failures: &mut Vec<String>,
) -> f64 {
    let mut worst = 0.0f64;
    for i in 0..n {
        for r in 0..rows {
            let wr = &deq[r * cols..(r + 1) * cols];
            let xr = &x[i * cols..(i + 1) * cols];
            let want: f64 = wr.iter().zip(xr).map(|(a, b)| *a as f64 * *b as f64).sum();
            let (tol, tol_cpu) = tolerance(t, n, wr, xr);
            let g = got[i * rows + r] as f64;
            let c = cpu[i * rows + r] as f64;
            let ratio = if g.is_nan() {
                f64::INFINITY
            } else {
                ((g - want).abs() / tol).max((g - c).abs() / tol_cpu)
            };
            worst = worst.max(ratio);
            if ratio > 1.0 && failures.len() < 20 {
                failures.push(format!(
                    "{what} out[{i},{r}] = {g}, want {want} ± {tol}, cpu {c} ± {tol_cpu}"
                ));
            }
        }
    }
    worst
}

/// Random weight blocks of `t` with their reference dequantization and the device upload.
fn random_matrix(
    be: &dyn Backend,
    t: GgmlType,
    rows: usize,
    cols: usize,
    rng: &mut Rng,
) -> (Vec<u8>, Vec<f32>, pocket_kernels::Weight) {
    let format = QuantFormat::Ggml(t);
    let bytes = random_weight(t, rows, cols, rng);
    let mut deq = vec![0f32; rows * cols];
    pocket_quant::dequantize_matrix(&quant_matrix(t, rows, cols, &bytes), &mut deq).unwrap();
    let w = be
        .upload_weight(
            format,
            rows,
            cols,
            HostBytes::from_vec(bytes.clone()),
            None,
            None,
        )
        .unwrap();
    (bytes, deq, w)
}

/// pocket-quant's view of raw GGML blocks.
fn quant_matrix(t: GgmlType, rows: usize, cols: usize, data: &[u8]) -> QuantMatrix<'_> {
    QuantMatrix {
        format: QuantFormat::Ggml(t),
        rows,
        cols,
        data,
        scales: None,
        tensor_scale: None,
    }
}

/// Runs the one-row GEMV of `w` on `x` twice into NaN-poisoned outputs; returns both results.
fn gemv_twice(
    be: &dyn Backend,
    w: &pocket_kernels::Weight,
    x: &[f32],
    rows: usize,
) -> [Vec<f32>; 2] {
    let cols = x.len();
    let xt = be.upload_f32(x, &[1, cols]).unwrap();
    let run = || {
        let mut out = be.alloc(DType::F32, &[1, rows]).unwrap();
        be.write_f32(&mut out, &vec![f32::NAN; rows], &[1, rows])
            .unwrap();
        be.matmul(&xt, w, &mut out).unwrap();
        be.read_f32(&out).unwrap()
    };
    [run(), run()]
}

/// Held by the tests that switch the process-wide GEMV kernel choice (`set_split_gemv`,
/// `set_q8_gemv_variant`) and by those that compare GEMV results bit for bit across calls, which
/// a switch in between (another test thread) would break: variants sum in different orders.
static KERNEL_CHOICE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// [`KERNEL_CHOICE`], also after another test panicked holding it.
fn kernel_choice() -> std::sync::MutexGuard<'static, ()> {
    KERNEL_CHOICE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether two results are identical bit for bit.
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.iter()
        .map(|v| v.to_bits())
        .eq(b.iter().map(|v| v.to_bits()))
}

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

/// The one-row GEMVs that `set_split_gemv` switches, new and previous, against the float64 dot
/// and the CPU within their bounds, each repeating its result bit for bit:
/// * 16-bit floats: `gemv_h_*_r1` (below 1024 rows) and `_r4` vs the warp-per-row `gemv_f`.
///   Shapes: the Gated DeltaNet's 48 x 5120, a second column pass of each split kernel (8200
///   columns = 1025 chunks over 256 x 4; 4104 = 513 over 128 x 4), a partial last block of four
///   rows (1101), and 1036 columns (not a multiple of 8: `gemv_f` serves it).
/// * Q4_0 and Q8_0: the `auto` per-shape choice (at these sizes `gemv_q8r1_*` and, for 2048
///   columns of Q4_0, `gemv_q8w_*`) vs `gemv_q8r_*`, with partial last blocks (every variant
///   is also covered by `q8_gemv_variants_match_references_and_repeat_bit_for_bit`).
#[test]
fn split_gemv_variants_match_references_and_repeat_bit_for_bit() {
    let _choice = kernel_choice();
    let be = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipped: no CUDA device ({e})");
            return;
        }
    };
    let mut failures = Vec::new();
    for split in [true, false] {
        be.set_split_gemv(split);
        // The backend takes 16-bit float rows in multiples of 16 columns. r1 (< 1024 rows, 256
        // threads x 4 x 8 = 8192 columns a pass): 8208 = a second pass of 2 chunks, 1040 = one
        // partial pass; r4 (>= 1024 rows, 4096 columns a pass): 4112 = a second pass of 2 chunks
        // with a partial last group of rows (1101 = 4 x 275 + 1), 1024 x 5120 = exact groups.
        let half: &[(usize, usize)] = &[
            (48, 5120),
            (96, 8208),
            (5, 1040),
            (1101, 4112),
            (1024, 5120),
        ];
        let dp4a: &[(usize, usize)] = &[(131, 4096), (67, 2048), (13, 4352)];
        for (ti, &t) in [
            GgmlType::BF16,
            GgmlType::F16,
            GgmlType::Q4_0,
            GgmlType::Q8_0,
        ]
        .iter()
        .enumerate()
        {
            let format = QuantFormat::Ggml(t);
            let mut rng = Rng::new(300 + ti as u64);
            let shapes = if ti < 2 { half } else { dp4a };
            for &(rows, cols) in shapes {
                let (bytes, deq, w) = random_matrix(&be, t, rows, cols, &mut rng);
                let m = quant_matrix(t, rows, cols, &bytes);
                let x: Vec<f32> = (0..cols).map(|_| rng.f32()).collect();
                let runs = gemv_twice(&be, &w, &x, rows);
                let what = format!("{} [{rows}x{cols}] split={split}", format.name());
                if !same_bits(&runs[0], &runs[1]) {
                    failures.push(format!("{what}: repeated GEMVs differ"));
                }
                let mut cpu = vec![0f32; rows];
                pocket_quant::matmul(&m, &x, 1, &mut cpu).unwrap();
                let worst = check_against_references(
                    t,
                    &what,
                    &deq,
                    &x,
                    (1, rows, cols),
                    &runs[0],
                    &cpu,
                    &mut failures,
                );
                eprintln!(
                    "{:7} [{rows:4}x{cols:4}] split={split}: worst error / bound = {worst:.3}",
                    format.name()
                );
            }
        }
    }
    // Back to what the environment asks for (other tests of this binary may still run).
    be.set_split_gemv(std::env::var("POCKET_GEMV_SPLIT").map_or(true, |v| v != "0"));
    assert!(
        failures.is_empty(),
        "split GEMV mismatches:\n{}",
        failures.join("\n")
    );
}

/// Every one-row dp4a GEMV kernel (`set_q8_gemv_variant`: `gemv_q8r_*`, `gemv_q8r64_*`, the
/// persistent `gemv_q8p_*`, the warp-per-row `gemv_q8w_*`, one row per block `gemv_q8r1_*`, and
/// the auto and legacy choices among them) against the float64 dot and the CPU within their
/// bounds, each repeating its result bit for bit. Shapes: 896 columns (one pass of every kernel,
/// 28 or 56 items a row) and 4352 (17 super-blocks: `gemv_q8p_*` takes two passes of 128 items,
/// Q8_0 three, the last partial), rows with a partial last group of 4. The persistent grid is
/// capped at 7 blocks so each block walks several groups (the default grid is one resident
/// wave, more blocks than these matrices have groups), then at 64.
#[test]
fn q8_gemv_variants_match_references_and_repeat_bit_for_bit() {
    let _choice = kernel_choice();
    use pocket_kernels::cuda::kernels::Q8Variant;
    let be = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipped: no CUDA device ({e})");
            return;
        }
    };
    let mut failures = Vec::new();
    let formats = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q5_0,
        GgmlType::Q3_K,
    ];
    for (ti, &t) in formats.iter().enumerate() {
        let mut rng = Rng::new(500 + ti as u64);
        let k_format = QuantFormat::Ggml(t).block_size() == 256;
        let shapes: &[(usize, usize)] = if k_format {
            &[(203, 4352), (5, 4352)]
        } else {
            &[(67, 896), (203, 4352), (5, 4352)]
        };
        for &(rows, cols) in shapes {
            let (bytes, deq, w) = random_matrix(&be, t, rows, cols, &mut rng);
            let x: Vec<f32> = (0..cols).map(|_| rng.f32()).collect();
            let mut cpu = vec![0f32; rows];
            pocket_quant::matmul(&quant_matrix(t, rows, cols, &bytes), &x, 1, &mut cpu).unwrap();
            for v in Q8Variant::ALL {
                for cap in [7usize, 64] {
                    if cap == 64 && v != Q8Variant::Persistent {
                        continue;
                    }
                    be.set_q8_gemv_variant(v);
                    be.set_q8p_max_blocks(cap);
                    let runs = gemv_twice(&be, &w, &x, rows);
                    let what = format!(
                        "{} [{rows}x{cols}] variant {} (grid cap {cap})",
                        QuantFormat::Ggml(t).name(),
                        v.name()
                    );
                    if !same_bits(&runs[0], &runs[1]) {
                        failures.push(format!("{what}: repeated GEMVs differ"));
                    }
                    let worst = check_against_references(
                        t,
                        &what,
                        &deq,
                        &x,
                        (1, rows, cols),
                        &runs[0],
                        &cpu,
                        &mut failures,
                    );
                    eprintln!("{what}: worst error / bound = {worst:.3}");
                }
            }
        }
    }
    // Back to what the environment asks for (other tests of this binary may still run).
    be.set_q8p_max_blocks(0);
    be.set_q8_gemv_variant(
        std::env::var("POCKET_GEMV_Q8")
            .ok()
            .and_then(|s| Q8Variant::parse(&s))
            .unwrap_or(Q8Variant::Auto),
    );
    assert!(
        failures.is_empty(),
        "q8 GEMV variant mismatches:\n{}",
        failures.join("\n")
    );
}

/// Consecutive GEMVs over one input reuse its 8-bit quantization; any write to that input must
/// force a new one. Each result is compared bit for bit with the same GEMV on a fresh upload of
/// the same values (which always quantizes).
#[test]
fn reused_activation_quantization_tracks_writes() {
    let _choice = kernel_choice();
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
    let _choice = kernel_choice();
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
