//! The MPI datatype and operation for every (element type, reduce operation) pair, chosen so
//! that the arithmetic is the simulated device's (see `ruccl_sim::SimDevice`, "Arithmetic"):
//!
//! | element      | `Sum`, `Product`                          | `Min`, `Max`                         |
//! |--------------|-------------------------------------------|--------------------------------------|
//! | f32, f64     | `MPI_FLOAT`/`MPI_DOUBLE`, `MPI_SUM`/`PROD` | user op: `f32::min`, a NaN loses     |
//! | f16, bf16    | `MPI_UINT16_T`, user op: through f32, rounded once per combine           ||
//! | i32, i64     | `MPI_UINT32_T`/`UINT64_T`, `MPI_SUM`/`PROD` | `MPI_INT32_T`/`INT64_T`, `MIN`/`MAX` |
//! | u32, u64     | `MPI_UINT32_T`/`UINT64_T`, `MPI_SUM`/`PROD` | the same, `MIN`/`MAX`               |
//! | i8, u8       | `MPI_INT8_T`/`UINT8_T`, user op: wrapping  | `MPI_INT8_T`/`UINT8_T`, `MIN`/`MAX`  |
//!
//! Why a user-defined operation for the 16-bit floats rather than widening to f32: it keeps two
//! bytes per element on the wire (the large-message case is bandwidth-bound), needs no widened
//! copy of the buffer, and rounds after every combine exactly as the devices of one process do,
//! so a hierarchical result is a fold of per-combine-rounded partials everywhere. Integer sums
//! and products go through the unsigned types because unsigned arithmetic wraps by definition
//! in C (signed overflow is undefined there), and two's complement wrapping gives the same bits.
//! The 8-bit sums and products are user operations because Open MPI 4.1.4's vectorised
//! operations (Debian's package) saturate 8-bit `MPI_SUM` instead of wrapping: measured, two
//! processes' `-2 + 5` in `MPI_UINT8_T` gave 255. Float min/max are user operations because MPI's built-ins do not say which operand a NaN
//! yields; the devices' rule is that a NaN loses to a number.
//!
//! `Mean` reduces as `Sum`; the caller divides afterwards.

use half::{bf16, f16};
use mpi::collective::{SystemOperation, UnsafeUserOperation};
use mpi::datatype::Equivalence;
use mpi::ffi;
use mpi::raw::AsRaw;
use ruccl_core::{ElementType, ReduceOperation};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};

/// A datatype and an operation for one element type: what `MPI_Iallreduce` and
/// `MPI_Ireduce_scatter_block` get. Only [`Reductions::get`] makes one, so the datatype's size
/// is always the element type's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reduction {
    pub(crate) element: ElementType,
    pub(crate) datatype: ffi::MPI_Datatype,
    pub(crate) op: ffi::MPI_Op,
}

/// The user-defined operations of one communicator, created after `MPI_Init` and freed (on
/// drop) before `MPI_Finalize`, both under the MPI lock.
pub(crate) struct Reductions {
    user: HashMap<(ElementType, ReduceOperation), UnsafeUserOperation>,
}

impl Reductions {
    /// Creates the user-defined operations. Call with the MPI lock held.
    pub(crate) fn new() -> Self {
        let mut user = HashMap::new();
        let mut add = |element, operation, function: UserFunction| {
            // SAFETY: `get` pairs each of these operations only with the datatype whose
            // elements `function` reads and writes: `MPI_FLOAT` for f32, `MPI_DOUBLE` for f64,
            // `MPI_UINT16_T` for f16 and bf16 (two bytes, any bit pattern valid), `MPI_INT8_T`
            // for i8 and `MPI_UINT8_T` for u8.
            let op = unsafe { UnsafeUserOperation::commutative(function) };
            user.insert((element, operation), op);
        };
        add(ElementType::F32, ReduceOperation::Min, reduce::<f32, MIN>);
        add(ElementType::F32, ReduceOperation::Max, reduce::<f32, MAX>);
        add(ElementType::F64, ReduceOperation::Min, reduce::<f64, MIN>);
        add(ElementType::F64, ReduceOperation::Max, reduce::<f64, MAX>);
        add(ElementType::F16, ReduceOperation::Sum, reduce::<f16, SUM>);
        add(
            ElementType::F16,
            ReduceOperation::Product,
            reduce::<f16, PRODUCT>,
        );
        add(ElementType::F16, ReduceOperation::Min, reduce::<f16, MIN>);
        add(ElementType::F16, ReduceOperation::Max, reduce::<f16, MAX>);
        add(ElementType::BF16, ReduceOperation::Sum, reduce::<bf16, SUM>);
        add(
            ElementType::BF16,
            ReduceOperation::Product,
            reduce::<bf16, PRODUCT>,
        );
        add(ElementType::BF16, ReduceOperation::Min, reduce::<bf16, MIN>);
        add(ElementType::BF16, ReduceOperation::Max, reduce::<bf16, MAX>);
        add(ElementType::I8, ReduceOperation::Sum, reduce::<i8, SUM>);
        add(
            ElementType::I8,
            ReduceOperation::Product,
            reduce::<i8, PRODUCT>,
        );
        add(ElementType::U8, ReduceOperation::Sum, reduce::<u8, SUM>);
        add(
            ElementType::U8,
            ReduceOperation::Product,
            reduce::<u8, PRODUCT>,
        );
        Reductions { user }
    }

