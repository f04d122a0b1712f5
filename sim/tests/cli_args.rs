//! The `ruccl-sim` command line: nccl-tests' flags and their meaning, sizes with suffixes, names
//! of operations and types, fault plans, and clear errors for bad values.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use clap::Parser;
use ruccl_core::ReduceOperation;
use ruccl_sim::ElementType;
use ruccl_sim::cli::{Cli, CliError, Command, PerfArgs, RunArgs, execute};
use ruccl_sim::fault::{FaultAction, FaultSite};

fn parse(args: &[&str]) -> Result<Command, String> {
    let argv = std::iter::once("ruccl-sim").chain(args.iter().copied());
    Cli::try_parse_from(argv)
        .map(Cli::into_command)
        .map_err(|error| error.to_string())
}

fn perf(args: &[&str]) -> PerfArgs {
    match parse(args).unwrap() {
        Command::AllReducePerf(perf) => perf,
        other => panic!("expected all-reduce-perf, got {other:?}"),
    }
}

fn run(args: &[&str]) -> RunArgs {
    let mut argv = vec!["run"];
    argv.extend_from_slice(args);
    match parse(&argv).unwrap() {
        Command::Run(run) => run,
        other => panic!("expected run, got {other:?}"),
    }
}

fn error(args: &[&str]) -> String {
    parse(args).expect_err("the command line should be refused")
}

#[test]
fn no_arguments_is_the_default_sweep() {
    let args = perf(&[]);
    assert_eq!(args.min_bytes.0, 8);
    assert_eq!(args.max_bytes.0, 128 << 20);
    assert_eq!(args.step_factor, 4);
    assert_eq!(args.world, 4);
    assert_eq!(args.operation, ReduceOperation::Sum);
    assert_eq!(args.element_type, ElementType::F32);
    assert_eq!((args.iterations, args.warmup, args.check), (20, 1, 1));
    assert!(!args.output.json);
    assert!(args.output.trace.is_none());
}

#[test]
fn nccl_tests_flags_mean_what_they_mean_there() {
    for prefix in [&[][..], &["all-reduce-perf"][..], &["perf"][..]] {
        let mut argv = prefix.to_vec();
        argv.extend_from_slice(&[
            "-b", "1K", "-e", "128M", "-f", "2", "-g", "8", "-o", "prod", "-d", "bf16", "-n", "5",
            "-w", "3", "-c", "0",
        ]);
        let args = perf(&argv);
        assert_eq!(args.min_bytes.0, 1024);
        assert_eq!(args.max_bytes.0, 128 << 20);
        assert_eq!(args.step_factor, 2);
        assert_eq!(args.world, 8);
        assert_eq!(args.operation, ReduceOperation::Product);
        assert_eq!(args.element_type, ElementType::BF16);
        assert_eq!(args.iterations, 5);
        assert_eq!(args.warmup, 3);
        assert_eq!(args.check, 0);
    }
    let long = perf(&[
        "--minbytes",
        "8",
        "--maxbytes",
        "1G",
        "--ngpus",
        "2",
        "--op",
        "avg",
    ]);
    assert_eq!(long.max_bytes.0, 1 << 30);
    assert_eq!(long.world, 2);
    assert_eq!(long.operation, ReduceOperation::Mean);
}

#[test]
fn sizes_take_binary_suffixes() {
    for (text, bytes) in [
        ("8", 8),
        ("1K", 1024),
        ("1k", 1024),
        ("64KiB", 65536),
        ("128M", 128 << 20),
        ("2G", 2 << 30),
    ] {
        assert_eq!(perf(&["-b", text, "-e", "4G"]).min_bytes.0, bytes, "{text}");
    }
    assert_eq!(run(&["-l", "1M"]).length.0, 1 << 20);
}

#[test]
fn operation_and_type_names_follow_nccl_and_rust() {
    for (text, operation) in [
        ("sum", ReduceOperation::Sum),
        ("prod", ReduceOperation::Product),
        ("product", ReduceOperation::Product),
        ("min", ReduceOperation::Min),
        ("max", ReduceOperation::Max),
        ("avg", ReduceOperation::Mean),
        ("mean", ReduceOperation::Mean),
        ("SUM", ReduceOperation::Sum),
    ] {
        assert_eq!(perf(&["-o", text]).operation, operation, "{text}");
    }
    for (text, element_type) in [
        ("float", ElementType::F32),
        ("f32", ElementType::F32),
        ("double", ElementType::F64),
        ("half", ElementType::F16),
        ("bfloat16", ElementType::BF16),
        ("int32", ElementType::I32),
        ("i64", ElementType::I64),
    ] {
        assert_eq!(perf(&["-d", text]).element_type, element_type, "{text}");
        assert_eq!(run(&["-d", text]).element_type, element_type, "{text}");
    }
}

