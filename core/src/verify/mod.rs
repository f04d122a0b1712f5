//! [`verify`]: the symbolic schedule checker.
//!
//! It runs a plan on symbols instead of numbers. Element `i` of rank `r`'s input is the symbol
//! `x[r][i]`; a combining step replaces an element by the expression the contract defines —
//! the operation folded over the element's own value and the received ones in ascending rank
//! order, its own value at its own rank's position — and an overwriting step copies expressions.
//! Expressions are hash-consed binary trees (`((a ⊕ b) ⊕ c)` is one node), so two elements hold
//! the same tree exactly when they hold the same node: "every rank's all-reduce output has the
//! same bits" becomes an equality of node numbers, decidable without evaluating anything.
//!
//! What it proves, for one plan and every input values, on any device that follows the contract:
//!
//! 1. **Layout**: one placement and one output per rank; inputs and outputs inside the buffer;
//!    outputs of the collective's length.
//! 2. **Bounds**: every transfer names ranks of the world (the same one for a local copy), and
//!    a source range and a target range inside the buffers ([`Step::check`](crate::Step::check),
//!    the rules every device follows).
//! 3. **Definedness**: no element is read (sent, or combined into) before it holds a value.
//! 4. **Single writer**: no element is written twice in one overwriting step, and no element
//!    receives the same sender's value twice in one combining step.
//! 5. **Contents**: every output element holds exactly what the collective defines — all-reduce,
//!    reduce-scatter and reduce: every rank's input element exactly once; all-gather and gather:
//!    the owner's input element; broadcast and scatter: the root's; all-to-all: block `r` of
//!    the owner's input.
//! 6. **Bitwise agreement**: every rank's all-reduce output is, element by element, the same
//!    tree as rank 0's.
//!
//! A violation names the step, rank and element it is about. Cost: two words per buffer element
//! per rank, and time linear in the elements the schedule moves.

mod symbolic;

use crate::{Collective, Plan, StepViolation};
use std::fmt;
use symbolic::Symbolic;

/// Why a plan is wrong; every variant names where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleViolation {
    /// The plan is for no rank at all.
    #[error("a plan needs at least one rank")]
    EmptyWorld,
    /// The plan's buffers are beyond what the checker takes on (about fifty bytes per element).
    #[error(
        "{world} ranks × {buffer_len} buffer elements exceed the checker's bound of {limit} elements"
    )]
    TooLarge {
        /// The plan's world.
        world: usize,
        /// Elements of every rank's buffer.
        buffer_len: usize,
        /// The bound on `world × buffer_len`.
        limit: usize,
    },
    /// The plan lists placements or outputs for another number of ranks.
    #[error("the plan lists {actual} {what} for a world of {world} ranks")]
    RankCount {
        /// `placements` or `outputs`.
        what: &'static str,
        /// The plan's world.
        world: usize,
        /// How many it lists.
        actual: usize,
    },
    /// The collective cannot take this input on this world at all.
    #[error("{collective} on {world} ranks cannot take {input_len} elements per rank: {reason}")]
    Impossible {
        /// The collective.
        collective: Collective,
        /// The plan's world.
        world: usize,
        /// Elements per rank's input.
        input_len: usize,
        /// Why not.
        reason: String,
    },
    /// A rank's input does not fit in its buffer where the plan places it.
    #[error(
        "rank {rank}'s input placed at {placement}..{end} does not fit its buffer of {buffer_len} elements"
    )]
    PlacementOutOfBounds {
        /// The rank.
        rank: usize,
        /// Where its input starts.
        placement: usize,
        /// Where it would end (saturated).
        end: usize,
        /// The buffer length.
        buffer_len: usize,
    },
    /// A rank's output range is inverted, outside its buffer, or of the wrong length.
    #[error(
        "rank {rank}'s output {start}..{end} must be a range of {expected} elements inside its buffer of {buffer_len}"
    )]
    BadOutput {
        /// The rank.
        rank: usize,
        /// The range's start.
        start: usize,
        /// The range's end.
        end: usize,
        /// The output length the collective gives.
        expected: usize,
        /// The buffer length.
        buffer_len: usize,
    },
    /// A step breaks one of the rules every device checks ([`Step::check`](crate::Step::check)):
    /// a rank outside the world, a range outside the buffers, an element overwritten twice, a
    /// sender folded into an element twice.
    #[error("step {step}: {violation}")]
    BrokenStep {
        /// The step.
        step: usize,
        /// The rule it breaks, and where.
        #[source]
        violation: StepViolation,
    },
    /// An element is sent, or combined into, before any value was placed or written there.
    #[error("step {step}: rank {rank} element {element} is read before it holds a value")]
    ReadBeforeWrite {
        /// The step.
        step: usize,
        /// The rank whose element is read.
        rank: usize,
        /// The element (buffer index).
        element: usize,
    },
    /// An output element holds something other than what the collective defines.
    #[error("rank {rank} output element {element} ({}): {problem}", LastWrite(*.step))]
    WrongContents {
        /// The rank.
        rank: usize,
        /// The element, counted from the start of the rank's output.
        element: usize,
        /// The step that last wrote it, if any did.
        step: Option<usize>,
        /// What it holds instead.
        problem: String,
    },
    /// An all-reduce output element is computed in another order than on rank 0, so its bits
    /// may differ from rank 0's.
    #[error(
        "rank {rank} output element {element} ({}) is folded in another order than rank 0's, so their bits may differ",
        LastWrite(*.step)
    )]
    NotIdentical {
        /// The rank.
        rank: usize,
        /// The element, counted from the start of the rank's output.
        element: usize,
        /// The step that last wrote it, if any did.
        step: Option<usize>,
    },
}

