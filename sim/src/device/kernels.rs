//! The element loops of the simulated device: one fused pass per piece of a write, written as
//! plain zipped loops over equally long slices so that they auto-vectorise for every element
//! type and operation (the operation is a zero-sized function item, monomorphised per loop).

/// One piece of a write: what to store into `dst`.
#[derive(Debug)]
pub(crate) enum Kernel<'a, T> {
    /// `dst[i] = src[i]`.
    Copy {
        /// The receiver's elements.
        dst: &'a mut [T],
        /// The sender's.
        src: &'a [T],
    },
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
    /// `dst[i] = op(left[i], right[i])`.
    Combine {
        /// Where the result goes.
        dst: &'a mut [T],
        /// The first operand.
        left: &'a [T],
        /// The second operand.
        right: &'a [T],
    },
}

impl<'a, T: Copy> Kernel<'a, T> {
    /// The number of elements written.
    pub(crate) fn len(&self) -> usize {
        match self {
            Kernel::Copy { dst, .. }
            | Kernel::Accumulate { dst, .. }
            | Kernel::AccumulateLeft { dst, .. }
            | Kernel::Combine { dst, .. } => dst.len(),
        }
    }

    /// Split into the first `at` elements and the rest (`at <= len()`).
    pub(crate) fn split_at(self, at: usize) -> (Self, Self) {
        match self {
            Kernel::Copy { dst, src } => {
                let ((dst_low, dst_high), (src_low, src_high)) =
                    (dst.split_at_mut(at), src.split_at(at));
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
                let ((dst_low, dst_high), (src_low, src_high)) =
                    (dst.split_at_mut(at), src.split_at(at));
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
            Kernel::AccumulateLeft { dst, src } => {
                let ((dst_low, dst_high), (src_low, src_high)) =
                    (dst.split_at_mut(at), src.split_at(at));
                (
                    Kernel::AccumulateLeft {
                        dst: dst_low,
                        src: src_low,
                    },
                    Kernel::AccumulateLeft {
                        dst: dst_high,
                        src: src_high,
                    },
                )
            }
            Kernel::Combine { dst, left, right } => {
                let (dst_low, dst_high) = dst.split_at_mut(at);
                let ((left_low, left_high), (right_low, right_high)) =
                    (left.split_at(at), right.split_at(at));
                (
                    Kernel::Combine {
                        dst: dst_low,
                        left: left_low,
                        right: right_low,
                    },
                    Kernel::Combine {
                        dst: dst_high,
                        left: left_high,
                        right: right_high,
                    },
                )
            }
        }
    }

    /// Run the kernel with the step's operation.
    pub(crate) fn run(self, op: impl Fn(T, T) -> T + Copy) {
        match self {
            Kernel::Copy { dst, src } => dst.copy_from_slice(src),
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
            Kernel::Combine { dst, left, right } => {
                for ((out, &first), &second) in dst.iter_mut().zip(left).zip(right) {
                    *out = op(first, second);
                }
            }
        }
    }
}

/// `values[i] = scale(values[i])`.
#[inline]
pub(crate) fn map_in_place<T: Copy>(values: &mut [T], scale: impl Fn(T) -> T) {
    for value in values.iter_mut() {
        *value = scale(*value);
    }
}
