//! The element loops of the simulated device: one fused pass per block of a fold, written as
//! plain zipped loops over equally long slices so that they vectorise for every element type and
//! operation (the operation is a zero-sized function item, monomorphised per loop).
//!
//! ## Vector width, chosen at run time
//!
//! The crate is compiled for the target's baseline (SSE2 on x86-64), but the loops are also
//! compiled for AVX2 and AVX-512 ([`Isa`]); [`Kernel::run`] takes the widest the running CPU has
//! ([`Isa::detected`]). Every version runs the same scalar source, so each element gets the same
//! operations on the same operands in the same order, one rounding each: the versions differ in
//! how many elements one instruction handles, never in the result. The property test below compares every version the machine runs with the baseline, bit for
//! bit, for every element type, operation and kernel; CI runs it in a release build too, where
//! the loops are vectorised.

use std::mem::MaybeUninit;

/// One pass of a fold over a block of a write: what to store into `dst`.
#[derive(Debug)]
pub(crate) enum Kernel<'a, T> {
    /// `dst[i] = op(dst[i], src[i])`: the receiver's value (or fold so far) comes first.
    Accumulate {
        /// The receiver's elements.
        dst: &'a mut [T],
        /// The sender's.
        src: &'a [T],
    },
    /// `dst[i] = op(src[i], dst[i])`: the sender's value (or fold so far) comes first.
    AccumulateLeft {
        /// The receiver's elements.
        dst: &'a mut [T],
        /// The sender's, or the fold of the senders below the receiver.
        src: &'a [T],
    },
}

/// An instruction set the element loops are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    /// The target's baseline (SSE2 on x86-64, NEON on aarch64).
    Baseline,
    /// x86-64 with AVX2: 256-bit vectors.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// x86-64 with AVX-512 F, BW and VL: 512-bit vectors, byte and word lanes included.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Isa {
    /// The widest instruction set this CPU runs (std caches the CPUID reading, so this is a
    /// load and a compare per call).
    pub(crate) fn detected() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vl")
            {
                return Isa::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Isa::Avx2;
            }
        }
        Isa::Baseline
    }

    /// Every instruction set this CPU runs, baseline first.
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Isa> {
        let mut all = vec![Isa::Baseline];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                all.push(Isa::Avx2);
            }
            if Isa::detected() == Isa::Avx512 {
                all.push(Isa::Avx512);
            }
        }
        all
    }
}

impl<T: Copy> Kernel<'_, T> {
    /// Run the kernel with the step's operation, in the widest vectors this CPU has.
    pub(crate) fn run(self, op: impl Fn(T, T) -> T + Copy) {
        self.run_on(Isa::detected(), op);
    }

    /// Run the kernel compiled for `isa`, which the caller checked the CPU runs
    /// ([`Isa::detected`] or [`Isa::available`]).
    pub(crate) fn run_on(self, isa: Isa, op: impl Fn(T, T) -> T + Copy) {
        match isa {
            Isa::Baseline => self.body(op),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa` is `Avx2` only when `Isa::detected`/`Isa::available` saw AVX2 on this
            // CPU, so the AVX2 instructions in the clone are executable. The slices are the
            // caller's borrows; the clone reads and writes only through them.
            Isa::Avx2 => unsafe { avx2(self, op) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above, for AVX-512 F, BW and VL, all three detected.
            Isa::Avx512 => unsafe { avx512(self, op) },
        }
    }

    /// The loops, inlined into each instruction set's clone.
    #[inline(always)]
    fn body(self, op: impl Fn(T, T) -> T + Copy) {
        match self {
            Kernel::Accumulate { dst, src } => {
                for (mine, &theirs) in dst.iter_mut().zip(src) {
                    *mine = op(*mine, theirs);
                }
            }
            Kernel::AccumulateLeft { dst, src } => {
                for (mine, &theirs) in dst.iter_mut().zip(src) {
                    *mine = op(theirs, *mine);
                }
            }
        }
    }
}

/// [`Kernel::body`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2<T: Copy>(kernel: Kernel<'_, T>, op: impl Fn(T, T) -> T + Copy) {
    kernel.body(op);
}

/// [`Kernel::body`] compiled for AVX-512.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VL.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn avx512<T: Copy>(kernel: Kernel<'_, T>, op: impl Fn(T, T) -> T + Copy) {
    kernel.body(op);
}

/// `dst[i] = op(left[i], right[i])` into memory not yet initialised, in the widest vectors this
/// CPU has; the written elements come back initialised: as many as the shortest of the three.
pub(crate) fn combine_into<'a, T: Copy>(
    dst: &'a mut [MaybeUninit<T>],
    left: &[T],
    right: &[T],
    op: impl Fn(T, T) -> T + Copy,
) -> &'a mut [T] {
    combine_into_on(Isa::detected(), dst, left, right, op)
}

/// [`combine_into`] compiled for `isa`, which the caller checked the CPU runs.
pub(crate) fn combine_into_on<'a, T: Copy>(
    isa: Isa,
    dst: &'a mut [MaybeUninit<T>],
    left: &[T],
    right: &[T],
    op: impl Fn(T, T) -> T + Copy,
) -> &'a mut [T] {
    let len = dst.len().min(left.len()).min(right.len());
    let dst = &mut dst[..len];
    let (left, right) = (&left[..len], &right[..len]);
    match isa {
        Isa::Baseline => combine_body(dst, left, right, op),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` names AVX2 only when the CPU was seen to run it; the slices are the
        // caller's borrows.
        Isa::Avx2 => unsafe { combine_avx2(dst, left, right, op) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, for AVX-512 F, BW and VL.
        Isa::Avx512 => unsafe { combine_avx512(dst, left, right, op) },
    }
    // SAFETY: `combine_body` wrote every one of `dst`'s `len` elements (the three slices are
    // `len` long), so all are initialised; `MaybeUninit<T>` has `T`'s layout, and the returned
    // borrow is `dst`'s, exclusive for `'a`.
    unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<T>(), len) }
}

