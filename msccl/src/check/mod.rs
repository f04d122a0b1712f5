//! [`Program::check`]: MSCCL's asynchronous semantics, decided for every execution the
//! executors allow.
//!
//! | file          | job                                                                    |
//! |---------------|------------------------------------------------------------------------|
//! | `model.rs`    | load as the executors do: validation, step numbers, waits, connections |
//! | `order.rs`    | happens-before, topological order, deadlock (unbounded and one slot)    |
//! | `cells.rs`    | where each buffer's chunks live, in place and out of place              |
//! | `races.rs`    | vector clocks per rank, data races per chunk                            |
//! | `symbolic.rs` | hash-consed evaluation, the collective's result, bitwise agreement      |
//! | `violation.rs`| [`Violation`], [`ViolationKind`], [`StepRef`]                           |

mod cells;
mod model;
mod order;
mod races;
mod symbolic;
mod violation;

pub(crate) use cells::Cells;
pub(crate) use model::Model;

pub(crate) use order::Order;
pub use symbolic::Agreement;
pub use violation::{StepRef, Violation, ViolationKind};

use crate::lower::Lowered;
use crate::program::{Mode, MscclCollective, Program, Protocol};
use std::fmt;

/// What a checked program is: its counts, what was proved, and what its lowering costs.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Report {
    /// The collective it claims.
    pub collective: MscclCollective,
    /// Ranks.
    pub world: usize,
    /// Chunks per loop.
    pub chunks: usize,
    /// Threadblocks over all ranks.
    pub threadblocks: usize,
    /// Instructions over all ranks, `nop`s left out.
    pub steps: usize,
    /// `nop`s over all ranks.
    pub nops: usize,
    /// Connections (sender, receiver, channel) that carry messages.
    pub connections: usize,
    /// Messages over all connections.
    pub messages: usize,
    /// The modes it declares, each checked.
    pub modes: Vec<Mode>,
    /// What was proved about the result.
    pub outcome: Outcome,
    /// Messages each connection is assumed to buffer: the least the executors guarantee for
    /// the protocol (2 for Simple, 8 for LL and LL128).
    pub slots: usize,
    /// The deadlock the program would have if connections buffered only one message, if any:
    /// not a fault (no executor is that tight), a margin to know.
    pub one_slot_deadlock: Option<Violation>,
    /// The ruCCL plan it lowers to (one element per chunk), or why it does not.
    pub lowered: Result<Lowered, String>,
}

/// What [`Program::check`] proved about a program's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Every rank's output holds what the collective defines, in every declared mode.
    Verified {
        /// The root (broadcast, reduce, gather, scatter), as the program's data flow shows it.
        root: Option<usize>,
        /// For reductions: bitwise agreement between ranks or equal terms only.
        agreement: Option<Agreement>,
    },
    /// The collective (`custom`, `send`, `recv`, `alltoallv`) defines no result to check;
    /// everything else (matching, deadlock, races, ranges) was.
    Unsupported,
}

impl fmt::Display for Report {
    /// One line: what was proved and what the lowering costs, e.g. `allreduce on 8 gpus, 64
    /// chunks, 1224 steps, 56 connections: verified, bitwise; lowers to 17 ruCCL steps, busiest
    /// rank sends 480 chunks (bound 480)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let coll = match self.collective {
            MscclCollective::AllReduce => "allreduce",
            MscclCollective::AllGather => "allgather",
            MscclCollective::ReduceScatter => "reduce_scatter",
            MscclCollective::AllToAll => "alltoall",
            MscclCollective::Broadcast => "broadcast",
            MscclCollective::Reduce => "reduce",
            MscclCollective::Gather => "gather",
            MscclCollective::Scatter => "scatter",
            MscclCollective::Custom | MscclCollective::PointToPoint => "custom",
        };
        write!(
            f,
            "{coll} on {} gpus, {} chunks, {} steps, {} connections: ",
            self.world, self.chunks, self.steps, self.connections
        )?;
        match self.outcome {
            Outcome::Unsupported => f.write_str("no result to check (unsupported collective)")?,
            Outcome::Verified { root, agreement } => {
                f.write_str("verified")?;
                if let Some(root) = root {
                    write!(f, ", root {root}")?;
                }
                match agreement {
                    Some(Agreement::Bitwise) => f.write_str(", bitwise")?,
                    Some(Agreement::TermsOnly { gpu, chunk }) => write!(
                        f,
                        ", terms only (gpu {gpu} chunk {chunk} folds in another order than gpu 0)"
                    )?,
                    None => {}
                }
            }
        }
        if self.one_slot_deadlock.is_some() {
            write!(
                f,
                "; needs more than one slot per connection (has {})",
                self.slots
            )?;
        }
        match &self.lowered {
            Ok(lowered) => write!(
                f,
                "; lowers to {} ruCCL steps, busiest rank sends {} chunks (bound {})",
                lowered.steps, lowered.busiest_sent, lowered.lower_bound
            ),
            Err(reason) => write!(f, "; does not lower: {reason}"),
        }
    }
}

