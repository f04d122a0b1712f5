//! `--schedule`, `verify` and `export`: MSCCL XML schedules through the perf tool, on the
//! committed test programs of `ruccl-msccl` (msccl/tests/data).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use clap::Parser;
use ruccl_perf::cli::{Cli, CliError, Verdict, execute};
use std::path::PathBuf;

fn data(name: &str) -> String {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "msccl",
        "tests",
        "data",
        name,
    ]
    .iter()
    .collect();
    path.display().to_string()
}

fn run(args: &[&str]) -> (Result<Verdict, CliError>, String) {
    let command = Cli::try_parse_from(std::iter::once("ruccl-perf").chain(args.iter().copied()))
        .unwrap()
        .into_command();
    let mut out = Vec::new();
    let verdict = execute(command, &mut out, false);
    (verdict, String::from_utf8(out).unwrap())
}

#[test]
fn verify_passes_good_schedules_and_exits_one_on_a_violation_two_on_garbage() {
    let (verdict, out) = run(&["verify", &data("allreduce_ring_n3.xml")]);
    assert_eq!(verdict.unwrap(), Verdict::Passed, "{out}");
    assert!(out.starts_with("PASS "), "{out}");
    let (verdict, out) = run(&[
        "verify",
        &data("allreduce_ring_n3.xml"),
        &data("broken_allreduce_ring_n3_missing.xml"),
    ]);
    assert!(matches!(verdict, Ok(Verdict::Wrong(_))), "{out}");
    assert!(out.lines().nth(1).unwrap().starts_with("FAIL "), "{out}");
    assert!(
        out.ends_with("2 files: 1 pass, 0 unsupported, 1 fail, 0 unreadable\n"),
        "{out}"
    );
    let (verdict, out) = run(&[
        "verify",
        &data("broken_allreduce_ring_n3_missing.xml"),
        &data("malformed_unclosed.xml"),
        "/nonexistent/schedule.xml",
    ]);
    assert_eq!(verdict.unwrap_err().exit_code(), 2, "{out}");
    assert_eq!(out.matches("UNREADABLE ").count(), 2, "{out}");
    let (verdict, out) = run(&["verify", &data("custom_forward_n2.xml")]);
    assert_eq!(verdict.unwrap(), Verdict::Passed, "{out}");
    assert!(out.starts_with("UNSUPPORTED "), "{out}");
}

#[test]
fn an_imported_schedule_runs_through_the_normal_table_with_nothing_wrong() {
    let (verdict, out) = run(&[
        "all-reduce-perf",
        "--schedule",
        &data("allreduce_ring_n3.xml"),
        "-g",
        "3",
        "-b",
        "4",
        "-e",
        "64K",
        "-f",
        "16",
        "-n",
        "2",
        "-w",
        "1",
        "--extra-columns",
    ]);
    assert_eq!(verdict.unwrap(), Verdict::Passed, "{out}");
    let rows: Vec<&str> = out
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .collect();
    assert!(rows.len() >= 4, "{out}");
    for row in rows {
        assert!(row.contains(" custom "), "{row}");
    }
    // Another collective or another world than the schedule's is a usage error.
    for args in [
        ["all-gather-perf", "-g", "3"],
        ["all-reduce-perf", "-g", "4"],
    ] {
        let mut args = args.to_vec();
        let schedule = data("allreduce_ring_n3.xml");
        args.extend(["--schedule", &schedule]);
        let (verdict, out) = run(&args);
        assert_eq!(verdict.unwrap_err().exit_code(), 2, "{args:?}: {out}");
    }
    // A broken schedule is refused before anything runs, naming the violation.
    let (verdict, _) = run(&[
        "all-reduce-perf",
        "-g",
        "3",
        "--schedule",
        &data("broken_allreduce_ring_n3_unmatched.xml"),
    ]);
    let error = verdict.unwrap_err();
    assert_eq!(error.exit_code(), 2);
    assert!(error.to_string().contains("unmatched"), "{error}");
}

#[test]
fn an_exported_plan_verifies_and_runs_back_through_the_tool() {
    let directory = std::env::temp_dir().join(format!("ruccl-export-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    for (collective, algorithm, world) in [
        ("all-reduce", "ring", "4"),
        ("alltoall", "direct", "3"),
        ("gather", "halving-doubling", "4"),
    ] {
        let file = directory.join(format!("{collective}.xml"));
        let file = file.display().to_string();
        let (verdict, _) = run(&[
            "export", "-k", collective, "-A", algorithm, "-g", world, "-f", &file,
        ]);
        assert_eq!(verdict.unwrap(), Verdict::Passed);
        let (verdict, out) = run(&["verify", &file]);
        assert_eq!(verdict.unwrap(), Verdict::Passed, "{out}");
        let command = format!("{collective}-perf");
        let (verdict, out) = run(&[
            &command,
            "--schedule",
            &file,
            "-g",
            world,
            "-b",
            "64",
            "-e",
            "4K",
            "-f",
            "8",
            "-n",
            "1",
            "-w",
            "0",
        ]);
        assert_eq!(verdict.unwrap(), Verdict::Passed, "{collective}: {out}");
    }
    std::fs::remove_dir_all(&directory).unwrap();
}

/// An imported schedule under the fault injector: a panic in one of its steps reaches every rank
/// as the same error, nothing of the generation stays alive, and the next generation of the same
/// plan delivers the all-reduce.
#[test]
fn an_imported_schedule_under_injected_faults_fails_alike_and_recovers() {
    use ruccl_core::{DeviceId, NativeCommunicator, Plan, ReduceOperation};
    use ruccl_perf::schedule::Schedule;
    use ruccl_sim::{FaultPlan, FaultyDevice, HostTensors, HostValues, SimDevice};

    let schedule = Schedule::load(std::path::Path::new(&data("allreduce_ring_n3.xml"))).unwrap();
    let plan: Plan = schedule.plan(30, ReduceOperation::Sum).unwrap();
    let devices: Vec<DeviceId> = (0..3).map(DeviceId::new).collect();
    let sim = SimDevice::builder().census(true).build();
    let faults: FaultPlan = "exchange:step=1:gen=0:panic".parse().unwrap();
    let faulty = FaultyDevice::new(sim.clone(), devices.clone(), faults);
    let communicator = NativeCommunicator::new(devices.clone(), faulty.clone()).unwrap();
    for generation in 0..2 {
        let outcomes: Vec<_> = std::thread::scope(|scope| {
            let ranks: Vec<_> = (0..3)
                .map(|rank| {
                    let (communicator, faulty, plan) = (&communicator, &faulty, plan.clone());
                    let devices = &devices;
                    scope.spawn(move || {
                        let values = HostValues::I64(vec![rank as i64 + 1; 30]);
                        let tensor = faulty.upload(devices[rank], &values).unwrap();
                        communicator
                            .run_plan(rank, tensor, plan, None)
                            .map(|output| faulty.download(&output).unwrap())
                            .map_err(|error| error.to_string())
                    })
                })
                .collect();
            ranks.into_iter().map(|rank| rank.join().unwrap()).collect()
        });
        if generation == 0 {
            let first = outcomes[0].clone().unwrap_err();
            assert!(first.contains("exchange"), "{first}");
            assert!(
                outcomes
                    .iter()
                    .all(|outcome| outcome == &Err(first.clone()))
            );
        } else {
            for outcome in outcomes {
                assert_eq!(outcome, Ok(HostValues::I64(vec![6; 30])));
            }
        }
        sim.check_quiescent()
            .unwrap_or_else(|alive| panic!("generation {generation} left values alive: {alive}"));
    }
}
