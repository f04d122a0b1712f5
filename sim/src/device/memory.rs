//! The simulated device memory of one generation: one working buffer per rank, typed.
//!
//! A rank's buffer is its input's own allocation when the plan works in place (the buffer is the
//! input, placed at 0) and the device allows it; otherwise a fresh buffer of the plan's length
//! with the input copied to its placement. The element type is matched once per call; everything
//! below runs on typed slices.

use super::census::Registry;
use super::elements::Element;
use super::error::SimError;
use super::kernels::{Kernel, map_in_place};
use super::parallel;
use super::pool::Pool;
use super::step::{Source, StepLayout, WriteKind};
use super::{SimPrepared, SimTensor};
use crate::host::{ElementType, HostValues};
use half::{bf16, f16};
use ruccl_core::{DeviceId, Plan, ReduceOperation};

/// Every rank's buffer, for one element type.
#[derive(Debug)]
pub(crate) enum Memory {
    F32(Vec<Vec<f32>>),
    F64(Vec<Vec<f64>>),
    F16(Vec<Vec<f16>>),
    BF16(Vec<Vec<bf16>>),
    I32(Vec<Vec<i32>>),
    I64(Vec<Vec<i64>>),
    I8(Vec<Vec<i8>>),
    U8(Vec<Vec<u8>>),
    U32(Vec<Vec<u32>>),
    U64(Vec<Vec<u64>>),
}

/// Run `$body` with `$buffers` bound to the typed buffers of whichever variant.
macro_rules! with_buffers {
    ($self:expr, $buffers:ident => $body:expr) => {
        match $self {
            Memory::F32($buffers) => $body,
            Memory::F64($buffers) => $body,
            Memory::F16($buffers) => $body,
            Memory::BF16($buffers) => $body,
            Memory::I32($buffers) => $body,
            Memory::I64($buffers) => $body,
            Memory::I8($buffers) => $body,
            Memory::U8($buffers) => $body,
            Memory::U32($buffers) => $body,
            Memory::U64($buffers) => $body,
        }
    };
}

impl Memory {
    /// The buffers of a generation of `plan` over `inputs` (checked: one per rank, all of
    /// `element_type` and the plan's input length). In place when `in_place` allows it; fresh
    /// buffers come from `pool`, and inputs copied out of go back to it.
    pub(crate) fn new(
        element_type: ElementType,
        inputs: Vec<SimPrepared>,
        plan: &Plan,
        in_place: bool,
        pool: &Pool,
    ) -> Result<Self, SimError> {
        Ok(match element_type {
            ElementType::F32 => Memory::F32(buffers(inputs, plan, in_place, pool)?),
            ElementType::F64 => Memory::F64(buffers(inputs, plan, in_place, pool)?),
            ElementType::F16 => Memory::F16(buffers(inputs, plan, in_place, pool)?),
            ElementType::BF16 => Memory::BF16(buffers(inputs, plan, in_place, pool)?),
            ElementType::I32 => Memory::I32(buffers(inputs, plan, in_place, pool)?),
            ElementType::I64 => Memory::I64(buffers(inputs, plan, in_place, pool)?),
            ElementType::I8 => Memory::I8(buffers(inputs, plan, in_place, pool)?),
            ElementType::U8 => Memory::U8(buffers(inputs, plan, in_place, pool)?),
            ElementType::U32 => Memory::U32(buffers(inputs, plan, in_place, pool)?),
            ElementType::U64 => Memory::U64(buffers(inputs, plan, in_place, pool)?),
            other => return Err(SimError::UnsupportedType(other)),
        })
    }

    /// Apply one checked step; `combining` is the operation a combining step folds with. Copies
    /// aside and scratch come from `pool` and go back to it.
    pub(crate) fn step(
        &mut self,
        layout: &StepLayout,
        combining: ReduceOperation,
        threads: usize,
        pool: &Pool,
    ) {
        with_buffers!(self, buffers => step(buffers, layout, combining, threads, pool));
    }

