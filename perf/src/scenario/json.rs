//! The `--json` document of a `run` scenario, for scripts, **streamed**: the head, each
//! generation's row as it completes, then the summary and what happened (also when the run
//! failed or was interrupted):
//!
//! `{ "command": "run", "collective", "world", "length", "type", "algorithm", "generations",
//! "faults", "lower_bound", "rows": [ { "generation", "ok_ranks", "error", "errors", "agreed",
//! "wrong", "differing", "sent", "algorithm", "time_us", "notes" } ], "summary": { "ok",
//! "failed_alike", "disagreed", "wrong", "generations", "mean_us" }, "outcome": { "status",
//! "message" } }` — `error` is the shared error (null if none or if the ranks disagree),
//! `errors` every failing rank's.

use super::runner::{GenerationRow, ScenarioConfig, Summary};
use serde::Serialize;
use serde_json::Value;

#[derive(Serialize)]
struct ErrorJson<'a> {
    rank: usize,
    message: &'a str,
}

#[derive(Serialize)]
struct RowJson<'a> {
    generation: u64,
    ok_ranks: &'a [usize],
    error: Option<&'a str>,
    errors: Vec<ErrorJson<'a>>,
    agreed: bool,
    wrong: u64,
    differing: u64,
    sent: usize,
    algorithm: Option<&'static str>,
    time_us: f64,
    notes: &'a [String],
}

#[derive(Serialize)]
struct HeadJson<'a> {
    command: &'static str,
    collective: String,
    world: usize,
    length: usize,
    #[serde(rename = "type")]
    element_type: &'static str,
    algorithm: &'static str,
    generations: u64,
    faults: &'a str,
    device: &'a str,
    lower_bound: f64,
}

/// The head, up to and including the opening of `rows`.
pub fn head(config: &ScenarioConfig, faults: &str, device: &str) -> String {
    let head = HeadJson {
        command: "run",
        collective: config.collective.to_string(),
        world: config.world,
        length: config.length,
        element_type: config.element_type.nccl_name(),
        algorithm: config.algorithm.name(),
        generations: config.generations,
        faults,
        device,
        lower_bound: config.lower_bound(),
    };
    let text = serde_json::to_string_pretty(&head).unwrap_or_else(|_| "{".to_owned());
    let open = text.trim_end().trim_end_matches('}').trim_end();
    format!("{open},\n  \"rows\": [")
}

/// One generation's row; `first` says whether it opens the list.
pub fn row(row: &GenerationRow, first: bool) -> String {
    let json = RowJson {
        generation: row.generation,
        ok_ranks: &row.ok_ranks,
        error: row.shared_error(),
        errors: row
            .errors
            .iter()
            .map(|(rank, message)| ErrorJson {
                rank: *rank,
                message,
            })
            .collect(),
        agreed: row.agreed(),
        wrong: row.wrong,
        differing: row.differing,
        sent: row.sent,
        algorithm: row.algorithm.map(|algorithm| algorithm.name()),
        time_us: row.time_us,
        notes: &row.notes,
    };
    let text = serde_json::to_string(&json).unwrap_or_default();
    format!("{}\n    {text}", if first { "" } else { "," })
}

/// The tail: the summary and `outcome`, closing the document.
pub fn tail(summary: &Summary, outcome: &Value) -> String {
    let summary = serde_json::json!({
        "generations": summary.generations,
        "ok": summary.ok,
        "failed_alike": summary.failed_alike,
        "disagreed": summary.disagreed,
        "wrong": summary.wrong,
        "mean_us": summary.mean_us(),
    });
    format!("\n  ],\n  \"summary\": {summary},\n  \"outcome\": {outcome}\n}}\n")
}
