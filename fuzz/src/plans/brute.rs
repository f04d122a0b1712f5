//! A brute-force, element-level simulator of [`PlanParts`], written from DESIGN.md's contract
//! (v3) and independent of the core's symbolic checker: what the `plans` target judges `verify` by.
//!
//! Every element of every rank's buffer holds a [`Value`]: nothing yet, or the tree of the
//! contract's folds over input elements. A step is run literally as the contract words it — read
//! every transfer's range from a copy of the state before the step and deliver it element by
//! element to `at..at + len` of the receiver (the sender itself for a local copy); per receiving
//! element, either the one value an overwriting step delivers, or the fold, from the left, of the
//! received values and the receiver's own in ascending rank order (the receiver's own value at its
//! own position, so a value it copies to itself comes right after it) — and every defect of the
//! first stage that has one is collected (not only the first): the layout, then each step in turn
//! (its malformed transfers first, then what it reads and writes), then the outputs' contents,
//! then (all-reduce) whether every rank's output is the same tree as rank 0's. A plan is correct
//! exactly when no stage has a defect; a refusal is right exactly when it names one of the
//! defects of that stage ([`Examination::names`]).
//!
//! Trees hold at most `W` leaves: a fold that would hold more is [`Value::Overfull`], which no
//! correct output can hold (a reduction has `W` contributions, a copy one), so the trees stay
//! small whatever a wrong schedule does.

use ruccl_core::{Collective, PlanParts, ScheduleViolation, Step, StepViolation};
use std::rc::Rc;

/// The most buffer elements (all ranks together) the simulator runs; larger plans are judged by
/// their layout only, and must be refused as too large (the target never builds plans between
/// this and the core's own bound).
pub const SIMULATED_ELEMENTS: usize = 1 << 16;

/// A fold tree over input elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tree {
    /// Element `index` of rank `rank`'s input, as it is.
    Input {
        /// The rank whose input it is.
        rank: usize,
        /// The element of that input.
        index: usize,
    },
    /// `left ⊕ right`, `left` being what was folded so far.
    Fold(Rc<Tree>, Rc<Tree>),
}

impl Tree {
    /// Every input element of the tree, with repetition, left to right.
    pub fn leaves(&self) -> Vec<(usize, usize)> {
        let mut leaves = Vec::new();
        let mut pending = vec![self];
        while let Some(tree) = pending.pop() {
            match tree {
                Tree::Input { rank, index } => leaves.push((*rank, *index)),
                Tree::Fold(left, right) => {
                    pending.push(right);
                    pending.push(left);
                }
            }
        }
        leaves
    }
}

/// What one buffer element holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// Nothing: no input was placed there and no step wrote it.
    Unset,
    /// A tree of `leaves` input elements, `leaves <= W`.
    Known {
        /// The tree.
        tree: Rc<Tree>,
        /// How many input elements it holds.
        leaves: usize,
    },
    /// A fold of more than `W` input elements: wrong wherever it ends up.
    Overfull,
}

