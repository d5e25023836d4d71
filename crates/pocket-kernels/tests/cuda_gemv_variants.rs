//! The one-row GEMV kernel variants (`set_split_gemv`, `set_q8_gemv_variant`) against the float64
//! dot and pocket-quant's CPU matmul, each repeating its result bit for bit. Its own binary: the
//! switches are process-wide, so bit-for-bit tests of other binaries cannot see one mid-way.
//! Skipped (with a message) where no CUDA device opens.
#![cfg(feature = "cuda")]

use pocket_kernels::cuda::CudaBackend;
use pocket_quant::{GgmlType, QuantFormat};

#[path = "cuda_common/gemv_ref.rs"]
mod gemv_ref;

use gemv_ref::{check_against_references, gemv_twice, quant_matrix, random_matrix, same_bits, Rng};

/// Held by the tests that switch the process-wide GEMV kernel choice (`set_split_gemv`,
/// `set_q8_gemv_variant`) and by those that compare GEMV results bit for bit across calls, which
/// a switch in between (another test thread) would break: variants sum in different orders.
static KERNEL_CHOICE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// [`KERNEL_CHOICE`], also after another test panicked holding it.
fn kernel_choice() -> std::sync::MutexGuard<'static, ()> {
    KERNEL_CHOICE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The one-row GEMVs that `set_split_gemv` switches, new and previous, against the float64 dot
/// and the CPU within their bounds, each repeating its result bit for bit:
/// * 16-bit floats: `gemv_h_*_r1` (below 1024 rows) and `_r4` vs the warp-per-row `gemv_f`.
///   Shapes: the Gated DeltaNet's 48 x 5120, a second column pass of each split kernel (8200
///   columns = 1025 chunks over 256 x 4; 4104 = 513 over 128 x 4), a partial last block of four
///   rows (1101), and 1036 columns (not a multiple of 8: `gemv_f` serves it).
/// * Q4_0 and Q8_0: the `auto` per-shape choice (`gemv_q8r_*` for these formats) vs the
///   legacy one (`gemv_q8r64_*` where the columns fit one pass), with partial last blocks
///   (every variant is also covered by `q8_gemv_variants_match_references_and_repeat_bit_for_bit`).
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
/// warp-per-row `gemv_q8w_*`, one row per block `gemv_q8r1_*`, and the auto and legacy choices
/// among them) against the float64 dot and the CPU within their bounds, each repeating its
/// result bit for bit. Shapes: 896 columns (one pass of every kernel, 28 or 56 items a row) and
/// 4352 (17 super-blocks: 136 work items a row, Q8_0 272, so `gemv_q8r_*` takes a partial second
/// pass for Q4_K, Q6_K and Q8_0), rows with a partial last group of 4; for Q4_K also rows of one
/// super-block and a matrix past the 2048 rows of its one-row-per-block rule.
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
        let shapes: &[(usize, usize)] = if t == GgmlType::Q4_K {
            // Q4_K (reordered at upload): also one super-block a row, and 2053 rows (>= 2048:
            // `auto` takes 4 rows per block, with a partial last group).
            &[(203, 4352), (5, 4352), (67, 256), (2053, 1280)]
        } else if k_format {
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
                be.set_q8_gemv_variant(v);
                let runs = gemv_twice(&be, &w, &x, rows);
                let what = format!(
                    "{} [{rows}x{cols}] variant {}",
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
    // Back to what the environment asks for (other tests of this binary may still run).
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
