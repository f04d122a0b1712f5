//! The nccl-tests-style result table: one row per message size.
//!
//! Columns follow nccl-tests' out-of-place half: `size` (bytes per rank), `count` (elements),
//! `type`, `redop`, `time` (µs per all-reduce), `algbw = size / time` and
//! `busbw = algbw · 2(W-1)/W` (GB/s, 10⁹ bytes per second), `#wrong` (elements that differ from
//! the reference). A footer gives the mean bus bandwidth, as nccl-tests does.

use ruccl_core::ReduceOperation;
use ruccl_sim::host::ElementType;
use std::fmt::Write as _;

/// One measured message size.
#[derive(Clone, Debug, PartialEq)]
pub struct PerfRow {
    /// Bytes per rank.
    pub bytes: usize,
    /// Elements per rank.
    pub count: usize,
    /// The element type.
    pub element_type: ElementType,
    /// The reduction.
    pub operation: ReduceOperation,
    /// The number of ranks.
    pub world: usize,
    /// Mean wall-clock time of one all-reduce, in microseconds.
    pub time_us: f64,
    /// Elements (over all ranks) that differ from the reference.
    pub wrong: usize,
}

/// nccl-tests' all-reduce bus factor, `2(W-1)/W` (0 for a world of one, which moves nothing).
pub fn bus_factor(world: usize) -> f64 {
    if world == 0 {
        return 0.0;
    }
    2.0 * (world - 1) as f64 / world as f64
}

impl PerfRow {
    /// Algorithm bandwidth: bytes per rank over time, in GB/s.
    pub fn algbw(&self) -> f64 {
        if self.time_us > 0.0 {
            self.bytes as f64 / self.time_us / 1.0e3
        } else {
            0.0
        }
    }

    /// Bus bandwidth: `algbw · 2(W-1)/W`, in GB/s.
    pub fn busbw(&self) -> f64 {
        self.algbw() * bus_factor(self.world)
    }
}

/// The two header lines (column names, then units).
pub fn header() -> String {
    format!(
        "#{:>11}  {:>12}  {:>8}  {:>6}  {:>9}  {:>7}  {:>7}  {:>6}\n#{:>11}  {:>12}  {:>8}  {:>6}  {:>9}  {:>7}  {:>7}  {:>6}\n",
        "size",
        "count",
        "type",
        "redop",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "(B)",
        "(elements)",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        ""
    )
}

/// One row, aligned under [`header`].
pub fn format_row(row: &PerfRow) -> String {
    format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>9.2}  {:>7.2}  {:>7.2}  {:>6}\n",
        row.bytes,
        row.count,
        row.element_type.nccl_name(),
        row.operation.nccl_name(),
        row.time_us,
        row.algbw(),
        row.busbw(),
        row.wrong
    )
}

/// The footer: total wrong elements and the mean bus bandwidth over the rows.
pub fn footer(rows: &[PerfRow]) -> String {
    let wrong: usize = rows.iter().map(|row| row.wrong).sum();
    let mean_busbw = if rows.is_empty() {
        0.0
    } else {
        rows.iter().map(PerfRow::busbw).sum::<f64>() / rows.len() as f64
    };
    format!(
        "# Out of bounds values : {wrong} {}\n# Avg bus bandwidth    : {mean_busbw:.4}\n",
        if wrong == 0 { "OK" } else { "FAILED" }
    )
}

/// A whole table: `#`-prefixed title lines, the header, the rows, the footer.
pub fn format_table(title: &[String], rows: &[PerfRow]) -> String {
    let mut text = String::new();
    for line in title {
        let _ = writeln!(text, "# {line}");
    }
    text.push_str(&header());
    for row in rows {
        text.push_str(&format_row(row));
    }
    text.push_str(&footer(rows));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(bytes: usize, time_us: f64, world: usize, wrong: usize) -> PerfRow {
        PerfRow {
            bytes,
            count: bytes / 4,
            element_type: ElementType::F32,
            operation: ReduceOperation::Sum,
            world,
            time_us,
            wrong,
        }
    }

    #[test]
    fn bus_bandwidth_scales_algorithm_bandwidth_by_two_w_minus_one_over_w() {
        let measured = row(1_000_000_000, 1_000_000.0, 4, 0);
        assert!((measured.algbw() - 1.0).abs() < 1e-12);
        assert!((measured.busbw() - 1.5).abs() < 1e-12);
        assert_eq!(bus_factor(1), 0.0);
        assert_eq!(bus_factor(2), 1.0);
        assert_eq!(bus_factor(8), 1.75);
    }

    #[test]
    fn a_zero_time_gives_zero_bandwidth_not_infinity() {
        assert_eq!(row(1024, 0.0, 2, 0).algbw(), 0.0);
    }

    #[test]
    fn rows_align_under_the_header_columns() {
        let header = header();
        let mut lines = header.lines();
        let names = lines.next().unwrap_or_default();
        let units = lines.next().unwrap_or_default();
        let line = format_row(&row(1 << 20, 123.456, 4, 0));
        let line = line.trim_end();
        assert_eq!(names.len(), line.len(), "{names}\n{line}");
        assert_eq!(units.len(), line.len(), "{units}\n{line}");
        assert!(line.contains("   float     sum     123.46"), "{line}");
        assert!(line.ends_with("       0"), "{line}");
    }

    #[test]
    fn the_footer_flags_wrong_values_and_averages_bus_bandwidth() {
        let rows = [row(1000, 1.0, 2, 0), row(1000, 2.0, 2, 3)];
        let footer = footer(&rows);
        assert!(
            footer.contains("Out of bounds values : 3 FAILED"),
            "{footer}"
        );
        assert!(footer.contains("Avg bus bandwidth    : 0.7500"), "{footer}");
        assert!(super::footer(&rows[..1]).contains(": 0 OK"));
    }

    #[test]
    fn a_table_has_title_header_rows_and_footer() {
        let table = format_table(&["ruccl-cuda all-reduce".to_owned()], &[row(8, 10.0, 2, 0)]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 1 + 2 + 1 + 2, "{table}");
        assert_eq!(lines[0], "# ruccl-cuda all-reduce");
    }
}
