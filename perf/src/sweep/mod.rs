//! The nccl-tests-style sweep, generic over any device that can upload and download host values
//! ([`HostTensors`](ruccl_sim::HostTensors)): the simulated one, the CUDA one — every backend
//! and every collective runs this one driver and prints this one table.
//!
//! | file        | job                                                                   |
//! |-------------|-----------------------------------------------------------------------|
//! | `config.rs` | [`SweepConfig`], [`Sizes`]: what a sweep measures, nccl-tests' sizes  |
//! | `driver.rs` | [`sweep`]: time collectives per size, out of place and in place       |
//! | `row.rs`    | [`PerfRow`]: one size, `algbw` and `busbw`                            |
//! | `table.rs`  | the nccl-tests text table                                             |
//! | `json.rs`   | the `--json` document, streamed                                       |
//! | `nccl_json.rs` | nccl-tests' JSON document (`-J FILE`), written aside then renamed  |
//! | `size.rs`   | `8`, `1K`, `128M`: byte counts as nccl-tests writes them              |
//! | `gate.rs`   | a breakable barrier for the rank threads                              |
//!
//! Inputs and the `#wrong` check are [`ruccl_sim::pattern`]'s. Figures follow nccl-tests:
//! `algbw = size / time`, `busbw = algbw ·` the collective's bus factor.

mod config;
mod driver;
mod gate;
pub mod json;
pub mod nccl_json;
mod row;
mod size;
pub mod table;

pub use config::{Average, Setup, Sizes, Step, SweepConfig};
pub use driver::{Instruments, Place, Places, SweepError, SweepEvent, sweep};
pub use row::{Measured, PerfRow, Waits, schedule_fingerprint};
pub use size::{ParseSizeError, Size, format_size};
