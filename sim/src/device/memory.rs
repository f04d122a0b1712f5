//! The simulated device memory of one generation: one contiguous, typed buffer per rank.
//!
//! The element type is matched once per call; everything below runs on plain `Vec<T>`s, so a
//! later change can split the per-rank loops across threads or fuse them without touching the
//! validation or the ledger.

use super::elements::Element;
use super::exchange;
use crate::host::{ElementType, HostValues};
use half::{bf16, f16};
use ruccl_core::ReduceOperation;
use std::ops::Range;

/// One buffer per rank, all of one element type and one length.
#[derive(Clone, Debug)]
pub(crate) enum Buffers {
    F32(Vec<Vec<f32>>),
    F64(Vec<Vec<f64>>),
    F16(Vec<Vec<f16>>),
    BF16(Vec<Vec<bf16>>),
    I32(Vec<Vec<i32>>),
    I64(Vec<Vec<i64>>),
}

/// Run `$body` with `$buffers` bound to the typed `&mut Vec<Vec<T>>` of whichever variant.
macro_rules! with_buffers {
    ($self:expr, $buffers:ident => $body:expr) => {
        match $self {
            Buffers::F32($buffers) => $body,
            Buffers::F64($buffers) => $body,
            Buffers::F16($buffers) => $body,
            Buffers::BF16($buffers) => $body,
            Buffers::I32($buffers) => $body,
            Buffers::I64($buffers) => $body,
        }
    };
}

impl Buffers {
    /// Copy `inputs` (one per rank) into fresh buffers of `element_type`. Fails with the first
    /// rank whose input is of another type (validation rules that out before this is called).
    pub(crate) fn copy_of(
        element_type: ElementType,
        inputs: &[&HostValues],
    ) -> Result<Self, usize> {
        Ok(match element_type {
            ElementType::F32 => Buffers::F32(copy_typed(inputs)?),
            ElementType::F64 => Buffers::F64(copy_typed(inputs)?),
            ElementType::F16 => Buffers::F16(copy_typed(inputs)?),
            ElementType::BF16 => Buffers::BF16(copy_typed(inputs)?),
            ElementType::I32 => Buffers::I32(copy_typed(inputs)?),
            ElementType::I64 => Buffers::I64(copy_typed(inputs)?),
        })
    }

    /// Apply one validated ring step (see [`exchange::step`]).
    pub(crate) fn step(&mut self, ranges: &[Range<usize>], reduce: Option<ReduceOperation>) {
        with_buffers!(self, buffers => exchange::step(buffers, ranges, reduce));
    }

    /// Divide every element of every rank by `world` (the `Mean` scaling).
    pub(crate) fn divide(&mut self, world: usize) {
        with_buffers!(self, buffers => {
            for buffer in buffers.iter_mut() {
                for element in buffer.iter_mut() {
                    *element = element.divide(world);
                }
            }
        });
    }

    /// Hand the buffers back as host values, one per rank, without copying.
    pub(crate) fn into_values(self) -> Vec<HostValues> {
        with_buffers!(self, buffers => buffers.into_iter().map(Stored::wrap).collect())
    }
}

fn copy_typed<T: Stored>(inputs: &[&HostValues]) -> Result<Vec<Vec<T>>, usize> {
    inputs
        .iter()
        .enumerate()
        .map(|(rank, values)| T::view(values).map(<[T]>::to_vec).ok_or(rank))
        .collect()
}

/// An [`Element`] that a [`HostValues`] variant stores.
pub(crate) trait Stored: Element {
    /// The elements, if `values` holds this type.
    fn view(values: &HostValues) -> Option<&[Self]>;
    /// Wrap a vector of this type.
    fn wrap(values: Vec<Self>) -> HostValues;
}

macro_rules! stored {
    ($type:ty, $variant:ident) => {
        impl Stored for $type {
            fn view(values: &HostValues) -> Option<&[Self]> {
                match values {
                    HostValues::$variant(values) => Some(values),
                    _ => None,
                }
            }
            fn wrap(values: Vec<Self>) -> HostValues {
                HostValues::$variant(values)
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
