//! One ring step: every rank sends a range to its successor, all sends reading the state from
//! before the step.
//!
//! Nothing is snapshotted wholesale. Rank `r`'s memory is written only in its predecessor's send
//! range `ranges[r - 1]`, so rank `r`'s own send range `ranges[r]` is read in place unless the two
//! overlap; only then is the send range copied first ([`save_overlapping`]). The ring schedule
//! never overlaps (each step sends distinct chunks), so it touches every element once per step:
//! a reduce-scatter transfer reads the sender's and the receiver's current values and writes the
//! receiver's output, an all-gather transfer reads the sender's and writes the receiver's.
//!
//! A rank's current value at an index is in its output once a step has written there, and in its
//! (shared, read-only) input before that ([`Ready`]); a transfer is cut into [`Kernel`]s where
//! either side switches between the two. Small steps run each kernel as it is planned; large ones
//! plan the whole step and split it across cores.

use super::kernels::Kernel;
use super::memory::{Rank, Stored};
use super::parallel;
use super::ready::Ready;
use std::ops::Range;

/// Apply one validated step (one range per rank, in bounds) with the combining `op` (when
/// `reduce`) or overwriting.
pub(crate) fn step<T: Stored>(
    ranks: &mut [Rank<T>],
    ranges: &[Range<usize>],
    reduce: bool,
    op: impl Fn(T, T) -> T + Copy + Sync,
    threads: usize,
) {
    let world = ranks.len();
    let saved = save_overlapping(ranks, ranges);
    let elements = ranges.iter().map(Range::len).sum();
    if parallel::worth(elements, size_of::<T>(), threads) > 1 {
        let kernels = plan_step(ranks, ranges, reduce, &saved);
        parallel::run_pieces(kernels, size_of::<T>(), threads, |kernel| kernel.run(op));
        for (source, range) in ranges.iter().enumerate() {
            ranks[(source + 1) % world].mark_ready(range.clone());
        }
        return;
    }
    for (source, range) in ranges.iter().enumerate() {
        if range.is_empty() {
            continue;
        }
        let destination = (source + 1) % world;
        let mut run = |kernel: Kernel<'_, T>| kernel.run(op);
        match saved.get(source).and_then(Option::as_ref) {
            Some(copy) => {
                let (own, output, ready) = ranks[destination].parts();
                let receiver = Receiver {
                    out: &mut output[range.clone()],
                    own,
                    ready,
                };
                plan_transfer(
                    range.clone(),
                    reduce,
                    Sender::Saved(copy),
                    receiver,
                    &mut run,
                );
            }
            None => {
                // A non-empty range that is not saved does not overlap what its rank receives,
                // so it cannot belong to a world of one (where a rank is its own successor).
                let Some((sender, receiver)) = sender_and_receiver(ranks, source, destination)
                else {
                    continue;
                };
                let (own, output, ready) = receiver.parts();
                let receiver = Receiver {
                    out: &mut output[range.clone()],
                    own,
                    ready,
                };
                let sender = Sender::Rank {
                    held: &sender.output()[range.clone()],
                    input: sender.input(),
                    ready: sender.ready(),
                };
                plan_transfer(range.clone(), reduce, sender, receiver, &mut run);
            }
        }
        ranks[destination].mark_ready(range.clone());
    }
}

/// For every rank whose send range overlaps what it receives in the same step, a copy of its
/// current values over its send range (`None` for the others). Empty when no rank overlaps (the
/// ring schedule), so the common case allocates nothing.
fn save_overlapping<T: Stored>(ranks: &[Rank<T>], ranges: &[Range<usize>]) -> Vec<Option<Vec<T>>> {
    let world = ranges.len();
    let overlapping = |rank: usize| overlaps(&ranges[rank], &ranges[(rank + world - 1) % world]);
    if !(0..world).any(overlapping) {
        return Vec::new();
    }
    (0..world)
        .map(|rank| {
            overlapping(rank).then(|| {
                let mut copy = Vec::with_capacity(ranges[rank].len());
                let memory = &ranks[rank];
                for (piece, held) in memory.ready().pieces(ranges[rank].clone()) {
                    let from = if held {
                        memory.output()
                    } else {
                        memory.input()
                    };
                    copy.extend_from_slice(&from[piece]);
                }
                copy
            })
        })
        .collect()
}

