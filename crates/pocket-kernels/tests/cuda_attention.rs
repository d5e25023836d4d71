//! CUDA paged attention on long decode contexts (the split-K flash-decoding path, which the
//! shared ops test's short sequences never reach) against the CPU backend on the same data.
//! Each case also runs with `max_seq_len` far above the real lengths, as a captured decode graph
//! passes its context bucket: the split count is then sized for the bound and the kernels must
//! size their work from the lengths on the device. Skipped without a GPU.
#![cfg(feature = "cuda")]

use pocket_kernels::{AttentionMeta, AttentionParams, DType, Device, DeviceKind};

fn meta(
    d: &Device,
    lens: &[usize],
    new: &[usize],
    tables: &[u32],
    mb: usize,
    bound: usize,
) -> AttentionMeta {
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
        max_seq_len: bound,
    }
}

#[test]
fn split_k_decode_matches_cpu() {
    let gpu = match Device::open(DeviceKind::Cuda(0)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let cpu = Device::cpu();
    let bs = 16usize;
    let mut seed = 0x1234_5678_9abc_def1u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    // (heads, kv_heads, head_dim, softcap): GQA groups of 4 and 8 (the decode kernel's two
    // entries), 7 (a partial group), 6 with head_dim 256 (Qwen3.5-27B: the group-of-6
    // instantiation), 3 (SmolLM2), 1 with head_dim 256, and head_dim 96 (the generic kernel).
    let configs = [
        (32usize, 8usize, 128usize, None),
        (16, 2, 64, None),
        (14, 2, 64, Some(30.0f32)),
        (24, 4, 256, None),
        (9, 3, 64, None),
        (4, 4, 256, None),
        (8, 2, 96, None),
    ];
    for (heads, kvh, hd, softcap) in configs {
        for dtype in [DType::F16, DType::BF16, DType::F32] {
            for (lens, new, window) in [
                (vec![1000usize, 37, 300], vec![1usize, 1, 1], None),
                (vec![2049], vec![1], None),
                (vec![700, 5], vec![1, 1], Some(100usize)),
                (vec![400], vec![3], None),
                (vec![1], vec![1], None),
                (vec![640, 33, 5], vec![1, 1, 1], None),
            ] {
                let mb = lens.iter().map(|l| l.div_ceil(bs)).max().unwrap();
                let nblocks = mb * lens.len();
                // Blocks in reverse order, so table lookups matter.
                let tables: Vec<u32> = (0..nblocks as u32).rev().collect();
                let row = kvh * hd;
                let kv: Vec<f32> = (0..nblocks * bs * row).map(|_| rnd()).collect();
                let vv: Vec<f32> = (0..nblocks * bs * row).map(|_| rnd()).collect();
                let nq: usize = new.iter().sum();
                let q: Vec<f32> = (0..nq * heads * hd).map(|_| rnd()).collect();
                let p = AttentionParams {
                    num_heads: heads,
                    num_kv_heads: kvh,
                    head_dim: hd,
                    scale: 1.0 / (hd as f32).sqrt(),
                    sliding_window: window,
                    softcap,
                };
                let mut outs = Vec::new();
                let exact = *lens.iter().max().unwrap();
                for (d, bound) in [(&cpu, exact), (&gpu, exact), (&gpu, exact.max(16384))] {
                    let shape = [nblocks, bs, kvh, hd];
                    let mut kc = d.alloc(dtype, &shape).unwrap();
                    let mut vc = d.alloc(dtype, &shape).unwrap();
                    let all: Vec<u32> = (0..(nblocks * bs) as u32).collect();
                    let mut fill = meta(d, &lens, &new, &tables, mb, bound);
                    fill.slot_mapping = d.upload_u32(&all, &[all.len()]).unwrap();
                    let kt = d.upload_f32(&kv, &[nblocks * bs, kvh, hd]).unwrap();
                    let vt = d.upload_f32(&vv, &[nblocks * bs, kvh, hd]).unwrap();
                    d.kv_write(&kt, &vt, &mut kc, &mut vc, &fill).unwrap();
                    let m = meta(d, &lens, &new, &tables, mb, bound);
                    let qt = d.upload_f32(&q, &[nq, heads, hd]).unwrap();
                    let mut out = d.alloc(DType::F32, &[nq, heads, hd]).unwrap();
                    // Poison the output so an unwritten element cannot pass.
                    d.write_f32(&mut out, &vec![f32::NAN; nq * heads * hd], &[nq, heads, hd])
                        .unwrap();
                    d.attention(&qt, &kc, &vc, &m, &p, &mut out).unwrap();
                    outs.push(d.read_f32(&out).unwrap());
                }
                let mut worst = 0.0f32;
                for (gpu_out, bound) in [(&outs[1], exact), (&outs[2], exact.max(16384))] {
                    for (i, (c, g)) in outs[0].iter().zip(gpu_out).enumerate() {
                        let err = (c - g).abs();
                        assert!(
                            err <= 2e-5 + 1e-4 * c.abs(),
                            "{heads}/{kvh}x{hd} {dtype:?} lens {lens:?} window {window:?} bound {bound}: out[{i}] cuda {g} vs cpu {c}"
                        );
                        worst = worst.max(err);
                    }
                }
                eprintln!(
                "{heads}/{kvh}x{hd} softcap {softcap:?} {dtype:?} lens {lens:?} window {window:?}: max |cuda - cpu| = {worst:e}"
            );
            }
        }
    }
}
