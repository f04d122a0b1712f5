//! Scripts written for nccl-tests' output read ruccl-perf's default table unchanged.
//!
//! The parsers below re-implement, in Rust, the logic of public scripts that read nccl-tests
//! tables (their logic only; no code is copied):
//!
//! - Microsoft SuperBench, `superbench/benchmarks/micro_benchmarks/cuda_nccl_bw_performance.py`
//!   (github.com/microsoft/superbenchmark), `CudaNcclBwBenchmark._process_raw_result`: runs
//!   `all_reduce_perf -b 1 -e MAX -f 2 -g N -c 0`, keeps the lines from four after the one
//!   containing `out-of-place` up to the one containing `Out of bounds values`, collapses runs
//!   of spaces, splits on one space, stops at the first line of 10 fields or fewer, and takes
//!   the largest `float(fields[-6])` — the out-of-place `busbw`, counted from the end, so a
//!   table with any other number of columns yields another column.
//! - FlagOpen FlagPerf, `base/toolkits/interconnect-MPI_intraserver/*/main.sh`
//!   (github.com/FlagOpen/FlagPerf): `grep "# Avg bus bandwidth" | awk '{print $NF}'`.
//! - The `$(NF-1)` idiom issue 33 names: `awk '!/^#/ && NF == 13 {print $(NF-1)}'`, the
//!   in-place `busbw` of every row.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use clap::Parser;
use ruccl_perf::cli::{Cli, Verdict, execute};

/// `ruccl-perf ARGS` (its default table), as the text a script would read.
fn table(args: &[&str]) -> String {
    let argv = std::iter::once("ruccl-perf").chain(args.iter().copied());
    let command = Cli::try_parse_from(argv).unwrap().into_command();
    let mut out = Vec::new();
    let verdict = execute(command, &mut out, false).unwrap();
    assert_eq!(verdict, Verdict::Passed);
    String::from_utf8(out).unwrap()
}

/// SuperBench's parse: the largest out-of-place bus bandwidth, or `None` where the script
/// reports "The result format is invalid".
fn superbench_busbw(raw_output: &str) -> Option<f64> {
    let content: Vec<&str> = raw_output.lines().collect();
    let mut out_of_place_index: isize = -1;
    let mut out_of_bounds_values: isize = -1;
    for (index, line) in content.iter().enumerate() {
        if line.contains("out-of-place") {
            out_of_place_index = index as isize;
        }
        if line.contains("Out of bounds values") {
            out_of_bounds_values = index as isize;
        }
    }
    let start = usize::try_from(out_of_place_index + 4).ok()?;
    let end = usize::try_from(out_of_bounds_values).ok()?;
    let mut busbw_out = -1.0f64;
    for line in content.get(start..end)? {
        // `re.sub(r' +', ' ', line.strip(' ')).split(' ')`
        let fields: Vec<&str> = line
            .trim_matches(' ')
            .split(' ')
            .filter(|f| !f.is_empty())
            .collect();
        if fields.len() <= 10 {
            break;
        }
        let busbw: f64 = fields[fields.len() - 6].parse().ok()?;
        busbw_out = busbw_out.max(busbw);
    }
    Some(busbw_out)
}

