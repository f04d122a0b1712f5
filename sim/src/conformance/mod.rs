//! The device conformance suite: checks any adapter that implements [`HostTensors`] against the
//! executor contract of [`NativeCollectiveDevice`](ruccl_core::NativeCollectiveDevice), and
//! reports — never panics on the device's behalf.
//!
//! ```no_run
//! use ruccl_sim::conformance::{self, ConformanceConfig};
//! use ruccl_sim::SimDevice;
//!
//! let report = conformance::run(
//!     &SimDevice::new(),
//!     conformance::consecutive_devices,
//!     &ConformanceConfig::default(),
//! );
//! report.assert_passed();
//! ```
//!
//! ## What is checked
//!
//! | check                         | how                                                            |
//! |-------------------------------|----------------------------------------------------------------|
//! | `collective/bits`             | every collective (all-reduce and reduce-scatter with every operation, all-gather, broadcast from a rotating root) × algorithm (auto, ring, direct, halving-doubling on powers of two) × element type × world × length (0, 1, W-1, W, W+1, a prime) through a real [`NativeCommunicator`](ruccl_core::NativeCommunicator), one thread per rank: each rank's output against the [plan interpreter](mod@interpret) on the plan the core resolves, **bit for bit** (float `Mean`: within one rounding of the scaling) |
//! | `collective/reference`        | the same outputs against the [exact reference](mod@reference), within its tolerance: an independent check that knows nothing of plans |
//! | `collective/identical`        | all-reduce, all-gather, broadcast: every rank's output is the same bits (DESIGN property 8), for floats too |
//! | `collective/call`, `…/hang`, `…/unfinished` | the call failed; no rank reported for [`stall`](ConformanceConfig::stall) (the ranks still inside a collective named, with their generations); a case never completed on every rank |
//! | `exchange/combine`, `exchange/overwrite` | one ring step of disjoint chunks: the successor, and only the successor, combines (sum, max, min) or overwrites |
//! | `exchange/pre_step_reads`     | every rank sends the range it also receives (fully or partly overlapping): sends must read the pre-step state |
//! | `exchange/fold_order`         | several senders into one element, listed out of order, on inputs whose sum shows the order: folds must run in the contract's |
//! | `exchange/empty_step`, `exchange/sequence`, `exchange/overwrite_many` | empty ranges and steps change nothing; state carries across steps; one sender to many |
//! | `exchange/plan`               | every built-in plan of every collective driven by hand (`begin`, each step, `finish`) on an uneven length |
//! | `validation/prepare/*`, `validation/begin/*`, `validation/exchange/*` | each contract violation returns an error — not `Ok`, not a panic: a tensor on another device, input count, lengths, element types, a rank's input on another device, an unsupported operation, a rank outside the world, a transfer to itself, an inverted or out-of-bounds range, an element overwritten twice, one sender twice in a fold |
//!
//! The exchange and validation checks drive the device directly through the trait
//! (`prepare`, `begin`, `exchange`, `finish`), on worlds of at least two ranks; their expected
//! values are the interpreter's too, compared bit for bit.
//!
//! ## Two references
//!
//! The [interpreter](mod@interpret) runs the generation's resolved plan on host values in the
//! contract's fold order with the arithmetic the simulated device documents, so a device that
//! folds in another order, reads post-step state or misplaces a range differs in the bits even
//! where the values are close. The [exact reference](mod@reference) computes each collective in f64
//! (compensated) or exact integers, with a tolerance that holds for any fold order: it would
//! catch a bug the interpreter shares with the device. The inputs ([`ConformanceConfig::seed`])
//! stay where the tolerance holds (see [`reference`](mod@reference)); `Min`/`Max` inputs include NaNs and
//! infinities, never zeros.
//!
//! ## Cost
//!
//! [`ConformanceConfig::default`], the affordable profile: the whole matrix (worlds 1..=8, every
//! collective, algorithm, type, operation and length, prime 31), the exchange checks and the
//! validations — 186,042 checks in about 5 s in a debug build on two cores (the simulated device,
//! `sim/tests/conformance_sim.rs`). [`ConformanceConfig::thorough`] adds prime 1021 and four
//! all-reduces of 1 Mi elements (about 25 s in debug). [`ConformanceConfig::quick`] (worlds 1 to
//! 4, prime 7, one type per case at the edge lengths: 15,000 checks, under half a second) is for
//! wrappers and broken devices.

mod checks;
mod collectives;
mod driver;
mod inputs;
pub mod interpret;
pub mod reference;
mod report;

pub use collectives::LargeCases;
pub use interpret::{InterpretError, compare_bits, interpret, run_steps, same_bits};
pub use reference::{Expected, Mismatch, compare, expected, expected_outputs};
pub use report::{ConformanceFailure, ConformanceReport};

use crate::host::{ElementType, HostTensors};
use ruccl_core::{Algorithm, Collective, DeviceId, ReduceOperation};
use std::time::{Duration, Instant};

