//! The `--json` document of a sweep command, for scripts: one document for everything the
//! command measures, **streamed** — the head when the command starts, each row as it is
//! measured, the tail (totals and what happened) at the end, also when the run failed or was
//! interrupted:
//!
//! ```json
//! { "command": "all_reduce_perf", "device": "...", "world": 4, "algorithm": "auto",
//!   (a run asking for several algorithms lists them: "auto,ring,direct,halving-doubling")
//!   "min_bytes": 8, "max_bytes": 134217728, "step": 4, "step_kind": "factor",
//!   "iterations": 20, "warmup": 5, "checks": 1, "average": 1,
//!   "link_model": { "alpha_us": 0.12, "gamma_us": 0.11, "beta_gbps": 24.0, "links": "shared" },
//!   "rows": [ { "bytes": 8, "count": 2, "type": "float", "redop": "sum", "root": -1,
//!               "out_of_place": { "time_us": 9.1, "algbw_gbps": 0.0, "busbw_gbps": 0.0, "wrong": 0,
//!                                 "parked": 0 },
//!               "in_place": { ... }, "asked": "auto", "algorithm": "direct", "traffic_ratio": 1.0,
//!               "model_us": 0.5, "schedule": "4f1c0b9e2a7d3365",
//!               "bound": { "copy_gbps": 9.8, "fold_gbps": 7.1, "folded_bytes": 24.0,
//!                          "copied_bytes": 24.0, "time_us": 0.006, "times": 1516.7 } } ],
//!   (a size the core refuses for the asked algorithm is a row with its size columns, "asked"
//!   and "skipped": the reason, and no measurements)
//!   (`schedule`: a fingerprint of the plan's work, equal for rows that ran the same schedule
//!   under different names — `PerfRow::schedule`; `bound`: the host-memory bound measured
//!   before the row, `crate::membound` — the rates in 10⁹ bytes per second, the minimum
//!   traffic, its time at those rates, and the in-place time over it, the table's `bound`
//!   column; `null` where none applies or it was not measured, `time_us` and `times` `null`
//!   where the row moves nothing)
//!   "wrong_total": 0, "avg_busbw_gbps": 1.5,
//!   "parked_generations": 0, "timed_generations": 40,
//!   "outcome": { "status": "passed", "message": "..." } }
//! ```

use super::config::{Setup, Step, SweepConfig, algorithms_asked};
use super::row::{Measured, PerfRow};
use super::table::Totals;
use crate::membound::Bound;
use ruccl_core::{LinkModel, Links};
use serde::Serialize;
use serde_json::Value;

#[derive(Serialize)]
struct LinkModelJson {
    alpha_us: f64,
    gamma_us: f64,
    beta_gbps: f64,
    links: &'static str,
}

impl LinkModelJson {
    fn of(model: &LinkModel) -> Self {
        Self {
            alpha_us: model.alpha() * 1e6,
            gamma_us: model.transfer_cost() * 1e6,
            beta_gbps: model.beta() / 1e9,
            links: match model.links() {
                Links::Shared => "shared",
                _ => "per-rank",
            },
        }
    }
}

#[derive(Serialize)]
struct MeasuredJson {
    time_us: f64,
    algbw_gbps: f64,
    busbw_gbps: f64,
    wrong: Option<u64>,
    /// Timed generations in which a rank parked (`null`: not counted).
    parked: Option<u64>,
}

#[derive(Serialize)]
struct RowJson {
    bytes: usize,
    count: usize,
    #[serde(rename = "type")]
    element_type: &'static str,
    redop: &'static str,
    root: i64,
    out_of_place: MeasuredJson,
    in_place: MeasuredJson,
    asked: Option<&'static str>,
    algorithm: Option<&'static str>,
    traffic_ratio: Option<f64>,
    model_us: Option<f64>,
    /// [`PerfRow::schedule`] as 16 hex digits.
    schedule: Option<String>,
    bound: Option<BoundJson>,
}

/// [`PerfRow::bound`].
#[derive(Serialize)]
struct BoundJson {
    copy_gbps: f64,
    fold_gbps: f64,
    folded_bytes: f64,
    copied_bytes: f64,
    time_us: Option<f64>,
    /// The in-place time over `time_us` (the table's `bound`).
    times: Option<f64>,
}

impl BoundJson {
    fn of(row: &PerfRow, bound: &Bound) -> Self {
        Self {
            copy_gbps: bound.rates.copy / 1e9,
            fold_gbps: bound.rates.fold / 1e9,
            folded_bytes: bound.traffic.folded,
            copied_bytes: bound.traffic.copied,
            time_us: bound.seconds().map(|seconds| seconds * 1e6),
            times: row.times_bound(),
        }
    }
}

