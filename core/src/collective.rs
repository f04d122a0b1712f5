//! What ranks ask for: the [`Collective`], the [`Algorithm`] that runs it, and the per-call
//! [`CollectiveOptions`].

use crate::ReduceOperation;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A collective operation, as every rank of a generation must agree on it.
///
/// Sizes are in elements, `W` is the world size:
///
/// | collective        | input per rank | output per rank | output holds                              |
/// |-------------------|----------------|-----------------|-------------------------------------------|
/// | `AllReduce(op)`   | `n`            | `n`             | the reduction over all ranks               |
/// | `ReduceScatter(op)` | `W·m`        | `m`             | block `rank` of the reduction              |
/// | `AllGather`       | `m`            | `W·m`           | block `r` is rank `r`'s input               |
/// | `Broadcast{root}` | `n`            | `n`             | the root's input (others' contents ignored) |
/// | `Reduce{op, root}` | `n`           | `n` at the root, `0` elsewhere | the reduction, at the root   |
/// | `Gather{root}`    | `m`            | `W·m` at the root, `0` elsewhere | block `r` is rank `r`'s input |
/// | `Scatter{root}`   | `W·m` (only the root's is read) | `m` | block `rank` of the root's input        |
/// | `AllToAll`        | `W·m`          | `W·m`           | block `j` is block `rank` of rank `j`'s input |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Collective {
    /// Every rank receives the element-wise reduction of every rank's input.
    AllReduce(ReduceOperation),
    /// Rank `r` receives block `r` (of `W` equal blocks) of the reduction.
    ReduceScatter(ReduceOperation),
    /// Every rank receives every rank's input, concatenated in rank order.
    AllGather,
    /// Every rank receives the input of rank `root`.
    Broadcast {
        /// The rank whose input everyone receives.
        root: usize,
    },
    /// Rank `root` receives the element-wise reduction of every rank's input; every other rank
    /// receives an empty tensor.
    Reduce {
        /// The reduce operation.
        op: ReduceOperation,
        /// The rank that receives the reduction.
        root: usize,
    },
    /// Rank `root` receives every rank's input, concatenated in rank order; every other rank
    /// receives an empty tensor.
    Gather {
        /// The rank that receives the inputs.
        root: usize,
    },
    /// Rank `r` receives block `r` (of `W` equal blocks) of rank `root`'s input; the other
    /// ranks' inputs are not read (but must have the root's length and type).
    Scatter {
        /// The rank whose input is scattered.
        root: usize,
    },
    /// Rank `r` receives, as its block `j`, block `r` of rank `j`'s input (`W` equal blocks).
    AllToAll,
}

impl Collective {
    /// Every kind of collective, with `Sum` and root 0 where a parameter is needed.
    pub const KINDS: [Collective; 8] = [
        Collective::AllReduce(ReduceOperation::Sum),
        Collective::ReduceScatter(ReduceOperation::Sum),
        Collective::AllGather,
        Collective::Broadcast { root: 0 },
        Collective::Reduce {
            op: ReduceOperation::Sum,
            root: 0,
        },
        Collective::Gather { root: 0 },
        Collective::Scatter { root: 0 },
        Collective::AllToAll,
    ];

    /// The reduce operation, for the reducing collectives.
    pub const fn operation(self) -> Option<ReduceOperation> {
        match self {
            Collective::AllReduce(operation)
            | Collective::ReduceScatter(operation)
            | Collective::Reduce { op: operation, .. } => Some(operation),
            Collective::AllGather
            | Collective::Broadcast { .. }
            | Collective::Gather { .. }
            | Collective::Scatter { .. }
            | Collective::AllToAll => None,
        }
    }

    /// The root, for the rooted collectives (broadcast, reduce, gather, scatter).
    pub const fn root(self) -> Option<usize> {
        match self {
            Collective::Broadcast { root }
            | Collective::Reduce { root, .. }
            | Collective::Gather { root }
            | Collective::Scatter { root } => Some(root),
            Collective::AllReduce(_)
            | Collective::ReduceScatter(_)
            | Collective::AllGather
            | Collective::AllToAll => None,
        }
    }

    /// The same collective with its root replaced by `root` (itself if it has none).
    pub const fn with_root(self, root: usize) -> Collective {
        match self {
            Collective::Broadcast { .. } => Collective::Broadcast { root },
            Collective::Reduce { op, .. } => Collective::Reduce { op, root },
            Collective::Gather { .. } => Collective::Gather { root },
            Collective::Scatter { .. } => Collective::Scatter { root },
            other => other,
        }
    }