/// One defect of a plan, in the words of the contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Defect {
    /// No rank at all.
    EmptyWorld,
    /// Another number of placements or outputs than ranks.
    RankCount {
        /// `placements` or `outputs`.
        what: &'static str,
        /// The world.
        world: usize,
        /// How many the plan lists.
        actual: usize,
    },
    /// The collective cannot take this input on this world (a root outside it, a reduce-scatter,
    /// scatter or all-to-all input not in `W` equal blocks, an all-gather or gather output beyond
    /// `usize`).
    Impossible,
    /// A rank's input does not fit its buffer where it is placed.
    PlacementOutOfBounds {
        /// The rank.
        rank: usize,
        /// Its placement.
        placement: usize,
        /// Where its input would end (saturated).
        end: usize,
        /// The buffer length.
        buffer_len: usize,
    },
    /// A rank's output is inverted, leaves the buffer, or has another length than the
    /// collective's output.
    BadOutput {
        /// The rank.
        rank: usize,
        /// The range's start.
        start: usize,
        /// The range's end.
        end: usize,
        /// The collective's output length.
        expected: usize,
        /// The buffer length.
        buffer_len: usize,
    },
    /// More buffer elements than [`SIMULATED_ELEMENTS`].
    TooLarge {
        /// The world.
        world: usize,
        /// Elements per buffer.
        buffer_len: usize,
    },
    /// A transfer names a rank outside the world.
    NoSuchRank {
        /// The step.
        step: usize,
        /// The transfer's index in the step.
        transfer: usize,
        /// The rank named.
        rank: usize,
        /// The world.
        world: usize,
    },
    /// A transfer's range is inverted, or its source or its target (`at..at + len`) leaves the
    /// buffers.
    OutOfBounds {
        /// The step.
        step: usize,
        /// The transfer's index in the step.
        transfer: usize,
        /// Its sender.
        from: usize,
        /// Its receiver.
        to: usize,
        /// Its range's start.
        start: usize,
        /// Its range's end.
        end: usize,
        /// Where it lands on the receiver.
        at: usize,
        /// The buffer length.
        buffer_len: usize,
    },
    /// An element is sent, or combined into, while it holds nothing.
    ReadBeforeWrite {
        /// The step.
        step: usize,
        /// The rank whose element is read.
        rank: usize,
        /// The element.
        element: usize,
    },
    /// An overwriting step delivers more than one value to an element.
    DoubleWrite {
        /// The step.
        step: usize,
        /// The receiver.
        rank: usize,
        /// The element.
        element: usize,
        /// Every sender of a value to it, with repetition.
        senders: Vec<usize>,
    },
    /// A combining step delivers one sender's value to an element more than once.
    DuplicateSource {
        /// The step.
        step: usize,
        /// The receiver.
        rank: usize,
        /// The element.
        element: usize,
        /// The sender.
        from: usize,
    },
    /// An output element holds something else than the collective defines.
    WrongContents {
        /// The rank.
        rank: usize,
        /// The element, from the start of the rank's output.
        element: usize,
        /// The step that wrote it last, if any.
        step: Option<usize>,
    },
    /// An all-reduce output element is another tree than rank 0's.
    NotIdentical {
        /// The rank.
        rank: usize,
        /// The element, from the start of the rank's output.
        element: usize,
        /// The step that wrote it last, if any.
        step: Option<usize>,
    },
}

impl Defect {
    /// Whether `violation` names this defect (the same kind, at the same place).
    pub fn named_by(&self, violation: &ScheduleViolation) -> bool {
        use ScheduleViolation as V;
        match (self, violation) {
            (Defect::EmptyWorld, V::EmptyWorld) => true,
            (
                Defect::RankCount {
                    what,
                    world,
                    actual,
                },
                V::RankCount {
                    what: named,
                    world: w,
                    actual: a,
                },
            ) => what == named && world == w && actual == a,
            (Defect::Impossible, V::Impossible { .. }) => true,
            (
                Defect::PlacementOutOfBounds {
                    rank,
                    placement,
                    end,
                    buffer_len,
                },
                V::PlacementOutOfBounds {
                    rank: r,
                    placement: p,
                    end: e,
                    buffer_len: b,
                },
            ) => (rank, placement, end, buffer_len) == (r, p, e, b),
            (
                Defect::BadOutput {
                    rank,
                    start,
                    end,
                    expected,
                    buffer_len,
                },
                V::BadOutput {
                    rank: r,
                    start: s,
                    end: e,
                    expected: x,
                    buffer_len: b,
                },
            ) => (rank, start, end, expected, buffer_len) == (r, s, e, x, b),
            (
                Defect::TooLarge { world, buffer_len },
                V::TooLarge {
                    world: w,
                    buffer_len: b,
                    limit,
                },
            ) => {
                (world, buffer_len) == (w, b)
                    && *limit >= SIMULATED_ELEMENTS
                    && world
                        .checked_mul(*buffer_len)
                        .is_none_or(|all| all > *limit)
            }
            (
                Defect::NoSuchRank {
                    step,
                    transfer,
                    rank,
                    world,
                },
                V::BrokenStep {
                    step: s,
                    violation:
                        StepViolation::NoSuchRank {
                            transfer: t,
                            rank: r,
                            world: w,
                        },
                },
            ) => (step, transfer, rank, world) == (s, t, r, w),
            (
                Defect::OutOfBounds {
                    step,
                    transfer,
                    from,
                    to,
                    start,
                    end,
                    at,
                    buffer_len,
                },
                V::BrokenStep {
                    step: s,
                    violation:
                        StepViolation::OutOfBounds {
                            transfer: t,
                            from: f,
                            to: o,
                            start: a,
                            end: e,
                            at: l,
                            buffer_len: b,
                        },
                },
            ) => (step, transfer, from, to, start, end, at, buffer_len) == (s, t, f, o, a, e, l, b),
            (
                Defect::ReadBeforeWrite {
                    step,
                    rank,
                    element,
                },
                V::ReadBeforeWrite {
                    step: s,
                    rank: r,
                    element: e,
                },
            ) => (step, rank, element) == (s, r, e),
            (
                Defect::DoubleWrite {
                    step,
                    rank,
                    element,
                    senders,
                },
                V::BrokenStep {
                    step: s,
                    violation:
                        StepViolation::DoubleWrite {
                            rank: r,
                            element: e,
                            first,
                            second,
                        },
                },
            ) => {
                let count = |sender: &usize| senders.iter().filter(|&s| s == sender).count();
                (step, rank, element) == (s, r, e)
                    && count(first) >= 1
                    && count(second) >= 1
                    && (first != second || count(first) >= 2)
            }
            (
                Defect::DuplicateSource {
                    step,
                    rank,
                    element,
                    from,
                },
                V::BrokenStep {
                    step: s,
                    violation:
                        StepViolation::DuplicateSource {
                            rank: r,
                            element: e,
                            from: f,
                        },
                },
            ) => (step, rank, element, from) == (s, r, e, f),
            (
                Defect::WrongContents {
                    rank,
                    element,
                    step,
                },
                V::WrongContents {
                    rank: r,
                    element: e,
                    step: s,
                    ..
                },
            ) => (rank, element, step) == (r, e, s),
            (
                Defect::NotIdentical {
                    rank,
                    element,
                    step,
                },
                V::NotIdentical {
                    rank: r,
                    element: e,
                    step: s,
                },
            ) => (rank, element, step) == (r, e, s),
            _ => false,
        }
    }
}

