//! What `ruccl-perf` prints: the nccl-tests table, the JSON documents, the scenario rows, and
//! trace files in the Chrome trace-event format with one track per rank.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use clap::Parser;
use ruccl_perf::cli::{Cli, Verdict, execute};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Run `ruccl-perf ARGS`, returning the verdict and what it printed.
fn ruccl_perf(args: &[&str]) -> (Verdict, String) {
    let argv = std::iter::once("ruccl-perf").chain(args.iter().copied());
    let command = Cli::try_parse_from(argv).unwrap().into_command();
    let mut out = Vec::new();
    let verdict = execute(command, &mut out, false).unwrap();
    (verdict, String::from_utf8(out).unwrap())
}

/// A file name in the temporary directory, unique to this test process and `name`.
fn temporary(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ruccl-perf-{}-{name}.json", std::process::id()))
}

#[test]
fn the_table_has_the_nccl_tests_columns_and_one_row_per_size() {
    let (verdict, text) = ruccl_perf(&[
        "-b", "8", "-e", "32K", "-f", "8", "-g", "3", "-n", "2", "-w", "1",
    ]);
    assert_eq!(verdict, Verdict::Passed);
    let header: Vec<&str> = text.lines().filter(|line| line.starts_with('#')).collect();
    assert!(
        header
            .iter()
            .any(|line| line.contains("nRanks 3 minBytes 8 maxBytes 32768"))
    );
    let columns = header
        .iter()
        .find(|line| line.contains("redop"))
        .expect("a column header");
    for column in [
        "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong", "traffic", "model",
    ] {
        assert!(columns.contains(column), "{column} missing from {columns}");
    }
    assert!(text.contains("# Out of bounds values : 0 OK"), "{text}");
    assert!(text.contains("# Avg bus bandwidth"), "{text}");
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| line.split_whitespace().collect())
        .collect();
    // 8, 64, 512, 4K, 32K bytes.
    let sizes: Vec<&str> = rows.iter().map(|row| row[0]).collect();
    assert_eq!(sizes, ["8", "64", "512", "4096", "32768"]);
    for row in &rows {
        assert_eq!(row.len(), 10, "{row:?}");
        let bytes: usize = row[0].parse().unwrap();
        assert_eq!(row[1].parse::<usize>().unwrap(), bytes / 4);
        assert_eq!((row[2], row[3]), ("float", "sum"));
        for number in [row[4], row[5], row[6], row[9]] {
            assert!(number.parse::<f64>().unwrap() >= 0.0, "{row:?}");
        }
        assert_eq!(row[7], "0", "#wrong");
        // Three ranks: the ring meets the bound exactly when 3 divides the count.
        let ratio: f64 = row[8].parse().unwrap();
        assert!((1.0..1.5).contains(&ratio), "{row:?}");
    }
}

#[test]
fn an_unchecked_sweep_prints_not_available() {
    let (verdict, text) = ruccl_perf(&["-b", "64", "-e", "64", "-n", "1", "-c", "0"]);
    assert_eq!(verdict, Verdict::Passed);
    let row = text.lines().find(|line| !line.starts_with('#')).unwrap();
    assert!(row.contains("N/A"), "{row}");
    assert!(text.contains("Out of bounds values : N/A"), "{text}");
}

