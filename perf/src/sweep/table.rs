//! The nccl-tests text table: the header (settings, `# Using devices`, column names), one line
//! per size with the out-of-place and in-place column groups, and the footer.
//!
//! The first thirteen columns are nccl-tests' own, in its order and formats — `size` (the larger
//! of a rank's input and output, bytes), `count` (elements, nccl-tests' per-rank count), `type`,
//! `redop` (`none` for collectives that do not reduce), `root` (`-1` without one), then
//! `time algbw busbw #wrong` out of place and again in place — so scripts written for
//! nccl-tests read them unchanged. ruCCL adds four after them: `algorithm` (what the plan
//! resolved to: `-A auto` picks per size), `traffic` (what the busiest rank sent over the
//! collective's lower bound, from the device's traffic ledger — the untimed sync generation's;
//! 1.00 is optimal), `model` (the device's α–β link model's time for that traffic, µs) and
//! `asked` (the algorithm the generations asked for: a run given several with `-A` measures
//! each in turn at every size).

use super::config::{Step, SweepConfig, algorithms_asked};
use super::row::{Measured, PerfRow, Waits};
use std::fmt::Write as _;

/// What the header describes besides the sweep settings.
#[derive(Clone, Debug, Default)]
pub struct HeaderInfo {
    /// The device, for the title line (`simulated devices (host memory, …)`).
    pub device: String,
    /// `# Using devices` lines, one per rank (without the leading `#`).
    pub using_devices: Vec<String>,
    /// Further lines (without the leading `#`): the link model, notes.
    pub notes: Vec<String>,
}

/// The header of `configs`' sweeps (the settings of the first, the algorithms of all):
/// nccl-tests' settings line, the devices, the column names and units.
pub fn header(configs: &[SweepConfig], info: &HeaderInfo) -> String {
    let Some(config) = configs.first() else {
        return String::new();
    };
    let mut text = String::new();
    let (step, unit) = match config.sizes.step {
        Step::Factor(factor) => (factor, "factor"),
        Step::Bytes(bytes) => (bytes, "bytes"),
    };
    // Writing to a `String` cannot fail.
    let _ = writeln!(
        text,
        "# ruccl-perf {}_perf on {}, algorithm {}",
        config.collective.nccl_name,
        info.device,
        algorithms_asked(configs)
    );
    let _ = writeln!(
        text,
        "# nThread {} nGpus 1 minBytes {} maxBytes {} step: {}({}) warmup iters: {} iters: {} agg iters: 1 validation: {} graph: 0",
        config.world,
        config.sizes.min,
        config.sizes.max,
        step,
        unit,
        config.warmup,
        config.iterations,
        config.checks,
    );
    for note in &info.notes {
        let _ = writeln!(text, "# {note}");
    }
    text.push_str("#\n# Using devices\n");
    for line in &info.using_devices {
        let _ = writeln!(text, "#  {line}");
    }
    text.push_str("#\n");
    let _ = writeln!(
        text,
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          ",
        "", "", "", "", ""
    );
    let _ = writeln!(
        text,
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6} {:>6}  {:>7}  {:>6}  {:>6} {:>6}  {:>16}  {:>7}  {:>9}  {:>16}",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "algorithm",
        "traffic",
        "model",
        "asked"
    );
    let _ = writeln!(
        text,
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>5}  {:>7}  {:>6}  {:>6}  {:>5}  {:>16}  {:>7}  {:>9}  {:>16}",
        "(B)",
        "(elements)",
        "",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "",
        "",
        "(xbound)",
        "(us)",
        ""
    );
    text
}

/// A time as nccl-tests prints it: fewer decimals as it grows.
pub fn time(micros: f64) -> String {
    let micros = non_negative(micros);
    if micros >= 10_000.0 {
        format!("{micros:7.0}")
    } else if micros >= 100.0 {
        format!("{micros:7.1}")
    } else {
        format!("{micros:7.2}")
    }
}

/// `value`, with `-0.0` and anything negative shown as `0`.
fn non_negative(value: f64) -> f64 {
    if value > 0.0 { value } else { 0.0 }
}

fn group(row: &PerfRow, measured: &Measured) -> String {
    let wrong = measured
        .wrong
        .map_or_else(|| "N/A".to_owned(), |wrong| wrong.to_string());
    format!(
        "  {}  {:6.2}  {:6.2}  {:>5}",
        time(measured.time_us),
        non_negative(row.algbw(measured)),
        non_negative(row.busbw(measured)),
        wrong
    )
}