/// FlagPerf's `grep "# Avg bus bandwidth" | awk '{print $NF}'`.
fn flagperf_average(raw_output: &str) -> Option<f64> {
    let line = raw_output
        .lines()
        .find(|line| line.contains("# Avg bus bandwidth"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// `awk '!/^#/ && NF == 13 {print $(NF-1)}'`: every row's in-place busbw.
fn awk_in_place_busbw(raw_output: &str) -> Vec<f64> {
    raw_output
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|fields| fields.len() == 13)
        .filter_map(|fields| fields[fields.len() - 2].parse().ok())
        .collect()
}

/// The rows as nccl-tests' fields, from their fixed columns.
fn rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn superbench_reads_the_out_of_place_bus_bandwidth() {
    // SuperBench's own command line (with a small -e, and few iterations).
    let text = table(&[
        "-b", "1", "-e", "64K", "-f", "2", "-g", "4", "-c", "0", "-n", "2", "-w", "1",
    ]);
    let parsed = superbench_busbw(&text).expect("SuperBench reads the table");
    let rows = rows(&text);
    assert!(rows.len() > 4, "{text}");
    // What the script should find: the largest out-of-place busbw (column 8) among the rows
    // after the first (its `+ 4` skips one).
    let expected = rows[1..]
        .iter()
        .map(|row| row[7].parse::<f64>().unwrap())
        .fold(-1.0, f64::max);
    assert_eq!(parsed, expected, "{text}");
    for row in &rows {
        assert_eq!(row.len(), 13, "{row:?}");
        assert_eq!((row[8].as_str(), row[12].as_str()), ("N/A", "N/A"), "-c 0");
    }
}

#[test]
fn flagperf_and_awk_read_the_footer_and_the_in_place_column() {
    let text = table(&[
        "-b", "1K", "-e", "64K", "-f", "4", "-g", "3", "-n", "2", "-w", "1",
    ]);
    let average = flagperf_average(&text).expect("FlagPerf reads the average");
    assert!(average >= 0.0, "{text}");
    let in_place = awk_in_place_busbw(&text);
    let rows = rows(&text);
    assert_eq!(
        in_place.len(),
        rows.len(),
        "every row has 13 fields: {text}"
    );
    for (value, row) in in_place.iter().zip(&rows) {
        assert_eq!(*value, row[11].parse::<f64>().unwrap(), "{row:?}");
    }
}

#[test]
fn the_table_is_laid_out_byte_for_byte_as_nccl_tests_2_19() {
    let text = table(&[
        "-b", "8", "-e", "8K", "-f", "32", "-g", "2", "-n", "2", "-w", "1",
    ]);
    let lines: Vec<&str> = text.lines().collect();
    // nccl-tests' writeDeviceReport and writeResultHeader (src/util.cu), in order.
    assert!(
        lines[0].starts_with("# nccl-tests version 2.19.6 nccl-headers="),
        "{text}"
    );
    assert_eq!(lines[1], "# Collective test starting: all_reduce_perf");
    assert_eq!(
        lines[2],
        "# nThread 1 nGpus 2 minBytes 8 maxBytes 8192 step: 32(factor) warmup iters: 1 iters: 2 agg iters: 1 validation: 1 graph: 0 unalign: 0"
    );
    let header = lines
        .iter()
        .position(|line| line.contains("out-of-place"))
        .unwrap();
    assert_eq!(lines[header - 1], "#");
    assert_eq!(
        lines[header],
        "#                                                              out-of-place                       in-place          "
    );
    assert_eq!(
        lines[header + 1],
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong "
    );
    assert_eq!(
        lines[header + 2],
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         "
    );
    // `%12li  %12li  %8s  %6s  %6s` then twice `  %7s  %6s  %6s  %6g`.
    let rows: Vec<&str> = lines[header + 3..]
        .iter()
        .copied()
        .take_while(|line| !line.starts_with('#'))
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    for row in &rows {
        assert_eq!(
            row.len(),
            12 + 2 + 12 + 2 + 8 + 2 + 6 + 2 + 6 + 2 * 33,
            "{row:?}"
        );
        assert_eq!(&row[26..48], "     float     sum    ", "{row:?}");
        assert!(row.ends_with("       0"), "{row:?}");
    }
    let footer = &lines[header + 3 + rows.len()..];
    assert_eq!(footer[0], "# Out of bounds values : 0 OK");
    assert!(footer[1].starts_with("# Avg bus bandwidth    : ") && footer[1].ends_with(' '));
    assert_eq!(
        footer[2..],
        ["#", "# Collective test concluded: all_reduce_perf", "#", ""]
    );
    assert!(text.ends_with("#\n\n"));
}

#[test]
fn dash_j_writes_nccl_tests_json_schema() {
    let dir = std::env::temp_dir().join(format!("ruccl-perf-{}-dash-j", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("out.json");
    let _ = std::fs::remove_file(&path);
    let text = table(&[
        "-b",
        "8",
        "-e",
        "64",
        "-f",
        "8",
        "-g",
        "2",
        "-n",
        "2",
        "-w",
        "0",
        "-J",
        path.to_str().unwrap(),
    ]);
    assert!(text.starts_with(&format!("# Writing JSON output to {}\n", path.display())));
    let document: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(document["version"], 3);
    for key in [
        "start_time",
        "end_time",
        "args",
        "env",
        "nccl_version",
        "errors",
    ] {
        assert!(document.get(key).is_some(), "{key}: {document}");
    }
    let config = &document["config"];
    assert_eq!(
        (config["nthreads"].as_u64(), config["ngpus"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(config["step_factor"], 8);
    assert_eq!(config["devices"].as_array().unwrap().len(), 2);
    let results = document["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    let first = &results[0];
    assert_eq!(
        (first["size"].as_u64(), first["count"].as_u64()),
        (Some(8), Some(2))
    );
    assert_eq!(
        (first["type"].as_str(), first["redop"].as_str()),
        (Some("float"), Some("sum"))
    );
    // nccl-tests writes the root as `%6i`, a string.
    assert_eq!(first["root"], "    -1");
    for place in ["out_of_place", "in_place"] {
        for key in ["time", "alg_bw", "bus_bw", "nwrong"] {
            assert!(first[place][key].is_number(), "{place}.{key}: {first}");
        }
    }
    assert_eq!(first["actual_iterations"], 2);
    assert_eq!(document["out_of_bounds"]["okay"], "true");
    assert_eq!(document["average_bus_bandwidth"]["okay"], "unchecked");
    // The name is taken now: nccl-tests writes FILE.0 instead.
    let again = table(&[
        "-b",
        "8",
        "-e",
        "8",
        "-n",
        "1",
        "-w",
        "0",
        "-J",
        path.to_str().unwrap(),
    ]);
    assert!(again.starts_with(&format!("# Writing JSON output to {}.0\n", path.display())));
    let _ = std::fs::remove_dir_all(&dir);
}