/// What the simulator found.
#[derive(Clone, Debug)]
pub struct Examination {
    /// Every defect of the first stage that has one; empty for a correct plan.
    pub defects: Vec<Defect>,
    /// Each rank's output elements, when the plan is correct (else empty).
    pub outputs: Vec<Vec<Rc<Tree>>>,
}

impl Examination {
    /// Whether the plan is correct.
    pub fn is_correct(&self) -> bool {
        self.defects.is_empty()
    }

    /// Whether `violation` names one of the defects found.
    pub fn names(&self, violation: &ScheduleViolation) -> bool {
        self.defects.iter().any(|defect| defect.named_by(violation))
    }

    fn defective(defects: Vec<Defect>) -> Self {
        Self {
            defects,
            outputs: Vec::new(),
        }
    }
}

/// The elements of rank `rank`'s output for `input_len` elements per rank, or `None` where the
/// collective cannot take them (DESIGN.md's tables of collectives, v2 and v3): a root outside the
/// world, an input that must split into `W` equal blocks and does not, an output beyond `usize`.
/// A rooted reduce or gather gives every other rank an empty output.
pub fn output_len_at(
    collective: Collective,
    rank: usize,
    world: usize,
    input_len: usize,
) -> Option<usize> {
    let block = || (world > 0 && input_len % world == 0).then(|| input_len / world);
    let root = |root: usize| (root < world).then_some(root);
    match collective {
        Collective::AllReduce(_) => Some(input_len),
        Collective::ReduceScatter(_) => block(),
        Collective::AllGather => input_len.checked_mul(world),
        Collective::Broadcast { root: r } => root(r).map(|_| input_len),
        Collective::Reduce { root: r, .. } => {
            root(r).map(|root| if rank == root { input_len } else { 0 })
        }
        Collective::Gather { root: r } => {
            let root = root(r)?;
            let all = input_len.checked_mul(world)?;
            Some(if rank == root { all } else { 0 })
        }
        Collective::Scatter { root: r } => root(r).and(block()),
        Collective::AllToAll => block().map(|_| input_len),
        _ => None,
    }
}

/// The longest output of any rank ([`output_len_at`] at the root, or at rank 0).
pub fn output_len(collective: Collective, world: usize, input_len: usize) -> Option<usize> {
    let rank = collective.root().unwrap_or(0);
    output_len_at(collective, rank, world, input_len)
}

