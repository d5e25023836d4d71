//! The device sampler (kernels/sample.cu) against an independent host computation of the same
//! distribution: greedy picks and log-probabilities, draw frequencies (chi-square) for
//! temperature / top-k / top-p / min-p, and reproducibility from (seed, counter). Skipped without
//! a GPU.

use pocket_kernels::{DType, Device, DeviceKind, Tensor};

fn gpu() -> Option<Device> {
    match Device::open(DeviceKind::Cuda(0)) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// Deterministic pseudo-random logits in [-4, 4) (a 64-bit LCG, independent of the device RNG).
fn logit_row(vocab: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..vocab)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0
        })
        .collect()
}

/// log Σ exp(row), in f64.
fn log_z(row: &[f32]) -> f64 {
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    m + row.iter().map(|&l| (l as f64 - m).exp()).sum::<f64>().ln()
}

/// The host sampler's distribution (sampling/sampler.rs `draw`), written out independently:
/// softmax of logits / t over the top-k, then the smallest top-p prefix, then min-p.
fn reference_probs(row: &[f32], t: f32, top_k: usize, top_p: f32, min_p: f32) -> Vec<f64> {
    let mut c: Vec<(usize, f64)> = row
        .iter()
        .enumerate()
        .map(|(i, &l)| (i, (l / t) as f64))
        .collect();
    c.sort_by(|a, b| b.1.total_cmp(&a.1));
    if top_k > 0 && top_k < c.len() {
        c.truncate(top_k);
    }
    let max = c[0].1;
    let z: f64 = c.iter().map(|x| (x.1 - max).exp()).sum();
    let mut items: Vec<(usize, f64)> = c.iter().map(|x| (x.0, (x.1 - max).exp() / z)).collect();
    if top_p < 1.0 {
        let mut cum = 0.0;
        let cut = items
            .iter()
            .position(|x| {
                cum += x.1;
                cum >= top_p as f64
            })
            .unwrap_or(items.len() - 1);
        items.truncate(cut + 1);
    }
    if min_p > 0.0 {
        let p_max = items[0].1;
        items.retain(|x| x.1 >= min_p as f64 * p_max);
    }
    let total: f64 = items.iter().map(|x| x.1).sum();
    let mut p = vec![0.0; row.len()];
    for (i, q) in items {
        p[i] = q / total;
    }
    p
}

/// The chi-square quantile at upper tail 1e-4 (Wilson–Hilferty, z = 3.719).
fn chi2_bound(df: usize) -> f64 {
    let d = df as f64;
    let z = 3.719;
    d * (1.0 - 2.0 / (9.0 * d) + z * (2.0 / (9.0 * d)).sqrt()).powi(3)
}

/// Draws `n` tokens from `row` with the given params (counters 0..n of one seed).
fn draw(
    dev: &Device,
    row: &[f32],
    params: [f32; 4],
    seed: u64,
    first_counter: u64,
    n: usize,
) -> (Vec<u32>, Vec<f32>) {
    let vocab = row.len();
    let logits: Vec<f32> = row.iter().copied().cycle().take(n * vocab).collect();
    let logits = dev.upload_f32(&logits, &[n, vocab]).unwrap();
    let p: Vec<f32> = params.iter().copied().cycle().take(4 * n).collect();
    let p = dev.upload_f32(&p, &[n, 4]).unwrap();
    let s: Vec<u32> = (0..n as u64)
        .flat_map(|i| {
            let c = first_counter + i;
            [seed as u32, (seed >> 32) as u32, c as u32, (c >> 32) as u32]
        })
        .collect();
    let s = dev.upload_u32(&s, &[n, 4]).unwrap();
    let mut ids: Tensor = dev.alloc(DType::U32, &[n]).unwrap();
    let mut lps: Tensor = dev.alloc(DType::F32, &[n]).unwrap();
    dev.sample_rows(&logits, &p, &s, &mut ids, &mut lps)
        .unwrap();
    (dev.read_u32(&ids).unwrap(), dev.read_f32(&lps).unwrap())
}

