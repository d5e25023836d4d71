//! The decode GEMVs with a folded tail (kernels/gemv_tail.cuh: `matmul_silu_halves`,
//! `matmul_add_rms_norm`) against the unfused launches they replace (`set_gemv_tail(false)`,
//! as `POCKET_GEMV_TAIL=0`): every output bit for bit (the projection, the residual, the normed
//! row or SwiGLU output, and the int8 activation the next GEMV reads), eagerly and over many
//! replays of a captured graph (the completion counters must reset themselves; a GEMV captured
//! after the fold reads the tail's int8 activation), for Q4_0, Q4_K,
//! Q8_0 (and Q6_K, Q5_0) at the Llama-3-8B and SmolLM2-135M shapes, under the auto and the
//! one-row-per-block GEMV variants. The CPU's default ops equal their composition, and the CUDA
//! fused ops stay within a float-reordering bound of the CPU's. GPU parts skip without a GPU.

use pocket_kernels::{Backend, DType, HostBytes, Tensor, Weight};
use pocket_quant::{GgmlType, QuantFormat};

#[path = "cuda_common/step.rs"]
mod step;

/// Values in [-scale, scale): a fixed xorshift stream.
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let u = s.wrapping_mul(0x2545_F491_4F6C_DD1D);
            ((u >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn weight(be: &dyn Backend, t: GgmlType, rows: usize, cols: usize, seed: u64) -> Weight {
    let bytes = step::random_blocks(t, rows, cols, seed);
    be.upload_weight(
        QuantFormat::Ggml(t),
        rows,
        cols,
        HostBytes::from_vec(bytes),
        None,
        None,
    )
    .unwrap()
}

/// Inputs of one fold: x, the weight, the residual and norm weight (norm folds).
struct Case {
    fmt: GgmlType,
    rows: usize,
    cols: usize,
    silu: bool,
    label: String,
}

/// (hidden, attention width, intermediate) of the two model shapes.
const SHAPES: [(&str, usize, usize, usize); 2] =
    [("8B", 4096, 4096, 14336), ("SmolLM2", 576, 576, 1536)];

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (name, h, qw, ff) in SHAPES {
        for fmt in [
            GgmlType::Q4_0,
            GgmlType::Q4_K,
            GgmlType::Q8_0,
            GgmlType::Q6_K,
            GgmlType::Q5_0,
        ] {
            let bs = QuantFormat::Ggml(fmt).block_size();
            let mut add = |rows: usize, cols: usize, silu: bool, what: &str| {
                if cols.is_multiple_of(bs) {
                    v.push(Case {
                        fmt,
                        rows,
                        cols,
                        silu,
                        label: format!("{name} {fmt:?} {what} {rows}x{cols}"),
                    });
                }
            };
            add(h, qw, false, "o+norm");
            add(h, ff, false, "down+norm");
            add(2 * ff, h, true, "gate_up+silu");
        }
    }
    v
}

/// Device buffers of one fold.
struct Bufs {
    x: Tensor,
    w: Weight,
    norm_w: Tensor,
    residual: Tensor,
    /// The GEMV output: delta (norm) or gate|up (silu).
    proj: Tensor,
    /// normed (norm) or silu(gate) * up (silu).
    out: Tensor,
    /// A GEMV over `out` run after the fold: it reads the int8 activation the tail left.
    next: Weight,
    /// Its output.
    y: Tensor,
}

/// Rows of the GEMV run after each fold.
const NEXT_ROWS: usize = 64;

impl Bufs {
    fn new(be: &dyn Backend, c: &Case, seed: u64) -> Bufs {
        let out_len = if c.silu { c.rows / 2 } else { c.rows };
        let a = |n: usize| be.alloc(DType::F32, &[1, n]).unwrap();
        Bufs {
            x: be
                .upload_f32(&values(c.cols, seed, 1.0), &[1, c.cols])
                .unwrap(),
            w: weight(be, c.fmt, c.rows, c.cols, seed + 1),
            norm_w: be
                .upload_f32(&values(out_len, seed + 2, 1.0), &[out_len])
                .unwrap(),
            residual: be
                .upload_f32(&values(out_len, seed + 3, 4.0), &[1, out_len])
                .unwrap(),
            proj: a(c.rows),
            out: a(out_len),
            // Q4_K reads the Q8K kind, Q8_0 the Q8 kind: whichever the row length allows.
            next: if out_len.is_multiple_of(256) {
                weight(be, GgmlType::Q4_K, NEXT_ROWS, out_len, seed + 4)
            } else {
                weight(be, GgmlType::Q8_0, NEXT_ROWS, out_len, seed + 4)
            },
            y: a(NEXT_ROWS),
        }
    }

    /// Puts the residual back to its initial values.
    fn reset_residual(&mut self, be: &dyn Backend, seed: u64) {
        let n = self.residual.numel();
        be.write_f32(&mut self.residual, &values(n, seed + 3, 4.0), &[1, n])
            .unwrap();
    }

    /// Runs the fold once.
    fn run(&mut self, be: &dyn Backend, c: &Case) {
        if c.silu {
            be.matmul_silu_halves(&self.x, &self.w, &mut self.proj, &mut self.out)
                .unwrap();
        } else {
            be.matmul_add_rms_norm(
                &self.x,
                &self.w,
                &mut self.proj,
                &mut self.residual,
                &self.norm_w,
                1e-5,
                &mut self.out,
            )
            .unwrap();
        }
        be.matmul(&self.out, &self.next, &mut self.y).unwrap();
    }

    /// Every float output (projection, residual, out, the next GEMV's) as bits.
    fn floats(&self, be: &dyn Backend) -> Vec<Vec<u32>> {
        [&self.proj, &self.residual, &self.out, &self.y]
            .iter()
            .map(|t| {
                be.read_f32(t)
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect()
            })
            .collect()
    }
}

#[test]
fn cpu_default_ops_equal_their_composition() {
    let be = pocket_kernels::cpu::CpuBackend::new();
    for c in cases().into_iter().filter(|c| c.rows * c.cols <= 4 << 20) {
        let mut fused = Bufs::new(&be, &c, 11);
        let mut parts = Bufs::new(&be, &c, 11);
        fused.run(&be, &c);
        be.matmul(&parts.x, &parts.w, &mut parts.proj).unwrap();
        if c.silu {
            be.silu_mul_halves(&parts.proj, &mut parts.out).unwrap();
        } else {
            be.add_rms_norm(
                &mut parts.residual,
                &parts.proj,
                &parts.norm_w,
                1e-5,
                &mut parts.out,
            )
            .unwrap();
        }
        be.matmul(&parts.out, &parts.next, &mut parts.y).unwrap();
        assert!(
            fused.floats(&be) == parts.floats(&be),
            "{}: CPU default differs from its composition",
            c.label
        );
    }
}

#[cfg(feature = "cuda")]
mod gpu {
    use super::*;
    use pocket_kernels::cuda::kernels::Q8Variant;
    use pocket_kernels::cuda::CudaBackend;

    /// The tests flip process-wide switches (`set_gemv_tail`, the GEMV variant): one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn gpu() -> Option<CudaBackend> {
        match CudaBackend::new(0) {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("skipped: no CUDA device ({e})");
                None
            }
        }
    }

    /// The int8 activation the next GEMV would read for `out`, both kinds where they exist.
    fn q8_of(be: &CudaBackend, out: &Tensor) -> Vec<Vec<u32>> {
        let mut v = Vec::new();
        let kinds: &[bool] = if out.row_len().is_multiple_of(256) {
            &[false, true]
        } else {
            &[false]
        };
        for &k in kinds {
            let (q, d, s) = be.quantized_activation(out, k).unwrap();
            v.push(q.iter().map(|&b| b as u8 as u32).collect());
            v.push(d.iter().map(|f| f.to_bits()).collect());
            v.push(s.iter().map(|f| f.to_bits()).collect());
        }
        v
    }

    /// Runs the fold `reps` times (tail on or off), eagerly or as replays of one captured
    /// graph; returns the float outputs and the int8 activation left for the next GEMV.
    fn outputs(
        be: &CudaBackend,
        c: &Case,
        tail: bool,
        graph: bool,
        reps: usize,
    ) -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
        be.set_gemv_tail(tail);
        let mut b = Bufs::new(be, c, 7);
        if graph {
            // One eager run first (the workspaces exist before capture, as in the models), then
            // the same initial residual for the replays as for the eager runs.
            b.run(be, c);
            b.reset_residual(be, 7);
            be.synchronize().unwrap();
            be.begin_capture().unwrap();
            b.run(be, c);
            let g = be.end_capture().unwrap();
            for _ in 0..reps {
                g.replay().unwrap();
            }
            be.synchronize().unwrap();
            // The graph owns the q8 workspace it wrote (the captured next GEMV read it, `y`):
            // quantize `out` afresh for the int8 comparison.
            let floats = b.floats(be);
            let q = q8_of(be, &b.out);
            drop(g);
            (floats, q)
        } else {
            for _ in 0..reps {
                b.run(be, c);
            }
            let floats = b.floats(be);
            (floats, q8_of(be, &b.out))
        }
    }

    /// Fused == unfused, bit for bit, eager (1 and 3 runs) and over 25 graph replays, under the
    /// auto GEMV choice and one row per block (`gemv_q8r1_*`, the Q4_K small-matrix kernel).
    #[test]
    fn folded_tails_equal_the_unfused_launches() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let Some(be) = gpu() else {
            return;
        };
        let variant = be.q8_gemv_variant();
        let tail = be.gemv_tail();
        let mut checked = 0;
        for v in [Q8Variant::Auto, Q8Variant::Row1] {
            be.set_q8_gemv_variant(v);
            for c in cases() {
                // One row per block over a 28672-row matrix: also covered at the SmolLM2 shape.
                if v == Q8Variant::Row1 && c.rows * c.cols > 64 << 20 {
                    continue;
                }
                for (graph, reps) in [(false, 1), (false, 3), (true, 25)] {
                    let (f_on, q_on) = outputs(&be, &c, true, graph, reps);
                    let (f_off, q_off) = outputs(&be, &c, false, false, reps);
                    let what = format!("{} ({}, graph {graph}, {reps} runs)", c.label, v.name());
                    let names = ["projection", "residual", "output", "next GEMV"];
                    for (i, name) in names.iter().enumerate() {
                        if c.silu && i == 1 {
                            continue; // the SwiGLU fold has no residual
                        }
                        let bad = f_on[i].iter().zip(&f_off[i]).position(|(a, b)| a != b);
                        assert!(
                            bad.is_none(),
                            "{what}: {name} differs at {bad:?}: {} vs {}",
                            f32::from_bits(f_on[i][bad.unwrap()]),
                            f32::from_bits(f_off[i][bad.unwrap()])
                        );
                    }
                    assert!(q_on == q_off, "{what}: int8 activation differs");
                    checked += 1;
                }
            }
        }
        be.set_q8_gemv_variant(variant);
        be.set_gemv_tail(tail);
        println!("{checked} fold runs bit-identical to the unfused launches");
    }

    /// The fused CUDA ops against the CPU's composition at the SmolLM2 shape: the GEMV sums
    /// 576-1536 products in another order than the CPU (same int8 activations, f32 partial
    /// sums in a different tree), so values agree to a few f32 ulps of the row's scale, not
    /// bit for bit: bound 1e-4 of the largest magnitude (a reordered sum of this length is off by ~1e-6).
    #[test]
    fn fused_ops_match_the_cpu() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let Some(be) = gpu() else {
            return;
        };
        let cpu = pocket_kernels::cpu::CpuBackend::new();
        let tail = be.gemv_tail();
        be.set_gemv_tail(true);
        for c in cases().into_iter().filter(|c| c.rows * c.cols <= 4 << 20) {
            let mut g = Bufs::new(&be, &c, 3);
            let mut h = Bufs::new(&cpu, &c, 3);
            g.run(&be, &c);
            h.run(&cpu, &c);
            for (t_gpu, t_cpu, name) in
                [(&g.proj, &h.proj, "projection"), (&g.out, &h.out, "output")]
            {
                let a = be.read_f32(t_gpu).unwrap();
                let b = cpu.read_f32(t_cpu).unwrap();
                let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
                let worst = a
                    .iter()
                    .zip(&b)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0f32, f32::max);
                assert!(
                    worst <= 1e-4 * scale,
                    "{} {name}: worst {worst} vs scale {scale}",
                    c.label
                );
            }
        }
        be.set_gemv_tail(tail);
    }
}
