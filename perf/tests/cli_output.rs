//! What `ruccl-perf` prints: nccl-tests' table with its out-of-place and in-place groups for
//! every collective, the streamed JSON documents (written with what happened also when a run
//! fails or is stopped), the scenario rows, and trace files in the Chrome trace-event format
//! with one track per rank.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use clap::Parser;
use ruccl_core::DeviceId;
use ruccl_perf::backend::Devices;
use ruccl_perf::cli::{Cli, CliError, Command, Verdict, execute, execute_with, sweeps_on};
use ruccl_perf::collectives::ALL_REDUCE;
use ruccl_perf::stop::{Stop, StopReason};
use ruccl_perf::sweep::Places;
use ruccl_sim::{FaultPlan, FaultyDevice, SimDevice};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn command(args: &[&str]) -> Command {
    let argv = std::iter::once("ruccl-perf").chain(args.iter().copied());
    Cli::try_parse_from(argv).unwrap().into_command()
}

/// Run `ruccl-perf ARGS` (a sweep with `--extra-columns`, so ruCCL's columns 13 to 16 can be
/// checked), returning the verdict and what it printed.
fn ruccl_perf(args: &[&str]) -> (Verdict, String) {
    let mut argv = args.to_vec();
    if args.first() != Some(&"run") {
        argv.push("--extra-columns");
    }
    let mut out = Vec::new();
    let verdict = execute(command(&argv), &mut out, false).unwrap();
    (verdict, String::from_utf8(out).unwrap())
}

/// A file name in the temporary directory, unique to this test process and `name`.
fn temporary(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ruccl-perf-{}-{name}.json", std::process::id()))
}

/// The table's rows, split into fields.
fn rows(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| line.split_whitespace().collect())
        .collect()
}

#[test]
fn the_table_has_nccl_tests_columns_both_groups_and_one_row_per_size() {
    let (verdict, text) = ruccl_perf(&[
        "-b", "8", "-e", "32K", "-f", "8", "-g", "3", "-n", "2", "-w", "1",
    ]);
    assert_eq!(verdict, Verdict::Passed);
    let header: Vec<&str> = text.lines().filter(|line| line.starts_with('#')).collect();
    assert!(header.iter().any(|line| line.contains(
        "# nThread 1 nGpus 3 minBytes 8 maxBytes 32768 step: 8(factor) warmup iters: 1 iters: 2 agg iters: 1 validation: 1 graph: 0 unalign: 0"
    )), "{text}");
    let using = text
        .find("# Using devices")
        .expect("a # Using devices block");
    let devices: Vec<&str> = text[using..]
        .lines()
        .skip(1)
        .take_while(|line| line.starts_with("#  Rank"))
        .collect();
    assert_eq!(devices.len(), 3, "{text}");
    assert!(devices[2].contains("Rank  2 Group  0 Pid") && devices[2].contains("device  2"));
    assert!(
        header
            .iter()
            .any(|line| line.contains("out-of-place") && line.contains("in-place"))
    );
    let columns = header
        .iter()
        .find(|line| line.contains("redop"))
        .expect("a column header");
    let names: Vec<&str> = columns.split_whitespace().skip(1).collect();
    assert_eq!(
        names,
        [
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
            "bound",
            "model",
            "asked"
        ]
    );
    assert!(text.contains("# Out of bounds values : 0 OK"), "{text}");
    assert!(text.contains("# Avg bus bandwidth    : "), "{text}");
    // Five sizes, two placements, two timed iterations each.
    assert!(text.contains(" of 20 timed (a rank parked"), "{text}");
    assert!(text.contains("# Parked generations   : "), "{text}");
    assert!(!text.contains("-0.00"), "{text}");
    let rows = rows(&text);
    // 8, 64, 512, 4K, 32K bytes.
    let sizes: Vec<&str> = rows.iter().map(|row| row[0]).collect();
    assert_eq!(sizes, ["8", "64", "512", "4096", "32768"]);
    for row in &rows {
        assert_eq!(row.len(), 17, "{row:?}");
        let bytes: usize = row[0].parse().unwrap();
        assert_eq!(row[1].parse::<usize>().unwrap(), bytes / 4);
        assert_eq!((row[2], row[3], row[4]), ("float", "sum", "-1"));
        for number in [row[5], row[6], row[7], row[9], row[10], row[11], row[15]] {
            assert!(number.parse::<f64>().unwrap() >= 0.0, "{row:?}");
        }
        assert_eq!((row[8], row[12]), ("0", "0"), "#wrong");
        assert!(
            ["direct", "ring", "halving-doubling"].contains(&row[13]),
            "{row:?}"
        );
        // The in-place time over the host-memory bound: positive, and far above 1 at these
        // sizes (the bound is nanoseconds, a generation microseconds).
        let times: f64 = row[14].parse().unwrap();
        assert!(times > 1.0, "{row:?}");
        assert_eq!(row[16], "auto", "{row:?}");
    }
}

