//! The nccl-tests text table, byte for byte as nccl-tests 2.19 (`src/util.cu`) prints it: the
//! header (version, settings, `# Using devices`, the column names), one line per size with the
//! out-of-place and in-place column groups, and the footer ending in `# Collective test
//! concluded`. ruCCL's own lines (the device, the link model, notes) are `#` comment lines
//! among the header's settings lines, where nccl-tests prints its own optional ones.
//!
//! The thirteen columns are nccl-tests' own, in its order and formats — `size` (the larger of a
//! rank's input and output, bytes), `count` (elements, nccl-tests' per-rank count), `type`,
//! `redop` (`none` for collectives that do not reduce), `root` (`-1` without one), then
//! `time algbw busbw #wrong` out of place and again in place — so scripts written for
//! nccl-tests read them unchanged. `--extra-columns` ([`Style::extra`]) appends ruCCL's four:
//! `algorithm` (what the plan resolved to: `-A auto` picks per size), `bound` (the in-place
//! time over the time that moving the collective's minimum traffic takes at the host-memory
//! rates measured right before the row — [`crate::membound`]: nccl-tests' lower bound per rank
//! times `W`, what a reduction must fold at the fold rate, the rest at the copy rate; 1.00
//! would be the machine's memory speed, `-` where no host-memory bound applies: GPUs, the NCCL
//! baseline; the traffic ratio it replaces, the busiest rank's over the lower bound, is in the
//! JSON), `model` (the device's α–β link model's time for the plan's traffic, µs) and `asked`
//! (the algorithm the generations asked for: a run given several with `-A` measures each in
//! turn at every size), and a `# Parked generations` footer line.

use super::config::{Setup, Step, SweepConfig, algorithms_asked};
use super::row::{Measured, PerfRow, Waits};
use std::fmt::Write as _;

/// The nccl-tests release whose output format the table follows.
pub const NCCL_TESTS_VERSION: &str = "2.19.6";

/// How the table is laid out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// Append ruCCL's columns (`algorithm bound model asked`) and the parked-generations line.
    pub extra: bool,
}

/// What the header describes besides the sweep settings.
#[derive(Clone, Debug, Default)]
pub struct HeaderInfo {
    /// The device, for the title line (`simulated devices (host memory, …)`).
    pub device: String,
    /// `# Using devices` lines, one per rank (without the leading `#`).
    pub using_devices: Vec<String>,
    /// Further lines (without the leading `#`): the link model, notes.
    pub notes: Vec<String>,
    /// Lines after the devices (without the leading `#`), where nccl-tests says `Reducing
    /// maxBytes to N due to memory limitation`.
    pub after_devices: Vec<String>,
    /// The NCCL version code the measurements ran with (`nccl-library=`), 0 for none.
    pub nccl_version: u32,
    /// The layout.
    pub style: Style,
}

/// nccl-tests' program name for `config`'s collective (`all_reduce_perf`).
pub fn program_name(config: &SweepConfig) -> String {
    format!("{}_perf", config.collective.nccl_name)
}

/// The header of `configs`' sweeps (the settings of the first, the algorithms of all):
/// nccl-tests' version and settings lines, ruCCL's notes, the devices, the column names.
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
        "# nccl-tests version {NCCL_TESTS_VERSION} nccl-headers={} nccl-library={}",
        info.nccl_version, info.nccl_version
    );
    let _ = writeln!(text, "# Collective test starting: {}", program_name(config));
    let _ = writeln!(
        text,
        "# nThread 1 nGpus {} minBytes {} maxBytes {} step: {}({}) warmup iters: {} iters: {} agg iters: 1 validation: {} graph: 0 unalign: 0",
        config.world,
        config.sizes.min,
        config.sizes.max,
        step,
        unit,
        config.warmup,
        config.iterations,
        config.checks,
    );
    let _ = writeln!(
        text,
        "# ruccl-perf {} {} on {}, algorithm {}",
        env!("CARGO_PKG_VERSION"),
        program_name(config),
        info.device,
        algorithms_asked(configs)
    );
    for note in &info.notes {
        let _ = writeln!(text, "# {note}");
    }
    text.push_str("#\n# Using devices\n");
    for line in &info.using_devices {
        let _ = writeln!(text, "#  {line}");
    }
    if !info.after_devices.is_empty() {
        text.push_str("#\n");
        for line in &info.after_devices {
            let _ = writeln!(text, "# {line}");
        }
    }
    text.push_str("#\n");
    let extra = |names: [&str; 4]| {
        if info.style.extra {
            format!(
                " {:>16}  {:>7}  {:>9}  {:>16}",
                names[0], names[1], names[2], names[3]
            )
        } else {
            String::new()
        }
    };
    let _ = writeln!(
        text,
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          ",
        "", "", "", "", ""
    );
    let _ = writeln!(
        text,
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} {}",
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
        extra(["algorithm", "bound", "model", "asked"]),
    );
    let _ = writeln!(
        text,
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} {}",
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
        extra(["", "(xtime)", "(us)", ""]),
    );
    text
}