#[test]
fn bad_values_are_refused_with_the_reason() {
    let size = error(&["-b", "12X"]);
    assert!(
        size.contains("'12X'") && size.contains("--minbytes"),
        "{size}"
    );
    assert!(size.contains("invalid size `12X`"), "{size}");
    let operation = error(&["-o", "median"]);
    assert!(
        operation.contains("unknown reduce operation `median`"),
        "{operation}"
    );
    let element_type = error(&["-d", "f8"]);
    assert!(
        element_type.contains("unknown element type `f8`"),
        "{element_type}"
    );
    let check = error(&["-c", "2"]);
    assert!(check.contains("--check"), "{check}");
    let factor = error(&["-f", "1"]);
    assert!(factor.contains("--stepfactor"), "{factor}");
    let ranks = error(&["-g", "0"]);
    assert!(ranks.contains("--ranks"), "{ranks}");
    let iterations = error(&["-n", "0"]);
    assert!(iterations.contains("--iters"), "{iterations}");
    let unknown = error(&["--bogus"]);
    assert!(unknown.contains("--bogus"), "{unknown}");
    // Sweep options do not mix with a subcommand.
    assert!(parse(&["-b", "8", "run"]).is_err());
}

#[test]
fn options_that_make_no_sweep_are_usage_errors() {
    let mut out = Vec::new();
    let refused = |args: &[&str], out: &mut Vec<u8>| {
        let failure = execute(parse(args).unwrap(), out, false).unwrap_err();
        assert!(matches!(failure, CliError::Usage(_)), "{failure:?}");
        assert_eq!(failure.exit_code(), 2);
        failure.to_string()
    };
    let reversed = refused(&["-b", "1M", "-e", "1K"], &mut out);
    assert!(reversed.contains("exceeds the largest"), "{reversed}");
    let alpha = refused(&["--alpha-us=-1"], &mut out);
    assert!(alpha.contains("α"), "{alpha}");
    let timeout = refused(&["--timeout=-3"], &mut out);
    assert!(timeout.contains("--timeout"), "{timeout}");
    assert!(out.is_empty(), "nothing is printed for a refused command");
}

#[test]
fn fault_plans_parse_and_concatenate_in_order() {
    let args = run(&[
        "-g",
        "3",
        "-n",
        "5",
        "--fault",
        "exchange:step=2:rank=1:gen=3:panic",
        "--fault",
        "prepare:rank=0:gen=1:error, drop:what=output:gen=2",
    ]);
    let plan = args.plan();
    assert_eq!(plan.specs().len(), 3);
    assert_eq!(
        plan.specs()[0].site,
        FaultSite::Exchange {
            step: Some(2),
            action: FaultAction::Panic
        }
    );
    assert_eq!(plan.specs()[0].rank, Some(1));
    assert_eq!(plan.specs()[0].generation, Some(3));
    assert_eq!(plan.specs()[1].site, FaultSite::Prepare(FaultAction::Error));
    assert_eq!(
        plan.to_string(),
        "exchange:step=2:rank=1:gen=3:panic,prepare:rank=0:gen=1:error,drop:what=output:gen=2"
    );
    assert!(run(&[]).plan().is_empty());
}

#[test]
fn a_bad_fault_plan_names_the_bad_part() {
    for (plan, expected) in [
        (
            "exchnge:step=2:panic",
            "fault 0 `exchnge:step=2:panic`: unknown fault site `exchnge`",
        ),
        (
            "exchange:step=x:panic",
            "`step=x`: expected a non-negative integer",
        ),
        (
            "begin:error,finish",
            "fault 1 `finish`: `finish` needs an action",
        ),
        ("prepare:colour=red:error", "unknown field `colour=red`"),
        ("outputs:count=1:panic", "`outputs` does not take `panic`"),
    ] {
        let message = error(&["run", "--fault", plan]);
        assert!(message.contains("--fault"), "{message}");
        assert!(message.contains(expected), "{plan}: {message}");
    }
}