    /// Hand over rank `r`'s `plan.output(r)` range on `devices[r]`, each divided by `divide_by`
    /// if given (the `Mean` scaling), counted in `census`; an output cut from a larger buffer is
    /// a copy from `pool`, and the buffer goes back to it.
    pub(crate) fn into_outputs(
        self,
        devices: &[DeviceId],
        plan: &Plan,
        divide_by: Option<usize>,
        threads: usize,
        keeping: Keeping<'_>,
    ) -> Vec<SimTensor> {
        with_buffers!(self, buffers => {
            into_outputs(buffers, devices, plan, divide_by, threads, keeping)
        })
    }

    /// A copy of rank `rank`'s buffer as it is now.
    pub(crate) fn buffer(&self, rank: usize) -> Option<HostValues> {
        with_buffers!(self, buffers => buffers.get(rank).map(|buffer| Stored::wrap(buffer.clone())))
    }
}

/// Each rank's working buffer: its input's allocation in place, or a fresh one holding the
/// input at its placement.
fn buffers<T: Stored>(
    inputs: Vec<SimPrepared>,
    plan: &Plan,
    in_place: bool,
    pool: &Pool,
) -> Result<Vec<Vec<T>>, SimError> {
    let buffer_len = plan.buffer_len();
    inputs
        .into_iter()
        .enumerate()
        .map(|(rank, input)| {
            let tensor = input.into_tensor();
            let actual = tensor.element_type();
            let values =
                T::unwrap(tensor.into_values()).map_err(|_| SimError::ElementTypeMismatch {
                    rank,
                    expected: T::TYPE,
                    actual,
                })?;
            let placement = plan.placement(rank);
            if in_place && placement == 0 && values.len() == buffer_len {
                return Ok(values);
            }
            // `validate::begin` checked the placement and length fit the buffer.
            let buffer = pool.placed(buffer_len, placement, &values);
            pool.give(values);
            Ok(buffer)
        })
        .collect()
}

fn step<T: Stored>(
    buffers: &mut [Vec<T>],
    layout: &StepLayout,
    combining: ReduceOperation,
    threads: usize,
    pool: &Pool,
) {
    match combining {
        ReduceOperation::Sum | ReduceOperation::Mean => {
            apply(buffers, layout, T::sum, threads, pool)
        }
        ReduceOperation::Product => apply(buffers, layout, T::product, threads, pool),
        ReduceOperation::Min => apply(buffers, layout, T::min, threads, pool),
        ReduceOperation::Max => apply(buffers, layout, T::max, threads, pool),
    }
}

/// Copy the snapshots, then run every write: copies, or folds in the contract's order —
/// `before` (folded from the left, through a scratch buffer when there are two or more), the
/// receiver's own value, then `after`.
fn apply<T: Stored, F: Fn(T, T) -> T + Copy + Sync>(
    buffers: &mut [Vec<T>],
    layout: &StepLayout,
    op: F,
    threads: usize,
    pool: &Pool,
) {
    let copies: Vec<Vec<T>> = layout
        .snapshots
        .iter()
        .map(|(rank, range)| pool.copied(&buffers[*rank][range.clone()]))
        .collect();
    let run = |kernel: Kernel<'_, T>| {
        if parallel::worth(kernel.len(), size_of::<T>(), threads) <= 1 {
            // One thread's worth: run it here, without the list the splitter takes.
            kernel.run(op);
        } else {
            parallel::run_pieces(vec![kernel], size_of::<T>(), threads, |piece| piece.run(op));
        }
    };
    let mut scratch: Vec<T> = Vec::new();
    for write in &layout.writes {
        let len = write.range.len();
        // The receiver's buffer is taken out while its sources are read from the others': a
        // transfer never reads its own receiver (checked), so the hole is never read.
        let mut target = std::mem::take(&mut buffers[write.to]);
        {
            let read = |source: &Source| -> &[T] {
                match *source {
                    Source::Live { rank, start } => &buffers[rank][start..start + len],
                    Source::Copied { index, offset } => &copies[index][offset..offset + len],
                }
            };
            let dst = &mut target[write.range.clone()];
            match &write.kind {
                WriteKind::Copy(source) => run(Kernel::Copy {
                    dst,
                    src: read(source),
                }),
                WriteKind::Fold { before, after } => {
                    match before.as_slice() {
                        [] => {}
                        [only] => run(Kernel::AccumulateLeft {
                            dst: &mut *dst,
                            src: read(only),
                        }),
                        [first, second, rest @ ..] => {
                            scratch.clear();
                            scratch.resize(len, T::default());
                            run(Kernel::Combine {
                                dst: &mut scratch,
                                left: read(first),
                                right: read(second),
                            });
                            for source in rest {
                                run(Kernel::Accumulate {
                                    dst: &mut scratch,
                                    src: read(source),
                                });
                            }
                            run(Kernel::AccumulateLeft {
                                dst: &mut *dst,
                                src: &scratch,
                            });
                        }
                    }
                    for source in after {
                        run(Kernel::Accumulate {
                            dst: &mut *dst,
                            src: read(source),
                        });
                    }
                }
            }
        }
        buffers[write.to] = target;
    }
    copies
        .into_iter()
        .chain([scratch])
        .for_each(|kept| pool.give(kept));
}