/// Run `parts` element by element and report what is wrong with it, if anything.
pub fn examine(parts: &PlanParts) -> Examination {
    let layout = layout_defects(parts);
    if !layout.is_empty() {
        return Examination::defective(layout);
    }
    let world = parts.world;
    if world
        .checked_mul(parts.buffer_len)
        .is_none_or(|elements| elements > SIMULATED_ELEMENTS)
    {
        return Examination::defective(vec![Defect::TooLarge {
            world,
            buffer_len: parts.buffer_len,
        }]);
    }
    let mut machine = Machine::new(parts);
    for (index, step) in parts.steps.iter().enumerate() {
        let defects = machine.step(index, step);
        if !defects.is_empty() {
            return Examination::defective(defects);
        }
    }
    machine.outputs(parts)
}

/// Every layout defect (DESIGN.md's layouts: one placement and one output per rank, inputs and
/// outputs inside the buffer, outputs of the collective's length).
fn layout_defects(parts: &PlanParts) -> Vec<Defect> {
    let world = parts.world;
    if world == 0 {
        return vec![Defect::EmptyWorld];
    }
    let mut defects = Vec::new();
    for (what, actual) in [
        ("placements", parts.placements.len()),
        ("outputs", parts.outputs.len()),
    ] {
        if actual != world {
            defects.push(Defect::RankCount {
                what,
                world,
                actual,
            });
        }
    }
    let possible = output_len(parts.collective, world, parts.input_len).is_some();
    if !possible {
        defects.push(Defect::Impossible);
    }
    let buffer_len = parts.buffer_len;
    for (rank, &placement) in parts.placements.iter().enumerate() {
        let end = placement.saturating_add(parts.input_len);
        if end > buffer_len {
            defects.push(Defect::PlacementOutOfBounds {
                rank,
                placement,
                end,
                buffer_len,
            });
        }
    }
    if possible {
        for (rank, output) in parts.outputs.iter().enumerate() {
            let expected =
                output_len_at(parts.collective, rank, world, parts.input_len).unwrap_or_default();
            let (start, end) = (output.start, output.end);
            if start > end || end > buffer_len || end - start != expected {
                defects.push(Defect::BadOutput {
                    rank,
                    start,
                    end,
                    expected,
                    buffer_len,
                });
            }
        }
    }
    defects
}

/// Every rank's buffer, element by element.
struct Machine {
    world: usize,
    buffer_len: usize,
    /// `values[r][e]`.
    values: Vec<Vec<Value>>,
    /// `written[r][e]`: the step that wrote it last.
    written: Vec<Vec<Option<usize>>>,
}

impl Machine {
    /// Rank `r`'s input elements at its placement; nothing elsewhere. The layout was checked.
    fn new(parts: &PlanParts) -> Self {
        let values = (0..parts.world)
            .map(|rank| {
                let mut buffer = vec![Value::Unset; parts.buffer_len];
                let placement = parts.placements[rank];
                for index in 0..parts.input_len {
                    buffer[placement + index] = Value::Known {
                        tree: Rc::new(Tree::Input { rank, index }),
                        leaves: 1,
                    };
                }
                buffer
            })
            .collect();
        Self {
            world: parts.world,
            buffer_len: parts.buffer_len,
            values,
            written: vec![vec![None; parts.buffer_len]; parts.world],
        }
    }