#[test]
fn several_algorithms_take_turns_at_every_size_in_one_table() {
    let (verdict, text) = ruccl_perf(&[
        "reduce-scatter-perf",
        "-A",
        "direct,auto,ring",
        "-b",
        "64",
        "-e",
        "4K",
        "-f",
        "8",
        "-g",
        "4",
        "-n",
        "2",
        "-w",
        "1",
    ]);
    assert_eq!(verdict, Verdict::Passed);
    assert!(
        text.lines()
            .find(|line| line.starts_with("# ruccl-perf "))
            .unwrap()
            .ends_with(", algorithm direct,auto,ring"),
        "{text}"
    );
    let rows = rows(&text);
    let shape: Vec<(&str, &str)> = rows.iter().map(|row| (row[0], row[16])).collect();
    assert_eq!(
        shape,
        [
            ("64", "direct"),
            ("64", "auto"),
            ("64", "ring"),
            ("512", "direct"),
            ("512", "auto"),
            ("512", "ring"),
            ("4096", "direct"),
            ("4096", "auto"),
            ("4096", "ring"),
        ]
    );
    for row in &rows {
        // A fixed algorithm resolves to itself; auto to one of them.
        if row[16] == "auto" {
            assert_ne!(row[13], "auto", "{row:?}");
        } else {
            assert_eq!(row[13], row[16], "{row:?}");
        }
        assert_eq!((row[8], row[12]), ("0", "0"), "#wrong");
    }
    assert!(text.contains("# Out of bounds values : 0 OK"), "{text}");
}

#[test]
fn every_collective_prints_its_own_table() {
    for (subcommand, redop, root) in [
        ("reduce-scatter-perf", "sum", "-1"),
        ("all-gather-perf", "none", "-1"),
        ("broadcast-perf", "none", "2"),
    ] {
        let (verdict, text) = ruccl_perf(&[
            subcommand, "-b", "96", "-e", "6K", "-f", "8", "-g", "3", "-n", "2", "-w", "1", "-r",
            "2", "-o", "sum", "-A", "ring",
        ]);
        assert_eq!(verdict, Verdict::Passed, "{text}");
        let name = subcommand.trim_end_matches("-perf").replace('-', "_");
        assert!(
            text.contains(&format!("# Collective test starting: {name}_perf\n")),
            "{text}"
        );
        assert!(
            text.ends_with(&format!("# Collective test concluded: {name}_perf\n#\n\n")),
            "{text}"
        );
        for row in rows(&text) {
            assert_eq!((row[3], row[4]), (redop, root), "{subcommand}: {row:?}");
            assert_eq!((row[8], row[12], row[13]), ("0", "0", "ring"), "{row:?}");
            assert!(row[14].parse::<f64>().unwrap() > 0.0, "{row:?}");
        }
        // The traffic ratio, in the JSON: the ring meets reduce-scatter's and all-gather's
        // bounds when 3 divides the counts; a ring broadcast's root sends its scatter and then
        // takes part in the all-gather.
        let (_, json) = ruccl_perf(&[
            subcommand, "-b", "96", "-e", "6K", "-f", "8", "-g", "3", "-n", "2", "-w", "1", "-r",
            "2", "-o", "sum", "-A", "ring", "--json",
        ]);
        let document: Value = serde_json::from_str(&json).unwrap();
        for row in document["rows"].as_array().unwrap() {
            let ratio = row["traffic_ratio"].as_f64().unwrap();
            if root == "-1" {
                assert_eq!(ratio, 1.0, "{subcommand}: {row}");
            } else {
                assert!((1.0..2.0).contains(&ratio), "{subcommand}: {row}");
            }
        }
        let ignored = if root == "-1" {
            "# -r ignored"
        } else {
            "# -o ignored"
        };
        assert!(text.contains(ignored), "{text}");
    }
}