    /// The reduction for `element` under `operation` (`Mean` as `Sum`); `None` if a user
    /// operation `new` should have made is missing, or for an element type added to the core
    /// after this crate.
    pub(crate) fn get(
        &self,
        element: ElementType,
        operation: ReduceOperation,
    ) -> Option<Reduction> {
        let operation = operation.combining();
        let user = |this: &Self| this.user.get(&(element, operation)).map(|op| op.as_raw());
        let system = match operation {
            ReduceOperation::Product => SystemOperation::product(),
            ReduceOperation::Min => SystemOperation::min(),
            ReduceOperation::Max => SystemOperation::max(),
            ReduceOperation::Sum | ReduceOperation::Mean => SystemOperation::sum(),
        }
        .as_raw();
        let arithmetic = matches!(operation, ReduceOperation::Sum | ReduceOperation::Product);
        let (datatype, op) = match element {
            ElementType::F32 if arithmetic => (f32::equivalent_datatype().as_raw(), system),
            ElementType::F64 if arithmetic => (f64::equivalent_datatype().as_raw(), system),
            ElementType::F32 => (f32::equivalent_datatype().as_raw(), user(self)?),
            ElementType::F64 => (f64::equivalent_datatype().as_raw(), user(self)?),
            ElementType::F16 | ElementType::BF16 => {
                (u16::equivalent_datatype().as_raw(), user(self)?)
            }
            ElementType::I32 if arithmetic => (u32::equivalent_datatype().as_raw(), system),
            ElementType::I64 if arithmetic => (u64::equivalent_datatype().as_raw(), system),
            ElementType::I32 => (i32::equivalent_datatype().as_raw(), system),
            ElementType::I64 => (i64::equivalent_datatype().as_raw(), system),
            ElementType::I8 if arithmetic => (i8::equivalent_datatype().as_raw(), user(self)?),
            ElementType::U8 if arithmetic => (u8::equivalent_datatype().as_raw(), user(self)?),
            ElementType::I8 => (i8::equivalent_datatype().as_raw(), system),
            ElementType::U8 => (u8::equivalent_datatype().as_raw(), system),
            ElementType::U32 => (u32::equivalent_datatype().as_raw(), system),
            ElementType::U64 => (u64::equivalent_datatype().as_raw(), system),
            _ => return None,
        };
        Some(Reduction {
            element,
            datatype,
            op,
        })
    }
}

/// The datatype that moves `element`s without arithmetic (gathers, broadcasts); `None` for an
/// element type added to the core after this crate.
pub(crate) fn move_datatype(element: ElementType) -> Option<ffi::MPI_Datatype> {
    Some(match element {
        ElementType::F32 => f32::equivalent_datatype().as_raw(),
        ElementType::F64 => f64::equivalent_datatype().as_raw(),
        ElementType::F16 | ElementType::BF16 => u16::equivalent_datatype().as_raw(),
        ElementType::I32 => i32::equivalent_datatype().as_raw(),
        ElementType::I64 => i64::equivalent_datatype().as_raw(),
        ElementType::I8 => i8::equivalent_datatype().as_raw(),
        ElementType::U8 => u8::equivalent_datatype().as_raw(),
        ElementType::U32 => u32::equivalent_datatype().as_raw(),
        ElementType::U64 => u64::equivalent_datatype().as_raw(),
        _ => return None,
    })
}

/// The signature MPI calls a user-defined operation with.
type UserFunction =
    unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut ffi::MPI_Datatype);

/// The operation codes of [`Combine::combine`].
pub(crate) const SUM: u8 = 0;
/// See [`SUM`].
pub(crate) const PRODUCT: u8 = 1;
/// See [`SUM`].
pub(crate) const MIN: u8 = 2;
/// See [`SUM`].
pub(crate) const MAX: u8 = 3;

/// An element a user-defined operation combines.
pub(crate) trait Combine: Copy {
    /// `incoming OP current`, as the simulated device computes it.
    fn combine<const OP: u8>(incoming: Self, current: Self) -> Self;
}