    /// Run step `index`, or return every defect it has (then nothing changed).
    fn step(&mut self, index: usize, step: &Step) -> Vec<Defect> {
        let malformed = self.malformed(index, step);
        if !malformed.is_empty() {
            return malformed;
        }
        let before = self.values.clone();
        let mut defects = Vec::new();
        // What each (receiver, element) received: (sender, value), in transfer order.
        let mut received: Vec<Vec<Vec<(usize, Value)>>> =
            vec![vec![Vec::new(); self.buffer_len]; self.world];
        for transfer in &step.transfers {
            for (element, target) in transfer.range.clone().zip(transfer.at..) {
                let value = &before[transfer.from][element];
                if *value == Value::Unset {
                    defects.push(Defect::ReadBeforeWrite {
                        step: index,
                        rank: transfer.from,
                        element,
                    });
                }
                received[transfer.to][target].push((transfer.from, value.clone()));
            }
        }
        for (rank, elements) in received.iter_mut().enumerate() {
            for (element, arrivals) in elements.iter_mut().enumerate() {
                if arrivals.is_empty() {
                    continue;
                }
                arrivals.sort_by_key(|(from, _)| *from);
                if !step.combine {
                    if arrivals.len() > 1 {
                        defects.push(Defect::DoubleWrite {
                            step: index,
                            rank,
                            element,
                            senders: arrivals.iter().map(|(from, _)| *from).collect(),
                        });
                    }
                    continue;
                }
                for pair in arrivals.windows(2) {
                    if pair[0].0 == pair[1].0 {
                        defects.push(Defect::DuplicateSource {
                            step: index,
                            rank,
                            element,
                            from: pair[0].0,
                        });
                    }
                }
                if before[rank][element] == Value::Unset {
                    defects.push(Defect::ReadBeforeWrite {
                        step: index,
                        rank,
                        element,
                    });
                }
            }
        }
        if !defects.is_empty() {
            defects.dedup();
            return defects;
        }
        for (rank, elements) in received.into_iter().enumerate() {
            for (element, arrivals) in elements.into_iter().enumerate() {
                if arrivals.is_empty() {
                    continue;
                }
                let value = if step.combine {
                    // The receiver's own value at its own rank's position (before a value it
                    // copies to itself: the sort is stable), then a left fold.
                    let own = (rank, before[rank][element].clone());
                    let position = arrivals.partition_point(|(from, _)| *from < rank);
                    let mut ordered = arrivals;
                    ordered.insert(position, own);
                    let mut values = ordered.into_iter().map(|(_, value)| value);
                    let first = values.next().unwrap_or(Value::Unset);
                    values.fold(first, |left, right| self.fold(left, right))
                } else {
                    arrivals.into_iter().next().map_or(Value::Unset, |(_, v)| v)
                };
                self.values[rank][element] = value;
                self.written[rank][element] = Some(index);
            }
        }
        Vec::new()
    }

    /// Every transfer that names a rank outside the world, or whose range is inverted, or whose
    /// source or target (`at..at + len`) leaves the buffers. A transfer from a rank to itself is
    /// a local copy, not a defect.
    fn malformed(&self, index: usize, step: &Step) -> Vec<Defect> {
        let mut defects = Vec::new();
        for (number, transfer) in step.transfers.iter().enumerate() {
            for rank in [transfer.from, transfer.to] {
                if rank >= self.world {
                    defects.push(Defect::NoSuchRank {
                        step: index,
                        transfer: number,
                        rank,
                        world: self.world,
                    });
                }
            }
            let (start, end, at) = (transfer.range.start, transfer.range.end, transfer.at);
            let length = end.saturating_sub(start);
            let target_inside = at
                .checked_add(length)
                .is_some_and(|target_end| target_end <= self.buffer_len);
            if start > end || end > self.buffer_len || !target_inside {
                defects.push(Defect::OutOfBounds {
                    step: index,
                    transfer: number,
                    from: transfer.from,
                    to: transfer.to,
                    start,
                    end,
                    at,
                    buffer_len: self.buffer_len,
                });
            }
        }
        defects
    }

    /// `left ⊕ right`, or [`Value::Overfull`] beyond `W` leaves. Neither is unset (checked).
    fn fold(&self, left: Value, right: Value) -> Value {
        match (left, right) {
            (
                Value::Known {
                    tree: left,
                    leaves: l,
                },
                Value::Known {
                    tree: right,
                    leaves: r,
                },
            ) if l + r <= self.world => Value::Known {
                tree: Rc::new(Tree::Fold(left, right)),
                leaves: l + r,
            },
            _ => Value::Overfull,
        }
    }

