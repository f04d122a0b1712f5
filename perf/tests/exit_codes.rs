//! The exit statuses, as a shell sees them from the built binary: 0 success, 1 wrong results, a
//! failed run or an output closed early (saying which), 2 usage, 101 a panic no fault injected,
//! 130 SIGINT or SIGTERM — with the JSON document and the trace completed on the way out.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_perf::cli::{CliError, Verdict, exit_status};
use ruccl_perf::stop::StopReason;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

fn ruccl_perf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ruccl-perf"))
}

/// Run to the end; the status code, stdout and stderr.
fn finished(args: &[&str]) -> (i32, String, String) {
    let output = ruccl_perf().args(args).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_run_that_checks_out_exits_0() {
    let (code, stdout, stderr) = finished(&["-b", "8", "-e", "64", "-n", "1", "-w", "0"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("# Out of bounds values : 0 OK"));
    let (code, _, stderr) = finished(&["run", "-n", "3", "--fault", "begin:gen=1:error"]);
    assert_eq!(
        code, 0,
        "a generation that failed on every rank alike is a pass: {stderr}"
    );
}

#[test]
fn a_command_line_that_makes_no_run_exits_2_printing_nothing() {
    for args in [
        &["-b", "12X"][..],
        &["-b", "1M", "-e", "1K"][..],
        &["run", "--fault", "exchange:rank=1:panic"][..],
        &["-b", "16G", "-e", "16G", "--memory-limit", "1G"][..],
    ] {
        let (code, stdout, stderr) = finished(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert!(!stderr.is_empty(), "{args:?}");
    }
}

#[test]
fn exit_statuses_follow_the_verdict() {
    let status = |result: Result<Verdict, CliError>| {
        let mut stderr = Vec::new();
        let code = exit_status(&result, &mut stderr);
        (code, String::from_utf8(stderr).unwrap())
    };
    assert_eq!(status(Ok(Verdict::Passed)), (0, String::new()));
    let (code, message) = status(Ok(Verdict::Wrong("3 wrong values".to_owned())));
    assert_eq!(
        (code, message.as_str()),
        (1, "ruccl-perf: wrong results: 3 wrong values\n")
    );
    let (code, message) = status(Ok(Verdict::Stopped(StopReason::OutputClosed)));
    assert_eq!(code, 1);
    assert!(message.contains("the output was closed"), "{message}");
    assert_eq!(status(Ok(Verdict::Stopped(StopReason::Interrupted))).0, 130);
    assert_eq!(status(Err(CliError::Usage("bad".to_owned()))).0, 2);
    assert_eq!(status(Err(CliError::Backend("no driver".to_owned()))).0, 1);
}

#[test]
fn a_closed_pipe_ends_the_run_and_fails_it() {
    let mut child = ruccl_perf()
        .args(["run", "-n", "100000000", "-l", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    for _ in 0..8 {
        line.clear();
        stdout.read_line(&mut line).unwrap();
    }
    drop(stdout);
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("broken pipe"), "{stderr}");
}

#[test]
fn ctrl_c_stops_an_endless_run_and_completes_its_json_and_trace() {
    let trace = std::env::temp_dir().join(format!("ruccl-perf-{}-sigint.json", std::process::id()));
    let mut child = ruccl_perf()
        .args([
            "run",
            "-n",
            "18446744073709551615",
            "-l",
            "1",
            "--json",
            "--trace",
        ])
        .arg(&trace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut document = String::new();
    // Rows stream: wait for the first generation's row, then press Ctrl-C.
    loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the run ended early"
        );
        document.push_str(&line);
        if line.contains("\"generation\"") {
            break;
        }
    }
    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    stdout.read_to_string(&mut document).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let document: Value = serde_json::from_str(&document).unwrap();
    assert_eq!(document["outcome"]["status"], "interrupted");
    assert!(document["summary"]["generations"].as_u64().unwrap() >= 1);
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    std::fs::remove_file(&trace).unwrap();
    assert_eq!(written["otherData"]["outcome"]["status"], "interrupted");
}

#[test]
fn every_commands_help_documents_the_exit_statuses() {
    for command in [
        &["--help"][..],
        &["reduce-scatter-perf", "--help"][..],
        &["all-gather-perf", "--help"][..],
        &["broadcast-perf", "--help"][..],
        &["run", "--help"][..],
    ] {
        let (code, stdout, _) = finished(command);
        assert_eq!(code, 0);
        assert!(stdout.contains("Exit status:"), "{command:?}");
        for status in ["  0 ", "  1 ", "  2 ", "  101 ", "  130 "] {
            assert!(stdout.contains(status), "{command:?}: {status}");
        }
    }
}