#[inline(always)]
fn combine_body<T: Copy>(
    dst: &mut [MaybeUninit<T>],
    left: &[T],
    right: &[T],
    op: impl Fn(T, T) -> T,
) {
    for ((out, &first), &second) in dst.iter_mut().zip(left).zip(right) {
        out.write(op(first, second));
    }
}

/// [`combine_body`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn combine_avx2<T: Copy>(
    dst: &mut [MaybeUninit<T>],
    left: &[T],
    right: &[T],
    op: impl Fn(T, T) -> T,
) {
    combine_body(dst, left, right, op);
}

/// [`combine_body`] compiled for AVX-512.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VL.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn combine_avx512<T: Copy>(
    dst: &mut [MaybeUninit<T>],
    left: &[T],
    right: &[T],
    op: impl Fn(T, T) -> T,
) {
    combine_body(dst, left, right, op);
}

/// Copy `src` into `dst` (as many elements as the shorter has) with stores that go around the
/// caches where the target has them (x86-64's `movntdq`, part of its SSE2 baseline): a block
/// written to memory no one reads soon neither evicts what is read next nor has its lines read
/// in before they are overwritten (write-allocate). Elsewhere a plain copy. The stores are
/// weakly ordered: the caller calls [`stream_fence`] before another thread may read `dst`.
pub(crate) fn stream_copy<T: Copy>(dst: &mut [MaybeUninit<T>], src: &[T]) {
    let len = dst.len().min(src.len());
    let bytes = len * size_of::<T>();
    let to = dst.as_mut_ptr().cast::<u8>();
    let from = src.as_ptr().cast::<u8>();
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let head = to.align_offset(16).min(bytes);
        let vectors = (bytes - head) / 16;
        // SAFETY: `dst` and `src` are the caller's borrows of at least `len` elements, so of
        // `bytes` bytes each; distinct borrows (one exclusive), so they cannot overlap. The head
        // copies `head <= bytes` bytes; each vector reads and writes 16 bytes at
        // `head + 16·i + 16 <= bytes`, the store aligned to 16 (`align_offset`), the load
        // unaligned; the tail copies what is left, ending at `bytes`. SSE2 is part of the
        // x86-64 baseline. `T: Copy`, and `MaybeUninit<T>` has `T`'s layout, so a bytewise copy
        // initialises every element written.
        unsafe {
            std::ptr::copy_nonoverlapping(from, to, head);
            for index in 0..vectors {
                let at = head + 16 * index;
                let value = _mm_loadu_si128(from.add(at).cast::<__m128i>());
                _mm_stream_si128(to.add(at).cast::<__m128i>(), value);
            }
            let done = head + 16 * vectors;
            std::ptr::copy_nonoverlapping(from.add(done), to.add(done), bytes - done);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above: `bytes` bytes of two distinct borrows, `T: Copy`.
    unsafe {
        std::ptr::copy_nonoverlapping(from, to, bytes);
    }
}

/// Order every [`stream_copy`] this thread made before its later stores (x86-64's `sfence`), so
/// that a thread that sees a later store (a share done, a generation's end) sees the copies.
pub(crate) fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` touches no memory; SSE is part of the x86-64 baseline.
    unsafe {
        std::arch::x86_64::_mm_sfence();
    }
}

/// `values[i] = scale(values[i])`, in the widest vectors this CPU has.
pub(crate) fn map_in_place<T: Copy>(values: &mut [T], scale: impl Fn(T) -> T + Copy) {
    map_in_place_on(Isa::detected(), values, scale);
}

/// [`map_in_place`] compiled for `isa`, which the caller checked the CPU runs.
pub(crate) fn map_in_place_on<T: Copy>(isa: Isa, values: &mut [T], scale: impl Fn(T) -> T + Copy) {
    match isa {
        Isa::Baseline => map_body(values, scale),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` names AVX2 only when the CPU was seen to run it; `values` is the
        // caller's exclusive borrow.
        Isa::Avx2 => unsafe { map_avx2(values, scale) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, for AVX-512 F, BW and VL.
        Isa::Avx512 => unsafe { map_avx512(values, scale) },
    }
}