#[test]
fn sizes_rounded_down_as_nccl_tests_are_said_so() {
    let (_, text) = ruccl_perf(&[
        "all-gather-perf",
        "-b",
        "100",
        "-e",
        "100",
        "-g",
        "4",
        "-n",
        "1",
    ]);
    assert!(
        text.contains("# sizes are rounded down to whole float elements in 4 equal blocks, as nccl-tests does: 100 B is measured as 96 B"),
        "{text}"
    );
    assert_eq!(rows(&text)[0][0], "96");
    let (_, text) = ruccl_perf(&["-b", "8", "-e", "64", "-n", "1"]);
    assert!(!text.contains("rounded down"), "{text}");
}

#[test]
fn an_unchecked_sweep_prints_not_available() {
    let (verdict, text) = ruccl_perf(&["-b", "64", "-e", "64", "-n", "1", "-c", "0"]);
    assert_eq!(verdict, Verdict::Passed);
    let row = &rows(&text)[0];
    assert_eq!((row[8], row[12]), ("N/A", "N/A"), "{row:?}");
    // nccl-tests counts failed checks: none when nothing is checked.
    assert!(text.contains("Out of bounds values : 0 OK"), "{text}");
}

#[test]
fn a_linear_sweep_steps_by_bytes() {
    let (_, text) = ruccl_perf(&[
        "-b", "1K", "-e", "4K", "-f", "1", "-i", "1K", "-n", "1", "-w", "0",
    ]);
    assert!(text.contains("step: 1024(bytes)"), "{text}");
    let sizes: Vec<&str> = rows(&text).iter().map(|row| row[0]).collect();
    assert_eq!(sizes, ["1024", "2048", "3072", "4096"]);
}

#[test]
fn every_type_and_operation_share_one_table_and_footer() {
    let (verdict, text) = ruccl_perf(&[
        "-b",
        "8",
        "-e",
        "64",
        "-f",
        "8",
        "-g",
        "3",
        "-n",
        "1",
        "-w",
        "0",
        "-d",
        "half,int64",
        "-o",
        "all",
    ]);
    assert_eq!(verdict, Verdict::Passed);
    assert_eq!(text.matches("nThread 1 nGpus 3").count(), 1, "{text}");
    assert_eq!(text.matches("# Out of bounds values : 0 OK").count(), 1);
    let rows = rows(&text);
    assert_eq!(rows.len(), 2 * 5 * 2, "{text}");
    let kinds: BTreeSet<(&str, &str)> = rows.iter().map(|row| (row[2], row[3])).collect();
    assert_eq!(kinds.len(), 10);
}

#[test]
fn a_size_the_core_refuses_for_direct_is_a_skipped_row_and_the_sweep_goes_on() {
    // At W = 8 direct all-reduce of one element would send 7 elements against the ring's 2
    // (more than TRAFFIC_BOUND = 3 times): refused at 4 B, two steps from 32 B on.
    let args = [
        "-A",
        "direct,ring",
        "-b",
        "4",
        "-e",
        "32",
        "-f",
        "8",
        "-g",
        "8",
        "-n",
        "2",
        "-w",
        "1",
    ];
    let (verdict, text) = ruccl_perf(&args);
    assert_eq!(verdict, Verdict::Passed, "{text}");
    let skipped: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("skipped:"))
        .collect();
    assert_eq!(skipped.len(), 1, "{text}");
    assert!(skipped[0].starts_with('#'), "{text}");
    let fields: Vec<&str> = skipped[0][1..].split_whitespace().collect();
    assert_eq!(
        fields[..6],
        ["4", "1", "float", "sum", "-1", "direct"],
        "{text}"
    );
    assert!(
        skipped[0].contains("7 elements, 3.5× the 2 of ring"),
        "{text}"
    );
    let shape: Vec<(&str, &str)> = rows(&text).iter().map(|row| (row[0], row[16])).collect();
    assert_eq!(
        shape,
        [("4", "ring"), ("32", "direct"), ("32", "ring")],
        "{text}"
    );
    // In JSON: a row with `skipped` and no measurements, in its place.
    let mut json = args.to_vec();
    json.push("--json");
    let (_, text) = ruccl_perf(&json);
    let document: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(document["outcome"]["status"], "passed", "{text}");
    let rows = document["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{text}");
    assert_eq!(rows[0]["asked"], "direct");
    assert!(rows[0]["skipped"].as_str().unwrap().contains("use ring"));
    assert!(rows[0].get("out_of_place").is_none());
    assert!(rows[1..].iter().all(|row| row.get("skipped").is_none()));
}

