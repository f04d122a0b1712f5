//! The `--json` document of a `run` scenario, for scripts:
//!
//! `{ "command": "run", "world", "length", "type", "redop", "generations", "faults",
//! "rows": [ { "generation", "ok_ranks", "error", "errors", "agreed", "wrong", "moved",
//! "lower_bound", "notes" } ] }` — `error` is the shared error (null if none or if the ranks
//! disagree), `errors` every failing rank's.

use super::runner::{GenerationRow, ScenarioConfig};
use serde::Serialize;
use serde_json::Value;

#[derive(Serialize)]
struct GenerationJson<'a> {
    generation: u64,
    ok_ranks: &'a [usize],
    error: Option<&'a str>,
    errors: Vec<ErrorJson<'a>>,
    agreed: bool,
    wrong: u64,
    moved: usize,
    lower_bound: usize,
    notes: &'a [String],
}

#[derive(Serialize)]
struct ErrorJson<'a> {
    rank: usize,
    message: &'a str,
}

#[derive(Serialize)]
struct ScenarioJson<'a> {
    command: &'static str,
    world: usize,
    length: usize,
    #[serde(rename = "type")]
    element_type: &'static str,
    redop: &'static str,
    generations: u64,
    faults: &'a str,
    rows: Vec<GenerationJson<'a>>,
}

/// The document of a `run` scenario; `faults` is the fault plan's text.
pub fn scenario_json(config: &ScenarioConfig, faults: &str, rows: &[GenerationRow]) -> Value {
    let document = ScenarioJson {
        command: "run",
        world: config.world,
        length: config.length,
        element_type: config.element_type.nccl_name(),
        redop: config.operation.nccl_name(),
        generations: config.generations,
        faults,
        rows: rows
            .iter()
            .map(|row| GenerationJson {
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
                moved: row.moved,
                lower_bound: row.lower_bound,
                notes: &row.notes,
            })
            .collect(),
    };
    serde_json::to_value(document).unwrap_or(Value::Null)
}