#[inline(always)]
fn map_body<T: Copy>(values: &mut [T], scale: impl Fn(T) -> T) {
    for value in values.iter_mut() {
        *value = scale(*value);
    }
}

/// [`map_body`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn map_avx2<T: Copy>(values: &mut [T], scale: impl Fn(T) -> T) {
    map_body(values, scale);
}

/// [`map_body`] compiled for AVX-512.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VL.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn map_avx512<T: Copy>(values: &mut [T], scale: impl Fn(T) -> T) {
    map_body(values, scale);
}

#[cfg(test)]
pub(super) mod tests {
    //! Every instruction set's loops against a scalar loop (one opaque call per element), bit
    //! for bit: every element type,
    //! every operation, every kernel, lengths around the vector widths, and operands chosen to
    //! hit the edge cases (NaNs of both signs and payloads, ±0, ±∞, subnormals, integer
    //! extremes).
    use super::{Isa, Kernel, combine_into_on, map_in_place_on};
    use crate::device::elements::Element;
    use half::{bf16, f16};
    use proptest::prelude::*;
    use std::mem::MaybeUninit;

    /// One of the element operations.
    type Op<T> = fn(T, T) -> T;

    /// Bits, so that NaNs compare by payload and ±0 apart.
    pub(crate) trait Bits: Element + std::fmt::Debug {
        fn bits(self) -> u64;
        fn from_bits(bits: u64) -> Self;
    }

    macro_rules! bits {
        ($type:ty, $bits:ty, |$value:ident| $to:expr, |$raw:ident| $from:expr) => {
            impl Bits for $type {
                fn bits(self) -> u64 {
                    let $value = self;
                    $to as u64
                }
                fn from_bits(bits: u64) -> Self {
                    let $raw = bits as $bits;
                    $from
                }
            }
        };
    }

    bits!(f32, u32, |v| v.to_bits(), |b| f32::from_bits(b));
    bits!(f64, u64, |v| v.to_bits(), |b| f64::from_bits(b));
    bits!(f16, u16, |v| v.to_bits(), |b| f16::from_bits(b));
    bits!(bf16, u16, |v| v.to_bits(), |b| bf16::from_bits(b));
    bits!(i8, u8, |v| v as u8, |b| b as i8);
    bits!(u8, u8, |v| v, |b| b);
    bits!(i32, u32, |v| v as u32, |b| b as i32);
    bits!(u32, u32, |v| v, |b| b);
    bits!(i64, u64, |v| v as u64, |b| b as i64);
    bits!(u64, u64, |v| v, |b| b);

