//! The perf check: inputs whose collective every element type computes exactly, a streaming
//! count of the elements that differ (`#wrong` in the perf tool's table), and a fingerprint of an
//! output's bits (so a harness can count the ranks whose all-reduce bits differ from rank 0's).
//!
//! [`input`] and [`Expected`] are the all-reduce's; [`collective_input`] and [`Check`] cover every
//! [`Collective`]: a reduce-scatter's rank `r` must hold block `r` of the same reduction, an
//! all-gather's block `b` must hold rank `b`'s input and a broadcast's output the root's. A
//! `seed` shifts the pattern along the index, so repeated checks (`-c N`) see other data.
//!
//! Every input element is a small integer, chosen per operation so that every partial result of
//! the ring, in whatever order a device combines, is an integer that even bf16 represents
//! exactly, for up to [`MAX_CHECKED_WORLD`] ranks: sums stay within ±4·W, a product has at most one
//! factor of 2 and one of −1, minima and maxima are inputs. So every result but `Mean`'s is exact
//! and compared bit for bit (as a value); `Mean` divides an exact sum by `W` once and is allowed
//! the element type's rounding (one unit in the last place), whether a device divides or multiplies
//! by a rounded `1/W`.
//!
//! The pattern is periodic in the index, so the reference is one period long and generating or
//! checking hundreds of megabytes stays a streaming pass. It is the
//! [conformance reference](crate::conformance::reference) specialised to these inputs: exact
//! where that one allows rounding (these results have none), and one period long.

use crate::conformance::reference::{epsilon, reduce_integer_column, reduce_integers};
use crate::host::{ElementType, HostValues};
use half::{bf16, f16};
use ruccl_core::{Collective, ReduceOperation};

/// The largest world the check is exact for (bf16 holds integers up to 256 exactly).
pub const MAX_CHECKED_WORLD: usize = 64;

/// The period of the pattern, in elements, for `operation`.
fn period(operation: ReduceOperation) -> usize {
    match operation {
        ReduceOperation::Sum | ReduceOperation::Mean => 9,
        ReduceOperation::Product => 40,
        ReduceOperation::Min | ReduceOperation::Max => 61,
    }
}

/// The integer rank `rank` contributes at `index` for `operation`.
pub fn input_integer(operation: ReduceOperation, rank: usize, index: usize) -> i64 {
    match operation {
        ReduceOperation::Sum | ReduceOperation::Mean => ((index + 3 * rank) % 9) as i64 - 4,
        ReduceOperation::Product => {
            // At most one of ranks 0..8 doubles an index, and only rank 0 negates.
            let magnitude = if rank < 8 && (index + rank) % 8 == 0 {
                2
            } else {
                1
            };
            if rank == 0 && index % 5 == 0 {
                -magnitude
            } else {
                magnitude
            }
        }
        ReduceOperation::Min | ReduceOperation::Max => ((index * 7 + rank * 13) % 61) as i64 - 30,
    }
}

/// The exact reduction at `index` over `world` ranks, as a real number (`Mean` not rounded).
fn reduced(operation: ReduceOperation, world: usize, index: usize) -> f64 {
    let column: Vec<i64> = (0..world)
        .map(|rank| input_integer(operation, rank, index))
        .collect();
    match operation {
        ReduceOperation::Mean => column.iter().sum::<i64>() as f64 / world.max(1) as f64,
        // Far from wrapping: |sums| ≤ 4·W, |products| ≤ 2.
        _ => reduce_integers(&column, operation, 64) as f64,
    }
}

/// Rank `rank`'s input: `length` elements of `element_type`.
pub fn input(
    element_type: ElementType,
    operation: ReduceOperation,
    rank: usize,
    length: usize,
) -> HostValues {
    let one_period: Vec<i64> = (0..period(operation))
        .map(|index| input_integer(operation, rank, index))
        .collect();
    cycled(element_type, &one_period, 0, length)
}

/// What every rank must hold after an all-reduce of [`input`]s over `world` ranks.
#[derive(Clone, Debug)]
pub struct Expected {
    element_type: ElementType,
    operation: ReduceOperation,
    /// One period of exact results.
    period: Vec<f64>,
}

