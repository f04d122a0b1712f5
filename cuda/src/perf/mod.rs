//! Performance measurement of the executor's all-reduce, printed as an nccl-tests-style table.
//!
//! The `ruccl-cuda-perf` binary drives this; the table format ([`table`]) is kept compatible with
//! `ruccl-sim`'s simulated perf table (same columns, same bandwidth definitions:
//! `algbw = bytes / time`, `busbw = algbw · 2(W-1)/W`).

pub mod pattern;
pub mod sweep;
pub mod table;

pub use pattern::{count_wrong, expected_values, rank_values};
pub use sweep::{SweepConfig, SweepError, measure};
pub use table::{PerfRow, bus_factor, footer, format_row, format_table, header};
