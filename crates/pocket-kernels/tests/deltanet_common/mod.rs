//! Scaffolding shared by the Gated DeltaNet CUDA tests (cuda_deltanet.rs, cuda_deltanet_decode.rs):
//! the generator, the recurrent batch metadata and one device's copy of a layer.

use pocket_kernels::{Device, RecurrentMeta, Tensor};

/// A small deterministic generator (xorshift64*), values in [-1, 1).
pub struct Rng(pub u64);

impl Rng {
    pub fn f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let u = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((u >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
}

/// Recurrent metadata on `d` for sequences of `lens` rows in state `slots` (`has`: 1 = continue
/// from the stored state).
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

/// One device's copy of a layer's weights and state pools.
pub struct Layer {
    pub d: Device,
    pub conv_w: Tensor,
    pub a_neg: Tensor,
    pub dt_bias: Tensor,
    pub norm_w: Tensor,
    pub conv_state: Tensor,
    pub state: Tensor,
}