    /// The contents of every output element, then (all-reduce) one tree on every rank.
    fn outputs(self, parts: &PlanParts) -> Examination {
        let world = self.world;
        let n = parts.input_len;
        // The block of a collective that splits its input into `W` (reduce-scatter, scatter,
        // all-to-all; the layout was checked, so it divides).
        let block = n.checked_div(world).unwrap_or(0);
        let mut defects = Vec::new();
        let mut outputs = Vec::with_capacity(world);
        for (rank, range) in parts.outputs.iter().enumerate() {
            let mut trees = Vec::with_capacity(range.len());
            for element in 0..range.len() {
                let at = range.start + element;
                let wrong = || Defect::WrongContents {
                    rank,
                    element,
                    step: self.written[rank][at],
                };
                let Value::Known { tree, .. } = &self.values[rank][at] else {
                    defects.push(wrong());
                    continue;
                };
                let right = match parts.collective {
                    Collective::AllReduce(_) | Collective::Reduce { .. } => {
                        is_reduction(tree, element, world)
                    }
                    Collective::ReduceScatter(_) => {
                        is_reduction(tree, rank * block + element, world)
                    }
                    Collective::AllGather | Collective::Gather { .. } => {
                        is_copy(tree, element / n, element % n)
                    }
                    Collective::Broadcast { root } => is_copy(tree, root, element),
                    Collective::Scatter { root } => is_copy(tree, root, rank * block + element),
                    Collective::AllToAll => {
                        is_copy(tree, element / block, rank * block + element % block)
                    }
                    _ => false,
                };
                if !right {
                    defects.push(wrong());
                }
                trees.push(Rc::clone(tree));
            }
            outputs.push(trees);
        }
        if !defects.is_empty() {
            return Examination::defective(defects);
        }
        if let Collective::AllReduce(_) = parts.collective {
            for (rank, trees) in outputs.iter().enumerate().skip(1) {
                for (element, tree) in trees.iter().enumerate() {
                    if tree != &outputs[0][element] {
                        defects.push(Defect::NotIdentical {
                            rank,
                            element,
                            step: self.written[rank][parts.outputs[rank].start + element],
                        });
                    }
                }
            }
            if !defects.is_empty() {
                return Examination::defective(defects);
            }
        }
        Examination { defects, outputs }
    }
}

/// Whether `tree` holds element `index` of every rank's input, each exactly once.
fn is_reduction(tree: &Tree, index: usize, world: usize) -> bool {
    let mut leaves = tree.leaves();
    leaves.sort_unstable();
    leaves == (0..world).map(|rank| (rank, index)).collect::<Vec<_>>()
}

/// Whether `tree` is element `index` of rank `rank`'s input, as it is.
fn is_copy(tree: &Tree, rank: usize, index: usize) -> bool {
    *tree == Tree::Input { rank, index }
}

#[cfg(test)]
mod tests {
    use super::{Defect, Machine, Tree, Value, examine};
    use ruccl_core::{Collective, PlanParts, ReduceOperation, Step, Transfer};
    use std::rc::Rc;

    fn all_reduce_of_two(steps: Vec<Step>) -> PlanParts {
        PlanParts {
            collective: Collective::AllReduce(ReduceOperation::Sum),
            world: 2,
            input_len: 1,
            buffer_len: 1,
            placements: vec![0, 0],
            outputs: vec![0..1, 0..1],
            steps,
        }
    }

    fn step(combine: bool, transfers: &[(usize, usize)]) -> Step {
        Step {
            combine,
            transfers: transfers
                .iter()
                .map(|&(from, to)| Transfer::new(from, to, 0..1))
                .collect(),
        }
    }

    #[test]
    fn a_reduce_then_copy_back_is_correct() {
        let parts = all_reduce_of_two(vec![step(true, &[(0, 1)]), step(false, &[(1, 0)])]);
        assert!(examine(&parts).is_correct());
    }

    #[test]
    fn folding_on_both_ranks_at_once_gives_one_tree() {
        let both = all_reduce_of_two(vec![step(true, &[(0, 1), (1, 0)])]);
        assert!(examine(&both).is_correct());
    }

    #[test]
    fn a_reassociated_fold_is_not_identical() {
        // Rank 1 folds (x0 ⊕ x1) ⊕ x2 and rank 2 x1 ⊕ x2 at once; rank 0 then folds
        // x0 ⊕ (x1 ⊕ x2); rank 2 copies rank 1's. Right contents, two trees.
        let parts = PlanParts {
            collective: Collective::AllReduce(ReduceOperation::Max),
            world: 3,
            input_len: 1,
            buffer_len: 1,
            placements: vec![0; 3],
            outputs: vec![0..1; 3],
            steps: vec![
                step(true, &[(0, 1), (2, 1), (1, 2)]),
                step(true, &[(2, 0)]),
                step(false, &[(1, 2)]),
            ],
        };
        assert_eq!(
            examine(&parts).defects,
            vec![
                Defect::NotIdentical {
                    rank: 1,
                    element: 0,
                    step: Some(0)
                },
                Defect::NotIdentical {
                    rank: 2,
                    element: 0,
                    step: Some(2)
                }
            ]
        );
    }

