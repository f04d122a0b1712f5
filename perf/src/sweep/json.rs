//! The `--json` document of a sweep, for scripts: one object per element type and operation (an
//! array of them when `-d` or `-o` names several, or `--nccl` adds the baseline's):
//!
//! ```json
//! { "command": "all-reduce-perf", "device": "...", "world": 4, "type": "float", "redop": "sum",
//!   "min_bytes": 8, "max_bytes": 134217728, "step_factor": 4, "iterations": 20, "warmup": 5,
//!   "check": true, "link_model": { "alpha_us": 2.0, "beta_gbps": 24.0 },
//!   "rows": [ { "bytes": 8, "count": 2, "type": "float", "redop": "sum", "time_us": 9.1,
//!               "algbw_gbps": 0.0, "busbw_gbps": 0.0, "wrong": 0, "traffic_ratio": 1.0,
//!               "model_us": 12.0 } ],
//!   "wrong_total": 0, "avg_busbw_gbps": 1.5 }
//! ```

use super::driver::SweepConfig;
use super::row::PerfRow;
use serde::Serialize;
use serde_json::Value;

#[derive(Serialize)]
struct LinkModelJson {
    alpha_us: f64,
    beta_gbps: f64,
}

#[derive(Serialize)]
struct RowJson {
    bytes: usize,
    count: usize,
    #[serde(rename = "type")]
    element_type: &'static str,
    redop: &'static str,
    time_us: f64,
    algbw_gbps: f64,
    busbw_gbps: f64,
    wrong: Option<u64>,
    traffic_ratio: Option<f64>,
    model_us: f64,
}

#[derive(Serialize)]
struct SweepJson<'a> {
    command: &'static str,
    device: &'a str,
    world: usize,
    #[serde(rename = "type")]
    element_type: &'static str,
    redop: &'static str,
    min_bytes: usize,
    max_bytes: usize,
    step_factor: usize,
    iterations: usize,
    warmup: usize,
    check: bool,
    link_model: LinkModelJson,
    rows: Vec<RowJson>,
    wrong_total: Option<u64>,
    avg_busbw_gbps: f64,
}

/// The document of an `all-reduce-perf` sweep.
pub fn sweep_json(config: &SweepConfig, device: &str, rows: &[PerfRow]) -> Value {
    let checked = rows.iter().any(|row| row.wrong.is_some());
    let document = SweepJson {
        command: "all-reduce-perf",
        device,
        world: config.world,
        element_type: config.element_type.nccl_name(),
        redop: config.operation.nccl_name(),
        min_bytes: config.min_bytes,
        max_bytes: config.max_bytes,
        step_factor: config.step_factor,
        iterations: config.iterations,
        warmup: config.warmup,
        check: config.check,
        link_model: LinkModelJson {
            alpha_us: config.link_model.alpha() * 1e6,
            beta_gbps: config.link_model.beta() / 1e9,
        },
        rows: rows
            .iter()
            .map(|row| RowJson {
                bytes: row.bytes,
                count: row.count,
                element_type: row.element_type.nccl_name(),
                redop: row.operation.nccl_name(),
                time_us: row.time_us,
                algbw_gbps: row.algbw(),
                busbw_gbps: row.busbw(),
                wrong: row.wrong,
                traffic_ratio: row.traffic_ratio,
                model_us: row.model_us,
            })
            .collect(),
        wrong_total: checked.then(|| rows.iter().filter_map(|row| row.wrong).sum()),
        avg_busbw_gbps: if rows.is_empty() {
            0.0
        } else {
            rows.iter().map(PerfRow::busbw).sum::<f64>() / rows.len() as f64
        },
    };
    serde_json::to_value(document).unwrap_or(Value::Null)
}
