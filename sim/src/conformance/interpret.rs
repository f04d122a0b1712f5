//! The plan interpreter: a generation's outputs, bit for bit, as the executor contract defines
//! them — the suite's first reference, against which every device is compared exactly.
//!
//! [`interpret`] runs a [`Plan`] (or [`run_steps`] any steps over a plan's layout) on host
//! values, element by element and as plainly as possible: the buffers start with every rank's
//! input at its placement (zeros elsewhere); in each step every transfer reads the state from
//! before the step and lands at its target; an overwriting step copies, a combining step folds,
//! per element, the values received from the senders below the receiver in ascending order, then
//! the receiver's own value, then a value it copies to itself, then the senders above it, from
//! the left (`((a ⊕ b) ⊕ own) ⊕ c`); at the end each rank
//! keeps its output range, and `Mean` divides it by the world.
//!
//! The arithmetic is the one the simulated device documents (see
//! [`SimDevice`](crate::SimDevice)), written here again, independently:
//!
//! | type                   | `⊕` for `Sum` / `Product`            | `Min` / `Max`             | `Mean`'s scaling                  |
//! |------------------------|--------------------------------------|---------------------------|-----------------------------------|
//! | f32, f64               | IEEE, rounded once per `⊕`           | a NaN loses to a number   | `/ W`, rounded once               |
//! | f16, bf16              | in f32, rounded to the type once per `⊕` | likewise              | in f32, rounded to the type once  |
//! | i8 … i64, u8 … u64     | wrapping                             | the type's own order      | `/ W`, toward zero                |
//!
//! Because a device folds in the contract's order, its `Sum`, `Product`, `Min` and `Max` outputs
//! must equal the interpreter's bit for bit ([`compare_bits`]); its `Mean` outputs too on
//! integers, and within one rounding on floats, where a device may multiply by a rounded `1/W`
//! instead of dividing.

use super::reference::{Mismatch, epsilon, smallest_subnormal};
use crate::host::{ElementType, HostValues};
use half::{bf16, f16};
use ruccl_core::{Collective, Plan, ReduceOperation, Step, TensorInfo, Transfer};