    /// The same collective with its reduce operation replaced by `operation` (itself if it
    /// reduces nothing).
    pub const fn with_operation(self, operation: ReduceOperation) -> Collective {
        match self {
            Collective::AllReduce(_) => Collective::AllReduce(operation),
            Collective::ReduceScatter(_) => Collective::ReduceScatter(operation),
            Collective::Reduce { root, .. } => Collective::Reduce {
                op: operation,
                root,
            },
            other => other,
        }
    }

    /// The name nccl-tests gives the collective: `all_reduce`, `reduce_scatter`, `all_gather`,
    /// `broadcast`, `reduce`, `gather`, `scatter`, `alltoall` (its binaries are `<name>_perf`).
    pub const fn nccl_name(self) -> &'static str {
        match self {
            Collective::AllReduce(_) => "all_reduce",
            Collective::ReduceScatter(_) => "reduce_scatter",
            Collective::AllGather => "all_gather",
            Collective::Broadcast { .. } => "broadcast",
            Collective::Reduce { .. } => "reduce",
            Collective::Gather { .. } => "gather",
            Collective::Scatter { .. } => "scatter",
            Collective::AllToAll => "alltoall",
        }
    }

    /// nccl-tests' bus-bandwidth factor for `world` ranks: `busbw = algbw · factor`, where
    /// `algbw` is the larger of the input and output sizes over the time. `2(W-1)/W` for
    /// all-reduce; `(W-1)/W` for reduce-scatter, all-gather, gather, scatter and all-to-all; `1`
    /// for broadcast and reduce (nccl-tests' `*GetBw` of each collective).
    pub fn bus_factor(self, world: usize) -> f64 {
        if world == 0 {
            return 0.0;
        }
        let share = (world - 1) as f64 / world as f64;
        match self {
            Collective::AllReduce(_) => 2.0 * share,
            Collective::ReduceScatter(_)
            | Collective::AllGather
            | Collective::Gather { .. }
            | Collective::Scatter { .. }
            | Collective::AllToAll => share,
            Collective::Broadcast { .. } | Collective::Reduce { .. } => 1.0,
        }
    }

    /// The elements of the largest output of any rank (the root's, for reduce and gather) for
    /// an input of `input_len` elements on `world` ranks, or `None` where the collective cannot
    /// take that input (an input that must split into `W` equal blocks and does not, an
    /// overflow). See [`output_len_at`](Self::output_len_at) for one rank's.
    pub fn output_len(self, world: usize, input_len: usize) -> Option<usize> {
        let blocks = || (world > 0 && input_len % world == 0).then(|| input_len / world);
        match self {
            Collective::AllReduce(_) | Collective::Broadcast { .. } | Collective::Reduce { .. } => {
                Some(input_len)
            }
            Collective::ReduceScatter(_) | Collective::Scatter { .. } => blocks(),
            Collective::AllToAll => blocks().map(|_| input_len),
            Collective::AllGather | Collective::Gather { .. } => input_len.checked_mul(world),
        }
    }

    /// The elements of rank `rank`'s output: [`output_len`](Self::output_len), except `0` for
    /// every rank but the root of a reduce or a gather.
    pub fn output_len_at(self, rank: usize, world: usize, input_len: usize) -> Option<usize> {
        let len = self.output_len(world, input_len)?;
        Some(match self {
            Collective::Reduce { root, .. } | Collective::Gather { root } if rank != root => 0,
            _ => len,
        })
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Collective::AllReduce(operation) => write!(f, "all-reduce({operation})"),
            Collective::ReduceScatter(operation) => write!(f, "reduce-scatter({operation})"),
            Collective::AllGather => f.write_str("all-gather"),
            Collective::Broadcast { root } => write!(f, "broadcast(root {root})"),
            Collective::Reduce { op, root } => write!(f, "reduce({op}, root {root})"),
            Collective::Gather { root } => write!(f, "gather(root {root})"),
            Collective::Scatter { root } => write!(f, "scatter(root {root})"),
            Collective::AllToAll => f.write_str("all-to-all"),
        }
    }
}

