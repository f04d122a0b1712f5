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
//! | `all_reduce`                  | every operation × element type × world × length (0, 1, W-1, W, W+1, a prime; plus large cases) through a real [`NativeCommunicator`](ruccl_core::NativeCommunicator), one thread per rank, against a sequential reference; one check per case and rank |
//! | `exchange/combine`, `exchange/overwrite` | one step of disjoint chunks: the successor, and only the successor, combines (sum, max) or overwrites |
//! | `exchange/pre_step_reads`     | every rank sends the range it also receives (fully or partly overlapping): sends must read the pre-step state |
//! | `exchange/empty_step`, `exchange/sequence` | empty ranges change nothing; state carries across steps |
//! | `exchange/schedule`           | the [`RingSchedule`](ruccl_core::RingSchedule) driven by hand on an uneven length |
//! | `validation/prepare/*`, `validation/begin/*`, `validation/exchange/*` | each contract violation returns an error — not `Ok`, not a panic |
//!
//! The exchange and validation checks drive the device directly through the trait
//! (`prepare`, `begin`, `exchange`, `finish`), on worlds of at least two ranks.
//!
//! ## Rounding and tolerance
//!
//! Integer results must be exact; float `Min`/`Max` exact; float `Sum`, `Mean` and `Product`
//! within a bound in the element type's machine epsilon. The bounds, and the argument for them,
//! are the public [`reference`](mod@reference) module's, which the fuzz targets and tests check against too. The
//! suite's inputs ([`ConformanceConfig::seed`]): sum and mean terms in `[-1, 1)`, product factors
//! of magnitude `[0.5, 2)` with a random sign (no product of up to 8 ranks overflows or becomes
//! subnormal, even in f16); integers half small (`-100..=100`, where rounding of `Mean` and
//! signs matter), half arbitrary bit patterns (where wrapping matters).
//!
//! ## Cost
//!
//! The default matrix is 5 operations × 6 types × worlds 1..=8 × up to 6 lengths: 1,350
//! all-reduces, each checked on every rank (6,360 checks), plus 4 sampled cases of 1 Mi elements
//! ([`LargeCases::Sample`], 18 rank checks), 420 crafted exchanges and 10 validations — 6,808
//! checks, about 6 s in a debug build on two cores.

mod all_reduce;
mod checks;
mod driver;
mod inputs;
pub mod reference;
mod report;

pub use all_reduce::LargeCases;
pub use reference::{Expected, Mismatch, compare, expected};
pub use report::{ConformanceFailure, ConformanceReport};

use crate::host::{ElementType, HostTensors};
use ruccl_core::{DeviceId, ReduceOperation};
use std::time::{Duration, Instant};

/// What a conformance run covers.
#[derive(Clone, Debug)]
pub struct ConformanceConfig {
    /// World sizes of the all-reduce matrix (exchange checks use those of at least 2 ranks).
    pub worlds: Vec<usize>,
    /// Element types to check.
    pub element_types: Vec<ElementType>,
    /// Operations to check.
    pub operations: Vec<ReduceOperation>,
    /// The prime length of the matrix (the others are 0, 1, W-1, W, W+1).
    pub prime_length: usize,
    /// The length of the large cases (at least 1 Mi elements by default).
    pub large_length: usize,
    /// Which combinations also run at [`large_length`](Self::large_length).
    pub large: LargeCases,
    /// Seeds the inputs; a run is reproducible from it.
    pub seed: u64,
    /// How long one rank waits for one all-reduce before the communicator aborts.
    pub timeout: Duration,
    /// Run the all-reduce matrix.
    pub all_reduce: bool,
    /// Run the crafted exchange checks.
    pub exchange: bool,
    /// Run the validation checks.
    pub validation: bool,
}

impl Default for ConformanceConfig {
    /// The full matrix: worlds 1..=8, every type and operation, prime 1021, four sampled cases of
    /// 1 Mi elements, 60 s per all-reduce.
    fn default() -> Self {
        Self {
            worlds: (1..=8).collect(),
            element_types: ElementType::ALL.to_vec(),
            operations: ReduceOperation::ALL.to_vec(),
            prime_length: 1021,
            large_length: 1 << 20,
            large: LargeCases::Sample,
            seed: 0x00C0_FFEE,
            timeout: Duration::from_secs(60),
            all_reduce: true,
            exchange: true,
            validation: true,
        }
    }
}

impl ConformanceConfig {
    /// A smaller run for quick checks of a wrapper or a broken device: worlds 1, 2, 3 and 5, no
    /// large cases, prime 31.
    pub fn quick() -> Self {
        Self {
            worlds: vec![1, 2, 3, 5],
            prime_length: 31,
            large: LargeCases::Skip,
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
/// report. The all-reduce checks spawn one thread per rank through [`ruccl_core::sync::thread`].
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
    if config.all_reduce {
        all_reduce::all_reduces(device, &devices, config, &mut report);
    }
    report.elapsed = started.elapsed();
    report
}