impl Expected {
    /// The reference for `world` ranks reducing `element_type` with `operation`.
    pub fn new(element_type: ElementType, operation: ReduceOperation, world: usize) -> Self {
        let period = (0..period(operation))
            .map(|index| reference_value(element_type, operation, world, index))
            .collect();
        Self {
            element_type,
            operation,
            period,
        }
    }

    /// The expected value at `index`.
    pub fn at(&self, index: usize) -> f64 {
        self.period[index % self.period.len()]
    }

    /// How far an element may be from [`at`](Self::at): 0 but for floating-point `Mean`, which
    /// may be off by the element type's rounding.
    fn tolerance(&self, expected: f64) -> f64 {
        if self.operation != ReduceOperation::Mean || !self.element_type.is_float() {
            return 0.0;
        }
        epsilon(self.element_type) * expected.abs()
    }

    /// The number of elements of `values` that differ from the reference (a length or element
    /// type mismatch makes every element of the longer of the two wrong).
    pub fn count_wrong(&self, values: &HostValues, length: usize) -> u64 {
        if values.element_type() != self.element_type || values.len() != length {
            return length.max(values.len()) as u64;
        }
        self.count_wrong_from(values, 0)
    }

    /// Wrong elements of `values`, whose element 0 holds the result at index `offset`.
    fn count_wrong_from(&self, values: &HostValues, offset: usize) -> u64 {
        let tolerances: Vec<f64> = self
            .period
            .iter()
            .map(|&value| self.tolerance(value))
            .collect();
        count_against(values, 0..values.len(), &self.period, offset, &tolerances)
    }
}

/// The exact result rounded as the element type stores it (integer `Mean` toward zero).
fn reference_value(
    element_type: ElementType,
    operation: ReduceOperation,
    world: usize,
    index: usize,
) -> f64 {
    let exact = reduced(operation, world, index);
    match element_type {
        ElementType::F32 => f64::from(exact as f32),
        ElementType::F64 => exact,
        ElementType::F16 => f64::from(f16::from_f64(exact)),
        ElementType::BF16 => f64::from(bf16::from_f64(exact)),
        // Integers wrap in their own type (the unsigned ones hold the negative inputs modulo
        // 2^bits), so their reference is the typed reduction of the wrapped inputs.
        integer if integer.is_integer() => {
            let column: Vec<i128> = (0..world)
                .map(|rank| i128::from(input_integer(operation, rank, index)))
                .collect();
            let reduced = reduce_integer_column(&column, operation, integer);
            if integer == ElementType::U64 {
                // Compared as the same bits read as i64 (see `widen_u64`): exact in an f64.
                reduced as u64 as i64 as f64
            } else {
                reduced as f64
            }
        }
        _ => exact,
    }
}

/// A u64 element as the check compares it: its bits read as an i64, so the pattern's values
/// (small, or small negatives held modulo 2^64) stay exact in an f64, where values near 2^64
/// would be 4096 apart.
fn widen_u64(value: u64) -> f64 {
    value as i64 as f64
}

/// The period of the pattern a copying collective (all-gather, broadcast) moves, in elements.
const COPY_PERIOD: usize = 61;

/// The integer rank `rank` contributes at `index` to a collective that copies (all-gather,
/// broadcast): small, distinct per rank, exact in every element type.
pub fn copy_integer(rank: usize, index: usize) -> i64 {
    ((index * 7 + rank * 13) % COPY_PERIOD) as i64 - 30
}

/// The integer rank `rank` contributes at `index` of its input to `collective`.
pub fn collective_integer(collective: Collective, rank: usize, index: usize) -> i64 {
    match collective.operation() {
        Some(operation) => input_integer(operation, rank, index),
        None => copy_integer(rank, index),
    }
}

/// The period, in elements, of what rank inputs to `collective` hold.
fn collective_period(collective: Collective) -> usize {
    collective.operation().map_or(COPY_PERIOD, period)
}