impl Program {
    /// Decide, for every execution MSCCL's executors allow, that the program runs to completion
    /// without a race and leaves every rank the collective's output; or name the first thing
    /// that goes wrong.
    ///
    /// The semantics are the executors' (see the crate README): threadblocks run their steps
    /// in order; a step with a `depid` (its own or a preceding `nop`'s) waits until that
    /// threadblock has published a step number of at least `deps`, which only steps with
    /// `hasdep="1"` do; the `k`-th send on a connection (sender, receiver, channel) meets the
    /// `k`-th receive. Deadlock is decided with unbounded buffers and again with one message per
    /// connection, the least the executors guarantee ([`ViolationKind::BufferDeadlock`]).
    /// Races, uninitialized reads and the result are decided in every mode the program
    /// declares, with NCCL's in-place aliasing.
    ///
    /// ```
    /// # let xml = include_str!("../../tests/data/allgather_ring_n2.xml");
    /// let program = ruccl_msccl::parse(xml)?;
    /// let report = program.check().expect("a correct ring");
    /// assert_eq!(report.world, 2);
    /// # Ok::<(), ruccl_msccl::MscclError>(())
    /// ```
    pub fn check(&self) -> Result<Report, Violation> {
        let analysis = Analysis::new(self)?;
        let modes = self.modes();
        let mut outcome = if self.collective.has_result() {
            Outcome::Verified {
                root: None,
                agreement: None,
            }
        } else {
            Outcome::Unsupported
        };
        for &mode in &modes {
            let evaluation = analysis.evaluate(mode)?;
            if let Outcome::Verified { root, agreement } = &mut outcome {
                *root = root.or(evaluation.root);
                *agreement = match (*agreement, evaluation.agreement) {
                    (Some(Agreement::TermsOnly { gpu, chunk }), _) => {
                        Some(Agreement::TermsOnly { gpu, chunk })
                    }
                    (_, other) => other,
                };
            }
        }
        let model = &analysis.model;
        let one_slot_deadlock = if analysis.slots > 1 {
            order::deadlock_with(model, 1)
        } else {
            None
        };
        let lowered = if self.collective.has_result() {
            crate::lower::summary(self, &analysis).map_err(|error| error.to_string())
        } else {
            Err(format!(
                "coll=\"{}\" defines no result ruCCL could run",
                self.coll
            ))
        };
        Ok(Report {
            collective: self.collective,
            world: model.world,
            chunks: model.chunks,
            threadblocks: model.tbs.len(),
            steps: model.ops.len(),
            nops: model.nops,
            connections: model.connections.len(),
            messages: model.messages.len(),
            modes,
            outcome,
            slots: analysis.slots,
            one_slot_deadlock,
            lowered,
        })
    }
}

/// A program loaded and ordered: what checking and lowering share.
pub(crate) struct Analysis {
    pub(crate) model: Model,
    pub(crate) order: Order,
    /// Messages per connection assumed in flight.
    pub(crate) slots: usize,
}

impl Analysis {
    /// Load, validate and order `program`: everything that does not depend on a mode.
    pub(crate) fn new(program: &Program) -> Result<Analysis, Violation> {
        if program.modes().is_empty() {
            return Err(Violation::new(
                ViolationKind::BadStep,
                "the program declares neither inplace=\"1\" nor outofplace=\"1\": no call ever selects it",
            ));
        }
        let model = model::load(program)?;
        let slots = match program.protocol {
            Protocol::Simple => 2,
            Protocol::Ll | Protocol::Ll128 => 8,
        };
        let order = order::order(&model, slots)?;
        Ok(Analysis {
            model,
            order,
            slots,
        })
    }

    /// The cells of `mode`, race-free, evaluated and judged.
    pub(crate) fn evaluate(&self, mode: Mode) -> Result<symbolic::Evaluation, Violation> {
        let cells = Cells::new(&self.model, mode);
        races::check(&self.model, &self.order, &cells)?;
        symbolic::evaluate(&self.model, &self.order, &cells)
    }
}
