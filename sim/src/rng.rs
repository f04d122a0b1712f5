//! A small deterministic random source (SplitMix64) for seeded fault plans and conformance inputs.
//! Not for anything that needs statistical quality beyond "varied and reproducible".

/// SplitMix64: every seed gives a different, reproducible stream.
#[derive(Clone, Debug)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// The stream for `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The stream for a tuple of keys, mixed so that nearby keys give unrelated streams.
    pub(crate) fn keyed(keys: &[u64]) -> Self {
        let mut mixer = Self::new(0x5EED_CC1D_0000_0001);
        for &key in keys {
            mixer.state ^= key;
            mixer.next_u64();
        }
        Self::new(mixer.next_u64())
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..bound` (0 when `bound` is 0); the slight modulo bias does not matter here.
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            0
        } else {
            self.next_u64() % bound
        }
    }

    /// A value in `[0, 1)` with 53 random bits.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A fair coin.
    pub(crate) fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
}