/// `integers` (one period, cycled from `offset` to `length` elements) as host values of
/// `element_type`, rounded once to the type; streamed, never collected as integers first (a sweep's
/// largest input is hundreds of megabytes).
fn cycled(element_type: ElementType, integers: &[i64], offset: usize, length: usize) -> HostValues {
    let start = offset % integers.len().max(1);
    let repeated = integers.iter().copied().cycle().skip(start).take(length);
    match element_type {
        ElementType::F32 => HostValues::F32(repeated.map(|value| value as f32).collect()),
        ElementType::F64 => HostValues::F64(repeated.map(|value| value as f64).collect()),
        ElementType::F16 => {
            HostValues::F16(repeated.map(|value| f16::from_f64(value as f64)).collect())
        }
        ElementType::BF16 => {
            HostValues::BF16(repeated.map(|value| bf16::from_f64(value as f64)).collect())
        }
        ElementType::I32 => HostValues::I32(repeated.map(|value| value as i32).collect()),
        ElementType::I64 => HostValues::I64(repeated.collect()),
        ElementType::I8 => HostValues::I8(repeated.map(|value| value as i8).collect()),
        ElementType::U8 => HostValues::U8(repeated.map(|value| value as u8).collect()),
        ElementType::U32 => HostValues::U32(repeated.map(|value| value as u32).collect()),
        ElementType::U64 => HostValues::U64(repeated.map(|value| value as u64).collect()),
        // A type this crate does not know: f64 values, which the check counts as all wrong.
        _ => HostValues::F64(repeated.map(|value| value as f64).collect()),
    }
}

/// Rank `rank`'s input to `collective`: `length` elements of `element_type`, the pattern shifted
/// by `seed` (with seed 0 and a reducing collective, the same as [`input`]).
pub fn collective_input(
    element_type: ElementType,
    collective: Collective,
    rank: usize,
    length: usize,
    seed: usize,
) -> HostValues {
    let one_period: Vec<i64> = (0..collective_period(collective))
        .map(|index| collective_integer(collective, rank, index))
        .collect();
    cycled(element_type, &one_period, seed, length)
}

/// The integer `value` as `element_type` holds it, widened back (exact for the pattern's values;
/// an unsigned type holds a negative one modulo 2^bits).
fn stored(element_type: ElementType, value: i64) -> f64 {
    match element_type {
        ElementType::F32 => f64::from(value as f32),
        ElementType::F16 => f64::from(f16::from_f64(value as f64)),
        ElementType::BF16 => f64::from(bf16::from_f64(value as f64)),
        ElementType::I32 => f64::from(value as i32),
        ElementType::I8 => f64::from(value as i8),
        ElementType::U8 => f64::from(value as u8),
        ElementType::U32 => f64::from(value as u32),
        ElementType::U64 => widen_u64(value as u64),
        _ => value as f64,
    }
}

/// What every rank must hold after `collective` of [`collective_input`]s (one seed) over
/// `world` ranks: the perf tool's check for every collective.
#[derive(Clone, Debug)]
pub struct Check {
    element_type: ElementType,
    collective: Collective,
    world: usize,
    seed: usize,
    /// A reducing collective: one period of exact results ([`Expected`]).
    reduced: Option<Expected>,
}

impl Check {
    /// The check of `collective` over `world` ranks for inputs made with `seed`.
    pub fn new(
        element_type: ElementType,
        collective: Collective,
        world: usize,
        seed: usize,
    ) -> Self {
        let reduced = collective
            .operation()
            .map(|operation| Expected::new(element_type, operation, world));
        Self {
            element_type,
            collective,
            world,
            seed,
            reduced,
        }
    }

