//! The element loops of the simulated device: one fused pass per piece of a transfer, written as
//! plain zipped loops over equally long slices so that they auto-vectorise for every element
//! type and operation (the operation is a zero-sized function item, monomorphised per loop).

/// One piece of a transfer: what to write into `dst`.
#[derive(Debug)]
pub(crate) enum Kernel<'a, T> {
    /// `dst[i] = src[i]` (all-gather).
    Copy {
        /// The receiver's output elements.
        dst: &'a mut [T],
        /// The sender's current elements.
        src: &'a [T],
    },
    /// `dst[i] = op(dst[i], src[i])` (reduce-scatter into elements the receiver already wrote).
    Accumulate {
        /// The receiver's output elements, also its current values.
        dst: &'a mut [T],
        /// The sender's current elements.
        src: &'a [T],
    },
    /// `dst[i] = op(own[i], src[i])` (reduce-scatter into elements still equal to the receiver's
    /// input: the input is read in the same pass, so nothing was copied before).
    Combine {
        /// The receiver's output elements (not read).
        dst: &'a mut [T],
        /// The receiver's current elements: its input.
        own: &'a [T],
        /// The sender's current elements.
        src: &'a [T],
    },
}

impl<'a, T: Copy> Kernel<'a, T> {
    /// The number of elements written.
    pub(crate) fn len(&self) -> usize {
        match self {
            Kernel::Copy { dst, .. }
            | Kernel::Accumulate { dst, .. }
            | Kernel::Combine { dst, .. } => dst.len(),
        }
    }

    /// Split into the first `at` elements and the rest (`at <= len()`).
    pub(crate) fn split_at(self, at: usize) -> (Self, Self) {
        match self {
            Kernel::Copy { dst, src } => {
                let (dst_low, dst_high) = dst.split_at_mut(at);
                let (src_low, src_high) = src.split_at(at);
                (
                    Kernel::Copy {
                        dst: dst_low,
                        src: src_low,
                    },
                    Kernel::Copy {
                        dst: dst_high,
                        src: src_high,
                    },
                )
            }
            Kernel::Accumulate { dst, src } => {
                let (dst_low, dst_high) = dst.split_at_mut(at);
                let (src_low, src_high) = src.split_at(at);
                (
                    Kernel::Accumulate {
                        dst: dst_low,
                        src: src_low,
                    },
                    Kernel::Accumulate {
                        dst: dst_high,
                        src: src_high,
                    },
                )
            }
            Kernel::Combine { dst, own, src } => {
                let (dst_low, dst_high) = dst.split_at_mut(at);
                let (own_low, own_high) = own.split_at(at);
                let (src_low, src_high) = src.split_at(at);
                (
                    Kernel::Combine {
                        dst: dst_low,
                        own: own_low,
                        src: src_low,
                    },
                    Kernel::Combine {
                        dst: dst_high,
                        own: own_high,
                        src: src_high,
                    },
                )
            }
        }
    }

    /// Run the kernel with the step's operation.
    pub(crate) fn run(self, op: impl Fn(T, T) -> T + Copy) {
        match self {
            Kernel::Copy { dst, src } => copy(dst, src),
            Kernel::Accumulate { dst, src } => accumulate(dst, src, op),
            Kernel::Combine { dst, own, src } => combine(dst, own, src, op),
        }
    }
}

/// `dst[i] = src[i]`, for equally long slices.
pub(crate) fn copy<T: Copy>(dst: &mut [T], src: &[T]) {
    // The buffers are separate allocations of the same shape and every piece starts at the same
    // index in both, so source and destination sit at the same offset modulo the page size: the
    // pattern `memcpy` handles at full speed.
    dst.copy_from_slice(src);
}

/// `dst[i] = op(dst[i], src[i])`, for equally long slices.
#[inline]
pub(crate) fn accumulate<T: Copy>(dst: &mut [T], src: &[T], op: impl Fn(T, T) -> T) {
    for (mine, &theirs) in dst.iter_mut().zip(src) {
        *mine = op(*mine, theirs);
    }
}

/// `dst[i] = op(own[i], src[i])`, for equally long slices.
#[inline]
pub(crate) fn combine<T: Copy>(dst: &mut [T], own: &[T], src: &[T], op: impl Fn(T, T) -> T) {
    for ((out, &mine), &theirs) in dst.iter_mut().zip(own).zip(src) {
        *out = op(mine, theirs);
    }
}

/// `values[i] = scale(values[i])`.
#[inline]
pub(crate) fn map_in_place<T: Copy>(values: &mut [T], scale: impl Fn(T) -> T) {
    for value in values.iter_mut() {
        *value = scale(*value);
    }
}