/// Implements [`Combine`] for a two's complement integer: wrapping sum and product.
macro_rules! integer_combine {
    ($type:ty) => {
        impl Combine for $type {
            fn combine<const OP: u8>(incoming: Self, current: Self) -> Self {
                match OP {
                    SUM => incoming.wrapping_add(current),
                    PRODUCT => incoming.wrapping_mul(current),
                    MIN => Ord::min(incoming, current),
                    _ => Ord::max(incoming, current),
                }
            }
        }
    };
}

integer_combine!(i32);
integer_combine!(i64);
integer_combine!(i8);
integer_combine!(u8);
integer_combine!(u32);
integer_combine!(u64);

impl Combine for f32 {
    fn combine<const OP: u8>(incoming: Self, current: Self) -> Self {
        match OP {
            SUM => incoming + current,
            PRODUCT => incoming * current,
            MIN => incoming.min(current),
            _ => incoming.max(current),
        }
    }
}

impl Combine for f64 {
    fn combine<const OP: u8>(incoming: Self, current: Self) -> Self {
        match OP {
            SUM => incoming + current,
            PRODUCT => incoming * current,
            MIN => incoming.min(current),
            _ => incoming.max(current),
        }
    }
}

impl Combine for f16 {
    fn combine<const OP: u8>(incoming: Self, current: Self) -> Self {
        f16::from_f32(f32::combine::<OP>(incoming.to_f32(), current.to_f32()))
    }
}

impl Combine for bf16 {
    fn combine<const OP: u8>(incoming: Self, current: Self) -> Self {
        bf16::from_f32(f32::combine::<OP>(incoming.to_f32(), current.to_f32()))
    }
}

/// A user-defined operation: `inout[i] = incoming[i] OP inout[i]` for `*len` elements.
///
/// # Safety
///
/// MPI calls it with `incoming` and `inout` pointing at `*len` elements of the datatype the
/// operation was paired with, whose size and alignment are `T`'s (see [`Reductions::new`]).
unsafe extern "C" fn reduce<T: Combine, const OP: u8>(
    incoming: *mut c_void,
    inout: *mut c_void,
    len: *mut c_int,
    _datatype: *mut ffi::MPI_Datatype,
) {
    // SAFETY: MPI passes a valid pointer to the element count.
    let len = usize::try_from(unsafe { *len }).unwrap_or(0);
    if len == 0 || incoming.is_null() || inout.is_null() {
        return;
    }
    // SAFETY: MPI owns both arrays for the duration of the call; each holds `len` elements of
    // `T`'s size (the paired datatype) and they do not overlap (MPI's rule for user functions).
    let (incoming, inout) = unsafe {
        (
            std::slice::from_raw_parts(incoming.cast::<T>(), len),
            std::slice::from_raw_parts_mut(inout.cast::<T>(), len),
        )
    };
    for (current, incoming) in inout.iter_mut().zip(incoming) {
        *current = T::combine::<OP>(*incoming, *current);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T: Combine, const OP: u8>(incoming: &mut [T], inout: &mut [T]) {
        let mut len = c_int::try_from(inout.len()).unwrap();
        // SAFETY: both slices hold `len` elements of T and are distinct.
        unsafe {
            reduce::<T, OP>(
                incoming.as_mut_ptr().cast(),
                inout.as_mut_ptr().cast(),
                &mut len,
                std::ptr::null_mut(),
            );
        }
    }

    #[test]
    fn half_sum_rounds_once_per_combine() {
        // 2048 + 1 is not representable in f16: it rounds to even (2048).
        let mut incoming = [f16::from_f32(1.0), f16::from_f32(0.5)];
        let mut inout = [f16::from_f32(2048.0), f16::from_f32(0.25)];
        run::<f16, SUM>(&mut incoming, &mut inout);
        assert_eq!(inout, [f16::from_f32(2048.0), f16::from_f32(0.75)]);
    }

    #[test]
    fn float_min_and_max_let_a_nan_lose() {
        let mut incoming = [f32::NAN, 1.0];
        let mut inout = [2.0, f32::NAN];
        run::<f32, MIN>(&mut incoming, &mut inout);
        assert_eq!(inout, [2.0, 1.0]);
        let mut incoming = [bf16::NAN, bf16::from_f32(-3.0)];
        let mut inout = [bf16::from_f32(-1.0), bf16::from_f32(5.0)];
        run::<bf16, MAX>(&mut incoming, &mut inout);
        assert_eq!(inout, [bf16::from_f32(-1.0), bf16::from_f32(5.0)]);
    }

    #[test]
    fn product_multiplies_every_element() {
        let mut incoming = [3.0f64, -2.0];
        let mut inout = [0.5, 4.0];
        run::<f64, PRODUCT>(&mut incoming, &mut inout);
        assert_eq!(inout, [1.5, -8.0]);
    }
}
