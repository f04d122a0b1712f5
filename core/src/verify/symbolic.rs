//! The symbolic machine behind [`verify`](super::verify): every buffer element holds a node of
//! a hash-consed expression DAG instead of a number.

use super::ScheduleViolation;
use crate::{Collective, Plan, Step};
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// The node of an element that holds no value yet.
const UNSET: usize = 0;

/// The most buffer elements (over all ranks) the checker takes on: about fifty bytes each.
pub(super) const MAX_ELEMENTS: usize = 1 << 22;

/// A combining node: `left ⊕ right`, `left` the value folded so far.
struct Combine {
    left: usize,
    right: usize,
    /// How many input symbols the tree holds (saturating): a combine of `W` inputs has `W`.
    leaves: usize,
}

/// What an element has received so far in the current step.
#[derive(Clone, Copy, Default)]
struct Pending {
    /// `1 + s` while step `s` is the current one and something arrived; stale otherwise.
    stamp: usize,
    /// The fold so far (or the overwriting value).
    value: usize,
    /// Whether the receiver's own value is folded in already.
    own_folded: bool,
}

/// Every rank's buffer, symbolically.
///
/// Node numbers: `0` is [`UNSET`]; `1 + r·input_len + i` is input symbol `x[r][i]`; from
/// `1 + W·input_len` on, `combines[k]` is node `first_combine + k`. Equal trees are equal
/// numbers: a combine of the same two nodes is interned once.
pub(super) struct Symbolic {
    world: usize,
    input_len: usize,
    buffer_len: usize,
    /// `values[r·buffer_len + e]`: the node rank `r`'s element `e` holds.
    values: Vec<usize>,
    /// `written[r·buffer_len + e]`: `1 + s` if step `s` wrote it last, `0` if no step did.
    written: Vec<usize>,
    /// `arrivals[r·buffer_len + e]`: what the element received in the current step.
    arrivals: Vec<Pending>,
    first_combine: usize,
    combines: Vec<Combine>,
    interned: HashMap<(usize, usize), usize, Mixed>,
    /// `(node, index)` pairs already proved to be a full reduction of input element `index`.
    proved: HashSet<(usize, usize), Mixed>,
}

/// Node numbers are small dense integers chosen by the checker itself, not by an adversary, so
/// a multiply-rotate hash is enough and several times faster than the default SipHash.
type Mixed = BuildHasherDefault<MixHasher>;

