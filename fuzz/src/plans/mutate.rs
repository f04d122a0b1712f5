//! Edits of a plan's parts: the near misses of a correct schedule (a step dropped, a transfer
//! moved, a range one element off, a block landing one place over, a transfer turned into a
//! local copy, a layout shifted) that a checker must tell from the schedules they came from.

use ruccl_core::{Collective, PlanParts, ReduceOperation, Transfer};

/// What a [`Mutation`] does; its bytes `a`, `b`, `c` pick the step, transfer and value (each
/// taken modulo what there is; an edit of something that does not exist does nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MutationKind {
    /// Remove step `a`.
    RemoveStep,
    /// Insert a copy of step `a` after it.
    DuplicateStep,
    /// Swap steps `a` and `b`.
    SwapSteps,
    /// Turn step `a` from combining to overwriting or back.
    FlipCombine,
    /// Remove transfer `b` of step `a`.
    RemoveTransfer,
    /// Add a copy of transfer `b` of step `a` to the step.
    DuplicateTransfer,
    /// Set the sender of transfer `b` of step `a` to `c` modulo `W + 1`.
    SetFrom,
    /// Set the receiver of transfer `b` of step `a` to `c` modulo `W + 1`.
    SetTo,
    /// Move the start of transfer `b` of step `a` by `c` (signed), and where it lands with it
    /// (the remaining elements land where they did).
    ShiftStart,
    /// Move the end of transfer `b` of step `a` by `c` (signed).
    ShiftEnd,
    /// Cut transfer `b` of step `a` in two at `c` elements from its start, each half landing
    /// where it did (the same schedule).
    SplitTransfer,
    /// Move transfer `b` of step `a` to step `c`.
    MoveTransfer,
    /// Cut step `a` in two before its transfer `b`.
    SplitStep,
    /// Join step `a` and the step after it (keeping step `a`'s combine flag).
    MergeSteps,
    /// Move a layout value by `c` (signed): `a` modulo 6 picks the buffer length, placement `b`,
    /// output `b`'s start or end, the input length, or the world (one less for an even `c`, one
    /// more for an odd one).
    Layout,
    /// Claim another collective: `a` modulo 8 picks the kind (`Collective::KINDS`' order), `b`
    /// the operation, `c` the root (up to one past the world).
    Retarget,
    /// Move where transfer `b` of step `a` lands by `c` (signed), its source unchanged.
    ShiftAt,
    /// Turn transfer `b` of step `a` into a local copy: its receiver becomes its sender for an
    /// even `c`, its sender its receiver for an odd one.
    SelfTransfer,
}

impl MutationKind {
    /// Every kind, in decoding order.
    pub const ALL: [MutationKind; 18] = [
        MutationKind::RemoveStep,
        MutationKind::DuplicateStep,
        MutationKind::SwapSteps,
        MutationKind::FlipCombine,
        MutationKind::RemoveTransfer,
        MutationKind::DuplicateTransfer,
        MutationKind::SetFrom,
        MutationKind::SetTo,
        MutationKind::ShiftStart,
        MutationKind::ShiftEnd,
        MutationKind::SplitTransfer,
        MutationKind::MoveTransfer,
        MutationKind::SplitStep,
        MutationKind::MergeSteps,
        MutationKind::Layout,
        MutationKind::Retarget,
        MutationKind::ShiftAt,
        MutationKind::SelfTransfer,
    ];
}

/// One edit of a plan's parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mutation {
    /// What it does.
    pub kind: MutationKind,
    /// Usually the step.
    pub a: u8,
    /// Usually the transfer.
    pub b: u8,
    /// Usually the value.
    pub c: u8,
}

/// `byte` modulo `len`, if there is anything to pick.
fn pick(byte: u8, len: usize) -> Option<usize> {
    (len > 0).then(|| usize::from(byte) % len)
}

/// `value` moved by the signed `by`, saturating at both ends.
fn shifted(value: usize, by: u8) -> usize {
    value.saturating_add_signed(isize::from(by as i8))
}

