//! The text table of a `run` scenario: one line per generation, printed as it completes.
//!
//! Columns: `gen`; `ok ranks` (compact, `0-3`, `0,2`, `none`); `algorithm`, what the plan
//! resolved to; `time`, the longest rank's call (µs); `sent` and `bound`, the elements the
//! busiest rank sent in the completed steps and the collective's per-rank lower bound, and their
//! `ratio`; `#wrong`, elements among the `Ok` outputs that differ from the reference plus, for
//! an all-reduce, `Ok` ranks whose bits differ from rank 0's; `error`, the one error every
//! failing rank got — or `DISAGREE` with each rank's, which would break ruCCL's agreement
//! property. Notes (a panicking output drop, say) follow their generation as comment lines.

use super::runner::{GenerationRow, ScenarioConfig, Summary};
use std::fmt::Write as _;

/// The header: the scenario and the column names.
pub fn scenario_header(config: &ScenarioConfig, device: &str, faults: &str) -> String {
    let mut text = String::new();
    // Writing to a `String` cannot fail.
    let _ = writeln!(
        text,
        "# ruccl-perf run: {}, {} ranks, {} x {}, algorithm {}, {} generations on {device}",
        config.collective,
        config.world,
        config.length,
        config.element_type.nccl_name(),
        config.algorithm,
        config.generations,
    );
    let faults = if faults.is_empty() { "none" } else { faults };
    let _ = writeln!(text, "# faults: {faults}");
    text.push_str("#\n");
    let _ = writeln!(
        text,
        "#{:>4}  {:<10}  {:>16}  {:>10}  {:>10}  {:>10}  {:>5}  {:>6}  error",
        "gen", "ok ranks", "algorithm", "time (us)", "sent", "bound", "ratio", "#wrong"
    );
    text
}

/// One generation's line (and its notes), with trailing newlines.
pub fn scenario_row(row: &GenerationRow, config: &ScenarioConfig) -> String {
    let bound = config.lower_bound();
    let ratio = if bound > 0.0 {
        format!("{:.2}", row.sent as f64 / bound)
    } else {
        "-".to_owned()
    };
    let wrong = if row.ok_ranks.is_empty() {
        "-".to_owned()
    } else {
        row.wrong_values().to_string()
    };
    let error = if row.errors.is_empty() {
        "-".to_owned()
    } else if row.agreed() {
        row.shared_error().unwrap_or_default().to_owned()
    } else {
        let each: Vec<String> = row
            .errors
            .iter()
            .map(|(rank, message)| format!("rank {rank}: {message}"))
            .collect();
        format!("DISAGREE ({} ok) {}", row.ok_ranks.len(), each.join(" | "))
    };
    let mut text = format!(
        " {:>4}  {:<10}  {:>16}  {:>10.2}  {:>10}  {:>10}  {:>5}  {:>6}  {error}\n",
        row.generation,
        ranks(&row.ok_ranks, config.world),
        row.algorithm.map_or("-", |algorithm| algorithm.name()),
        row.time_us,
        row.sent,
        bound.round() as u64,
        ratio,
        wrong,
    );
    for note in &row.notes {
        let _ = writeln!(text, "#       note: {note}");
    }
    text
}

/// The footer: how many generations succeeded, failed, or broke agreement, and the time.
pub fn scenario_footer(summary: &Summary) -> String {
    let mut text = format!(
        "# generations: {} ok, {} failed on every rank alike, {} disagreed; wrong values: {}\n",
        summary.ok, summary.failed_alike, summary.disagreed, summary.wrong
    );
    let _ = writeln!(
        text,
        "# mean time per generation: {:.2} us ({} generations in {:.3} s)",
        summary.mean_us(),
        summary.generations,
        summary.elapsed.as_secs_f64()
    );
    if let Some(reason) = summary.stopped {
        let _ = writeln!(text, "# stopped early: {}", reason.describe());
    }
    text
}

/// `ranks` (sorted) as runs: `0-3`, `0,2,5-6`, or `none`.
fn ranks(ranks: &[usize], world: usize) -> String {
    if ranks.is_empty() {
        return "none".to_owned();
    }
    if ranks.len() == world && world > 1 {
        return format!("0-{}", world - 1);
    }
    let mut parts: Vec<String> = Vec::new();
    let mut index = 0;
    while index < ranks.len() {
        let start = ranks[index];
        let mut end = start;
        while index + 1 < ranks.len() && ranks[index + 1] == end + 1 {
            index += 1;
            end = ranks[index];
        }
        parts.push(if end > start {
            format!("{start}-{end}")
        } else {
            start.to_string()
        });
        index += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::ranks;

    #[test]
    fn rank_lists_are_compact() {
        assert_eq!(ranks(&[], 4), "none");
        assert_eq!(ranks(&[0, 1, 2, 3], 4), "0-3");
        assert_eq!(ranks(&[0, 2, 5, 6], 8), "0,2,5-6");
        assert_eq!(ranks(&[0], 1), "0");
    }
}
