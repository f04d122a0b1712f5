//! The nccl-tests-style sweep, generic over any device that can upload and download host values
//! ([`HostTensors`](ruccl_sim::HostTensors)): the simulated one, the CUDA one — every backend
//! runs this one driver and prints this one table.
//!
//! | file        | job                                                                 |
//! |-------------|---------------------------------------------------------------------|
//! | `driver.rs` | [`sweep`]: time all-reduces per message size, one thread per rank   |
//! | `row.rs`    | [`PerfRow`]: one size, `algbw` and `busbw`                          |
//! | `table.rs`  | the nccl-tests text table                                          |
//! | `json.rs`   | the `--json` document                                              |
//! | `size.rs`   | `8`, `1K`, `128M`: byte counts as nccl-tests writes them            |
//! | `gate.rs`   | a breakable barrier for the rank threads                           |
//!
//! Inputs and the `#wrong` check are [`ruccl_sim::pattern`]'s. Figures follow nccl-tests:
//! `algbw = bytes / time`, `busbw = algbw · 2(W-1)/W`.

mod driver;
mod gate;
pub mod json;
mod row;
mod size;
pub mod table;

pub use driver::{
    DEFAULT_ALPHA_US, DEFAULT_BETA_GBPS, Instruments, SweepConfig, SweepError, SweepEvent,
    default_link_model, sweep,
};
pub use row::{PerfRow, bus_factor};
pub use size::{ParseSizeError, Size, format_size};