/// Where a transfer reads: a saved copy of the send range, or the sender's memory.
enum Sender<'a, T> {
    /// The sender's current values over the whole range.
    Saved(&'a [T]),
    /// The sender's memory.
    Rank {
        /// Its output over the range.
        held: &'a [T],
        /// Its whole input.
        input: &'a [T],
        /// Where its output holds the current values.
        ready: &'a Ready,
    },
}

/// Where a transfer writes.
struct Receiver<'a, T> {
    /// The receiver's output over the range.
    out: &'a mut [T],
    /// Its whole input.
    own: &'a [T],
    /// Where its output holds the current values (before this transfer).
    ready: &'a Ready,
}

/// Cut the transfer of `range` into kernels and hand each to `emit`, in order.
fn plan_transfer<'a, T: Copy>(
    range: Range<usize>,
    reduce: bool,
    sender: Sender<'a, T>,
    receiver: Receiver<'a, T>,
    emit: &mut impl FnMut(Kernel<'a, T>),
) {
    let Receiver {
        mut out,
        own,
        ready,
    } = receiver;
    // Both sides hold everything in their outputs (small tensors, copied by `begin`): one kernel.
    if let Sender::Rank {
        held,
        ready: sent_ready,
        ..
    } = &sender
    {
        if ready.is_all() && sent_ready.is_all() {
            emit(if reduce {
                Kernel::Accumulate {
                    dst: out,
                    src: held,
                }
            } else {
                Kernel::Copy {
                    dst: out,
                    src: held,
                }
            });
            return;
        }
    }
    // Receive `src`, the sender's current values over `piece`, cut where the receiver's change.
    let mut receive = |piece: Range<usize>, mut src: &'a [T]| {
        for (part, written) in ready.pieces(piece) {
            let (dst, rest) = std::mem::take(&mut out).split_at_mut(part.len());
            out = rest;
            let (now, later) = src.split_at(part.len());
            src = later;
            emit(match (reduce, written) {
                (false, _) => Kernel::Copy { dst, src: now },
                (true, true) => Kernel::Accumulate { dst, src: now },
                (true, false) => Kernel::Combine {
                    dst,
                    own: &own[part],
                    src: now,
                },
            });
        }
    };
    match sender {
        Sender::Saved(copy) => receive(range, copy),
        Sender::Rank { held, input, ready } => {
            for (piece, in_output) in ready.pieces(range.clone()) {
                let src = if in_output {
                    &held[piece.start - range.start..piece.end - range.start]
                } else {
                    &input[piece.clone()]
                };
                receive(piece, src);
            }
        }
    }
}

/// Every kernel of a step at once (for running them across cores). `saved` is
/// [`save_overlapping`]'s result for the same state.
fn plan_step<'a, T: Stored>(
    ranks: &'a mut [Rank<T>],
    ranges: &[Range<usize>],
    reduce: bool,
    saved: &'a [Option<Vec<T>>],
) -> Vec<Kernel<'a, T>> {
    let world = ranges.len();
    let is_saved = |rank: usize| saved.get(rank).is_some_and(Option::is_some);
    // Each rank's memory, its output cut into the part it sends (read in place unless saved)
    // and the part its predecessor writes. They are disjoint: overlapping ones are saved.
    let mut views: Vec<View<'a, T>> = ranks
        .iter_mut()
        .enumerate()
        .map(|(rank, memory)| {
            let (input, output, ready) = memory.parts();
            let sent = if is_saved(rank) {
                0..0
            } else {
                ranges[rank].clone()
            };
            let received = ranges[(rank + world - 1) % world].clone();
            let (held, written) = disjoint_pair(output, sent, received);
            View {
                input,
                ready,
                held,
                written,
            }
        })
        .collect();
    let mut kernels = Vec::with_capacity(world);
    for (source, range) in ranges.iter().enumerate() {
        if range.is_empty() {
            continue;
        }
        let destination = (source + 1) % world;
        let receiver = Receiver {
            out: std::mem::take(&mut views[destination].written),
            own: views[destination].input,
            ready: views[destination].ready,
        };
        let sender = match saved.get(source).and_then(Option::as_ref) {
            Some(copy) => Sender::Saved(copy),
            None => Sender::Rank {
                held: views[source].held,
                input: views[source].input,
                ready: views[source].ready,
            },
        };
        plan_transfer(range.clone(), reduce, sender, receiver, &mut |kernel| {
            kernels.push(kernel);
        });
    }
    kernels
}