#[test]
fn the_json_document_has_every_row_and_what_happened() {
    let (_, text) = ruccl_perf(&[
        "all-gather-perf",
        "-b",
        "1K",
        "-e",
        "16K",
        "-f",
        "4",
        "-g",
        "2",
        "-d",
        "double",
        "-n",
        "2",
        "--json",
    ]);
    let document: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(document["command"], "all_gather_perf");
    assert_eq!(document["world"], 2);
    assert_eq!(document["algorithm"], "auto");
    assert_eq!(document["wrong_total"], 0);
    assert_eq!(document["outcome"]["status"], "passed");
    assert!(document["link_model"]["alpha_us"].as_f64().unwrap() > 0.0);
    // Three sizes, two placements, two timed iterations each.
    assert_eq!(document["timed_generations"], 12);
    assert!(document["parked_generations"].as_u64().unwrap() <= 12);
    let rows = document["rows"].as_array().unwrap();
    let sizes: Vec<u64> = rows
        .iter()
        .map(|row| row["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [1024, 4096, 16384]);
    for row in rows {
        assert_eq!(row["type"], "double");
        assert_eq!(row["redop"], "none");
        assert_eq!(
            row["count"].as_u64().unwrap() * 8 * 2,
            row["bytes"].as_u64().unwrap()
        );
        for place in ["out_of_place", "in_place"] {
            assert_eq!(row[place]["wrong"], 0);
            assert!(row[place]["parked"].as_u64().unwrap() <= 2);
            for field in ["time_us", "algbw_gbps", "busbw_gbps"] {
                assert!(row[place][field].as_f64().unwrap() >= 0.0, "{field}");
            }
        }
        assert_eq!(row["traffic_ratio"], 1.0);
        assert_eq!(row["asked"], "auto");
        // The host-memory bound: an all-gather only copies, (W-1)/W of the output per rank,
        // W ranks; its time at the copy rate; the table's column is the in-place time over it.
        let bound = &row["bound"];
        let bytes = row["bytes"].as_f64().unwrap();
        assert_eq!(bound["folded_bytes"], 0.0);
        assert_eq!(bound["copied_bytes"].as_f64().unwrap(), bytes);
        let copy = bound["copy_gbps"].as_f64().unwrap();
        assert!(
            copy > 0.0 && bound["fold_gbps"].as_f64().unwrap() > 0.0,
            "{row}"
        );
        let time_us = bound["time_us"].as_f64().unwrap();
        assert!(
            (time_us - bytes / (copy * 1e3)).abs() <= 1e-9 * time_us,
            "{row}"
        );
        let times = bound["times"].as_f64().unwrap();
        let in_place = row["in_place"]["time_us"].as_f64().unwrap();
        assert!((times - in_place / time_us).abs() <= 1e-9 * times, "{row}");
        let schedule = row["schedule"].as_str().unwrap();
        assert!(
            schedule.len() == 16 && schedule.chars().all(|c| c.is_ascii_hexdigit()),
            "{schedule}"
        );
    }
}

#[test]
fn a_scenario_prints_one_row_per_generation_with_the_shared_error() {
    let (verdict, text) = ruccl_perf(&[
        "run",
        "-g",
        "4",
        "-n",
        "5",
        "-l",
        "1000",
        "-A",
        "ring",
        "--fault",
        "exchange:step=2:gen=3:panic",
        "--fault",
        "prepare:rank=2:gen=1:error",
    ]);
    // Injected faults are delivered to every rank alike: that is a pass.
    assert_eq!(verdict, Verdict::Passed);
    assert!(
        text.contains("# faults: exchange:step=2:gen=3:panic,prepare:rank=2:gen=1:error"),
        "{text}"
    );
    let rows = rows(&text);
    assert_eq!(rows.len(), 5, "{text}");
    for (generation, row) in rows.iter().enumerate() {
        let line = row.join(" ");
        assert_eq!(row[0], generation.to_string());
        match generation {
            1 => {
                assert_eq!((row[1], row[2], row[4]), ("none", "-", "0"), "{line}");
                assert!(
                    line.contains("injected error in prepare on rank 2"),
                    "{line}"
                );
            }
            3 => {
                // Steps 0 and 1 completed: each rank sent 250 of the bound's 1500.
                assert_eq!(
                    (row[1], row[2], row[4], row[5]),
                    ("none", "ring", "500", "1500"),
                    "{line}"
                );
                assert!(line.contains("injected panic in exchange step 2"), "{line}");
            }
            _ => {
                assert_eq!(&row[1..3], ["0-3", "ring"], "{line}");
                assert_eq!(&row[4..8], ["1500", "1500", "1.00", "0"], "{line}");
                assert!(line.ends_with(" -"), "{line}");
            }
        }
    }
    assert!(
        text.contains("3 ok, 2 failed on every rank alike, 0 disagreed"),
        "{text}"
    );
    assert!(text.contains("# mean time per generation:"), "{text}");
}

#[test]
fn rows_that_ran_the_same_schedule_carry_the_same_fingerprint() {
    let fingerprints = |world: &str| -> Vec<(String, String)> {
        let (_, text) = ruccl_perf(&[
            "all-gather-perf",
            "-A",
            "ring,direct,halving-doubling,auto",
            "-b",
            "64",
            "-e",
            "64",
            "-g",
            world,
            "-n",
            "1",
            "-w",
            "0",
            "--json",
        ]);
        let document: Value = serde_json::from_str(&text).unwrap();
        document["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                let asked = row["asked"].as_str().unwrap().to_owned();
                (asked, row["schedule"].as_str().unwrap().to_owned())
            })
            .collect()
    };
    // At W = 2 every all-gather algorithm is one step of the same two transfers.
    let two = fingerprints("2");
    assert_eq!(two.len(), 4, "{two:?}");
    assert!(
        two.iter().all(|(_, schedule)| *schedule == two[0].1),
        "{two:?}"
    );
    // At W = 4 ring (three steps), direct (one) and halving-doubling (two) differ; auto runs
    // one of them.
    let four = fingerprints("4");
    assert_eq!(four.len(), 4, "{four:?}");
    assert_ne!(four[0].1, four[1].1, "{four:?}");
    assert_ne!(four[0].1, four[2].1, "{four:?}");
    assert_ne!(four[1].1, four[2].1, "{four:?}");
    assert!(
        four[..3].iter().any(|(_, schedule)| *schedule == four[3].1),
        "{four:?}"
    );
}

#[test]
fn a_scenario_of_any_collective_as_json() {
    let (_, text) = ruccl_perf(&[
        "run",
        "--collective",
        "reduce-scatter",
        "-g",
        "2",
        "-n",
        "3",
        "-l",
        "64",
        "--fault",
        "finish:gen=1:error",
        "--json",
    ]);
    let document: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(document["command"], "run");
    assert_eq!(document["collective"], "reduce-scatter(sum)");
    assert_eq!(document["faults"], "finish:gen=1:error");
    let rows = document["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["ok_ranks"], serde_json::json!([0, 1]));
    assert_eq!(rows[1]["ok_ranks"], serde_json::json!([]));
    assert!(
        rows[1]["error"]
            .as_str()
            .unwrap()
            .contains("injected error in finish")
    );
    assert_eq!(rows[1]["errors"].as_array().unwrap().len(), 2);
    for row in rows {
        assert_eq!(row["agreed"], true);
    }
    assert_eq!(document["lower_bound"], 32.0);
    assert_eq!(document["summary"]["ok"], 2);
    assert_eq!(document["outcome"]["status"], "passed");
}

/// Parse a trace file and check the trace-event format; returns the complete events and the
/// outcome it ends with.
fn trace_events(path: &PathBuf, world: usize) -> (Vec<Value>, Value) {
    let text = std::fs::read_to_string(path).unwrap();
    std::fs::remove_file(path).unwrap();
    let document: Value = serde_json::from_str(&text).unwrap();
    let events = document["traceEvents"].as_array().unwrap();
    let named: BTreeSet<(u64, String)> = events
        .iter()
        .filter(|event| event["ph"] == "M" && event["name"] == "thread_name")
        .map(|event| {
            (
                event["tid"].as_u64().unwrap(),
                event["args"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: BTreeSet<(u64, String)> = (0..world as u64)
        .map(|rank| (rank, format!("rank {rank}")))
        .collect();
    assert_eq!(named, expected);
    let complete: Vec<Value> = events
        .iter()
        .filter(|event| event["ph"] == "X")
        .cloned()
        .collect();
    for event in &complete {
        assert!(
            event["name"].is_string() && event["cat"].is_string(),
            "{event}"
        );
        assert_eq!(event["pid"], 1);
        assert!(event["tid"].as_u64().unwrap() < world as u64, "{event}");
        assert!(event["ts"].as_f64().unwrap() >= 0.0 && event["dur"].as_f64().unwrap() >= 0.0);
    }
    (complete, document["otherData"]["outcome"].clone())
}

/// How many complete events of each name each track has.
fn per_track(events: &[Value]) -> BTreeMap<(u64, String), usize> {
    let mut counts = BTreeMap::new();
    for event in events {
        let key = (
            event["tid"].as_u64().unwrap(),
            event["name"].as_str().unwrap().to_owned(),
        );
        *counts.entry(key).or_default() += 1;
    }
    counts
}

#[test]
fn a_scenario_trace_has_one_track_per_rank_and_a_slice_per_phase_and_step() {
    let path = temporary("scenario");
    let world = 3;
    let generations = 4;
    ruccl_perf(&[
        "run",
        "-g",
        "3",
        "-n",
        "4",
        "-l",
        "1026",
        "-A",
        "ring",
        "--trace",
        path.to_str().unwrap(),
    ]);
    let (events, outcome) = trace_events(&path, world);
    assert_eq!(outcome["status"], "passed");
    let counts = per_track(&events);
    for rank in 0..world as u64 {
        assert_eq!(counts[&(rank, "all_reduce".to_owned())], generations);
        assert_eq!(counts[&(rank, "prepare".to_owned())], generations);
        assert!(counts[&(rank, "wait".to_owned())] >= generations);
    }
    let total = |name: &str| -> usize {
        counts
            .iter()
            .filter(|((_, event), _)| event == name)
            .map(|(_, count)| count)
            .sum()
    };
    // One plan per generation, on whichever rank arrived last.
    for name in ["ring", "begin", "finish"] {
        assert_eq!(total(name), generations, "{name}");
    }
    for step in 0..2 * (world - 1) {
        let kind = if step < world - 1 {
            "combine"
        } else {
            "overwrite"
        };
        assert_eq!(total(&format!("exchange {step} ({kind})")), generations);
    }
    // Slices nest: every exchange lies within a plan on its track, every plan within a call.
    let within = |inner: &Value, outer: &str| {
        events.iter().any(|event| {
            event["name"] == outer
                && event["tid"] == inner["tid"]
                && event["ts"].as_f64().unwrap() <= inner["ts"].as_f64().unwrap() + 1e-3
                && inner["ts"].as_f64().unwrap() + inner["dur"].as_f64().unwrap()
                    <= event["ts"].as_f64().unwrap() + event["dur"].as_f64().unwrap() + 1e-3
        })
    };
    for event in &events {
        if event["cat"] == "step" {
            assert!(within(event, "ring"), "{event}");
            // Every ring step sends one chunk per rank: the whole tensor.
            assert_eq!(event["args"]["elements"], 1026);
        }
        if event["name"] == "ring" {
            assert!(within(event, "all_reduce"), "{event}");
            assert_eq!(event["args"]["elements"], 4 * 1026);
        }
    }
}

#[test]
fn a_sweep_trace_covers_every_generation() {
    let path = temporary("sweep");
    ruccl_perf(&[
        "-b",
        "64",
        "-e",
        "256",
        "-f",
        "4",
        "-g",
        "2",
        "-n",
        "3",
        "-w",
        "1",
        "--trace",
        path.to_str().unwrap(),
    ]);
    let (events, _) = trace_events(&path, 2);
    let counts = per_track(&events);
    // Warm-up at 64, 128 and 256 B (1 each, doubling as nccl-tests), then two sizes × two
    // placements × (sync, 3 timed, 1 check).
    let calls = 3 + 2 * 2 * 5;
    assert_eq!(counts[&(0, "all_reduce".to_owned())], calls);
    assert_eq!(counts[&(1, "all_reduce".to_owned())], calls);
}

#[test]
fn a_failed_run_still_writes_its_json_document_and_trace_and_says_it_failed() {
    // A device whose sixth exchange fails, on both placements: the sweep stops there.
    let path = temporary("failed");
    let args = match command(&[
        "-b",
        "8",
        "-e",
        "64",
        "-g",
        "3",
        "-n",
        "2",
        "-w",
        "0",
        "--json",
        "--trace",
        path.to_str().unwrap(),
    ]) {
        Command::AllReducePerf(args) => args,
        other => panic!("{other:?}"),
    };
    let ranks: Vec<DeviceId> = (0..3).map(DeviceId::new).collect();
    let plan: FaultPlan = "exchange:gen=5:error".parse().unwrap();
    let faulty = |in_place| {
        let device = SimDevice::builder().in_place(in_place).build();
        FaultyDevice::new(device, ranks.clone(), plan.clone())
    };
    let places = Places {
        out_of_place: faulty(false),
        in_place: faulty(true),
    };
    let devices = Devices {
        world: 3,
        description: "faulty simulated devices".to_owned(),
        title: Vec::new(),
        using_devices: Vec::new(),
        ledger: None,
        host_copies: 5,
        bound_threads: None,
        nccl_version: 0,
    };
    let mut out = Vec::new();
    let stop = Stop::new();
    let failure = sweeps_on(&ALL_REDUCE, &args, &places, &devices, &mut out, &stop).unwrap_err();
    assert!(matches!(failure, CliError::Sweep(_)), "{failure:?}");
    assert_eq!(failure.exit_code(), 1);
    assert!(
        failure.to_string().starts_with("the run failed: "),
        "{failure}"
    );
    let document: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(document["outcome"]["status"], "failed");
    let message = document["outcome"]["message"].as_str().unwrap();
    assert!(message.contains("injected error in exchange"), "{message}");
    let (_, outcome) = trace_events(&path, 3);
    assert_eq!(outcome["status"], "failed");
}

#[test]
fn a_stopped_run_writes_its_json_document_and_trace_with_why() {
    for command_line in [
        &["-b", "8", "-e", "1K", "--json"][..],
        &["run", "-n", "1000", "--json"][..],
    ] {
        let path = temporary("stopped");
        let mut argv = command_line.to_vec();
        argv.extend(["--trace", path.to_str().unwrap()]);
        let stop = Stop::new();
        stop.request(StopReason::Interrupted);
        let mut out = Vec::new();
        let verdict = execute_with(command(&argv), &mut out, false, &stop).unwrap();
        assert_eq!(verdict, Verdict::Stopped(StopReason::Interrupted));
        let document: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(document["outcome"]["status"], "interrupted", "{argv:?}");
        let (_, outcome) = trace_events(&path, 4);
        assert_eq!(outcome["status"], "interrupted");
    }
}

#[test]
fn a_trace_path_that_cannot_be_written_is_refused_before_anything_runs() {
    for argv in [
        &[
            "-b",
            "8",
            "-e",
            "8",
            "--trace",
            "/nonexistent/ruccl/trace.json",
        ][..],
        &["run", "--trace", "/nonexistent/ruccl/trace.json"][..],
    ] {
        let mut out = Vec::new();
        let failure = execute(command(argv), &mut out, false).unwrap_err();
        assert_eq!(failure.exit_code(), 2, "{failure:?}");
        assert!(
            failure
                .to_string()
                .contains("/nonexistent/ruccl/trace.json"),
            "{failure}"
        );
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    }
}