/// How a collective is scheduled. Every algorithm produces a [`Plan`](crate::Plan) the symbolic
/// checker accepts; they differ in steps and traffic.
///
/// | algorithm          | all-reduce steps | reduce-scatter / all-gather steps | broadcast steps | needs |
/// |--------------------|------------------|-----------------------------------|-----------------|-------|
/// | `Ring`             | `2(W-1)`         | `W-1`                             | `W` (scatter, ring all-gather) | — |
/// | `Direct`           | 1 or 2           | 1                                 | 1 or 2          | traffic within [`TRAFFIC_BOUND`](crate::TRAFFIC_BOUND) |
/// | `HalvingDoubling`  | `2·log2 W`       | `log2 W`                          | `2·log2 W`      | `W` a power of two |
///
/// `Auto` picks, per collective, world and size, the one with the least modelled time (see
/// [`LinkModel`](crate::LinkModel)); `Custom` names a plan built from a user's own steps
/// ([`Plan::from_parts`](crate::Plan::from_parts)) and cannot be asked for by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// The least modelled time for the collective, world and size.
    #[default]
    Auto,
    /// Neighbour to neighbour around the ring `r → r+1`: bandwidth-optimal, `O(W)` steps.
    Ring,
    /// Every destination receives from every source at once: one step, or two (all-reduce,
    /// broadcast, reduce: a direct scatter or reduce-scatter of chunks, then their direct
    /// gather) — of those within [`TRAFFIC_BOUND`](crate::TRAFFIC_BOUND) times the least
    /// traffic, the one with the least modelled time (one step where latency dominates, two
    /// where bandwidth does); refused where neither is within the bound.
    Direct,
    /// Recursive halving (reduce) and doubling (gather) with partner `r XOR d`: `O(log W)` steps,
    /// bandwidth-optimal; needs a power-of-two world.
    HalvingDoubling,
    /// A user's own schedule, checked by [`verify`](crate::verify) when it was built.
    Custom,
}

impl Algorithm {
    /// The algorithms a plan can be built for by name, in the order `Auto` prefers them on a tie.
    pub const BUILT_IN: [Algorithm; 3] = [
        Algorithm::Direct,
        Algorithm::HalvingDoubling,
        Algorithm::Ring,
    ];

    /// The name used in tables and on command lines.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Auto => "auto",
            Algorithm::Ring => "ring",
            Algorithm::Direct => "direct",
            Algorithm::HalvingDoubling => "halving-doubling",
            Algorithm::Custom => "custom",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A string that names no [`Algorithm`] that can be asked for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown algorithm `{0}`: expected one of auto, ring, direct, halving-doubling (hd) — a custom plan is passed as a plan, not by name"
)]
pub struct ParseAlgorithmError(pub String);

impl FromStr for Algorithm {
    type Err = ParseAlgorithmError;

    /// Accepts `auto`, `ring`, `direct`, `halving-doubling` (also `halving_doubling`, `hd`,
    /// `rhd`), in any case.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "auto" => Ok(Algorithm::Auto),
            "ring" => Ok(Algorithm::Ring),
            "direct" => Ok(Algorithm::Direct),
            "halving-doubling" | "halving_doubling" | "hd" | "rhd" => {
                Ok(Algorithm::HalvingDoubling)
            }
            _ => Err(ParseAlgorithmError(text.to_owned())),
        }
    }
}

/// Per-call options of [`NativeCommunicator::collective`](crate::NativeCommunicator::collective).
///
/// ```
/// use ruccl_core::{Algorithm, CollectiveOptions};
/// use std::time::Duration;
///
/// let options = CollectiveOptions::default()
///     .with_algorithm(Algorithm::Ring)
///     .with_timeout(Duration::from_secs(5));
/// assert_eq!(options.algorithm, Algorithm::Ring);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CollectiveOptions {
    /// The algorithm; every rank of a generation must ask for the same one.
    pub algorithm: Algorithm,
    /// How long this rank waits for its generation before the communicator is aborted with
    /// [`TimedOut`](crate::NativeCollectiveError::TimedOut); `None` waits forever. Counted from
    /// when the rank parks, after its bounded polling ([`SpinBudget`](crate::sync::SpinBudget)):
    /// a call that never parks never reads the clock.
    pub timeout: Option<Duration>,
}

impl CollectiveOptions {
    /// These options with `algorithm`.
    pub fn with_algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// These options with a `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}