    /// The number of elements of rank `rank`'s output `values` that differ from what it must
    /// hold, for inputs of `input_len` elements; a length or element type other than the
    /// collective's output makes every element of the longer of the two wrong.
    pub fn count_wrong(&self, rank: usize, input_len: usize, values: &HostValues) -> u64 {
        let length = self
            .collective
            .output_len_at(rank, self.world, input_len)
            .unwrap_or(0);
        if values.element_type() != self.element_type || values.len() != length {
            return length.max(values.len()) as u64;
        }
        if length == 0 {
            return 0; // A rank that receives nothing, and holds nothing.
        }
        let block = input_len / self.world.max(1);
        match (self.collective, &self.reduced) {
            (Collective::AllReduce(_) | Collective::Reduce { .. }, Some(expected)) => {
                expected.count_wrong_from(values, self.seed)
            }
            (Collective::ReduceScatter(_), Some(expected)) => {
                expected.count_wrong_from(values, self.seed + rank * length)
            }
            (Collective::AllGather | Collective::Gather { .. }, _) => {
                let block = input_len.max(1);
                (0..self.world)
                    .map(|owner| {
                        let start = owner * input_len;
                        let end = (start + block).min(values.len());
                        self.count_copied(values, start..end, owner, 0)
                    })
                    .sum()
            }
            (Collective::Broadcast { root }, _) => self.count_copied(values, 0..length, root, 0),
            (Collective::Scatter { root }, _) => {
                self.count_copied(values, 0..length, root, rank * length)
            }
            (Collective::AllToAll, _) => (0..self.world)
                .map(|owner| {
                    self.count_copied(
                        values,
                        owner * block..(owner + 1) * block,
                        owner,
                        rank * block,
                    )
                })
                .sum(),
            // A reducing collective always has its reduction; an unknown one checks nothing.
            _ => 0,
        }
    }

    /// Wrong elements of `values[range]`, which must hold rank `owner`'s input from its element
    /// `from` on.
    fn count_copied(
        &self,
        values: &HostValues,
        range: std::ops::Range<usize>,
        owner: usize,
        from: usize,
    ) -> u64 {
        let one_period: Vec<f64> = (0..COPY_PERIOD)
            .map(|index| stored(self.element_type, copy_integer(owner, index)))
            .collect();
        count_against(
            values,
            range,
            &one_period,
            self.seed + from,
            &vec![0.0; COPY_PERIOD],
        )
    }
}

/// Wrong elements of `values[range]` against `period` cycled from `offset`, each allowed its
/// `tolerances` entry.
fn count_against(
    values: &HostValues,
    range: std::ops::Range<usize>,
    period: &[f64],
    offset: usize,
    tolerances: &[f64],
) -> u64 {
    fn count<T>(
        values: &[T],
        widen: impl Fn(&T) -> f64,
        period: &[f64],
        offset: usize,
        tolerances: &[f64],
    ) -> u64 {
        let start = offset % period.len().max(1);
        let reference = period.iter().zip(tolerances).cycle().skip(start);
        values
            .iter()
            .zip(reference)
            .filter(|(value, (expected, tolerance))| {
                let distance = (widen(value) - **expected).abs();
                // A NaN distance is never within tolerance.
                distance.is_nan() || distance > **tolerance
            })
            .count() as u64
    }
    let range = range.start.min(values.len())..range.end.min(values.len());
    match values {
        HostValues::F32(v) => count(&v[range], |&x| f64::from(x), period, offset, tolerances),
        HostValues::F64(v) => count(&v[range], |&x| x, period, offset, tolerances),
        HostValues::F16(v) => count(&v[range], |&x| f64::from(x), period, offset, tolerances),
        HostValues::BF16(v) => count(&v[range], |&x| f64::from(x), period, offset, tolerances),
        HostValues::I32(v) => count(&v[range], |&x| f64::from(x), period, offset, tolerances),
        HostValues::I64(v) => count(&v[range], |&x| x as f64, period, offset, tolerances),
        HostValues::I8(v) => count(&v[range], |&x| f64::from(x), period, offset, tolerances),
        HostValues::U8(v) => count(&v[range], |&x| f64::from(x), period, offset, tolerances),
        HostValues::U32(v) => count(&v[range], |&x| f64::from(x), period, offset, tolerances),
        HostValues::U64(v) => count(&v[range], |&x| widen_u64(x), period, offset, tolerances),
        other => {
            // A type added to ruccl-host after this check: its elements widened one by one.
            let widened: Vec<f64> = range.filter_map(|index| other.get_f64(index)).collect();
            count(&widened, |&x| x, period, offset, tolerances)
        }
    }
}

