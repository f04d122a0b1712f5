//! The fault-scenario runner: generations of one collective through a real communicator, on any
//! device (the simulated one behind a [`FaultyDevice`](ruccl_sim::FaultyDevice), by default),
//! one row per generation as it completes — which ranks got `Ok`, the error they shared, wrong
//! values, what the busiest rank sent against the lower bound, the time.
//!
//! | file        | job                                                                  |
//! |-------------|----------------------------------------------------------------------|
//! | `runner.rs` | [`run_scenario`], [`GenerationRow`]: streaming, constant memory       |
//! | `faults.rs` | [`check_faults`]: a fault plan checked against the run before it runs |
//! | `table.rs`  | the text table, one line per generation                              |
//! | `json.rs`   | the `--json` document, streamed                                      |

pub mod faults;
pub mod json;
mod runner;
pub mod table;

pub use faults::check_faults;
pub use runner::{GenerationRow, ScenarioConfig, ScenarioError, Summary, WINDOW, run_scenario};
