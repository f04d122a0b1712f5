//! The `ruccl-perf` command line: nccl-tests' flags and their meaning, sizes with suffixes, names
//! of operations and types, fault plans, and clear errors for bad values.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use clap::Parser;
use ruccl_core::ReduceOperation;
use ruccl_perf::backend::Backend;
use ruccl_perf::cli::{Cli, CliError, Command, PerfArgs, RunArgs, execute, sweep_configs};
use ruccl_sim::ElementType;
use ruccl_sim::fault::{FaultAction, FaultSite};

fn parse(args: &[&str]) -> Result<Command, String> {
    let argv = std::iter::once("ruccl-perf").chain(args.iter().copied());
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
    assert_eq!(
        args.world, None,
        "4 simulated ranks, or the CUDA backend's map"
    );
    assert_eq!(args.operations.0, [ReduceOperation::Sum]);
    assert_eq!(args.element_types.0, [ElementType::F32]);
    assert_eq!((args.iterations, args.warmup, args.check), (20, 5, 1));
    assert_eq!(args.backend.backend, Backend::Sim);
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
        assert_eq!(args.world, Some(8));
        assert_eq!(args.operations.0, [ReduceOperation::Product]);
        assert_eq!(args.element_types.0, [ElementType::BF16]);
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
    assert_eq!(long.world, Some(2));
    assert_eq!(long.operations.0, [ReduceOperation::Mean]);
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
        assert_eq!(perf(&["-o", text]).operations.0, [operation], "{text}");
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
        assert_eq!(
            perf(&["-d", text]).element_types.0,
            [element_type],
            "{text}"
        );
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

#[test]
fn all_selects_every_type_and_operation_and_lists_are_comma_separated() {
    let every = perf(&["-d", "all", "-o", "ALL"]);
    assert_eq!(every.element_types.0, ElementType::ALL);
    assert_eq!(every.operations.0, ReduceOperation::ALL);
    let listed = perf(&["-d", "half,int32,half", "-o", "sum, max"]);
    assert_eq!(listed.element_types.0, [ElementType::F16, ElementType::I32]);
    assert_eq!(
        listed.operations.0,
        [ReduceOperation::Sum, ReduceOperation::Max]
    );
    let bad = error(&["-d", "float,quad"]);
    assert!(bad.contains("unknown element type `quad`"), "{bad}");
}

#[test]
fn the_sweeps_follow_the_flags_and_every_size_holds_at_least_one_element() {
    let args = perf(&[
        "-b",
        "4",
        "-e",
        "4M",
        "-f",
        "64",
        "-n",
        "3",
        "-w",
        "1",
        "-d",
        "double,float",
        "-o",
        "avg",
    ]);
    let configs = sweep_configs(&args, 4).unwrap();
    assert_eq!(configs.len(), 2);
    let doubles = &configs[0];
    assert_eq!(doubles.element_type, ElementType::F64);
    assert_eq!(doubles.operation, ReduceOperation::Mean);
    assert_eq!(doubles.sizes(), vec![8, 512, 32 << 10, 2 << 20]);
    assert_eq!(
        (doubles.iterations, doubles.warmup, doubles.world),
        (3, 1, 4)
    );
    assert!(doubles.check);
    assert_eq!(configs[1].sizes(), vec![4, 256, 16 << 10, 1 << 20]);
    // More ranks than the check is exact for: a usage error, unless the check is off.
    let many = perf(&["-g", "65"]);
    assert!(matches!(sweep_configs(&many, 65), Err(CliError::Usage(_))));
    let unchecked = perf(&["-g", "65", "-c", "0"]);
    assert!(sweep_configs(&unchecked, 65).is_ok());
}

#[test]
fn options_of_another_backend_are_usage_errors() {
    let mut out = Vec::new();
    for args in [
        &["--map", "0:0,1:0"][..],
        &["--ranks-per-gpu", "2"][..],
        &["--require-gpu"][..],
        &["--nccl"][..],
    ] {
        let failure = execute(parse(args).unwrap(), &mut out, false).unwrap_err();
        assert!(
            matches!(failure, CliError::Usage(_)),
            "{args:?}: {failure:?}"
        );
        assert!(failure.to_string().contains("cuda"), "{failure}");
    }
    assert!(
        parse(&["--map", "0:0", "-g", "2"]).is_err(),
        "--map fixes the world"
    );
    assert!(parse(&["--backend", "gpu"]).is_err());
    assert!(out.is_empty(), "nothing is printed for a refused command");
}

#[cfg(not(feature = "cuda"))]
#[test]
fn the_cuda_backend_without_the_cuda_feature_is_a_usage_error() {
    let mut out = Vec::new();
    for command in [
        parse(&["--backend", "cuda"]).unwrap(),
        parse(&["run", "--backend", "cuda"]).unwrap(),
    ] {
        let failure = execute(command, &mut out, false).unwrap_err();
        assert!(matches!(failure, CliError::Usage(_)), "{failure:?}");
        assert_eq!(failure.exit_code(), 2);
        assert!(failure.to_string().contains("--features cuda"), "{failure}");
    }
}

#[cfg(feature = "cuda")]
#[test]
fn the_cuda_backend_without_a_gpu_skips() {
    // On a machine with a GPU this runs a tiny sweep instead; either way it passes.
    let mut out = Vec::new();
    let command = parse(&[
        "--backend",
        "cuda",
        "-b",
        "8",
        "-e",
        "8",
        "-n",
        "1",
        "-w",
        "0",
    ]);
    let verdict = execute(command.unwrap(), &mut out, false).unwrap();
    assert_eq!(verdict, ruccl_perf::cli::Verdict::Passed);
}