/// "last written in step s" or "never written by a step".
struct LastWrite(Option<usize>);

impl fmt::Display for LastWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(step) => write!(f, "last written in step {step}"),
            None => f.write_str("never written by a step"),
        }
    }
}

/// Prove `plan` correct for its collective, or name the first place it goes wrong (see the
/// module documentation for what is proved).
///
/// ```
/// use ruccl_core::{Algorithm, Collective, Plan, ReduceOperation, Transfer, verify};
///
/// let plan = Plan::new(Collective::AllReduce(ReduceOperation::Sum), Algorithm::Ring, 3, 7)?;
/// assert_eq!(verify(&plan), Ok(()));
///
/// // Drop the last all-gather step: rank 2 never receives one chunk.
/// let mut parts = plan.into_parts();
/// parts.steps.pop();
/// let wrong = Plan::from_parts(parts).unwrap_err();
/// assert!(wrong.to_string().starts_with("rank"), "{wrong}");
/// # Ok::<(), ruccl_core::NativeCollectiveError>(())
/// ```
pub fn verify(plan: &Plan) -> Result<(), ScheduleViolation> {
    check_layout(plan)?;
    let mut symbolic = Symbolic::new(plan)?;
    for (index, step) in plan.steps().iter().enumerate() {
        symbolic.apply(index, step)?;
    }
    symbolic.check_outputs(plan)
}

/// Property 1: placements and outputs, one per rank, inside the buffer, of the right length.
fn check_layout(plan: &Plan) -> Result<(), ScheduleViolation> {
    let world = plan.world();
    if world == 0 {
        return Err(ScheduleViolation::EmptyWorld);
    }
    for (what, actual) in [
        ("placements", plan.placements().len()),
        ("outputs", plan.outputs().len()),
    ] {
        if actual != world {
            return Err(ScheduleViolation::RankCount {
                what,
                world,
                actual,
            });
        }
    }
    let collective = plan.collective();
    let impossible = |reason: String| ScheduleViolation::Impossible {
        collective,
        world,
        input_len: plan.input_len(),
        reason,
    };
    if let Some(root) = collective.root() {
        if root >= world {
            return Err(impossible(format!("the root {root} is outside the world")));
        }
    }
    if collective.output_len(world, plan.input_len()).is_none() {
        return Err(impossible(
            "the input does not split into one equal block per rank".to_owned(),
        ));
    }
    let buffer_len = plan.buffer_len();
    for (rank, &placement) in plan.placements().iter().enumerate() {
        let end = placement.saturating_add(plan.input_len());
        if end > buffer_len {
            return Err(ScheduleViolation::PlacementOutOfBounds {
                rank,
                placement,
                end,
                buffer_len,
            });
        }
    }
    for (rank, output) in plan.outputs().iter().enumerate() {
        let expected = collective
            .output_len_at(rank, world, plan.input_len())
            .unwrap_or(0);
        if output.start > output.end || output.end > buffer_len || output.len() != expected {
            return Err(ScheduleViolation::BadOutput {
                rank,
                start: output.start,
                end: output.end,
                expected,
                buffer_len,
            });
        }
    }
    Ok(())
}
