//! Times the GEMVs of one Qwen2.5-0.5B-shaped decode step (24 layers of distinct random weights
//! in the Q4_K_M file's formats, plus the tied 151936 x 896 Q8_0 output), per matrix shape.
//!
//! `cargo run --release -p pocket-quant --example decode_step -- [threads] [steps]`

use pocket_quant::{matmul, GgmlType as G, QuantFormat, QuantMatrix};

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}
extern "C" {
    fn clock_gettime(clk: i32, ts: *mut Timespec) -> i32;
}

/// CPU time of the calling thread (time descheduled by other load does not count).
#[derive(Clone, Copy)]
struct Instant(f64);
impl Instant {
    fn now() -> Self {
        let mut t = Timespec { sec: 0, nsec: 0 };
        // SAFETY: a valid out pointer; clock 3 = CLOCK_THREAD_CPUTIME_ID.
        // CLOCK_MONOTONIC (1) with WALL set: multi-threaded runs.
        let clk = if std::env::var_os("WALL").is_some() {
            1
        } else {
            3
        };
        unsafe { clock_gettime(clk, &mut t) };
        Instant(t.sec as f64 + t.nsec as f64 * 1e-9)
    }
    fn elapsed(&self) -> Elapsed {
        Elapsed(Instant::now().0 - self.0)
    }
}
struct Elapsed(f64);
impl Elapsed {
    fn as_secs_f64(&self) -> f64 {
        self.0
    }
}

/// Random blocks of format `t` with finite, normal f16 scales at its scale fields.
fn weights(t: G, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let f = QuantFormat::Ggml(t);
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let scales: &[usize] = match t {
        G::Q4_1 | G::Q5_1 | G::Q4_K => &[0, 2],
        G::Q6_K => &[208],
        _ => &[0],
    };
    let mut d: Vec<u8> = (0..rows * f.row_bytes(cols).unwrap())
        .map(|_| next() as u8)
        .collect();
    for b in d.chunks_exact_mut(f.block_bytes()) {
        for &o in scales {
            let v = 0.01 * (1.0 + (next() % 100) as f32 / 100.0);
            b[o..o + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
        }
    }
    d
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let threads = args.first().copied().unwrap_or(2);
    let steps = args.get(1).copied().unwrap_or(20);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .unwrap();
    let (h, ff, kv, layers, vocab) = (896, 4864, 128, 24, 151936);
    // (name, format, rows, cols) per layer
    let shapes = |l: usize| {
        [
            ("q", G::Q5_0, h, h),
            ("k", G::Q5_0, kv, h),
            (
                "v",
                if l.is_multiple_of(2) {
                    G::Q8_0
                } else {
                    G::Q5_0
                },
                kv,
                h,
            ),
            ("o", G::Q5_0, h, h),
            ("gate", G::Q5_0, ff, h),
            ("up", G::Q5_0, ff, h),
            (
                "down",
                if l.is_multiple_of(2) {
                    G::Q6_K
                } else {
                    G::Q4_K
                },
                h,
                ff,
            ),
        ]
    };
    let mut mats = Vec::new();
    for l in 0..layers {
        for (i, (name, t, r, c)) in shapes(l).into_iter().enumerate() {
            mats.push((
                format!("{name}:{t:?}"),
                t,
                r,
                c,
                weights(t, r, c, (l * 16 + i) as u64 + 7),
            ));
        }
    }
    mats.push((
        "output:Q8_0".into(),
        G::Q8_0,
        vocab,
        h,
        weights(G::Q8_0, vocab, h, 99),
    ));
    let x: Vec<f32> = (0..ff)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let mut y = vec![0.0f32; vocab];
    if std::env::var("HOT").is_ok() {
        // each of the first layer's matrices (and layer 1's other formats) repeated, cache-hot
        for (name, t, r, c, d) in mats.iter().take(14) {
            let m = QuantMatrix {
                format: QuantFormat::Ggml(*t),
                rows: *r,
                cols: *c,
                data: d,
                scales: None,
                tensor_scale: None,
            };
            let reps = 300;
            let mut best = f64::MAX;
            for _ in 0..reps {
                let s = Instant::now();
                matmul(&m, &x[..*c], 1, &mut y[..*r]).unwrap();
                best = best.min(s.elapsed().as_secs_f64());
            }
            println!(
                "  hot {name:12} {:7.1} us best  {:6.2} GB/s",
                best * 1e6,
                d.len() as f64 / best / 1e9
            );
        }
        return;
    }
    let mut per: std::collections::BTreeMap<String, (f64, usize, usize)> = Default::default();
    let mut total = 0.0;
    for step in 0..steps + 2 {
        let t0 = Instant::now();
        let only = std::env::var("ONLY").unwrap_or_default();
        for (name, t, r, c, d) in mats.iter().filter(|m| m.0.contains(&only)) {
            let m = QuantMatrix {
                format: QuantFormat::Ggml(*t),
                rows: *r,
                cols: *c,
                data: d,
                scales: None,
                tensor_scale: None,
            };
            let s = Instant::now();
            matmul(&m, &x[..*c], 1, &mut y[..*r]).unwrap();
            if step >= 2 {
                let e = per.entry(name.clone()).or_default();
                e.0 += s.elapsed().as_secs_f64();
                e.1 += d.len();
                e.2 += 1;
            }
        }
        if step >= 2 {
            total += t0.elapsed().as_secs_f64();
        }
    }
    let st = steps as f64;
    println!(
        "{threads} threads: step {:.2} ms ({:.1} tok/s of GEMVs)",
        total / st * 1e3,
        st / total
    );
    for (name, (t, bytes, calls)) in per {
        println!(
            "  {name:12} {:7.3} ms/step  {:6.2} GB/s  {:6.1} us/call",
            t / st * 1e3,
            bytes as f64 / t / 1e9,
            t / calls as f64 * 1e6
        );
    }
}
