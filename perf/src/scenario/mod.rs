//! The fault-scenario runner: generations of one all-reduce through a real communicator, on any
//! device (the simulated one behind a [`FaultyDevice`](ruccl_sim::FaultyDevice), by default),
//! one row per generation — which ranks got `Ok`, the error they shared, wrong elements, elements
//! moved against the lower bound.
//!
//! | file        | job                                                          |
//! |-------------|--------------------------------------------------------------|
//! | `runner.rs` | [`run_scenario`], [`GenerationRow`]                          |
//! | `table.rs`  | the text table, one line per generation                      |
//! | `json.rs`   | the `--json` document                                        |

pub mod json;
mod runner;
pub mod table;

pub use runner::{GenerationRow, ScenarioConfig, ScenarioError, run_scenario};