/// Where the values a generation hands out are counted and go back to when dropped.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keeping<'a> {
    /// The device's census, if it keeps one.
    pub(crate) census: Option<&'a Registry>,
    /// The device's pool.
    pub(crate) pool: &'a Pool,
}

fn into_outputs<T: Stored>(
    buffers: Vec<Vec<T>>,
    devices: &[DeviceId],
    plan: &Plan,
    divide_by: Option<usize>,
    threads: usize,
    keeping: Keeping<'_>,
) -> Vec<SimTensor> {
    let mut outputs: Vec<Vec<T>> = buffers
        .into_iter()
        .enumerate()
        .map(|(rank, buffer)| {
            let range = plan.output(rank);
            if range == (0..buffer.len()) {
                buffer
            } else {
                let output = keeping.pool.copied(&buffer[range]);
                keeping.pool.give(buffer);
                output
            }
        })
        .collect();
    if let Some(world) = divide_by {
        let slices: Vec<&mut [T]> = outputs.iter_mut().map(Vec::as_mut_slice).collect();
        parallel::run_pieces(slices, size_of::<T>(), threads, |slice| {
            map_in_place(slice, |value| value.divide(world));
        });
    }
    outputs
        .into_iter()
        .zip(devices)
        .map(|(values, &device)| SimTensor::counted(device, T::wrap(values), keeping))
        .collect()
}

/// An element type the device keeps in [`HostValues`].
pub(crate) trait Stored: Element + Default {
    /// The element type's name.
    const TYPE: ElementType;
    /// Wrap a vector of this type.
    fn wrap(values: Vec<Self>) -> HostValues;
    /// The vector inside `values`, if it holds this type (else `values` back).
    fn unwrap(values: HostValues) -> Result<Vec<Self>, HostValues>;
    /// `length` zeros (for the primitive types, untouched zero pages from the allocator).
    fn zeroed(length: usize) -> Vec<Self> {
        vec![Self::default(); length]
    }
}

macro_rules! stored {
    ($type:ty, $variant:ident) => {
        impl Stored for $type {
            const TYPE: ElementType = ElementType::$variant;
            fn wrap(values: Vec<Self>) -> HostValues {
                HostValues::$variant(values)
            }
            fn unwrap(values: HostValues) -> Result<Vec<Self>, HostValues> {
                match values {
                    HostValues::$variant(values) => Ok(values),
                    other => Err(other),
                }
            }
        }
    };
}

stored!(f32, F32);
stored!(f64, F64);
stored!(f16, F16);
stored!(bf16, BF16);
stored!(i32, I32);
stored!(i64, I64);
stored!(i8, I8);
stored!(u8, U8);
stored!(u32, U32);
stored!(u64, U64);