/// `value` in `width` characters as nccl-tests' `getFloatStr`: two decimals, else one, else
/// none, else an exponent.
pub fn float_str(value: f64, width: usize) -> String {
    let value = non_negative(value);
    for decimals in [2, 1, 0] {
        let text = format!("{value:width$.decimals$}");
        if text.len() <= width {
            return text;
        }
    }
    let text = if width >= 7 {
        c_exponent(value, 1)
    } else {
        c_exponent(value, 0)
    };
    format!("{text:>width$}")
}

/// `value` as C's `%.{decimals}e` (`1.5e+09`).
fn c_exponent(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$e}");
    let (mantissa, power) = text.split_once('e').unwrap_or((&text, "0"));
    let power: i32 = power.parse().unwrap_or(0);
    format!(
        "{mantissa}e{}{:02}",
        if power < 0 { '-' } else { '+' },
        power.abs()
    )
}

/// A time as nccl-tests prints it: seven characters, fewer decimals as it grows.
pub fn time(micros: f64) -> String {
    float_str(micros, 7)
}

/// `value`, with `-0.0`, NaN and anything negative shown as `0`.
fn non_negative(value: f64) -> f64 {
    if value > 0.0 { value } else { 0.0 }
}

fn group(row: &PerfRow, measured: &Measured) -> String {
    let wrong = measured.wrong.map_or_else(
        || "   N/A".to_owned(),
        |wrong| format!("{:>6}", general(wrong as f64)),
    );
    format!(
        "  {}  {}  {}  {wrong}",
        time(measured.time_us),
        float_str(row.algbw(measured), 6),
        float_str(row.busbw(measured), 6),
    )
}

/// One row, with a trailing newline; `style.extra` appends ruCCL's columns.
pub fn row(row: &PerfRow, style: Style) -> String {
    let extra = if style.extra {
        let algorithm = row.algorithm.map_or("-", |algorithm| algorithm.name());
        let asked = row.asked.map_or("-", |algorithm| algorithm.name());
        let bound = row
            .times_bound()
            .map_or_else(|| "-".to_owned(), |times| float_str(times, 7));
        let model = row
            .model_us
            .map_or_else(|| "-".to_owned(), |us| format!("{:.2}", non_negative(us)));
        format!("  {algorithm:>16}  {bound:>7}  {model:>9}  {asked:>16}")
    } else {
        String::new()
    };
    format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{}{}{extra}\n",
        row.bytes,
        row.count,
        row.element_type.nccl_name(),
        row.collective
            .operation()
            .map_or("none", |operation| operation.nccl_name()),
        row.root,
        group(row, &row.out_of_place),
        group(row, &row.in_place),
    )
}

