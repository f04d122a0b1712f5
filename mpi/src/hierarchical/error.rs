//! [`HierarchicalError`], and the tag that carries a hierarchical call's description through
//! the inter-process step so that calls differing above it are a mismatch too.

use crate::error::{CallDescription, InterProcessError};
use ruccl_core::{Collective, ElementType, NativeCollectiveError, ReduceOperation};
use std::fmt;

/// A failure of a hierarchical collective. Within one generation every rank of every process
/// that returns an error returns one with the same `Display` text — except the refusals of a
/// single call ([`RankOutOfRange`](Self::RankOutOfRange), [`RankBusy`](Self::RankBusy)), which
/// concern that call alone and are not agreed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HierarchicalError {
    /// A rank of some process failed (a device error or panic in either local phase, a local
    /// mismatch, an abort, an argument the job cannot honour, a failed staging): the lowest
    /// failing process, and the text of its lowest failing local rank. Rank numbers inside the
    /// text are that process's local ranks. The communicator stays usable (an abort, though, is
    /// sticky: every later generation fails with it).
    #[error("process {process} failed: {message}")]
    Failed {
        /// The lowest process that failed.
        process: usize,
        /// Its failure's text.
        message: String,
    },
    /// The processes called different collectives (kind, operation, root, element type or
    /// length differ). The communicator stays usable.
    #[error("processes called different collectives: {}", list_calls(.calls))]
    Mismatch {
        /// Each process's call, in process order.
        calls: Vec<ProcessCall>,
    },
    /// A deadline passed before every rank of every process finished this generation. Sticky:
    /// the communicator is poisoned and every later call returns this same error. A rank that
    /// never called, locally or in another process, makes every waiting rank of every process
    /// return this text (processes waiting without a timeout wait for ever: MPI cannot cancel).
    #[error(
        "collective #{generation} timed out before every rank of every process arrived; the communicator is poisoned"
    )]
    TimedOut {
        /// The generation (0-based count of the communicator's collectives).
        generation: u64,
    },
    /// The inter-process engine failed on its own (an MPI error, an engine bug: sticky, the
    /// communicator is poisoned), or this generation's engine call met another communicator's
    /// on a shared engine ([`InterProcessError::Crossed`]: not sticky, and not agreed across
    /// processes — each met a different call).
    #[error(transparent)]
    InterProcess(InterProcessError),
    /// The communicator could not be created.
    #[error("cannot create the hierarchical communicator: {reason}")]
    Setup {
        /// Why.
        reason: String,
    },
    /// A rank outside this process's local ranks called; refused at once, not agreed.
    #[error("local rank {rank} is outside this process's {ranks} local ranks")]
    RankOutOfRange {
        /// The rank given.
        rank: usize,
        /// This process's local rank count.
        ranks: usize,
    },
    /// A local rank called while its previous call was still in progress (from a second
    /// thread); refused at once, without disturbing the call in progress.
    #[error(
        "local rank {rank} already has a collective in progress on this communicator (one thread per rank)"
    )]
    RankBusy {
        /// The rank.
        rank: usize,
    },
}

impl HierarchicalError {
    /// Whether the error poisons the communicator (every later call fails fast with it).
    pub fn is_sticky(&self) -> bool {
        match self {
            HierarchicalError::TimedOut { .. } => true,
            HierarchicalError::InterProcess(error) => error.is_sticky(),
            _ => false,
        }
    }

    /// A local core error at creation.
    pub(crate) fn setup(error: &NativeCollectiveError) -> Self {
        HierarchicalError::Setup {
            reason: error.to_string(),
        }
    }
}

/// One process's call, as a [`HierarchicalError::Mismatch`] lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProcessCall {
    /// The collective its local ranks asked for (a broadcast's root is a global rank); `None`
    /// for a call this version cannot read.
    pub collective: Option<Collective>,
    /// The element type of the input; `None` when the process had no input.
    pub element: Option<ElementType>,
    /// Elements of every local rank's input.
    pub len: usize,
    /// The process's count of inter-process calls before this one.
    pub call: u64,
}

impl ProcessCall {
    /// The hierarchical call an inter-process description carries in its tag.
    pub(crate) fn from_description(description: &CallDescription) -> Self {
        let decoded = untag(description.tag);
        ProcessCall {
            collective: decoded.map(|(collective, _)| collective),
            element: description.element,
            len: decoded.map_or(description.len, |(_, len)| len),
            call: description.generation,
        }
    }
}

impl fmt::Display for ProcessCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.collective {
            Some(collective) => write!(f, "{collective}")?,
            None => f.write_str("an unknown collective")?,
        }
        match self.element {
            Some(element) => write!(f, " of {} × {element}", self.len),
            None => f.write_str(" (no input)"),
        }
    }
}

fn list_calls(calls: &[ProcessCall]) -> String {
    // The inter-process call counts matter only when they differ (a process skipped a call).
    let counts_differ = calls.windows(2).any(|pair| pair[0].call != pair[1].call);
    let listed: Vec<String> = calls
        .iter()
        .enumerate()
        .map(|(process, call)| {
            if counts_differ {
                format!(
                    "process {process}: {call} at inter-process call #{}",
                    call.call
                )
            } else {
                format!("process {process}: {call}")
            }
        })
        .collect();
    listed.join(", ")
}