#[derive(Serialize)]
struct HeadJson<'a> {
    command: String,
    device: &'a str,
    world: usize,
    algorithm: String,
    min_bytes: usize,
    max_bytes: usize,
    step: usize,
    step_kind: &'static str,
    iterations: usize,
    warmup: usize,
    checks: usize,
    average: u8,
    link_model: LinkModelJson,
}

/// The `link_model` object of a document.
pub fn link_model_json(model: &LinkModel) -> Value {
    serde_json::to_value(LinkModelJson::of(model)).unwrap_or(Value::Null)
}

/// The document's head for `configs`' sweeps (the settings of the first, the algorithms of
/// all), up to and including the opening of `rows`.
pub fn head(configs: &[SweepConfig], device: &str, model: &LinkModel) -> String {
    let Some(config) = configs.first() else {
        return "{\n  \"rows\": [".to_owned();
    };
    let (step, step_kind) = match config.sizes.step {
        Step::Factor(factor) => (factor, "factor"),
        Step::Bytes(bytes) => (bytes, "bytes"),
    };
    let head = HeadJson {
        command: format!("{}_perf", config.collective.nccl_name),
        device,
        world: config.world,
        algorithm: algorithms_asked(configs),
        min_bytes: config.sizes.min,
        max_bytes: config.sizes.max,
        step,
        step_kind,
        iterations: config.iterations,
        warmup: config.warmup,
        checks: config.checks,
        average: config.average.code(),
        link_model: LinkModelJson::of(model),
    };
    let text = serde_json::to_string_pretty(&head).unwrap_or_else(|_| "{".to_owned());
    // Reopen the object to append the rows.
    let open = text.trim_end().trim_end_matches('}').trim_end();
    format!("{open},\n  \"rows\": [")
}

fn measured(row: &PerfRow, measured: &Measured) -> MeasuredJson {
    MeasuredJson {
        time_us: measured.time_us,
        algbw_gbps: row.algbw(measured),
        busbw_gbps: row.busbw(measured),
        wrong: measured.wrong,
        parked: measured.waits.map(|waits| waits.parked),
    }
}

/// One row; `first` says whether it opens the list (no comma before it).
pub fn row(row: &PerfRow, first: bool) -> String {
    let json = RowJson {
        bytes: row.bytes,
        count: row.count,
        element_type: row.element_type.nccl_name(),
        redop: row
            .collective
            .operation()
            .map_or("none", |operation| operation.nccl_name()),
        root: row.root,
        out_of_place: measured(row, &row.out_of_place),
        in_place: measured(row, &row.in_place),
        asked: row.asked.map(|algorithm| algorithm.name()),
        algorithm: row.algorithm.map(|algorithm| algorithm.name()),
        traffic_ratio: row.traffic_ratio,
        model_us: row.model_us,
        schedule: row
            .schedule
            .map(|fingerprint| format!("{fingerprint:016x}")),
        bound: row.bound.as_ref().map(|bound| BoundJson::of(row, bound)),
    };
    let text = serde_json::to_string(&json).unwrap_or_default();
    format!("{}\n    {text}", if first { "" } else { "," })
}

/// A size the core refuses for the sweep's algorithm ([`SweepConfig::refusal`]), in the rows'
/// list: its size columns, `asked`, and `skipped` (why) instead of measurements.
pub fn skipped(config: &SweepConfig, setup: &Setup, reason: &str, first: bool) -> String {
    let json = serde_json::json!({
        "bytes": setup.bytes,
        "count": setup.counts.param,
        "type": config.element_type.nccl_name(),
        "redop": config.operation_name(),
        "root": config.root_column(),
        "asked": config.algorithm.name(),
        "skipped": reason,
    });
    format!("{}\n    {json}", if first { "" } else { "," })
}

/// The tail: the totals and `outcome` (what happened), closing the document.
pub fn tail(totals: &Totals, outcome: &Value) -> String {
    let wrong = if totals.checked > 0 {
        Value::from(totals.wrong)
    } else {
        Value::Null
    };
    let (parked, timed) = match totals.waits {
        Some(waits) => (Value::from(waits.parked), Value::from(waits.generations)),
        None => (Value::Null, Value::Null),
    };
    format!(
        "\n  ],\n  \"wrong_total\": {wrong},\n  \"avg_busbw_gbps\": {},\n  \"parked_generations\": {parked},\n  \"timed_generations\": {timed},\n  \"outcome\": {}\n}}\n",
        Value::from(totals.average_busbw()),
        outcome
    )
}