#[test]
fn greedy_picks_and_logprobs_match_the_host() {
    let Some(dev) = gpu() else { return };
    let (rows, vocab) = (5, 50_000);
    let mut host = Vec::new();
    for r in 0..rows {
        host.extend(logit_row(vocab, r as u64 + 1));
    }
    // A tie (first index wins) and a NaN (never wins) in row 0.
    let m = host[..vocab]
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    host[17] = m + 1.0;
    host[40_000] = m + 1.0;
    host[3] = f32::NAN;
    let logits = dev.upload_f32(&host, &[rows, vocab]).unwrap();
    let mut ids = dev.alloc(DType::U32, &[rows]).unwrap();
    let mut lps = dev.alloc(DType::F32, &[rows]).unwrap();
    dev.argmax_logprob(&logits, &mut ids, &mut lps).unwrap();
    let (ids, lps) = (dev.read_u32(&ids).unwrap(), dev.read_f32(&lps).unwrap());
    for r in 0..rows {
        let row: Vec<f32> = host[r * vocab..(r + 1) * vocab].to_vec();
        let mut best = 0;
        for (i, &l) in row.iter().enumerate() {
            if l > row[best] || row[best].is_nan() && !l.is_nan() {
                best = i;
            }
        }
        assert_eq!(ids[r] as usize, best, "row {r}");
        let finite: Vec<f32> = row.iter().copied().filter(|l| !l.is_nan()).collect();
        let want = row[best] as f64 - log_z(&finite);
        assert!(
            (lps[r] as f64 - want).abs() < 1e-4,
            "row {r}: logprob {} vs {want}",
            lps[r]
        );
    }
    assert_eq!(ids[0], 17);
}

/// Draws `n` tokens from `row` and checks them against the host sampler's distribution: every
/// draw kept by it, its log-probability, and the frequencies (chi-square at upper tail 1e-4).
fn check_draws(dev: &Device, row: &[f32], params: [f32; 4], n: usize) {
    let vocab = row.len();
    let p = reference_probs(row, params[0], params[1] as usize, params[2], params[3]);
    let (ids, lps) = draw(dev, row, params, 1234, 0, n);
    let lz = log_z(row);
    let mut counts = vec![0usize; vocab];
    for (&id, &lp) in ids.iter().zip(&lps) {
        assert!(
            p[id as usize] > 0.0,
            "{params:?}: drew {id}, which the host sampler never keeps"
        );
        let want = row[id as usize] as f64 - lz;
        assert!(
            (lp as f64 - want).abs() < 1e-4,
            "{params:?}: logprob of {id}"
        );
        counts[id as usize] += 1;
    }
    // Cells expecting fewer than 5 draws are pooled into one, as the test requires.
    let (mut cells, mut pool) = (Vec::new(), (0.0f64, 0usize));
    for i in (0..vocab).filter(|&i| p[i] > 0.0) {
        let e = p[i] * n as f64;
        if e < 5.0 {
            pool.0 += e;
            pool.1 += counts[i];
        } else {
            cells.push((e, counts[i]));
        }
    }
    if pool.0 > 0.0 {
        cells.push(pool);
    }
    let chi2: f64 = cells.iter().map(|&(e, o)| (o as f64 - e).powi(2) / e).sum();
    let bound = chi2_bound(cells.len().max(2) - 1);
    assert!(
        chi2 < bound,
        "{params:?}: chi-square {chi2:.1} over {} cells exceeds {bound:.1}",
        cells.len()
    );
}

/// At 64 tokens every cut-off runs over a candidate set in shared memory (sample_cut.cuh).
#[test]
fn draws_follow_the_host_distribution() {
    let Some(dev) = gpu() else { return };
    let row = logit_row(64, 99);
    for params in [
        [1.0f32, 0.0, 1.0, 0.0], // plain softmax
        [0.7, 20.0, 1.0, 0.0],   // temperature + top-k
        [1.3, 0.0, 0.8, 0.0],    // top-p
        [1.0, 30.0, 0.9, 0.05],  // all filters
    ] {
        check_draws(&dev, &row, params, 40_000);
    }
}

