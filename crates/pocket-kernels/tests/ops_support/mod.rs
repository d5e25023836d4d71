//! Helpers shared by the op test files: a deterministic generator, upload/read shorthands and a
//! tolerance check that names the worst element.
#![allow(dead_code)]

use pocket_kernels::{Device, RecurrentMeta, Tensor};

#[path = "../rng/mod.rs"]
mod rng;
pub use rng::Rng;

pub fn up(d: &Device, data: &[f32], shape: &[usize]) -> Tensor {
    d.upload_f32(data, shape).unwrap()
}

pub fn up_u32(d: &Device, data: &[u32], shape: &[usize]) -> Tensor {
    d.upload_u32(data, shape).unwrap()
}

pub fn read(d: &Device, t: &Tensor) -> Vec<f32> {
    d.read_f32(t).unwrap()
}

/// Asserts `|got - want| <= atol + rtol * |want|` elementwise, naming the worst element.
pub fn assert_close(what: &str, got: &[f32], want: &[f64], atol: f64, rtol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (0usize, 0.0f64);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs() - (atol + rtol * w.abs());
        if err > worst.1 || g.is_nan() {
            worst = (i, if g.is_nan() { f64::INFINITY } else { err });
        }
    }
    let i = worst.0;
    assert!(
        worst.1 <= 0.0,
        "{what}: element {i}: got {}, want {} (atol {atol}, rtol {rtol})",
        got[i],
        want[i]
    );
}

/// Recurrent (Gated DeltaNet) metadata on `d` for sequences of `lens` rows in state `slots`
/// (`has`: 1 = continue from the stored state).
pub fn meta(d: &Device, lens: &[usize], slots: &[u32], has: &[u32]) -> RecurrentMeta {
    let mut qs = vec![0u32];
    for l in lens {
        qs.push(qs.last().unwrap() + *l as u32);
    }
    RecurrentMeta {
        query_start: d.upload_u32(&qs, &[qs.len()]).unwrap(),
        state_slots: d.upload_u32(slots, &[slots.len()]).unwrap(),
        has_state: d.upload_u32(has, &[has.len()]).unwrap(),
        num_seqs: lens.len(),
        max_rows: lens.iter().copied().max().unwrap_or(0),
    }
}