impl Mutation {
    /// Apply the edit to `parts`.
    pub fn apply(&self, parts: &mut PlanParts) {
        let Mutation { kind, a, b, c } = *self;
        let steps = parts.steps.len();
        let world = parts.world;
        // Transfer `b` of step `a`, if both exist.
        let transfer = |parts: &mut PlanParts| -> Option<(usize, usize)> {
            let step = pick(a, parts.steps.len())?;
            let number = pick(b, parts.steps[step].transfers.len())?;
            Some((step, number))
        };
        match kind {
            MutationKind::RemoveStep => {
                if let Some(step) = pick(a, steps) {
                    parts.steps.remove(step);
                }
            }
            MutationKind::DuplicateStep => {
                if let Some(step) = pick(a, steps) {
                    let copy = parts.steps[step].clone();
                    parts.steps.insert(step + 1, copy);
                }
            }
            MutationKind::SwapSteps => {
                if let (Some(first), Some(second)) = (pick(a, steps), pick(b, steps)) {
                    parts.steps.swap(first, second);
                }
            }
            MutationKind::FlipCombine => {
                if let Some(step) = pick(a, steps) {
                    parts.steps[step].combine = !parts.steps[step].combine;
                }
            }
            MutationKind::RemoveTransfer => {
                if let Some((step, number)) = transfer(parts) {
                    parts.steps[step].transfers.remove(number);
                }
            }
            MutationKind::DuplicateTransfer => {
                if let Some((step, number)) = transfer(parts) {
                    let copy = parts.steps[step].transfers[number].clone();
                    parts.steps[step].transfers.push(copy);
                }
            }
            MutationKind::SetFrom | MutationKind::SetTo => {
                if let Some((step, number)) = transfer(parts) {
                    let rank = usize::from(c) % (world + 1);
                    let moved = &mut parts.steps[step].transfers[number];
                    if kind == MutationKind::SetFrom {
                        moved.from = rank;
                    } else {
                        moved.to = rank;
                    }
                }
            }
            MutationKind::ShiftStart | MutationKind::ShiftEnd | MutationKind::ShiftAt => {
                if let Some((step, number)) = transfer(parts) {
                    let edited = &mut parts.steps[step].transfers[number];
                    match kind {
                        MutationKind::ShiftStart => {
                            let start = shifted(edited.range.start, c);
                            // The elements that stay land where they did: `at` moves as far.
                            edited.at = if start >= edited.range.start {
                                edited.at.saturating_add(start - edited.range.start)
                            } else {
                                edited.at.saturating_sub(edited.range.start - start)
                            };
                            edited.range.start = start;
                        }
                        MutationKind::ShiftEnd => edited.range.end = shifted(edited.range.end, c),
                        _ => edited.at = shifted(edited.at, c),
                    }
                }
            }
            MutationKind::SelfTransfer => {
                if let Some((step, number)) = transfer(parts) {
                    let edited = &mut parts.steps[step].transfers[number];
                    if c % 2 == 0 {
                        edited.to = edited.from;
                    } else {
                        edited.from = edited.to;
                    }
                }
            }
            MutationKind::SplitTransfer => {
                if let Some((step, number)) = transfer(parts) {
                    let moved = parts.steps[step].transfers[number].clone();
                    let length = moved.range.end.saturating_sub(moved.range.start);
                    let cut = usize::from(c) % length.saturating_add(1);
                    let middle = moved.range.start + cut;
                    parts.steps[step].transfers[number].range.end = middle;
                    parts.steps[step].transfers.insert(
                        number + 1,
                        Transfer {
                            range: middle..moved.range.end,
                            at: moved.at.saturating_add(cut),
                            ..moved
                        },
                    );
                }
            }
            MutationKind::MoveTransfer => {
                if let (Some((step, number)), Some(target)) = (transfer(parts), pick(c, steps)) {
                    let moved = parts.steps[step].transfers.remove(number);
                    parts.steps[target].transfers.push(moved);
                }
            }
            MutationKind::SplitStep => {
                if let Some(step) = pick(a, steps) {
                    let count = parts.steps[step].transfers.len();
                    let at = usize::from(b) % (count + 1);
                    let rest = parts.steps[step].transfers.split_off(at);
                    let combine = parts.steps[step].combine;
                    parts.steps.insert(
                        step + 1,
                        ruccl_core::Step {
                            combine,
                            transfers: rest,
                        },
                    );
                }
            }
            MutationKind::MergeSteps => {
                if let Some(step) = pick(a, steps).filter(|&step| step + 1 < steps) {
                    let next = parts.steps.remove(step + 1);
                    parts.steps[step].transfers.extend(next.transfers);
                }
            }
            MutationKind::Layout => match a % 6 {
                0 => parts.buffer_len = shifted(parts.buffer_len, c),
                1 => {
                    if let Some(rank) = pick(b, parts.placements.len()) {
                        parts.placements[rank] = shifted(parts.placements[rank], c);
                    }
                }
                2 | 3 => {
                    if let Some(rank) = pick(b, parts.outputs.len()) {
                        let output = &mut parts.outputs[rank];
                        if a % 6 == 2 {
                            output.start = shifted(output.start, c);
                        } else {
                            output.end = shifted(output.end, c);
                        }
                    }
                }
                4 => parts.input_len = shifted(parts.input_len, c),
                _ => {
                    parts.world = if c % 2 == 0 {
                        world.saturating_sub(1)
                    } else {
                        world + 1
                    }
                }
            },
            MutationKind::Retarget => {
                let operation = ReduceOperation::ALL[usize::from(b) % ReduceOperation::ALL.len()];
                let kind = Collective::KINDS[usize::from(a) % Collective::KINDS.len()];
                parts.collective = kind
                    .with_operation(operation)
                    .with_root(usize::from(c) % (world + 2));
            }
        }
    }
}