    #[test]
    fn a_missing_contribution_is_wrong_contents() {
        let parts = all_reduce_of_two(vec![step(false, &[(0, 1)])]);
        let examination = examine(&parts);
        assert_eq!(
            examination.defects,
            vec![
                Defect::WrongContents {
                    rank: 0,
                    element: 0,
                    step: None
                },
                Defect::WrongContents {
                    rank: 1,
                    element: 0,
                    step: Some(0)
                }
            ]
        );
    }

    #[test]
    fn two_overwrites_of_one_element_are_a_double_write() {
        let mut parts = all_reduce_of_two(vec![step(false, &[(0, 1), (0, 1)])]);
        parts.world = 2;
        assert_eq!(
            examine(&parts).defects,
            vec![Defect::DoubleWrite {
                step: 0,
                rank: 1,
                element: 0,
                senders: vec![0, 0]
            }]
        );
    }

    #[test]
    fn a_local_copy_folds_right_after_the_receivers_own_value() {
        // Rank 1 folds rank 0's element 0, its own element 0, its own element 1 (copied to
        // itself), then rank 2's element 0.
        let parts = PlanParts {
            collective: Collective::Reduce {
                op: ReduceOperation::Sum,
                root: 1,
            },
            world: 4,
            input_len: 2,
            buffer_len: 2,
            placements: vec![0; 4],
            outputs: vec![0..0, 0..2, 0..0, 0..0],
            steps: Vec::new(),
        };
        let mut machine = Machine::new(&parts);
        let fold = Step {
            combine: true,
            transfers: vec![
                Transfer::new(2, 1, 0..1),
                Transfer {
                    from: 1,
                    to: 1,
                    range: 1..2,
                    at: 0,
                },
                Transfer::new(0, 1, 0..1),
            ],
        };
        assert_eq!(machine.step(0, &fold), Vec::new());
        let Value::Known { tree, leaves: 4 } = &machine.values[1][0] else {
            panic!("rank 1 holds {:?}", machine.values[1][0]);
        };
        // ((x0[0] ⊕ x1[0]) ⊕ x1[1]) ⊕ x2[0], folded from the left.
        assert_eq!(tree.leaves(), vec![(0, 0), (1, 0), (1, 1), (2, 0)]);
        let Tree::Fold(left, last) = tree.as_ref() else {
            panic!("not a fold: {tree:?}");
        };
        assert_eq!(last.as_ref(), &Tree::Input { rank: 2, index: 0 });
        let Tree::Fold(_, local) = left.as_ref() else {
            panic!("not a fold: {left:?}");
        };
        assert_eq!(local.as_ref(), &Tree::Input { rank: 1, index: 1 });
    }

    #[test]
    fn blocks_land_at_their_offsets_from_the_state_before_the_step() {
        // All-to-all of two ranks in place, in one overwriting step: rank 1's block 0 lands as
        // rank 0's block 1 and rank 0's block 1 as rank 1's block 0.
        let parts = PlanParts {
            collective: Collective::AllToAll,
            world: 2,
            input_len: 4,
            buffer_len: 4,
            placements: vec![0, 0],
            outputs: vec![0..4, 0..4],
            steps: vec![Step {
                combine: false,
                transfers: vec![
                    Transfer {
                        from: 1,
                        to: 0,
                        range: 0..2,
                        at: 2,
                    },
                    Transfer {
                        from: 0,
                        to: 1,
                        range: 2..4,
                        at: 0,
                    },
                ],
            }],
        };
        let examination = examine(&parts);
        assert!(examination.is_correct(), "{:?}", examination.defects);
        let input = |rank, index| Rc::new(Tree::Input { rank, index });
        assert_eq!(
            examination.outputs[1],
            vec![input(0, 2), input(0, 3), input(1, 2), input(1, 3)]
        );
    }

    #[test]
    fn a_target_past_the_buffer_is_out_of_bounds() {
        let mut parts = all_reduce_of_two(vec![Step {
            combine: false,
            transfers: vec![Transfer {
                from: 0,
                to: 0,
                range: 0..1,
                at: 1,
            }],
        }]);
        parts.world = 2;
        assert_eq!(
            examine(&parts).defects,
            vec![Defect::OutOfBounds {
                step: 0,
                transfer: 0,
                from: 0,
                to: 0,
                start: 0,
                end: 1,
                at: 1,
                buffer_len: 1
            }]
        );
    }
}
