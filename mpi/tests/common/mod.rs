//! Inputs and references shared by the multi-process tests (`multiprocess.rs`, the engine;
//! `hierarchical.rs`, the hierarchical communicator): small exact values, so that every sum,
//! product, minimum and maximum over a few contributors is exact in every type (bf16 holds
//! integers up to 256 exactly, i8 up to 127) and the reduction order cannot change a bit.

use half::{bf16, f16};
use ruccl_core::{ElementType, ReduceOperation};
use ruccl_mpi::{HostValues, MpiInterProcess, MpiRuntime};
use std::time::{Duration, Instant};

/// Contributor `who`'s element `index` for `operation` (never negative in an unsigned type).
pub fn value(who: usize, index: usize, element: ElementType, operation: ReduceOperation) -> f64 {
    let offset = |signed: f64| if element.is_unsigned() { 0.0 } else { signed };
    match operation {
        ReduceOperation::Sum | ReduceOperation::Mean => {
            ((who * 7 + index * 3) % 11) as f64 - offset(5.0)
        }
        ReduceOperation::Product => {
            let factors = if element.is_float() {
                [1.0, -1.0, 2.0, 0.5]
            } else if element.is_unsigned() {
                [1.0, 1.0, 2.0, 3.0]
            } else {
                [1.0, -1.0, 2.0, 3.0]
            };
            factors[(who + index) % 4]
        }
        ReduceOperation::Min | ReduceOperation::Max => {
            ((who * 5 + index * 3) % 13) as f64 - offset(6.0)
        }
    }
}

/// Exact small values as a buffer of `element`.
pub fn buffer(element: ElementType, values: &[f64]) -> HostValues {
    fn cast<T>(values: &[f64], from: impl Fn(f64) -> T) -> Vec<T> {
        values.iter().map(|value| from(*value)).collect()
    }
    match element {
        ElementType::F32 => cast(values, |v| v as f32).into(),
        ElementType::F64 => values.to_vec().into(),
        ElementType::F16 => cast(values, f16::from_f64).into(),
        ElementType::BF16 => cast(values, bf16::from_f64).into(),
        ElementType::I32 => cast(values, |v| v as i32).into(),
        ElementType::I64 => cast(values, |v| v as i64).into(),
        ElementType::I8 => cast(values, |v| v as i8).into(),
        ElementType::U8 => cast(values, |v| v as u8).into(),
        ElementType::U32 => cast(values, |v| v as u32).into(),
        ElementType::U64 => cast(values, |v| v as u64).into(),
        other => panic!("no test values for {other}: add an arm here"),
    }
}

/// Contributor `who`'s input of `len` elements.
pub fn input(
    who: usize,
    len: usize,
    element: ElementType,
    operation: ReduceOperation,
) -> HostValues {
    let values: Vec<f64> = (0..len)
        .map(|index| value(who, index, element, operation))
        .collect();
    buffer(element, &values)
}

/// The reduction over `count` contributors' inputs, computed on exact values; `Mean` divides
/// the exact sum once, in the type, as the simulated device does (rounding toward zero for
/// integers).
pub fn reference(
    count: usize,
    len: usize,
    element: ElementType,
    operation: ReduceOperation,
) -> HostValues {
    let fold = |index: usize| {
        let values = (0..count).map(|who| value(who, index, element, operation));
        match operation {
            ReduceOperation::Sum | ReduceOperation::Mean => values.sum::<f64>(),
            ReduceOperation::Product => values.product::<f64>(),
            ReduceOperation::Min => values.fold(f64::INFINITY, f64::min),
            ReduceOperation::Max => values.fold(f64::NEG_INFINITY, f64::max),
        }
    };
    let folded: Vec<f64> = (0..len).map(fold).collect();
    let reduced = buffer(element, &folded);
    if operation != ReduceOperation::Mean {
        return reduced;
    }
    let divisor = count as f32;
    match reduced {
        HostValues::F32(v) => v
            .into_iter()
            .map(|x| x / divisor)
            .collect::<Vec<_>>()
            .into(),
        HostValues::F64(v) => v
            .into_iter()
            .map(|x| x / count as f64)
            .collect::<Vec<_>>()
            .into(),
        HostValues::F16(v) => v
            .into_iter()
            .map(|x| f16::from_f32(x.to_f32() / divisor))
            .collect::<Vec<_>>()
            .into(),
        HostValues::BF16(v) => v
            .into_iter()
            .map(|x| bf16::from_f32(x.to_f32() / divisor))
            .collect::<Vec<_>>()
            .into(),
        // Sums of these small values divided exactly in f64 and truncated: toward zero.
        _ => buffer(
            element,
            &folded
                .iter()
                .map(|sum| (sum / count as f64).trunc())
                .collect::<Vec<_>>(),
        ),
    }
}

/// Whether two buffers hold the same type and bits (floats compared bit for bit).
pub fn same_bits(actual: &HostValues, expected: &HostValues) -> bool {
    fn bits<T: Copy, B: PartialEq>(a: &[T], b: &[T], f: impl Fn(T) -> B) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| f(*x) == f(*y))
    }
    match (actual, expected) {
        (HostValues::F32(a), HostValues::F32(b)) => bits(a, b, f32::to_bits),
        (HostValues::F64(a), HostValues::F64(b)) => bits(a, b, f64::to_bits),
        (HostValues::F16(a), HostValues::F16(b)) => bits(a, b, f16::to_bits),
        (HostValues::BF16(a), HostValues::BF16(b)) => bits(a, b, bf16::to_bits),
        (a, b) => a == b,
    }
}

/// Whether a scenario passed on every process (`failed_here`: it failed on this one), agreed over
/// `control` within `within`; this process reports why it says no. A control communicator that
/// fails ends the job (exit 3): nothing after it could be trusted.
pub fn passed_everywhere(
    control: &MpiInterProcess,
    runtime: &MpiRuntime,
    process: usize,
    failed_here: bool,
    within: Duration,
) -> bool {
    let flag = HostValues::I32(vec![i32::from(failed_here)]);
    match control.all_reduce(
        Ok(flag),
        ReduceOperation::Max,
        Some(Instant::now() + within),
    ) {
        Ok(HostValues::I32(flags)) => flags == [0],
        Ok(other) => {
            eprintln!("[process {process}] the control verdict came back as {other:?}");
            false
        }
        Err(error) => {
            eprintln!("[process {process}] the control communicator failed: {error}");
            runtime.abort_job(3);
        }
    }
}