/// Why the interpreter cannot run a plan or steps on the given inputs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InterpretError {
    /// The inputs are not one per rank.
    #[error("{inputs} inputs for a plan of {world} ranks")]
    InputCount {
        /// Inputs given.
        inputs: usize,
        /// The plan's world.
        world: usize,
    },
    /// A rank's input has another length than the plan's, or another type than rank 0's.
    #[error("rank {rank}'s input is {actual}, the plan takes {expected}")]
    Input {
        /// The rank.
        rank: usize,
        /// The plan's input length and rank 0's type.
        expected: TensorInfo,
        /// This rank's.
        actual: TensorInfo,
    },
    /// The inputs hold a type the interpreter does not know.
    #[error("the interpreter does not know {0} elements")]
    UnsupportedType(ElementType),
    /// A step breaks the contract (these are the steps a device must refuse).
    #[error("step {step}: {reason}")]
    Step {
        /// The step.
        step: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// The outputs of `plan` over `inputs` (one per rank, in rank order), as the contract defines
/// them: one per rank, rank `r`'s `plan.output(r)` range, scaled for `Mean`.
///
/// ```
/// use ruccl_core::{Algorithm, Collective, Plan, ReduceOperation};
/// use ruccl_sim::HostValues;
/// use ruccl_sim::conformance::interpret::interpret;
///
/// // 1e8 + 1 + (-1e8) in f32 depends on the order: the ring and direct plans differ.
/// let inputs = [1e8f32, 1.0, -1e8].map(|value| HostValues::F32(vec![value]));
/// let sum = Collective::AllReduce(ReduceOperation::Sum);
/// let direct = Plan::new(sum, Algorithm::Direct, 3, 1)?;
/// let outputs = interpret(&direct, &inputs)?;
/// assert_eq!(outputs[2], HostValues::F32(vec![0.0])); // ((1e8 + 1) + -1e8) on every rank
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn interpret(plan: &Plan, inputs: &[HostValues]) -> Result<Vec<HostValues>, InterpretError> {
    run_steps(plan, plan.steps(), inputs)
}

/// Like [`interpret`], with `steps` instead of the plan's own (crafted steps over the plan's
/// layout and operation). Steps that break the contract — a rank outside the world, a transfer
/// to itself, an inverted or out-of-bounds range, an element overwritten twice or receiving one
/// sender twice in a step — are an [`InterpretError::Step`].
pub fn run_steps(
    plan: &Plan,
    steps: &[Step],
    inputs: &[HostValues],
) -> Result<Vec<HostValues>, InterpretError> {
    let world = plan.world();
    if inputs.len() != world {
        return Err(InterpretError::InputCount {
            inputs: inputs.len(),
            world,
        });
    }
    let Some(first) = inputs.first() else {
        return Ok(Vec::new());
    };
    let expected = TensorInfo {
        len: plan.input_len(),
        element: first.element_type(),
    };
    for (rank, input) in inputs.iter().enumerate() {
        let actual = TensorInfo {
            len: input.len(),
            element: input.element_type(),
        };
        if actual != expected {
            return Err(InterpretError::Input {
                rank,
                expected,
                actual,
            });
        }
    }
    for (index, step) in steps.iter().enumerate() {
        check_step(step, world, plan.buffer_len()).map_err(|reason| InterpretError::Step {
            step: index,
            reason,
        })?;
    }
    let operation = plan.collective().operation();
    macro_rules! run {
        ($variant:ident) => {{
            let buffers: Vec<Vec<_>> = inputs
                .iter()
                .map(|input| match input {
                    HostValues::$variant(values) => values.clone(),
                    _ => Vec::new(), // unreachable: every input has rank 0's type (checked)
                })
                .collect();
            execute(plan, steps, buffers, operation)
                .into_iter()
                .map(HostValues::$variant)
                .collect()
        }};
    }
    Ok(match first {
        HostValues::F32(_) => run!(F32),
        HostValues::F64(_) => run!(F64),
        HostValues::F16(_) => run!(F16),
        HostValues::BF16(_) => run!(BF16),
        HostValues::I32(_) => run!(I32),
        HostValues::I64(_) => run!(I64),
        HostValues::I8(_) => run!(I8),
        HostValues::U8(_) => run!(U8),
        HostValues::U32(_) => run!(U32),
        HostValues::U64(_) => run!(U64),
        other => return Err(InterpretError::UnsupportedType(other.element_type())),
    })
}

/// A step breaks none of the contract's rules ([`Step::check`], stated once in the core):
/// ranks of the world, source and target ranges inside the buffers, no element overwritten
/// twice, no sender folded into an element twice.
fn check_step(step: &Step, world: usize, buffer_len: usize) -> Result<(), String> {
    step.check(world, buffer_len)
        .map_err(|violation| violation.to_string())
}

/// Run checked `steps` on the typed buffers (each rank's input), then hand out the outputs.
fn execute<T: Arithmetic>(
    plan: &Plan,
    steps: &[Step],
    inputs: Vec<Vec<T>>,
    operation: Option<ReduceOperation>,
) -> Vec<Vec<T>> {
    let combining = operation.map_or(ReduceOperation::Sum, ReduceOperation::combining);
    let mut buffers: Vec<Vec<T>> = inputs
        .into_iter()
        .enumerate()
        .map(|(rank, input)| {
            let mut buffer = vec![T::ZERO; plan.buffer_len()];
            let placement = plan.placement(rank);
            buffer[placement..placement + input.len()].copy_from_slice(&input);
            buffer
        })
        .collect();
    for step in steps {
        // Every transfer's values as they were before the step.
        let sent: Vec<Vec<T>> = step
            .transfers
            .iter()
            .map(|transfer| buffers[transfer.from][transfer.range.clone()].to_vec())
            .collect();
        if !step.combine {
            for (transfer, values) in step.transfers.iter().zip(&sent) {
                buffers[transfer.to][transfer.target()].copy_from_slice(values);
            }
            continue;
        }
        for (to, buffer) in buffers.iter_mut().enumerate() {
            let mut incoming: Vec<(&Transfer, &Vec<T>)> = step
                .transfers
                .iter()
                .zip(&sent)
                .filter(|(transfer, _)| transfer.to == to && !transfer.range.is_empty())
                .collect();
            incoming.sort_by_key(|(transfer, _)| transfer.from);
            let (Some(low), Some(high)) = (
                incoming
                    .iter()
                    .map(|(transfer, _)| transfer.target().start)
                    .min(),
                incoming
                    .iter()
                    .map(|(transfer, _)| transfer.target().end)
                    .max(),
            ) else {
                continue;
            };
            for (element, value) in buffer.iter_mut().enumerate().take(high).skip(low) {
                *value = fold(&incoming, to, element, *value, combining);
            }
        }
    }
    let divide = operation == Some(ReduceOperation::Mean);
    let world = plan.world();
    buffers
        .into_iter()
        .enumerate()
        .map(|(rank, buffer)| {
            let output = &buffer[plan.output(rank)];
            if divide {
                output.iter().map(|&value| value.divide(world)).collect()
            } else {
                output.to_vec()
            }
        })
        .collect()
}

/// The value of rank `to`'s `element` after a combining step: the left fold, in ascending rank
/// order, of the values received and `own` at position `to` (before a value `to` copies to
/// itself); `own` if nothing arrived.
fn fold<T: Arithmetic>(
    incoming: &[(&Transfer, &Vec<T>)],
    to: usize,
    element: usize,
    own: T,
    operation: ReduceOperation,
) -> T {
    let mut folded: Option<T> = None;
    let mut own_folded = false;
    let mut received = false;
    let push = |folded: &mut Option<T>, value: T| {
        *folded = Some(match *folded {
            None => value,
            Some(left) => T::combine(operation, left, value),
        });
    };
    for (transfer, values) in incoming {
        let target = transfer.target();
        if !target.contains(&element) {
            continue;
        }
        if transfer.from >= to && !own_folded {
            push(&mut folded, own);
            own_folded = true;
        }
        push(&mut folded, values[element - target.start]);
        received = true;
    }
    if !received {
        return own;
    }
    if !own_folded {
        push(&mut folded, own);
    }
    folded.unwrap_or(own)
}

/// Element arithmetic as the contract's devices compute it.
trait Arithmetic: Copy {
    /// The value of an element no step wrote yet.
    const ZERO: Self;
    /// `left ⊕ right` for a combining operation (`Mean` combines as `Sum`).
    fn combine(operation: ReduceOperation, left: Self, right: Self) -> Self;
    /// `Mean`'s scaling of a sum over `world` ranks.
    fn divide(self, world: usize) -> Self;
}

/// IEEE arithmetic in the type itself.
macro_rules! float_arithmetic {
    ($type:ty) => {
        impl Arithmetic for $type {
            const ZERO: Self = 0.0;
            fn combine(operation: ReduceOperation, left: Self, right: Self) -> Self {
                match operation {
                    ReduceOperation::Sum | ReduceOperation::Mean => left + right,
                    ReduceOperation::Product => left * right,
                    // `min`/`max` return the number when the other operand is a NaN.
                    ReduceOperation::Min => left.min(right),
                    ReduceOperation::Max => left.max(right),
                }
            }
            fn divide(self, world: usize) -> Self {
                self / world as $type
            }
        }
    };
}

float_arithmetic!(f32);
float_arithmetic!(f64);

/// 16-bit floats: computed in f32, rounded to the type once per operation.
macro_rules! half_arithmetic {
    ($type:ty) => {
        impl Arithmetic for $type {
            const ZERO: Self = <$type>::ZERO;
            fn combine(operation: ReduceOperation, left: Self, right: Self) -> Self {
                let wide = f32::combine(operation, left.to_f32(), right.to_f32());
                <$type>::from_f32(wide)
            }
            fn divide(self, world: usize) -> Self {
                <$type>::from_f32(self.to_f32() / world as f32)
            }
        }
    };
}

half_arithmetic!(f16);
half_arithmetic!(bf16);

/// Integers: wrapping `Sum` and `Product`, the type's own order, `Mean` toward zero.
macro_rules! integer_arithmetic {
    ($type:ty) => {
        impl Arithmetic for $type {
            const ZERO: Self = 0;
            fn combine(operation: ReduceOperation, left: Self, right: Self) -> Self {
                match operation {
                    ReduceOperation::Sum | ReduceOperation::Mean => left.wrapping_add(right),
                    ReduceOperation::Product => left.wrapping_mul(right),
                    ReduceOperation::Min => left.min(right),
                    ReduceOperation::Max => left.max(right),
                }
            }
            fn divide(self, world: usize) -> Self {
                // In i128 every value and world fits, and the quotient fits the type again.
                let quotient = i128::from(self) / world.max(1) as i128;
                <$type>::try_from(quotient).unwrap_or_default()
            }
        }
    };
}

integer_arithmetic!(i8);
integer_arithmetic!(i32);
integer_arithmetic!(i64);
integer_arithmetic!(u8);
integer_arithmetic!(u32);
integer_arithmetic!(u64);

/// Compare a device's output of `collective` with the interpreter's: the same bits element for
/// element (a NaN matching any NaN: its payload is not specified), except `Mean` on floats,
/// which may differ by one rounding of the scaling — `|got − want| ≤ max(ε·|want|, the type's
/// smallest subnormal)`.
pub fn compare_bits(
    collective: Collective,
    want: &HostValues,
    got: &HostValues,
) -> Result<(), Mismatch> {
    let element_type = want.element_type();
    let scaled = collective.operation() == Some(ReduceOperation::Mean) && element_type.is_float();
    let tolerance =
        |value: f64| (epsilon(element_type) * value.abs()).max(smallest_subnormal(element_type));
    compare_elements(want, got, |index| {
        let (wanted, actual) = (want.get_bits(index), got.get_bits(index));
        if wanted == actual || (want.is_nan(index) && got.is_nan(index)) {
            return None;
        }
        let (value, other) = (
            want.get_f64(index).unwrap_or(f64::NAN),
            got.get_f64(index).unwrap_or(f64::NAN),
        );
        if scaled && value.is_finite() && (other - value).abs() <= tolerance(value) {
            return None;
        }
        Some(format!(
            "expected {} ({}), got {} ({})",
            show(want, index),
            show_bits(element_type, wanted),
            show(got, index),
            show_bits(element_type, actual)
        ))
    })
}

/// Whether two outputs hold the same bits, strictly (NaN payloads included): what "every rank's
/// output is identical" means.
pub fn same_bits(first: &HostValues, other: &HostValues) -> Result<(), Mismatch> {
    let element_type = first.element_type();
    compare_elements(first, other, |index| {
        let (wanted, actual) = (first.get_bits(index), other.get_bits(index));
        (wanted != actual).then(|| {
            format!(
                "{} ({}) against {} ({})",
                show(first, index),
                show_bits(element_type, wanted),
                show(other, index),
                show_bits(element_type, actual)
            )
        })
    })
}

/// Compare element by element with `differs` (a description when element `index` differs),
/// after the type and length.
fn compare_elements(
    want: &HostValues,
    got: &HostValues,
    differs: impl Fn(usize) -> Option<String>,
) -> Result<(), Mismatch> {
    let length = want.len();
    let whole = |detail: String| Mismatch {
        first: None,
        wrong: length.max(got.len()),
        length,
        detail,
    };
    if got.element_type() != want.element_type() {
        return Err(whole(format!(
            "the output holds {} elements, the reference {}",
            got.element_type(),
            want.element_type()
        )));
    }
    if got.len() != length {
        return Err(whole(format!(
            "the output has {} elements, the reference {length}",
            got.len()
        )));
    }
    let mut mismatch: Option<Mismatch> = None;
    for index in 0..length {
        if let Some(detail) = differs(index) {
            mismatch
                .get_or_insert_with(|| Mismatch {
                    first: Some(index),
                    wrong: 0,
                    length,
                    detail: format!("element {index}: {detail}"),
                })
                .wrong += 1;
        }
    }
    mismatch.map_or(Ok(()), Err)
}

/// Element `index` as its type writes it.
fn show(values: &HostValues, index: usize) -> String {
    match values.get_integer(index) {
        Some(integer) => integer.to_string(),
        None => values
            .get_f64(index)
            .map_or_else(|| "nothing".to_owned(), |value| format!("{value:e}")),
    }
}

/// Bits as hexadecimal digits of the type's width.
fn show_bits(element_type: ElementType, bits: Option<u64>) -> String {
    let digits = element_type.size() * 2;
    bits.map_or_else(|| "-".to_owned(), |bits| format!("0x{bits:0digits$x}"))
}

#[cfg(test)]
mod tests {
    use super::{InterpretError, compare_bits, interpret, run_steps, same_bits};
    use crate::host::HostValues;
    use half::f16;
    use ruccl_core::{Algorithm, Collective, Plan, ReduceOperation, Step, Transfer};

    fn plan(collective: Collective, algorithm: Algorithm, world: usize, length: usize) -> Plan {
        Plan::new(collective, algorithm, world, length).unwrap()
    }

    #[test]
    fn a_combining_step_folds_below_own_above_from_the_left() {
        // Rank 2 receives from ranks 3, 0 and 1 (listed so): (((x0 + x1) + x2) + x3) = 1.5,
        // where own-first gives 0.5 and descending order 0.
        let sum = Collective::AllReduce(ReduceOperation::Sum);
        let layout = plan(sum, Algorithm::Direct, 4, 1);
        let values = [1e8f32, -1e8, 1.0, 0.5];
        let inputs = values.map(|value| HostValues::F32(vec![value]));
        let step = Step {
            combine: true,
            transfers: [3, 0, 1]
                .into_iter()
                .map(|from| Transfer::new(from, 2, 0..1))
                .collect(),
        };
        let outputs = run_steps(&layout, &[step], &inputs).unwrap();
        let [x0, x1, x2, x3] = values;
        assert_eq!(outputs[2], HostValues::F32(vec![((x0 + x1) + x2) + x3]));
        assert_ne!(((x0 + x1) + x2) + x3, ((x2 + x0) + x1) + x3);
        assert_ne!(((x0 + x1) + x2) + x3, ((x3 + x2) + x1) + x0);
        assert_eq!(outputs[0], HostValues::F32(vec![x0]));
    }

    #[test]
    fn every_transfer_reads_the_state_from_before_the_step() {
        let gather = Collective::AllReduce(ReduceOperation::Sum);
        let layout = plan(gather, Algorithm::Direct, 2, 2);
        let inputs = [HostValues::I32(vec![1, 2]), HostValues::I32(vec![10, 20])];
        let swap = Step {
            combine: false,
            transfers: vec![Transfer::new(0, 1, 0..2), Transfer::new(1, 0, 0..2)],
        };
        let outputs = run_steps(&layout, &[swap], &inputs).unwrap();
        assert_eq!(outputs, vec![inputs[1].clone(), inputs[0].clone()]);
    }

    #[test]
    fn every_built_in_plan_interprets_to_the_collective() {
        for world in 1..=5 {
            for algorithm in Algorithm::BUILT_IN {
                let length = 2 * world + 1;
                let inputs: Vec<HostValues> = (0..world)
                    .map(|rank| {
                        HostValues::I64((0..length).map(|i| (rank * 10 + i) as i64).collect())
                    })
                    .collect();
                let sum: Vec<i64> = (0..length)
                    .map(|i| (0..world).map(|rank| (rank * 10 + i) as i64).sum())
                    .collect();
                let collective = Collective::AllReduce(ReduceOperation::Sum);
                let Ok(plan) = Plan::new(collective, algorithm, world, length) else {
                    continue;
                };
                let outputs = interpret(&plan, &inputs).unwrap();
                assert!(
                    outputs
                        .iter()
                        .all(|output| *output == HostValues::I64(sum.clone()))
                );
            }
        }
    }

    #[test]
    fn a_step_a_device_must_refuse_is_an_error() {
        let layout = plan(Collective::AllGather, Algorithm::Direct, 2, 2);
        let inputs = [HostValues::U8(vec![1, 2]), HostValues::U8(vec![3, 4])];
        let double = Step {
            combine: false,
            transfers: vec![Transfer::new(0, 1, 0..2), Transfer::new(0, 1, 1..3)],
        };
        assert!(matches!(
            run_steps(&layout, &[double], &inputs),
            Err(InterpretError::Step { step: 0, .. })
        ));
        assert!(matches!(
            interpret(&layout, &inputs[..1]),
            Err(InterpretError::InputCount { .. })
        ));
    }

    #[test]
    fn bits_must_match_but_a_mean_may_differ_by_one_rounding() {
        let sum = Collective::AllReduce(ReduceOperation::Sum);
        let mean = Collective::AllReduce(ReduceOperation::Mean);
        let want = HostValues::F16(vec![f16::from_f32(1.0 / 3.0)]);
        let next = HostValues::F16(vec![f16::from_bits(want_bits(&want) + 1)]);
        assert!(compare_bits(sum, &want, &next).is_err());
        assert!(compare_bits(mean, &want, &next).is_ok());
        let far = HostValues::F16(vec![f16::from_f32(0.5)]);
        assert!(compare_bits(mean, &want, &far).is_err());
        let nan = HostValues::F32(vec![f32::NAN]);
        let other_nan = HostValues::F32(vec![f32::from_bits(0x7fc0_0001)]);
        assert!(compare_bits(sum, &nan, &other_nan).is_ok());
        assert!(same_bits(&nan, &other_nan).is_err());
    }

    fn want_bits(values: &HostValues) -> u16 {
        match values {
            HostValues::F16(values) => values[0].to_bits(),
            _ => unreachable!(),
        }
    }
}