    /// Raw words biased towards each type's edge cases (zero, one, all ones, sign bits only,
    /// infinities, NaNs with payloads, one) eight times in ten, else random.
    fn word() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(u64::MAX),
            Just(0x8000_0000_8000_8080),
            Just(0x7f80_0000_7c00_7f80),
            Just(0xff80_0000_fc00_ff80),
            Just(0x7fc0_0001_7e01_7fc1),
            Just(0x3f80_0000_3c00_3f80),
            any::<u64>(),
            any::<u64>(),
        ]
    }

    fn operands() -> impl Strategy<Value = (Vec<u64>, Vec<u64>, Vec<u64>)> {
        // Lengths across one to several 512-bit vectors of bytes, plus remainders.
        (0usize..300).prop_flat_map(|len| {
            (
                prop::collection::vec(word(), len),
                prop::collection::vec(word(), len),
                prop::collection::vec(word(), len),
            )
        })
    }

    /// What every kernel leaves in `dst` on every instruction set, as bits: all must agree.
    fn agree<T: Bits>(words: &(Vec<u64>, Vec<u64>, Vec<u64>)) -> Result<(), TestCaseError> {
        let values = |raw: &[u64]| raw.iter().map(|&w| T::from_bits(w)).collect::<Vec<T>>();
        let (dst, first, second) = (values(&words.0), values(&words.1), values(&words.2));
        let ops: [(&str, Op<T>); 4] = [
            ("sum", T::sum),
            ("product", T::product),
            ("min", T::min),
            ("max", T::max),
        ];
        for (name, op) in ops {
            for kind in 0..3 {
                let run = |isa: Isa| {
                    let mut out = dst.clone();
                    match kind {
                        0 => Kernel::Accumulate {
                            dst: &mut out,
                            src: &first,
                        }
                        .run_on(isa, op),
                        1 => Kernel::AccumulateLeft {
                            dst: &mut out,
                            src: &first,
                        }
                        .run_on(isa, op),
                        _ => {
                            let mut fresh = vec![MaybeUninit::uninit(); out.len()];
                            let written = combine_into_on(isa, &mut fresh, &first, &second, op);
                            out.copy_from_slice(written);
                        }
                    }
                    out.into_iter().map(Bits::bits).collect::<Vec<u64>>()
                };
                // One element at a time through an opaque call: nothing to vectorise.
                let scalar: Vec<u64> = (0..dst.len())
                    .map(|i| {
                        let op = std::hint::black_box(op);
                        match kind {
                            0 => op(dst[i], first[i]),
                            1 => op(first[i], dst[i]),
                            _ => op(first[i], second[i]),
                        }
                        .bits()
                    })
                    .collect();
                for isa in Isa::available() {
                    prop_assert_eq!(&run(isa), &scalar, "{:?} {} kernel {}", isa, name, kind);
                }
            }
        }
        let scaled = |isa: Isa| {
            let mut out = dst.clone();
            map_in_place_on(isa, &mut out, |value: T| value.divide(3));
            out.into_iter().map(Bits::bits).collect::<Vec<u64>>()
        };
        let scalar: Vec<u64> = dst
            .iter()
            .map(|&value| std::hint::black_box(T::divide)(value, 3).bits())
            .collect();
        for isa in Isa::available() {
            prop_assert_eq!(&scaled(isa), &scalar, "{:?} mean scaling", isa);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn every_instruction_set_gives_the_scalar_loops_bits(words in operands()) {
            agree::<f32>(&words)?;
            agree::<f64>(&words)?;
            agree::<f16>(&words)?;
            agree::<bf16>(&words)?;
            agree::<i8>(&words)?;
            agree::<u8>(&words)?;
            agree::<i32>(&words)?;
            agree::<u32>(&words)?;
            agree::<i64>(&words)?;
            agree::<u64>(&words)?;
        }
    }

    #[test]
    fn the_detected_instruction_set_is_one_the_cpu_runs() {
        assert!(Isa::available().contains(&Isa::detected()));
    }

    /// `stream_copy` at every alignment of the destination within a vector and every length
    /// around one: each copied element's bits, nothing written past the shorter slice.
    fn streamed_copies_are_exact<T: Bits>() {
        let src: Vec<T> = (0..200u64)
            .map(|index| T::from_bits(index.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
            .collect();
        let marker = T::from_bits(0x5a5a_5a5a_5a5a_5a5a);
        for offset in 0..16 {
            for len in (0..=40).chain([127, 128, 129, 199]) {
                let mut dst = [MaybeUninit::new(marker); 220];
                super::stream_copy(&mut dst[offset..offset + len], &src[..len + 1]);
                super::stream_fence();
                // SAFETY: every element was initialised with the marker, then perhaps copied.
                let dst: Vec<u64> = dst
                    .iter()
                    .map(|v| unsafe { v.assume_init() }.bits())
                    .collect();
                let copied: Vec<u64> = src[..len].iter().map(|&v| v.bits()).collect();
                assert_eq!(&dst[offset..offset + len], &copied[..], "{offset} {len}");
                let untouched = dst[..offset].iter().chain(&dst[offset + len..]);
                assert!(
                    untouched.into_iter().all(|&bits| bits == marker.bits()),
                    "{offset} {len}"
                );
            }
        }
    }

    #[test]
    fn a_copy_past_the_caches_writes_exactly_its_elements() {
        streamed_copies_are_exact::<u8>();
        streamed_copies_are_exact::<f16>();
        streamed_copies_are_exact::<f32>();
        streamed_copies_are_exact::<f64>();
    }
}
