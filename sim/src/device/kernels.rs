//! The element loops of the simulated device: one fused pass per block of a fold, written as
//! plain zipped loops over equally long slices so that they auto-vectorise for every element
//! type and operation (the operation is a zero-sized function item, monomorphised per loop).

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

impl<T: Copy> Kernel<'_, T> {
    /// Run the kernel with the step's operation.
    pub(crate) fn run(self, op: impl Fn(T, T) -> T + Copy) {
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