/// One row, with a trailing newline.
pub fn row(row: &PerfRow) -> String {
    let algorithm = row.algorithm.map_or("-", |algorithm| algorithm.name());
    let asked = row.asked.map_or("-", |algorithm| algorithm.name());
    let traffic = row.traffic_ratio.map_or_else(
        || "-".to_owned(),
        |ratio| format!("{:.2}", non_negative(ratio)),
    );
    let model = row
        .model_us
        .map_or_else(|| "-".to_owned(), |us| format!("{:.2}", non_negative(us)));
    format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{}{}  {:>16}  {:>7}  {:>9}  {:>16}\n",
        row.bytes,
        row.count,
        row.element_type.nccl_name(),
        row.collective
            .operation()
            .map_or("none", |operation| operation.nccl_name()),
        row.root,
        group(row, &row.out_of_place),
        group(row, &row.in_place),
        algorithm,
        traffic,
        model,
        asked,
    )
}

/// What the footer sums over a whole command, row by row.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    /// Measurements (a size at one placement).
    pub measurements: u64,
    /// Measurements that were checked.
    pub checked: u64,
    /// Measurements whose check found something (nccl-tests' "out of bounds values").
    pub failed: u64,
    /// Wrong elements and differing ranks over all measurements.
    pub wrong: u64,
    /// Bus bandwidth summed over the measurements, GB/s.
    pub busbw_sum: f64,
    /// How the ranks waited, summed over the measurements that counted it.
    pub waits: Option<Waits>,
}

impl Totals {
    /// Count `row`'s two measurements in.
    pub fn add(&mut self, row: &PerfRow) {
        for measured in row.placements() {
            self.measurements += 1;
            self.busbw_sum += row.busbw(measured);
            if let Some(waits) = measured.waits {
                let sum = self.waits.get_or_insert_default();
                sum.generations += waits.generations;
                sum.parked += waits.parked;
            }
            if let Some(wrong) = measured.wrong {
                self.checked += 1;
                self.wrong += wrong;
                self.failed += u64::from(wrong > 0);
            }
        }
    }

    /// nccl-tests' average bus bandwidth: over every measurement, both placements.
    pub fn average_busbw(&self) -> f64 {
        if self.measurements == 0 {
            0.0
        } else {
            self.busbw_sum / self.measurements as f64
        }
    }
}

/// The footer, as nccl-tests ends: how many measurements found wrong values, and the mean bus
/// bandwidth.
pub fn footer(totals: &Totals) -> String {
    let verdict = match (totals.checked, totals.failed) {
        (0, _) => "N/A (unchecked)".to_owned(),
        (_, 0) => "0 OK".to_owned(),
        (_, failed) => format!("{failed} FAILED"),
    };
    let parked = totals.waits.map_or_else(String::new, |waits| {
        format!(
            "# Parked generations   : {} of {} timed (a rank parked instead of seeing the publication while it polled)\n",
            waits.parked, waits.generations
        )
    });
    format!(
        "# Out of bounds values : {verdict}\n# Avg bus bandwidth    : {}\n{parked}#\n",
        general(totals.average_busbw())
    )
}

/// `value` as C's `%g` prints it: six significant digits, no trailing zeros.
pub fn general(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return if value.is_finite() {
            "0".to_owned()
        } else {
            value.to_string()
        };
    }
    let exponent = value.abs().log10().floor() as i32;
    if (-4..6).contains(&exponent) {
        let decimals = (5 - exponent).max(0) as usize;
        let text = format!("{value:.decimals$}");
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            text
        }
    } else {
        let text = format!("{value:.5e}");
        let (mantissa, power) = text.split_once('e').unwrap_or((&text, "0"));
        let mantissa = if mantissa.contains('.') {
            mantissa.trim_end_matches('0').trim_end_matches('.')
        } else {
            mantissa
        };
        let power: i32 = power.parse().unwrap_or(0);
        format!(
            "{mantissa}e{}{:02}",
            if power < 0 { '-' } else { '+' },
            power.abs()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{general, time};

    #[test]
    fn times_lose_decimals_as_nccl_tests() {
        assert_eq!(time(5.123), "   5.12");
        assert_eq!(time(123.45), "  123.5");
        assert_eq!(time(12345.6), "  12346");
        assert_eq!(time(-0.0), "   0.00");
    }

    #[test]
    fn percent_g_keeps_six_significant_digits() {
        assert_eq!(general(1.327976), "1.32798");
        assert_eq!(general(12.5), "12.5");
        assert_eq!(general(0.0), "0");
        assert_eq!(general(0.000123456), "0.000123456");
        assert_eq!(general(1234567.0), "1.23457e+06");
    }
}
