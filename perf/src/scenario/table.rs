//! The text table of a `run` scenario: one line per generation.
//!
//! Columns: `gen`; `ok ranks` (compact, `0-3`, `0,2`, `none`); `moved` and `bound`, the elements
//! the completed ring steps moved over all links and the all-reduce lower bound `2(W-1)·n`, and
//! their `ratio`; `#wrong` among the `Ok` outputs; `error`, the one error every failing rank got —
//! or `DISAGREE` with each rank's, which would break ruCCL's agreement property. Notes (a
//! panicking output drop, say) follow their generation as comment lines.

use super::runner::{GenerationRow, ScenarioConfig};
use std::fmt::Write as _;

/// The header: the scenario and the column names.
pub fn scenario_header(config: &ScenarioConfig, device: &str, faults: &str) -> String {
    let mut text = String::new();
    // Writing to a `String` cannot fail.
    let _ = writeln!(
        text,
        "# ruccl-perf run: {} ranks, {} x {}, {}, {} generations on {device}",
        config.world,
        config.length,
        config.element_type.nccl_name(),
        config.operation.nccl_name(),
        config.generations,
    );
    let faults = if faults.is_empty() { "none" } else { faults };
    let _ = writeln!(text, "# faults: {faults}");
    text.push_str("#\n");
    let _ = writeln!(
        text,
        "#{:>4}  {:<10}  {:>10}  {:>10}  {:>5}  {:>6}  error",
        "gen", "ok ranks", "moved", "bound", "ratio", "#wrong"
    );
    text
}

/// One generation's line (and its notes), with trailing newlines.
pub fn scenario_row(row: &GenerationRow, world: usize) -> String {
    let ratio = if row.lower_bound > 0 {
        format!("{:.2}", row.moved as f64 / row.lower_bound as f64)
    } else {
        "-".to_owned()
    };
    let wrong = if row.ok_ranks.is_empty() {
        "-".to_owned()
    } else {
        row.wrong.to_string()
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
        " {:>4}  {:<10}  {:>10}  {:>10}  {:>5}  {:>6}  {error}\n",
        row.generation,
        ranks(&row.ok_ranks, world),
        row.moved,
        row.lower_bound,
        ratio,
        wrong,
    );
    for note in &row.notes {
        let _ = writeln!(text, "#       note: {note}");
    }
    text
}

/// The footer: how many generations succeeded, failed, or broke agreement.
pub fn scenario_footer(rows: &[GenerationRow]) -> String {
    let ok = rows.iter().filter(|row| row.errors.is_empty()).count();
    let broken = rows.iter().filter(|row| !row.agreed()).count();
    let wrong: u64 = rows.iter().map(|row| row.wrong).sum();
    format!(
        "# generations: {} ok, {} failed on every rank alike, {} disagreed; wrong elements: {}\n",
        ok,
        rows.len() - ok - broken,
        broken,
        wrong
    )
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