/// A size the core refuses for the sweep's algorithm ([`SweepConfig::refusal`]): a comment line
/// where its row would be, naming the algorithm and why, so the sweep goes on.
pub fn skipped(config: &SweepConfig, setup: &Setup, reason: &str) -> String {
    format!(
        "#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}  {} skipped: {reason}\n",
        setup.bytes,
        setup.counts.param,
        config.element_type.nccl_name(),
        config.operation_name(),
        config.root_column(),
        config.algorithm,
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

/// `NCCL_TESTS_MIN_BW`: the average bus bandwidth a run must reach (GB/s), as nccl-tests reads
/// it (`atof`: a value that is not a number reads as 0); `None` when unset.
pub fn min_bandwidth() -> Option<f64> {
    let text = std::env::var_os("NCCL_TESTS_MIN_BW")?;
    Some(leading_float(&text.to_string_lossy()).unwrap_or(0.0))
}

/// The number at the start of `text`, as C's `atof` reads it (`None`: no number).
pub fn leading_float(text: &str) -> Option<f64> {
    let text = text.trim_start();
    (1..=text.len())
        .rev()
        .filter(|&end| text.is_char_boundary(end))
        .find_map(|end| {
            let head = &text[..end];
            // Rust also reads `inf`, `nan` and `infinity`; C's atof does too.
            head.parse::<f64>().ok()
        })
}

/// Whether `totals`' average bus bandwidth passes `min` as nccl-tests judges it: at least 90 %
/// of it.
pub fn bandwidth_passes(totals: &Totals, min: f64) -> bool {
    totals.average_busbw() >= min * 0.9
}

/// The footer, as nccl-tests ends: how many measurements found wrong values, the mean bus
/// bandwidth (judged against `min_bw`, `NCCL_TESTS_MIN_BW`), `# Collective test concluded:
/// {program}`; `style.extra` adds how the ranks waited.
pub fn footer(totals: &Totals, min_bw: Option<f64>, program: &str, style: Style) -> String {
    let verdict = if totals.failed == 0 { "OK" } else { "FAILED" };
    let judged = match min_bw {
        None => "",
        Some(min) if bandwidth_passes(totals, min) => "OK",
        Some(_) => "FAILED",
    };
    let parked = match totals.waits {
        Some(waits) if style.extra => format!(
            "# Parked generations   : {} of {} timed (a rank parked instead of seeing the publication while it polled)\n",
            waits.parked, waits.generations
        ),
        _ => String::new(),
    };
    format!(
        "# Out of bounds values : {} {verdict}\n# Avg bus bandwidth    : {} {judged}\n{parked}#\n# Collective test concluded: {program}\n#\n\n",
        totals.failed,
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
    use super::{HeaderInfo, Style, float_str, general, header, leading_float, row, time};
    use crate::membound::{Bound, MinTraffic, Rates};
    use crate::sweep::{Measured, PerfRow, SweepConfig};
    use ruccl_core::{Algorithm, Collective, ElementType, ReduceOperation};

    /// An all-reduce row of 1 MiB at W = 2 whose in-place time is `in_place_us`.
    fn all_reduce_row(in_place_us: f64, bound: Option<Bound>) -> PerfRow {
        let measured = |time_us| Measured {
            time_us,
            wrong: Some(0),
            waits: None,
        };
        PerfRow {
            collective: Collective::AllReduce(ReduceOperation::Sum),
            element_type: ElementType::F32,
            world: 2,
            bytes: 1 << 20,
            count: 1 << 18,
            root: -1,
            out_of_place: measured(900.0),
            in_place: measured(in_place_us),
            asked: Some(Algorithm::Auto),
            algorithm: Some(Algorithm::Ring),
            traffic_ratio: Some(1.5),
            model_us: Some(80.0),
            schedule: None,
            bound,
        }
    }

    #[test]
    fn the_bound_column_is_the_in_place_time_over_the_bounds_time() {
        // 2·1/2·2^18 elements per rank · 2 ranks · 4 B = 2 MiB: 1 MiB folded at 1 GB/s and
        // 1 MiB copied at 2 GB/s take 1572.864 µs; 3932.16 µs is 2.5 times that.
        let bound = Bound {
            rates: Rates {
                copy: 2e9,
                fold: 1e9,
            },
            traffic: MinTraffic::of(Collective::AllReduce(ReduceOperation::Sum), 2, 1 << 18, 4),
        };
        let measured = all_reduce_row(3932.16, Some(bound));
        let fields: Vec<String> = row(&measured, Style { extra: true })
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        assert_eq!(fields.len(), 17, "{fields:?}");
        assert_eq!(
            fields[14], "2.50",
            "not the traffic ratio (1.50) nor out of place"
        );
        assert!((measured.times_bound().unwrap() - 2.5).abs() < 1e-9);
        // No bound (GPUs, the NCCL baseline): a dash, whatever the traffic ratio.
        let unbounded = row(&all_reduce_row(3932.16, None), Style { extra: true });
        assert_eq!(unbounded.split_whitespace().nth(14), Some("-"));
    }

    #[test]
    fn the_extra_columns_leave_nccl_tests_columns_byte_for_byte() {
        let measured = all_reduce_row(1234.5, None);
        let plain = row(&measured, Style { extra: false });
        let extra = row(&measured, Style { extra: true });
        assert!(extra.starts_with(plain.trim_end_matches('\n')), "{extra}");
        // The extra columns keep their widths: 16, 7, 9, 16 after two spaces each.
        assert_eq!(extra.len() - plain.len(), 4 * 2 + 16 + 7 + 9 + 16);
        let config = SweepConfig {
            world: 2,
            ..SweepConfig::default()
        };
        let info = |extra| HeaderInfo {
            style: Style { extra },
            ..HeaderInfo::default()
        };
        let (plain, extra) = (
            header(std::slice::from_ref(&config), &info(false)),
            header(&[config], &info(true)),
        );
        for (plain, extra) in plain.lines().zip(extra.lines()) {
            assert!(extra.starts_with(plain), "{extra}");
        }
        let names = extra.lines().rev().nth(1).unwrap();
        assert!(
            names.ends_with("  algorithm    bound      model             asked"),
            "{names}"
        );
        assert!(extra.lines().last().unwrap().contains("(xtime)"));
    }

    #[test]
    fn times_lose_decimals_as_nccl_tests() {
        assert_eq!(time(5.123), "   5.12");
        assert_eq!(time(123.45), " 123.45");
        assert_eq!(time(12345.6), "12345.6");
        assert_eq!(time(1234567.8), "1234568");
        assert_eq!(time(12345678.9), "1.2e+07");
        assert_eq!(time(-0.0), "   0.00");
    }

    #[test]
    fn bandwidths_fit_six_characters_as_get_float_str() {
        assert_eq!(float_str(0.0, 6), "  0.00");
        assert_eq!(float_str(123.456, 6), "123.46");
        assert_eq!(float_str(1234.5, 6), "1234.5");
        assert_eq!(float_str(123456.0, 6), "123456");
        assert_eq!(float_str(1234567.0, 6), " 1e+06");
    }

    #[test]
    fn the_minimum_bandwidth_reads_as_atof() {
        assert_eq!(leading_float("12.5"), Some(12.5));
        assert_eq!(leading_float(" 3GB"), Some(3.0));
        assert_eq!(leading_float("abc"), None);
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