/// What a conformance run covers.
#[derive(Clone, Debug)]
pub struct ConformanceConfig {
    /// World sizes of the matrix (exchange checks use those of at least 2 ranks).
    pub worlds: Vec<usize>,
    /// Element types to check (a type the device does not take, [`HostTensors::supports_type`],
    /// is skipped and listed as unsupported).
    pub element_types: Vec<ElementType>,
    /// Operations of the reducing collectives.
    pub operations: Vec<ReduceOperation>,
    /// The kinds of collective ([`Collective::KINDS`]): a reducing kind is checked with every
    /// operation of [`operations`](Self::operations) (its own is ignored), a broadcast from a
    /// root that rotates over the ranks (its own is ignored).
    pub kinds: Vec<Collective>,
    /// The algorithms; halving-doubling runs only on worlds that are powers of two.
    pub algorithms: Vec<Algorithm>,
    /// The prime length of the matrix (the others are 0, 1, W-1, W, W+1), per output block.
    pub prime_length: usize,
    /// Every element type at every length; otherwise every type at the prime length and one
    /// type per case, rotating, at the others.
    pub every_type_at_every_length: bool,
    /// The length of the large cases (at least 1 Mi elements by default).
    pub large_length: usize,
    /// Which all-reduces also run at [`large_length`](Self::large_length).
    pub large: LargeCases,
    /// Seeds the inputs; a run is reproducible from it.
    pub seed: u64,
    /// How long one rank waits for one collective before the communicator aborts.
    pub timeout: Duration,
    /// How long the matrix waits for any rank of a world to report before it declares the world
    /// hung (`collective/hang`, naming the ranks still inside a collective and the generation
    /// each is in), aborts its communicator and moves on: a lost wake-up or a hung device fails
    /// the suite in seconds instead of hanging it.
    pub stall: Duration,
    /// Run the collective matrix.
    pub collectives: bool,
    /// Run the crafted exchange checks and the plans driven by hand.
    pub exchange: bool,
    /// Run the validation checks.
    pub validation: bool,
}

impl Default for ConformanceConfig {
    /// The affordable profile: worlds 1..=8 × every type, operation, collective, algorithm and
    /// length, prime 31, no large cases, 60 s per collective, a world hung after 20 s without a
    /// result.
    fn default() -> Self {
        Self {
            worlds: (1..=8).collect(),
            element_types: ElementType::ALL.to_vec(),
            operations: ReduceOperation::ALL.to_vec(),
            kinds: Collective::KINDS.to_vec(),
            algorithms: vec![
                Algorithm::Auto,
                Algorithm::Ring,
                Algorithm::Direct,
                Algorithm::HalvingDoubling,
            ],
            prime_length: 31,
            every_type_at_every_length: true,
            large_length: 1 << 20,
            large: LargeCases::Skip,
            seed: 0x00C0_FFEE,
            timeout: Duration::from_secs(60),
            stall: Duration::from_secs(20),
            collectives: true,
            exchange: true,
            validation: true,
        }
    }
}

impl ConformanceConfig {
    /// The larger profile: the default's matrix at prime 1021, and four sampled all-reduces of
    /// 1 Mi elements ([`LargeCases::Sample`]).
    pub fn thorough() -> Self {
        Self {
            prime_length: 1021,
            large: LargeCases::Sample,
            ..Self::default()
        }
    }

    /// A smaller run for quick checks of a wrapper or a broken device: worlds 1, 2, 3 and 4,
    /// prime 7, one element type per case (rotating) at the lengths other than the prime.
    pub fn quick() -> Self {
        Self {
            worlds: vec![1, 2, 3, 4],
            prime_length: 7,
            every_type_at_every_length: false,
            ..Self::default()
        }
    }
}

/// Rank `r` on device `r`: the usual device list for a world of `world` ranks.
pub fn consecutive_devices(world: usize) -> Vec<DeviceId> {
    (0..world as u32).map(DeviceId::new).collect()
}

/// Check `device` against the executor contract. `devices(w)` names the `w` distinct devices a
/// world of `w` ranks runs on (rank `r` on `devices(w)[r]`); worlds of 2 are always used, for the
/// validation checks.
///
/// Every device call is contained: errors and panics of the device become failures in the
/// report. The matrix spawns one thread per rank through [`ruccl_core::sync::thread`].
pub fn run<D, F>(device: &D, devices: F, config: &ConformanceConfig) -> ConformanceReport
where
    D: HostTensors,
    F: Fn(usize) -> Vec<DeviceId>,
{
    let started = Instant::now();
    let mut report = ConformanceReport::default();
    if config.validation {
        checks::validations(device, &devices, config, &mut report);
    }
    if config.exchange {
        checks::exchanges(device, &devices, config, &mut report);
    }
    if config.collectives {
        collectives::run_matrix(device, &devices, config, &mut report);
    }
    report.elapsed = started.elapsed();
    report
}