#[test]
fn the_json_document_has_every_row() {
    let (_, text) = ruccl_perf(&[
        "all-reduce-perf",
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
        "-o",
        "max",
        "-n",
        "2",
        "--json",
    ]);
    let document: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(document["command"], "all-reduce-perf");
    assert_eq!(document["world"], 2);
    assert_eq!(document["type"], "double");
    assert_eq!(document["redop"], "max");
    assert_eq!(document["wrong_total"], 0);
    assert!(document["link_model"]["alpha_us"].as_f64().unwrap() > 0.0);
    let rows = document["rows"].as_array().unwrap();
    let sizes: Vec<u64> = rows
        .iter()
        .map(|row| row["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [1024, 4096, 16384]);
    for row in rows {
        assert_eq!(
            row["count"].as_u64().unwrap() * 8,
            row["bytes"].as_u64().unwrap()
        );
        assert_eq!(row["wrong"], 0);
        assert_eq!(row["traffic_ratio"], 1.0);
        for field in ["time_us", "algbw_gbps", "busbw_gbps", "model_us"] {
            assert!(row[field].as_f64().unwrap() >= 0.0, "{field}");
        }
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
        "--fault",
        "exchange:step=2:rank=1:gen=3:panic",
        "--fault",
        "prepare:rank=2:gen=1:error",
    ]);
    // Injected faults are delivered to every rank alike: that is a pass.
    assert_eq!(verdict, Verdict::Passed);
    assert!(
        text.contains("# faults: exchange:step=2:rank=1:gen=3:panic,prepare:rank=2:gen=1:error")
    );
    let rows: Vec<&str> = text.lines().filter(|line| !line.starts_with('#')).collect();
    assert_eq!(rows.len(), 5, "{text}");
    for (generation, row) in rows.iter().enumerate() {
        let fields: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(fields[0], generation.to_string());
        match generation {
            1 => {
                assert_eq!((fields[1], fields[2]), ("none", "0"), "{row}");
                assert!(row.contains("injected error in prepare on rank 2"), "{row}");
            }
            3 => {
                // Steps 0 and 1 completed: 2 of the 6 steps' elements.
                assert_eq!(
                    (fields[1], fields[2], fields[3]),
                    ("none", "2000", "6000"),
                    "{row}"
                );
                assert!(row.contains("injected panic in exchange step 2"), "{row}");
            }
            _ => {
                assert_eq!(&fields[1..6], ["0-3", "6000", "6000", "1.00", "0"], "{row}");
                assert!(row.ends_with(" -"), "{row}");
            }
        }
    }
    assert!(
        text.contains("3 ok, 2 failed on every rank alike, 0 disagreed"),
        "{text}"
    );
}

#[test]
fn a_scenario_as_json() {
    let (_, text) = ruccl_perf(&[
        "run",
        "-g",
        "2",
        "-n",
        "3",
        "--fault",
        "finish:gen=1:error",
        "--json",
    ]);
    let document: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(document["command"], "run");
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
        assert_eq!(row["lower_bound"], 2 * 1024);
    }
}

/// Parse a trace file and check the trace-event format; returns the complete events.
fn trace_events(path: &PathBuf, world: usize) -> Vec<Value> {
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
    complete
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
        "--trace",
        path.to_str().unwrap(),
    ]);
    let events = trace_events(&path, world);
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
    // One ring per generation, on whichever rank arrived last.
    for name in ["ring", "begin", "finish"] {
        assert_eq!(total(name), generations, "{name}");
    }
    for step in 0..2 * (world - 1) {
        let phase = if step < world - 1 {
            "reduce-scatter"
        } else {
            "all-gather"
        };
        assert_eq!(total(&format!("exchange {step} ({phase})")), generations);
    }
    // Slices nest: every exchange lies within a ring on its track, every ring within a call.
    let within = |inner: &Value, outer: &str| {
        events.iter().any(|event| {
            event["name"] == outer
                && event["tid"] == inner["tid"]
                && event["ts"].as_f64().unwrap() <= inner["ts"].as_f64().unwrap()
                && inner["ts"].as_f64().unwrap() + inner["dur"].as_f64().unwrap()
                    <= event["ts"].as_f64().unwrap() + event["dur"].as_f64().unwrap() + 1e-3
        })
    };
    for event in &events {
        if event["cat"] == "step" {
            assert!(within(event, "ring"), "{event}");
            // Every step sends one chunk per rank: the whole tensor.
            assert_eq!(event["args"]["elements"], 1024);
        }
        if event["name"] == "ring" {
            assert!(within(event, "all_reduce"), "{event}");
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
    let events = trace_events(&path, 2);
    let counts = per_track(&events);
    // Two sizes × (1 check + 1 warm-up + 3 timed) generations.
    assert_eq!(counts[&(0, "all_reduce".to_owned())], 10);
    assert_eq!(counts[&(1, "all_reduce".to_owned())], 10);
    let rings: usize = (0..2)
        .map(|rank| counts.get(&(rank, "ring".to_owned())).copied().unwrap_or(0))
        .sum();
    assert_eq!(rings, 10);
}

#[test]
fn every_type_and_operation_gets_its_own_table_or_document() {
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
    let headers = text
        .lines()
        .filter(|line| line.contains("nRanks 3"))
        .count();
    assert_eq!(headers, 2 * 5, "{text}");
    assert_eq!(text.matches("# Out of bounds values : 0 OK").count(), 10);
    let (_, text) = ruccl_perf(&[
        "-b", "8", "-e", "8", "-g", "2", "-n", "1", "-w", "0", "-d", "float", "-o", "sum,max",
        "--json",
    ]);
    let documents: Value = serde_json::from_str(&text).unwrap();
    let documents = documents.as_array().unwrap();
    assert_eq!(documents.len(), 2);
    assert_eq!(documents[1]["redop"], "max");
}