/// A multiply-rotate hasher for tuples of node numbers.
#[derive(Default)]
struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_usize(&mut self, value: usize) {
        self.write_u64(value as u64);
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Symbolic {
    /// The buffers before the first step: rank `r`'s input symbols at its placement, nothing
    /// elsewhere. The layout was checked.
    pub(super) fn new(plan: &Plan) -> Result<Self, ScheduleViolation> {
        let world = plan.world();
        let buffer_len = plan.buffer_len();
        let input_len = plan.input_len();
        let elements = world
            .checked_mul(buffer_len)
            .filter(|&elements| elements <= MAX_ELEMENTS)
            .ok_or(ScheduleViolation::TooLarge {
                world,
                buffer_len,
                limit: MAX_ELEMENTS,
            })?;
        let mut values = vec![UNSET; elements];
        for (rank, &placement) in plan.placements().iter().enumerate() {
            let start = rank * buffer_len + placement;
            for (index, value) in values[start..start + input_len].iter_mut().enumerate() {
                *value = 1 + rank * input_len + index;
            }
        }
        Ok(Self {
            world,
            input_len,
            buffer_len,
            values,
            written: vec![0; elements],
            arrivals: vec![Pending::default(); elements],
            first_combine: 1 + world * input_len,
            combines: Vec::new(),
            interned: HashMap::default(),
            proved: HashSet::default(),
        })
    }

    fn at(&self, rank: usize, element: usize) -> usize {
        rank * self.buffer_len + element
    }

    /// Run step `index`: check its transfers, read every sent element from the state before the
    /// step, then overwrite or fold.
    ///
    /// Transfers are taken in ascending sender order, so each element's fold is built as its
    /// values arrive: a pending value per element, with the receiver's own value folded in just
    /// before the first sender above it (or at the end). Pending values are committed once every
    /// transfer has been read, so every read sees the state before the step.
    pub(super) fn apply(&mut self, index: usize, step: &Step) -> Result<(), ScheduleViolation> {
        let stamp = index + 1;
        self.check_rules(index, step)?;
        let mut order: Vec<usize> = (0..step.transfers.len()).collect();
        order.sort_by_key(|&number| step.transfers[number].from);
        let mut touched = Vec::new();
        for number in order {
            let transfer = &step.transfers[number];
            let (from, to) = (transfer.from, transfer.to);
            for (element, target) in transfer.range.clone().zip(transfer.at..) {
                let value = self.values[self.at(from, element)];
                if value == UNSET {
                    return Err(ScheduleViolation::ReadBeforeWrite {
                        step: index,
                        rank: from,
                        element,
                    });
                }
                let element = target;
                let at = self.at(to, element);
                let arrival = &mut self.arrivals[at];
                // `check_rules` refused a second writer of an overwriting step and a sender
                // folded into one element twice, so a repeat arrival is another sender's fold.
                if arrival.stamp != stamp {
                    *arrival = Pending {
                        stamp,
                        value: UNSET,
                        own_folded: false,
                    };
                    touched.push(at);
                }
                let pending = self.arrivals[at];
                let mut folded = pending.value;
                let mut own_folded = pending.own_folded;
                if step.combine {
                    // The receiver's own value comes before a self-transfer's and every higher
                    // sender's.
                    if from >= to && !own_folded {
                        folded = self.fold_own(index, to, element, folded)?;
                        own_folded = true;
                    }
                    folded = self.fold_in(folded, value);
                } else {
                    folded = value;
                }
                self.arrivals[at] = Pending {
                    stamp,
                    value: folded,
                    own_folded,
                };
            }
        }
        for at in touched {
            let pending = self.arrivals[at];
            let mut value = pending.value;
            if step.combine && !pending.own_folded {
                let (rank, element) = (at / self.buffer_len, at % self.buffer_len);
                value = self.fold_own(index, rank, element, value)?;
            }
            self.values[at] = value;
            self.written[at] = stamp;
        }
        Ok(())
    }

    /// The rules every device checks ([`Step::check`]), as a violation of step `index`.
    fn check_rules(&self, index: usize, step: &Step) -> Result<(), ScheduleViolation> {
        step.check(self.world, self.buffer_len)
            .map_err(|violation| ScheduleViolation::BrokenStep {
                step: index,
                violation,
            })
    }

    /// Fold rank `rank`'s own (pre-step) value of `element` into `folded`.
    fn fold_own(
        &mut self,
        index: usize,
        rank: usize,
        element: usize,
        folded: usize,
    ) -> Result<usize, ScheduleViolation> {
        let own = self.values[self.at(rank, element)];
        if own == UNSET {
            return Err(ScheduleViolation::ReadBeforeWrite {
                step: index,
                rank,
                element,
            });
        }
        Ok(self.fold_in(folded, own))
    }

    /// `folded ⊕ value`, or `value` when nothing was folded yet.
    fn fold_in(&mut self, folded: usize, value: usize) -> usize {
        if folded == UNSET {
            value
        } else {
            self.combine(folded, value)
        }
    }

    /// The interned node `left ⊕ right`.
    fn combine(&mut self, left: usize, right: usize) -> usize {
        if let Some(&node) = self.interned.get(&(left, right)) {
            return node;
        }
        let leaves = self.leaf_count(left).saturating_add(self.leaf_count(right));
        let node = self.first_combine + self.combines.len();
        self.combines.push(Combine {
            left,
            right,
            leaves,
        });
        self.interned.insert((left, right), node);
        node
    }

    fn combine_node(&self, node: usize) -> Option<&Combine> {
        node.checked_sub(self.first_combine)
            .and_then(|index| self.combines.get(index))
    }

    fn leaf_count(&self, node: usize) -> usize {
        match self.combine_node(node) {
            Some(combine) => combine.leaves,
            None => usize::from(node != UNSET),
        }
    }

    /// The input symbol `(rank, index)` a leaf node stands for.
    fn symbol(&self, node: usize) -> Option<(usize, usize)> {
        (node != UNSET && node < self.first_combine && self.input_len > 0).then(|| {
            let offset = node - 1;
            (offset / self.input_len, offset % self.input_len)
        })
    }

    /// Every input symbol of `node`'s tree, with repetition; only called on trees of at most
    /// `world` leaves.
    fn symbols(&self, node: usize) -> Vec<(usize, usize)> {
        let mut symbols = Vec::new();
        let mut pending = vec![node];
        while let Some(next) = pending.pop() {
            match self.combine_node(next) {
                Some(combine) => pending.extend([combine.left, combine.right]),
                None => symbols.extend(self.symbol(next)),
            }
        }
        symbols
    }

    fn describe(&self, node: usize) -> String {
        match (self.symbol(node), self.leaf_count(node)) {
            (Some((rank, index)), _) => format!("rank {rank}'s input element {index}"),
            (None, 0) => "no value".to_owned(),
            (None, leaves) => format!("a reduction of {leaves} contributions"),
        }
    }

    /// Properties 5 and 6: every output element's contents, then all-reduce bitwise agreement.
    pub(super) fn check_outputs(&mut self, plan: &Plan) -> Result<(), ScheduleViolation> {
        for (rank, output) in plan.outputs().iter().enumerate() {
            for element in 0..output.len() {
                let at = self.at(rank, output.start + element);
                let node = self.values[at];
                if let Some(problem) = self.contents_problem(plan.collective(), rank, element, node)
                {
                    return Err(ScheduleViolation::WrongContents {
                        rank,
                        element,
                        step: self.written[at].checked_sub(1),
                        problem,
                    });
                }
            }
        }
        if let Collective::AllReduce(_) = plan.collective() {
            let first = plan.output(0).start;
            for (rank, output) in plan.outputs().iter().enumerate().skip(1) {
                for element in 0..output.len() {
                    let at = self.at(rank, output.start + element);
                    if self.values[at] != self.values[self.at(0, first + element)] {
                        return Err(ScheduleViolation::NotIdentical {
                            rank,
                            element,
                            step: self.written[at].checked_sub(1),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// What is wrong with `node` as output element `element` of `rank`, if anything.
    fn contents_problem(
        &mut self,
        collective: Collective,
        rank: usize,
        element: usize,
        node: usize,
    ) -> Option<String> {
        let block = self.input_len.checked_div(self.world).unwrap_or(0);
        let copy_of = |source: (usize, usize)| (source, 1 + source.0 * self.input_len + source.1);
        let ((source, index), expected) = match collective {
            Collective::AllReduce(_) => return self.reduction_problem(node, element),
            Collective::ReduceScatter(_) => {
                return self.reduction_problem(node, rank * block + element);
            }
            Collective::Reduce { .. } => return self.reduction_problem(node, element),
            Collective::AllGather | Collective::Gather { .. } => copy_of((
                element.checked_div(self.input_len).unwrap_or(0),
                element.checked_rem(self.input_len).unwrap_or(0),
            )),
            Collective::Broadcast { root } => copy_of((root, element)),
            Collective::Scatter { root } => copy_of((root, rank * block + element)),
            Collective::AllToAll => copy_of((
                element.checked_div(block).unwrap_or(0),
                rank * block + element.checked_rem(block).unwrap_or(0),
            )),
        };
        (node != expected).then(|| {
            format!(
                "holds {}, expected rank {source}'s input element {index} as it is",
                self.describe(node)
            )
        })
    }

    /// Whether `node` is a reduction of every rank's input element `index`, each exactly once.
    fn reduction_problem(&mut self, node: usize, index: usize) -> Option<String> {
        if self.proved.contains(&(node, index)) {
            return None;
        }
        let leaves = self.leaf_count(node);
        if leaves == 0 {
            return Some("holds no value".to_owned());
        }
        if leaves > self.world {
            return Some(format!(
                "holds {leaves} contributions, more than one from each of the {} ranks",
                self.world
            ));
        }
        let mut found = self.symbols(node);
        found.sort_unstable();
        let mut problems = Vec::new();
        for rank in 0..self.world {
            let times = found
                .iter()
                .filter(|&&symbol| symbol == (rank, index))
                .count();
            match times {
                1 => {}
                0 => problems.push(format!("lacks rank {rank}'s element {index}")),
                _ => problems.push(format!("holds rank {rank}'s element {index} {times} times")),
            }
        }
        for &(rank, other) in found.iter().filter(|symbol| symbol.1 != index) {
            problems.push(format!(
                "holds rank {rank}'s element {other}, which belongs to element {other}"
            ));
        }
        if problems.is_empty() {
            self.proved.insert((node, index));
            return None;
        }
        problems.dedup();
        Some(format!(
            "expected one contribution from each of the {} ranks' element {index}, but it {}",
            self.world,
            problems.join(", ")
        ))
    }
}