/// A 64-bit fingerprint of `values`' bits (and element type and length): two outputs with the
/// same fingerprint hold, but for a vanishing chance, the same bits. A harness compares every
/// rank's all-reduce output with rank 0's this way, in one pass and constant memory.
pub fn fingerprint(values: &HostValues) -> u64 {
    fn mix<T>(values: &[T], bits: impl Fn(&T) -> u64, seed: u64) -> u64 {
        let mut hash = seed ^ (values.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for value in values {
            hash = (hash ^ bits(value)).wrapping_mul(0x0000_0100_0000_01b3);
            hash ^= hash >> 29;
        }
        hash
    }
    match values {
        HostValues::F32(v) => mix(v, |x| u64::from(x.to_bits()), 1),
        HostValues::F64(v) => mix(v, |x| x.to_bits(), 2),
        HostValues::F16(v) => mix(v, |x| u64::from(x.to_bits()), 3),
        HostValues::BF16(v) => mix(v, |x| u64::from(x.to_bits()), 4),
        HostValues::I32(v) => mix(v, |&x| u64::from(x as u32), 5),
        HostValues::I64(v) => mix(v, |&x| x as u64, 6),
        HostValues::I8(v) => mix(v, |&x| u64::from(x as u8), 7),
        HostValues::U8(v) => mix(v, |&x| u64::from(x), 8),
        HostValues::U32(v) => mix(v, |&x| u64::from(x), 9),
        HostValues::U64(v) => mix(v, |&x| x, 10),
        other => {
            // A type added to ruccl-host after this function: its elements' bits one by one.
            let bits: Vec<u64> = (0..other.len()).filter_map(|i| other.get_bits(i)).collect();
            mix(&bits, |&x| x, 11)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Expected, MAX_CHECKED_WORLD, input, input_integer};
    use crate::host::{ElementType, HostValues};
    use ruccl_core::ReduceOperation;

    #[test]
    fn partial_results_stay_exact_in_bf16() {
        for operation in ReduceOperation::ALL {
            for index in 0..200 {
                let mut partial: i64 = if operation == ReduceOperation::Product {
                    1
                } else {
                    0
                };
                for rank in 0..MAX_CHECKED_WORLD {
                    let value = input_integer(operation, rank, index);
                    partial = match operation {
                        ReduceOperation::Product => partial * value,
                        _ => partial + value,
                    };
                    assert!(
                        partial.abs() <= 256,
                        "{operation} {index} {rank}: {partial}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_reference_counts_wrong_elements() {
        let world = 3;
        let operation = ReduceOperation::Sum;
        let expected = Expected::new(ElementType::F32, operation, world);
        let length = 20;
        let sum: Vec<f32> = (0..length)
            .map(|index| {
                (0..world)
                    .map(|rank| input_integer(operation, rank, index) as f32)
                    .sum()
            })
            .collect();
        assert_eq!(
            expected.count_wrong(&HostValues::F32(sum.clone()), length),
            0
        );
        let mut broken = sum;
        broken[7] += 1.0;
        broken[19] = f32::NAN;
        assert_eq!(expected.count_wrong(&HostValues::F32(broken), length), 2);
        assert_eq!(
            expected.count_wrong(&HostValues::I32(vec![0; length]), length),
            20
        );
        assert_eq!(
            input(ElementType::I64, operation, 1, 4),
            HostValues::I64(vec![-1, 0, 1, 2])
        );
    }

    #[test]
    fn every_collective_is_checked_against_its_own_layout() {
        use super::{Check, collective_input, fingerprint};
        use ruccl_core::Collective;
        let world = 3;
        let integers = |values: &HostValues| -> Vec<i64> {
            (0..values.len())
                .map(|index| values.get_f64(index).unwrap_or(f64::NAN) as i64)
                .collect()
        };
        let inputs = |collective, length, seed| -> Vec<Vec<i64>> {
            (0..world)
                .map(|rank| {
                    integers(&collective_input(
                        ElementType::I64,
                        collective,
                        rank,
                        length,
                        seed,
                    ))
                })
                .collect()
        };
        let seed = 5;
        // Reduce-scatter: rank 1 holds block 1 of the sum.
        let scatter = Collective::ReduceScatter(ReduceOperation::Sum);
        let all = inputs(scatter, 12, seed);
        let block: Vec<i64> = (4..8).map(|i| all.iter().map(|v| v[i]).sum()).collect();
        let check = Check::new(ElementType::I64, scatter, world, seed);
        assert_eq!(check.count_wrong(1, 12, &HostValues::I64(block.clone())), 0);
        assert_eq!(check.count_wrong(2, 12, &HostValues::I64(block)), 4);
        // All-gather: block b holds rank b's input.
        let gather = inputs(Collective::AllGather, 5, seed);
        let mut gathered: Vec<i64> = gather.concat();
        let check = Check::new(ElementType::I64, Collective::AllGather, world, seed);
        assert_eq!(
            check.count_wrong(0, 5, &HostValues::I64(gathered.clone())),
            0
        );
        gathered[7] += 1;
        assert_eq!(check.count_wrong(0, 5, &HostValues::I64(gathered)), 1);
        // Broadcast: the root's input, not another rank's.
        let broadcast = Collective::Broadcast { root: 2 };
        let sent = inputs(broadcast, 70, seed);
        let check = Check::new(ElementType::I64, broadcast, world, seed);
        assert_eq!(
            check.count_wrong(0, 70, &HostValues::I64(sent[2].clone())),
            0
        );
        assert!(check.count_wrong(0, 70, &HostValues::I64(sent[1].clone())) > 60);
        // Reduce: the sum at the root, nothing elsewhere.
        let reduce = Collective::Reduce {
            op: ReduceOperation::Sum,
            root: 1,
        };
        let all = inputs(reduce, 6, seed);
        let sum: Vec<i64> = (0..6).map(|i| all.iter().map(|v| v[i]).sum()).collect();
        let check = Check::new(ElementType::I64, reduce, world, seed);
        assert_eq!(check.count_wrong(1, 6, &HostValues::I64(sum.clone())), 0);
        assert_eq!(check.count_wrong(0, 6, &HostValues::I64(Vec::new())), 0);
        assert_eq!(check.count_wrong(0, 6, &HostValues::I64(sum)), 6);
        // Gather: every input at the root, in rank order.
        let gather = Collective::Gather { root: 0 };
        let mut gathered = inputs(gather, 5, seed).concat();
        let check = Check::new(ElementType::I64, gather, world, seed);
        assert_eq!(
            check.count_wrong(0, 5, &HostValues::I64(gathered.clone())),
            0
        );
        gathered.swap(0, 5);
        assert_eq!(check.count_wrong(0, 5, &HostValues::I64(gathered)), 2);
        // Scatter: block r of the root's input at rank r.
        let scatter = Collective::Scatter { root: 2 };
        let root = &inputs(scatter, 12, seed)[2];
        let check = Check::new(ElementType::I64, scatter, world, seed);
        let block = |rank: usize| HostValues::I64(root[4 * rank..4 * rank + 4].to_vec());
        assert_eq!(check.count_wrong(1, 12, &block(1)), 0);
        assert_eq!(check.count_wrong(0, 12, &block(1)), 4);
        // All-to-all: block j of rank r's output is block r of rank j's input.
        let all = inputs(Collective::AllToAll, 9, seed);
        let received = |rank: usize| -> Vec<i64> {
            all.iter()
                .flat_map(|input| input[3 * rank..3 * rank + 3].to_vec())
                .collect()
        };
        let check = Check::new(ElementType::I64, Collective::AllToAll, world, seed);
        assert_eq!(check.count_wrong(2, 9, &HostValues::I64(received(2))), 0);
        let mut off_by_one = received(2);
        off_by_one.rotate_left(1);
        assert!(check.count_wrong(2, 9, &HostValues::I64(off_by_one)) > 4);
        // Bits, not values: -0.0 and +0.0 print differently.
        assert_ne!(
            fingerprint(&HostValues::F32(vec![0.0, 1.0])),
            fingerprint(&HostValues::F32(vec![-0.0, 1.0]))
        );
        assert_eq!(
            fingerprint(&HostValues::F32(vec![0.5; 9])),
            fingerprint(&HostValues::F32(vec![0.5; 9]))
        );
    }
}
