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
//!               "model_us": 0.5, "schedule": "4f1c0b9e2a7d3365" } ],
//!   (`schedule`: a fingerprint of the plan's work, equal for rows that ran the same schedule
//!   under different names — `PerfRow::schedule`)
//!   "wrong_total": 0, "avg_busbw_gbps": 1.5,
//!   "parked_generations": 0, "timed_generations": 40,
//!   "outcome": { "status": "passed", "message": "..." } }
//! ```

use super::config::{Step, SweepConfig, algorithms_asked};
use super::row::{Measured, PerfRow};
use super::table::Totals;
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
    };
    let text = serde_json::to_string(&json).unwrap_or_default();
    format!("{}\n    {text}", if first { "" } else { "," })
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