/// A row shaped like a language model's (a low bulk, a few dozen high tokens scattered over the
/// row, so every warp's segment compacts some), whose cut-offs run over a candidate set (a weight
/// set, or with top-k past the high tokens the set by key after the radix selection); and a
/// nearly flat row whose 4,096 candidates overflow every set, so the cut-offs bisect the whole row.
#[test]
fn draws_over_a_candidate_set_and_over_the_whole_row() {
    let Some(dev) = gpu() else { return };
    let mut peaked: Vec<f32> = logit_row(20_000, 5).iter().map(|v| v * 0.4 - 6.0).collect();
    for (j, v) in logit_row(40, 6).into_iter().enumerate() {
        peaked[(j * 7919 + 13) % 20_000] = 9.0 + 0.75 * v;
    }
    check_draws(&dev, &peaked, [0.8, 40.0, 0.9, 0.0], 4_000);
    check_draws(&dev, &peaked, [1.0, 0.0, 0.95, 0.02], 4_000);
    // Top-k past the 40 peaks: no weight set holds 60 tokens (the bulk lies ~15 below the top),
    // so the 60th largest comes from the radix selection and the tokens at or above it are the set.
    check_draws(&dev, &peaked, [1.0, 60.0, 1.0, 0.0], 4_000);
    check_draws(&dev, &peaked, [0.8, 60.0, 0.99, 0.0], 4_000);
    let flat: Vec<f32> = logit_row(4096, 8).iter().map(|v| v / 8.0).collect();
    check_draws(&dev, &flat, [1.0, 0.0, 0.5, 0.0], 40_000);
    check_draws(&dev, &flat, [1.0, 3_500.0, 1.0, 0.0], 40_000);
}

#[test]
fn draws_are_reproducible_from_seed_and_counter() {
    let Some(dev) = gpu() else { return };
    let row = logit_row(1000, 7);
    let params = [1.0, 0.0, 0.95, 0.0];
    let (a, _) = draw(&dev, &row, params, 42, 0, 256);
    let (b, _) = draw(&dev, &row, params, 42, 0, 256);
    assert_eq!(a, b, "same seed and counters");
    // Counters 100.. of the same seed are the tail of the same stream.
    let (c, _) = draw(&dev, &row, params, 42, 100, 156);
    assert_eq!(&a[100..], &c[..], "a draw depends only on (seed, counter)");
    let (d, _) = draw(&dev, &row, params, 43, 0, 256);
    assert_ne!(a, d, "another seed gives another stream");
}

/// Rows with per-row parameters where some are greedy (temperature 0): the greedy rows take the
/// multi-block pick (several blocks per row at this vocabulary) and must equal the host's argmax
/// and log-probability; the sampled rows beside them must draw exactly what each draws alone
/// (the same one-block path and (seed, counter)), whatever the mix.
#[test]
fn greedy_and_sampled_rows_mixed_in_one_call() {
    let Some(dev) = gpu() else { return };
    let vocab = 50_001; // odd: the unaligned scalar path of the pick; 7 blocks per row
    let temps = [0.0f32, 0.9, 0.0, -1.0, 1.2, 0.0];
    let n = temps.len();
    let rows: Vec<Vec<f32>> = (0..n).map(|r| logit_row(vocab, 500 + r as u64)).collect();
    let params: Vec<[f32; 4]> = temps.iter().map(|&t| [t, 40.0, 0.9, 0.0]).collect();
    let seed = |r: usize| [7 + r as u32, 0, 3, 0];
    let run = |which: &[usize]| {
        let logits: Vec<f32> = which.iter().flat_map(|&r| rows[r].clone()).collect();
        let logits = dev.upload_f32(&logits, &[which.len(), vocab]).unwrap();
        let p: Vec<f32> = which.iter().flat_map(|&r| params[r]).collect();
        let p = dev.upload_f32(&p, &[which.len(), 4]).unwrap();
        let s: Vec<u32> = which.iter().flat_map(|&r| seed(r)).collect();
        let s = dev.upload_u32(&s, &[which.len(), 4]).unwrap();
        let mut ids: Tensor = dev.alloc(DType::U32, &[which.len()]).unwrap();
        let mut lps: Tensor = dev.alloc(DType::F32, &[which.len()]).unwrap();
        dev.sample_rows(&logits, &p, &s, &mut ids, &mut lps)
            .unwrap();
        (dev.read_u32(&ids).unwrap(), dev.read_f32(&lps).unwrap())
    };
    let all: Vec<usize> = (0..n).collect();
    let (ids, lps) = run(&all);
    for r in 0..n {
        let row = &rows[r];
        if temps[r] > 0.0 {
            let (alone, alone_lp) = run(&[r]);
            assert_eq!(ids[r], alone[0], "row {r}: the mixed call's draw");
            assert_eq!(
                lps[r].to_bits(),
                alone_lp[0].to_bits(),
                "row {r}: its logprob"
            );
        } else {
            let best = (0..vocab).fold(0, |b, i| if row[i] > row[b] { i } else { b });
            assert_eq!(ids[r] as usize, best, "row {r}: greedy pick");
            let want = row[best] as f64 - log_z(row);
            assert!(
                (lps[r] as f64 - want).abs() < 1e-4,
                "row {r}: logprob {} vs {want}",
                lps[r]
            );
        }
    }
}