/// One rank's memory during [`plan_step`].
struct View<'a, T> {
    input: &'a [T],
    ready: &'a Ready,
    /// The output over the rank's send range.
    held: &'a [T],
    /// The output over its predecessor's send range; taken by that transfer.
    written: &'a mut [T],
}

/// Whether two ranges share an index (empty ranges share none).
fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end && !a.is_empty() && !b.is_empty()
}

/// Borrow `buffer[read]` shared and `buffer[write]` mutably; the ranges do not overlap.
fn disjoint_pair<T>(buffer: &mut [T], read: Range<usize>, write: Range<usize>) -> (&[T], &mut [T]) {
    if read.is_empty() {
        return (&[], &mut buffer[write]);
    }
    if write.is_empty() {
        return (&buffer[read], &mut []);
    }
    if read.end <= write.start {
        let (low, high) = buffer.split_at_mut(write.start);
        (&low[read], &mut high[..write.len()])
    } else {
        let (low, high) = buffer.split_at_mut(read.start);
        (&high[..read.len()], &mut low[write])
    }
}

/// Borrow `ranks[source]` shared and `ranks[destination]` mutably (`None` if they are the same).
fn sender_and_receiver<T>(
    ranks: &mut [T],
    source: usize,
    destination: usize,
) -> Option<(&T, &mut T)> {
    if source < destination {
        let (low, high) = ranks.split_at_mut(destination);
        Some((&low[source], &mut high[0]))
    } else if source > destination {
        let (low, high) = ranks.split_at_mut(source);
        Some((&high[0], &mut low[destination]))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::memory::Memory;
    use super::super::pool::Pool;
    use crate::host::HostValues;
    use crate::{SimDevice, SimTensor};
    use ruccl_core::{DeviceId, NativeCollectiveDevice, ReduceOperation};
    use std::ops::Range;

    type Steps<'a> = &'a [(&'a [Range<usize>], Option<ReduceOperation>)];

    /// Run `steps` on the memory of `inputs` with `threads` threads, and return the outputs.
    fn run_with(inputs: &[HostValues], steps: Steps<'_>, threads: usize) -> Vec<HostValues> {
        let device = SimDevice::new();
        let devices: Vec<DeviceId> = (0..inputs.len() as u32).map(DeviceId::new).collect();
        let prepared: Vec<_> = inputs
            .iter()
            .zip(&devices)
            .map(|(values, &on)| {
                device
                    .prepare(SimTensor::new(on, values.clone()), on)
                    .unwrap()
            })
            .collect();
        let pool = Pool::default();
        let mut memory = Memory::new(inputs[0].element_type(), &prepared, inputs[0].len(), &pool);
        for (ranges, reduce) in steps {
            memory.step(ranges, *reduce, threads);
        }
        memory
            .into_outputs(&devices, None, threads)
            .into_iter()
            .map(SimTensor::into_values)
            .collect()
    }

    fn run(inputs: &[HostValues], steps: Steps<'_>) -> Vec<HostValues> {
        run_with(inputs, steps, 1)
    }

    #[test]
    fn overlapping_sends_read_the_pre_step_state() {
        // Every rank sends and receives 0..2: each destination adds its predecessor's old values.
        let outputs = run(
            &[
                HostValues::I64(vec![1, 2, 3]),
                HostValues::I64(vec![10, 20, 30]),
                HostValues::I64(vec![100, 200, 300]),
            ],
            &[(&[0..2, 0..2, 0..2], Some(ReduceOperation::Sum))],
        );
        assert_eq!(
            outputs,
            vec![
                HostValues::I64(vec![101, 202, 3]),
                HostValues::I64(vec![11, 22, 30]),
                HostValues::I64(vec![110, 220, 300])
            ]
        );
    }

    #[test]
    fn partially_overlapping_overwrites_read_the_pre_step_state() {
        let outputs = run(
            &[
                HostValues::I32(vec![1, 2, 3, 4]),
                HostValues::I32(vec![5, 6, 7, 8]),
            ],
            &[(&[1..3, 2..4], None)],
        );
        assert_eq!(
            outputs,
            vec![
                HostValues::I32(vec![1, 2, 7, 8]),
                HostValues::I32(vec![5, 2, 3, 8])
            ]
        );
    }

    #[test]
    fn a_single_rank_combines_with_its_own_pre_step_values() {
        let one_rank = [Range { start: 0, end: 2 }];
        let outputs = run(
            &[HostValues::F32(vec![3.0, 4.0])],
            &[(&one_rank, Some(ReduceOperation::Product))],
        );
        assert_eq!(outputs, vec![HostValues::F32(vec![9.0, 16.0])]);
    }

    /// Large inputs (shared, not copied) on two ranks: step 1 writes rank 1 at `a` and rank 0 at
    /// `b`; step 2 sends everything from rank 0 (so the send and the receive each span written and
    /// unwritten elements); step 3 sends it back.
    fn mixed_steps(length: usize, threads: usize) {
        let zero: Vec<i64> = (0..length as i64).collect();
        let one: Vec<i64> = (0..length as i64).map(|value| 1000 * value).collect();
        let a = length / 8..length / 3;
        let b = length / 2..length - length / 5;
        let steps: Steps<'_> = &[
            (&[a.clone(), b.clone()], Some(ReduceOperation::Sum)),
            (&[0..length, length..length], Some(ReduceOperation::Sum)),
            (&[length..length, 0..length], None),
        ];
        let outputs = run_with(
            &[HostValues::I64(zero.clone()), HostValues::I64(one.clone())],
            steps,
            threads,
        );
        let mut rank_zero = zero;
        let mut rank_one = one;
        for index in a {
            rank_one[index] += rank_zero[index];
        }
        for index in b.clone() {
            rank_zero[index] += rank_one[index];
        }
        for index in 0..length {
            rank_one[index] += rank_zero[index];
        }
        let expected = HostValues::I64(rank_one);
        assert_eq!(outputs, vec![expected.clone(), expected]);
    }

    #[test]
    fn transfers_cut_where_written_and_unwritten_elements_meet() {
        // 1 Mi elements of 8 bytes: shared inputs, and steps large enough to split across cores.
        mixed_steps(1 << 20, 1);
        mixed_steps(1 << 20, 3);
    }

    #[test]
    fn unwritten_elements_come_from_the_input_and_mean_divides_all() {
        let device = SimDevice::new();
        let on = DeviceId::new(0);
        let big: Vec<i32> = (0..100_000).map(|value| value - 50_000).collect();
        let prepared = vec![
            device
                .prepare(SimTensor::new(on, HostValues::I32(big.clone())), on)
                .unwrap(),
        ];
        let memory = Memory::new(
            crate::ElementType::I32,
            &prepared,
            big.len(),
            &Pool::default(),
        );
        let outputs = memory.into_outputs(&[on], Some(3), 2);
        let expected: Vec<i32> = big.iter().map(|value| value / 3).collect();
        assert_eq!(outputs[0].values(), &HostValues::I32(expected));
    }
}
