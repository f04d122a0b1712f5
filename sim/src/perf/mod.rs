//! The nccl-tests-style perf harness and the scenario runner, generic over any device that can
//! upload and download host values ([`HostTensors`](crate::HostTensors)) — the simulated one
//! here, the CUDA one for its real-GPU table.
//!
//! | file                | job                                                                 |
//! |---------------------|---------------------------------------------------------------------|
//! | `sweep.rs`          | [`sweep`]: time all-reduces per message size, one thread per rank   |
//! | `row.rs`            | [`PerfRow`]: one size, `algbw` and `busbw`                          |
//! | `table.rs`          | the nccl-tests text table                                          |
//! | `scenario.rs`       | [`run_scenario`]: generations under a fault plan, per-generation rows |
//! | `scenario_table.rs` | the scenario's text table                                           |
//! | `json.rs`           | the `--json` documents                                              |
//! | `pattern.rs`        | inputs whose reduction is exact in every type; the `#wrong` check   |
//! | `size.rs`           | `8`, `1K`, `128M`: byte counts as nccl-tests writes them            |
//! | `gate.rs`           | a breakable barrier for the harness's rank threads                  |
//!
//! Figures follow nccl-tests: `algbw = bytes / time`, `busbw = algbw · 2(W-1)/W`.

mod gate;
pub mod json;
pub mod pattern;
mod row;
mod scenario;
pub mod scenario_table;
mod size;
mod sweep;
pub mod table;

pub use row::{PerfRow, bus_factor};
pub use scenario::{GenerationRow, ScenarioConfig, ScenarioError, run_scenario};
pub use size::{ParseSizeError, Size, format_size};
pub use sweep::{
    DEFAULT_ALPHA_US, DEFAULT_BETA_GBPS, Instruments, SweepConfig, SweepError, SweepEvent,
    default_link_model, sweep,
};
