//! The nccl-tests-style text table: a header describing the sweep, one line per size, a footer.
//!
//! Columns follow nccl-tests' out-of-place half — `size` (bytes per rank), `count` (elements),
//! `type`, `redop`, `time` (µs per all-reduce), `algbw = size / time`, `busbw = algbw · 2(W-1)/W`
//! (GB/s, 10⁹ bytes per second), `#wrong` (elements over all ranks that differ from the
//! reference, `N/A` unchecked) — then two of ruCCL's: `traffic`, what the busiest rank sent over
//! the all-reduce lower bound `2(W-1)/W · n` per the traffic ledger (1.00 is optimal), and
//! `model`, the α–β link model's time for the same traffic (µs).

use super::driver::SweepConfig;
use super::row::PerfRow;
use std::fmt::Write as _;

/// The header: the sweep's settings, the device, the link model, and the column names and units.
pub fn header(config: &SweepConfig, device: &str) -> String {
    let mut text = String::new();
    let model = &config.link_model;
    // Writing to a `String` cannot fail.
    let _ = writeln!(text, "# ruccl-perf all-reduce-perf on {device}");
    let _ = writeln!(
        text,
        "# nRanks {} minBytes {} maxBytes {} step: {}(factor) warmup iters: {} iters: {} validation: {}",
        config.world,
        config.min_bytes,
        config.max_bytes,
        config.step_factor,
        config.warmup,
        config.iterations,
        u8::from(config.check),
    );
    let _ = writeln!(
        text,
        "# link model: alpha {} us per step, beta {} GB/s per link",
        model.alpha() * 1e6,
        model.beta() / 1e9,
    );
    text.push_str("#\n");
    let _ = writeln!(
        text,
        "#{:>11}  {:>12}  {:>8}  {:>6}  {:>10}  {:>7}  {:>7}  {:>6}  {:>7}  {:>10}",
        "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong", "traffic", "model"
    );
    let _ = writeln!(
        text,
        "#{:>11}  {:>12}  {:>8}  {:>6}  {:>10}  {:>7}  {:>7}  {:>6}  {:>7}  {:>10}",
        "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(xbound)", "(us)"
    );
    text
}

/// One row, with a trailing newline.
pub fn row(row: &PerfRow) -> String {
    let wrong = row
        .wrong
        .map_or_else(|| "N/A".to_owned(), |wrong| wrong.to_string());
    let traffic = row
        .traffic_ratio
        .map_or_else(|| "-".to_owned(), |ratio| format!("{ratio:.2}"));
    format!(
        " {:>11}  {:>12}  {:>8}  {:>6}  {:>10.2}  {:>7.2}  {:>7.2}  {:>6}  {:>7}  {:>10.2}\n",
        row.bytes,
        row.count,
        row.element_type.nccl_name(),
        row.operation.nccl_name(),
        row.time_us,
        row.algbw(),
        row.busbw(),
        wrong,
        traffic,
        row.model_us,
    )
}

/// The footer: wrong values over the whole sweep and the mean bus bandwidth, as nccl-tests ends.
pub fn footer(rows: &[PerfRow]) -> String {
    let checked = rows.iter().any(|row| row.wrong.is_some());
    let wrong: u64 = rows.iter().filter_map(|row| row.wrong).sum();
    let verdict = match (checked, wrong) {
        (false, _) => "N/A (unchecked)".to_owned(),
        (true, 0) => "0 OK".to_owned(),
        (true, wrong) => format!("{wrong} FAILED"),
    };
    let average = if rows.is_empty() {
        0.0
    } else {
        rows.iter().map(PerfRow::busbw).sum::<f64>() / rows.len() as f64
    };
    format!("# Out of bounds values : {verdict}\n# Avg bus bandwidth    : {average:.6}\n#\n")
}

/// The whole table for rows measured already.
pub fn table(config: &SweepConfig, device: &str, rows: &[PerfRow]) -> String {
    let mut text = header(config, device);
    for measured in rows {
        text.push_str(&row(measured));
    }
    text.push_str(&footer(rows));
    text
}
