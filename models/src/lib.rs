//! # ruccl-models
//!
//! Model checks of the production `ruccl-core` — through its sync facade, against the simulated
//! device and its fault injector — with loom (exhaustive, `--cfg ruccl_loom`), shuttle
//! (randomized and PCT, `--cfg ruccl_shuttle`), and real threads (std).
//!
//! The library holds what the three share; the test targets pick the checker:
//!
//! | module          | job                                                                      |
//! |-----------------|--------------------------------------------------------------------------|
//! | [`properties`]  | one checker function per property of the design, named after it          |
//! | [`scenario`]    | the scenarios, written once against [`ruccl_core::sync`], run by all three |
//! | [`script`]      | what the ranks ask for, generation by generation, and what they must get  |
//! | [`values`]      | inputs that betray their generation, and every collective's outputs      |
//! | [`device`]      | the devices the scenarios drive, the census, a decorator holding the schedule |
//! | [`witness`]     | how often a scenario hit the schedule-dependent case it is about         |
//! | [`quiet`]       | a panic hook that keeps contained, injected panics off the output         |
//! | [`budget`]      | the full and the quick (mutation-testing) profile                        |
//! | [`watch`]       | the real-thread runs' deadline: fail fast, naming the ranks stuck         |
//! | `checkers`      | loom and shuttle runners that count executions and time them             |
//!
//! See `models/README.md` for the commands, the budgets measured and the planted slips each
//! checker catches.

pub mod budget;
#[cfg(any(ruccl_loom, ruccl_shuttle))]
pub mod checkers;
pub mod device;
pub mod properties;
pub mod quiet;
pub mod scenario;
pub mod script;
pub mod values;
pub mod watch;
pub mod witness;