/// Bits of the tag: the kind, the operation plus one (0 for none), the root plus one (0 for
/// none, saturating), the length (saturating). 2 + 3 + 19 + 39 = 63 bits, so a tag is a
/// non-negative `i64` on the wire.
const KIND_BITS: u32 = 2;
const OPERATION_BITS: u32 = 3;
const ROOT_BITS: u32 = 19;
const LEN_BITS: u32 = 39;
const ROOT_SHIFT: u32 = KIND_BITS + OPERATION_BITS;
const LEN_SHIFT: u32 = ROOT_SHIFT + ROOT_BITS;
/// The operation code no operation has: marks the layout exchange at creation.
const SETUP_CODE: u64 = (1 << OPERATION_BITS) - 1;

/// The tag of the layout exchange that creates a communicator.
pub(crate) const SETUP_TAG: u64 = 2 | SETUP_CODE << KIND_BITS;

/// The tag describing a hierarchical `collective` on inputs of `len` elements.
pub(crate) fn tag(collective: Collective, len: usize) -> u64 {
    let (kind, operation, root) = match collective {
        Collective::AllReduce(operation) => (0, Some(operation), None),
        Collective::ReduceScatter(operation) => (1, Some(operation), None),
        Collective::AllGather => (2, None, None),
        Collective::Broadcast { root } => (3, None, Some(root)),
        // A later core's collective: refused before the inter-process step; any tag will do.
        _ => (0, None, None),
    };
    let operation = operation.map_or(0, |operation| {
        1 + ReduceOperation::ALL
            .iter()
            .position(|candidate| *candidate == operation)
            .unwrap_or(0) as u64
    });
    let root = root.map_or(0, |root| {
        (root as u64).saturating_add(1).min(mask(ROOT_BITS))
    });
    let len = (len as u64).min(mask(LEN_BITS));
    kind | operation << KIND_BITS | root << ROOT_SHIFT | len << LEN_SHIFT
}

/// The collective and length a [`tag`] describes, or `None` for a tag no hierarchical call of
/// this version writes.
pub(crate) fn untag(tag: u64) -> Option<(Collective, usize)> {
    let field = |shift: u32, bits: u32| (tag >> shift) & mask(bits);
    let operation = match field(KIND_BITS, OPERATION_BITS) {
        0 => None,
        code => Some(*ReduceOperation::ALL.get(usize::try_from(code - 1).ok()?)?),
    };
    let root = field(ROOT_SHIFT, ROOT_BITS).checked_sub(1);
    let collective = match (field(0, KIND_BITS), operation, root) {
        (0, Some(operation), None) => Collective::AllReduce(operation),
        (1, Some(operation), None) => Collective::ReduceScatter(operation),
        (2, None, None) => Collective::AllGather,
        (3, None, Some(root)) => Collective::Broadcast {
            root: usize::try_from(root).ok()?,
        },
        _ => return None,
    };
    Some((
        collective,
        usize::try_from(field(LEN_SHIFT, LEN_BITS)).ok()?,
    ))
}

const fn mask(bits: u32) -> u64 {
    (1 << bits) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hierarchical_call_survives_its_tag() {
        let collectives = ReduceOperation::ALL
            .into_iter()
            .flat_map(|operation| {
                [
                    Collective::AllReduce(operation),
                    Collective::ReduceScatter(operation),
                ]
            })
            .chain([
                Collective::AllGather,
                Collective::Broadcast { root: 0 },
                Collective::Broadcast { root: 4242 },
            ]);
        for collective in collectives {
            for len in [0, 1, 1 << 38] {
                let tag = tag(collective, len);
                assert!(tag < 1 << 63, "{collective}");
                assert_eq!(untag(tag), Some((collective, len)), "{collective} x {len}");
            }
        }
    }

    #[test]
    fn calls_that_differ_only_above_the_inter_process_step_have_different_tags() {
        // Both are a sum between processes; only the tag tells them apart.
        let sum = tag(Collective::AllReduce(ReduceOperation::Sum), 8);
        let mean = tag(Collective::AllReduce(ReduceOperation::Mean), 8);
        assert_ne!(sum, mean);
        // Two global roots in one process are one root process between processes.
        let one = tag(Collective::Broadcast { root: 0 }, 8);
        let other = tag(Collective::Broadcast { root: 1 }, 8);
        assert_ne!(one, other);
        assert_eq!(untag(SETUP_TAG), None);
    }

    #[test]
    fn a_mismatch_names_the_inter_process_call_only_when_the_counts_differ() {
        let call = |collective, call| ProcessCall {
            collective: Some(collective),
            element: Some(ElementType::F32),
            len: 4,
            call,
        };
        let sum = Collective::AllReduce(ReduceOperation::Sum);
        let max = Collective::AllReduce(ReduceOperation::Max);
        let same = HierarchicalError::Mismatch {
            calls: vec![call(sum, 3), call(max, 3)],
        };
        assert_eq!(
            same.to_string(),
            "processes called different collectives: process 0: all-reduce(sum) of 4 × float, \
             process 1: all-reduce(max) of 4 × float"
        );
        let skewed = HierarchicalError::Mismatch {
            calls: vec![call(sum, 3), call(sum, 5)],
        };
        assert!(skewed.to_string().ends_with("at inter-process call #5"));
    }
}
