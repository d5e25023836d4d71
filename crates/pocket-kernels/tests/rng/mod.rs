//! The deterministic generator every test file of this crate shares (xorshift64*), so tests
//! need no extra crates and a seed names the same inputs in every file.
#![allow(dead_code)]

/// xorshift64* over a 64-bit state.
pub struct Rng(u64);

impl Rng {
    /// A generator whose state is `seed` mixed (any seed, 0 included).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The generator at state `s` as is, without mixing the seed (`s` must not be 0).
    pub fn from_state(s: u64) -> Self {
        Rng(s)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// `n` values uniform in [-1, 1).
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }

    /// `n` values uniform in [-scale, scale).
    pub fn scaled(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| scale * self.f32()).collect()
    }

    /// Uniform in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
