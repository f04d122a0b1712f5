//! The `ruccl-perf` command line: nccl-tests' flags and their meaning, every collective's
//! subcommand, sizes with suffixes, names of operations, types and algorithms, fault plans
//! checked against the run, memory checked against the machine, and clear errors (exit 2) for
//! everything that makes no run — before anything runs or prints.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use clap::Parser;
use ruccl_core::{Algorithm, ReduceOperation};
use ruccl_perf::backend::Backend;
use ruccl_perf::cli::{Cli, CliError, Command, PerfArgs, Roots, RunArgs, execute, sweep_configs};
use ruccl_perf::collectives::{self, ALL_REDUCE, BROADCAST};
use ruccl_perf::sweep::{Average, Step};
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

/// Run a command that must be refused as a usage error (exit 2) having printed nothing.
fn refused(args: &[&str]) -> String {
    let mut out = Vec::new();
    let failure = execute(parse(args).unwrap(), &mut out, false).unwrap_err();
    assert!(
        matches!(failure, CliError::Usage(_)),
        "{args:?}: {failure:?}"
    );
    assert_eq!(failure.exit_code(), 2);
    assert!(
        out.is_empty(),
        "{args:?} printed {}",
        String::from_utf8_lossy(&out)
    );
    failure.to_string()
}

#[test]
fn no_arguments_is_the_default_sweep() {
    let args = perf(&[]);
    assert_eq!(args.min_bytes.0, 8);
    assert_eq!(args.max_bytes.0, 128 << 20);
    assert_eq!((args.step_factor, args.step_bytes.0), (4, 1 << 20));
    assert_eq!(
        args.world, None,
        "4 simulated ranks, or the CUDA backend's map"
    );
    assert_eq!(args.operations, None, "sum");
    assert_eq!(args.element_types.0, [ElementType::F32]);
    assert_eq!((args.iterations, args.warmup, args.checks), (20, 5, 1));
    assert_eq!(
        (args.average, &args.algorithms.0[..]),
        (1, &[Algorithm::Auto][..])
    );
    assert_eq!(args.root, None);
    assert_eq!(args.backend.backend, Backend::Sim);
    assert!(!args.output.json);
    assert!(args.output.trace.is_none());
}

#[test]
fn nccl_tests_flags_mean_what_they_mean_there() {
    for prefix in [
        &[][..],
        &["all-reduce-perf"][..],
        &["perf"][..],
        &["all_reduce_perf"][..],
    ] {
        let mut argv = prefix.to_vec();
        argv.extend_from_slice(&[
            "-b", "1K", "-e", "128M", "-f", "2", "-g", "8", "-o", "prod", "-d", "bf16", "-n", "5",
            "-w", "3", "-c", "4", "-a", "3", "-T", "7", "-i", "64K",
        ]);
        let args = perf(&argv);
        assert_eq!(args.min_bytes.0, 1024);
        assert_eq!(args.max_bytes.0, 128 << 20);
        assert_eq!((args.step_factor, args.step_bytes.0), (2, 64 << 10));
        assert_eq!(args.world, Some(8));
        assert_eq!(args.operations.unwrap().0, [ReduceOperation::Product]);
        assert_eq!(args.element_types.0, [ElementType::BF16]);
        assert_eq!((args.iterations, args.warmup, args.checks), (5, 3, 4));
        assert_eq!((args.average, args.timeout_s), (3, 7.0));
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
        "--stepbytes",
        "8",
        "--average",
        "0",
        "--algorithm",
        "ring",
        "--root",
        "1",
    ]);
    assert_eq!(long.max_bytes.0, 1 << 30);
    assert_eq!(long.world, Some(2));
    assert_eq!(long.operations.unwrap().0, [ReduceOperation::Mean]);
    assert_eq!(
        (long.average, &long.algorithms.0[..]),
        (0, &[Algorithm::Ring][..])
    );
    assert_eq!(long.root, Some(Roots::One(1)));
}

#[test]
fn every_collective_has_its_nccl_tests_subcommand() {
    for (names, expected) in [
        (["all-reduce-perf", "all_reduce_perf"], "all_reduce"),
        (
            ["reduce-scatter-perf", "reduce_scatter_perf"],
            "reduce_scatter",
        ),
        (["all-gather-perf", "all_gather_perf"], "all_gather"),
        (["broadcast-perf", "broadcast_perf"], "broadcast"),
        (["reduce-perf", "reduce_perf"], "reduce"),
        (["gather-perf", "gather_perf"], "gather"),
        (["scatter-perf", "scatter_perf"], "scatter"),
        (["alltoall-perf", "alltoall_perf"], "alltoall"),
    ] {
        for name in names {
            let command = parse(&[name, "-b", "4"]).unwrap();
            let (collective, args) = command.sweep().unwrap();
            assert_eq!(collective.nccl_name, expected);
            assert_eq!(args.min_bytes.0, 4);
        }
    }
    assert!(parse(&["run"]).unwrap().sweep().is_none());
    assert_eq!(collectives::ALL.len(), 8);
}

#[test]
fn algorithms_and_roots_parse_by_name() {
    for (text, algorithm) in [
        ("auto", Algorithm::Auto),
        ("ring", Algorithm::Ring),
        ("direct", Algorithm::Direct),
        ("halving-doubling", Algorithm::HalvingDoubling),
        ("hd", Algorithm::HalvingDoubling),
    ] {
        assert_eq!(perf(&["-A", text]).algorithms.0, [algorithm], "{text}");
        assert_eq!(run(&["-A", text]).algorithm, algorithm, "{text}");
    }
    assert!(error(&["-A", "tree"]).contains("unknown algorithm `tree`"));
    // A sweep takes a list, in the order given without repeats, or all.
    assert_eq!(
        perf(&["-A", "direct,ring,direct"]).algorithms.0,
        [Algorithm::Direct, Algorithm::Ring]
    );
    assert_eq!(
        perf(&["-A", "all"]).algorithms.0,
        [
            Algorithm::Auto,
            Algorithm::Ring,
            Algorithm::Direct,
            Algorithm::HalvingDoubling
        ]
    );
    assert!(error(&["-A", "ring,tree"]).contains("unknown algorithm `tree`"));
    let roots = |text: &str| match parse(&["broadcast-perf", "-r", text]).unwrap() {
        Command::BroadcastPerf(args) => args.root,
        _ => None,
    };
    assert_eq!(roots("3"), Some(Roots::One(3)));
    assert_eq!(roots("all"), Some(Roots::All));
    assert_eq!(roots("-1"), Some(Roots::All));
    assert!(error(&["broadcast-perf", "-r", "x"]).contains("invalid root `x`"));
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
        assert_eq!(
            perf(&["-o", text]).operations.unwrap().0,
            [operation],
            "{text}"
        );
    }
    for (text, element_type) in [
        ("float", ElementType::F32),
        ("f32", ElementType::F32),
        ("double", ElementType::F64),
        ("half", ElementType::F16),
        ("bfloat16", ElementType::BF16),
        ("int32", ElementType::I32),
        ("i64", ElementType::I64),
        ("int8", ElementType::I8),
        ("uint8", ElementType::U8),
        ("uint32", ElementType::U32),
        ("u64", ElementType::U64),
    ] {
        assert_eq!(
            perf(&["-d", text]).element_types.0,
            [element_type],
            "{text}"
        );
        assert_eq!(run(&["-d", text]).element_type, element_type, "{text}");
    }
    for (text, name) in [
        ("all-gather", "all_gather"),
        ("reduce_scatter", "reduce_scatter"),
        ("Broadcast", "broadcast"),
        ("allreduce", "all_reduce"),
        ("gather", "gather"),
        ("all-to-all", "alltoall"),
        ("alltoall_perf", "alltoall"),
    ] {
        assert_eq!(run(&["--collective", text]).collective.0.nccl_name, name);
    }
    assert!(error(&["run", "--collective", "gatherv"]).contains("unknown collective `gatherv`"));
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
    assert!(error(&["-f", "0"]).contains("--stepfactor"));
    assert!(error(&["-g", "0"]).contains("--ranks"));
    assert!(error(&["-n", "0"]).contains("--iters"));
    assert!(error(&["-a", "4"]).contains("--average"));
    assert!(error(&["-c", "x"]).contains("--check"));
    assert!(error(&["run", "-n", "-1"]).contains("unexpected argument '-1'"));
    assert!(error(&["run", "-n", "18446744073709551616"]).contains("--generations"));
    let unknown = error(&["--bogus"]);
    assert!(unknown.contains("--bogus"), "{unknown}");
    // Sweep options do not mix with a subcommand.
    assert!(parse(&["-b", "8", "run"]).is_err());
}

#[test]
fn options_that_make_no_sweep_are_usage_errors() {
    assert!(refused(&["-b", "1M", "-e", "1K"]).contains("exceeds the largest"));
    assert!(refused(&["-f", "1", "-i", "0"]).contains("must be at least 1 B"));
    assert!(refused(&["-b", "0", "-e", "64"]).contains("never grows"));
    assert!(refused(&["--alpha-us=-1"]).contains("α"));
    assert!(refused(&["--timeout=-3"]).contains("--timeout"));
    assert!(refused(&["-A", "halving-doubling", "-g", "3"]).contains("power-of-two"));
    assert!(refused(&["broadcast-perf", "-r", "4", "-g", "4"]).contains("outside the world"));
    assert!(refused(&["-g", "65"]).contains("-c 0"));
}

#[test]
fn sizes_that_cannot_fit_in_memory_are_refused_naming_both_figures() {
    let smallest = refused(&["-b", "16G", "-e", "16G", "--memory-limit", "1G"]);
    assert!(smallest.contains("-b 16G"), "{smallest}");
    assert!(
        smallest.contains("needs an estimated 384.0 GiB over 4 ranks"),
        "{smallest}"
    );
    assert!(
        smallest.contains("1.0 GiB allowed by --memory-limit"),
        "{smallest}"
    );
    let scenario = refused(&["run", "-l", "1T", "--memory-limit", "8G"]);
    assert!(
        scenario.contains("-l 1099511627776 needs an estimated"),
        "{scenario}"
    );
    assert!(scenario.contains("8.0 GiB allowed"), "{scenario}");
    // Far past anything: the estimate saturates instead of overflowing.
    let huge = refused(&["run", "-l", "16T", "-d", "double", "-g", "64"]);
    assert!(huge.contains("needs an estimated"), "{huge}");
}

#[test]
fn the_largest_size_is_reduced_to_what_fits_with_a_note() {
    let mut out = Vec::new();
    let command = parse(&[
        "-b",
        "8",
        "-e",
        "16G",
        "-f",
        "4096",
        "-n",
        "1",
        "-w",
        "0",
        "--memory-limit",
        "300M",
    ])
    .unwrap();
    let verdict = execute(command, &mut out, false).unwrap();
    assert_eq!(verdict, ruccl_perf::cli::Verdict::Passed);
    let text = String::from_utf8(out).unwrap();
    let note = text
        .lines()
        .find(|line| line.contains("Reducing maxBytes to"))
        .unwrap_or_else(|| panic!("no note in {text}"));
    assert!(note.ends_with("due to memory limitation"), "{note}");
    assert!(
        text.contains("300.0 MiB allowed by --memory-limit"),
        "{text}"
    );
    let sizes: Vec<usize> = text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| line.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(sizes, [8, 32768], "{text}");
}

#[test]
fn fault_plans_parse_and_concatenate_in_order() {
    let args = run(&[
        "-g",
        "3",
        "-n",
        "5",
        "--fault",
        "exchange:step=2:gen=3:panic",
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
    assert_eq!(plan.specs()[0].generation, Some(3));
    assert_eq!(plan.specs()[1].site, FaultSite::Prepare(FaultAction::Error));
    assert_eq!(
        plan.to_string(),
        "exchange:step=2:gen=3:panic,prepare:rank=0:gen=1:error,drop:what=output:gen=2"
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
fn faults_that_can_never_fire_are_usage_errors_naming_them() {
    for (args, expected) in [
        (
            &["-g", "4", "--fault", "prepare:rank=4:error"][..],
            "fault 0 `prepare:rank=4:error`: rank 4 is outside the world of 4 ranks",
        ),
        (
            &["-n", "4", "--fault", "finish:gen=4:error"][..],
            "generation 4 never runs: -n 4 runs generations 0-3",
        ),
        (
            &["-g", "4", "-A", "ring", "--fault", "exchange:step=6:panic"][..],
            "step 6 does not exist: the plan has 6 steps (0-5)",
        ),
        (
            &["-g", "1", "--fault", "exchange:panic"][..],
            "the plan has no steps",
        ),
        (
            &["--fault", "exchange:rank=1:gen=2:panic"][..],
            "`exchange` runs once for all ranks (on the last to arrive), so it takes no rank=",
        ),
        (
            &["--fault", "outputs:count=18446744073709551615"][..],
            "more than twice the world",
        ),
        (
            &["--fault", "begin:error", "--fault", "finish:gen=2:error"][..],
            "fault 1 `finish:gen=2:error` can never fire",
        ),
    ] {
        let mut argv = vec!["run"];
        argv.extend_from_slice(args);
        let message = refused(&argv);
        assert!(message.contains("--fault"), "{message}");
        assert!(message.contains(expected), "{args:?}: {message}");
    }
}

#[test]
fn scenarios_that_make_no_run_are_usage_errors() {
    let uneven = refused(&[
        "run",
        "--collective",
        "reduce-scatter",
        "-g",
        "4",
        "-l",
        "1023",
    ]);
    assert!(
        uneven.contains("does not split into 4 equal blocks"),
        "{uneven}"
    );
    assert!(
        refused(&["run", "--collective", "broadcast", "-r", "4"]).contains("outside the world")
    );
    assert!(refused(&["run", "-A", "hd", "-g", "3"]).contains("power-of-two"));
}

#[test]
fn all_selects_every_type_and_operation_and_lists_are_comma_separated() {
    let every = perf(&["-d", "all", "-o", "ALL"]);
    assert_eq!(every.element_types.0, ElementType::ALL);
    assert_eq!(every.operations.unwrap().0, ReduceOperation::ALL);
    let listed = perf(&["-d", "half,int32,half", "-o", "sum, max"]);
    assert_eq!(listed.element_types.0, [ElementType::F16, ElementType::I32]);
    assert_eq!(
        listed.operations.unwrap().0,
        [ReduceOperation::Sum, ReduceOperation::Max]
    );
    let bad = error(&["-d", "float,quad"]);
    assert!(bad.contains("unknown element type `quad`"), "{bad}");
}

#[test]
fn the_sweeps_follow_the_flags() {
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
        "-c",
        "2",
        "-a",
        "2",
        "-d",
        "double,float",
        "-o",
        "avg,min",
    ]);
    let configs = sweep_configs(&ALL_REDUCE, &args, 4).unwrap();
    assert_eq!(configs.len(), 4);
    let first = &configs[0];
    assert_eq!(
        (first.element_type, first.operation),
        (ElementType::F64, ReduceOperation::Mean)
    );
    assert_eq!(configs[1].operation, ReduceOperation::Min);
    assert_eq!(
        first.sizes.iter().collect::<Vec<_>>(),
        [4, 256, 16 << 10, 1 << 20]
    );
    assert_eq!(
        (first.iterations, first.warmup, first.checks, first.world),
        (3, 1, 2, 4)
    );
    assert_eq!(first.average, Average::Min);
    // A linear sweep: -f 1 steps by -i.
    let linear = perf(&["-b", "1M", "-e", "3M", "-f", "1", "-i", "1M"]);
    let configs = sweep_configs(&ALL_REDUCE, &linear, 4).unwrap();
    assert_eq!(configs[0].sizes.step, Step::Bytes(1 << 20));
    assert_eq!(
        configs[0].sizes.iter().collect::<Vec<_>>(),
        [1 << 20, 2 << 20, 3 << 20]
    );
    // Every root in turn; a collective that does not reduce runs one operation.
    let broadcast = match parse(&["broadcast-perf", "-r", "all", "-o", "all"]).unwrap() {
        Command::BroadcastPerf(args) => args,
        other => panic!("{other:?}"),
    };
    let roots: Vec<usize> = sweep_configs(&BROADCAST, &broadcast, 3)
        .unwrap()
        .iter()
        .map(|config| config.root)
        .collect();
    assert_eq!(roots, [0, 1, 2]);
    // More ranks than the check is exact for: a usage error, unless the check is off.
    let many = perf(&["-g", "65"]);
    assert!(matches!(
        sweep_configs(&ALL_REDUCE, &many, 65),
        Err(CliError::Usage(_))
    ));
    let unchecked = perf(&["-g", "65", "-c", "0"]);
    assert!(sweep_configs(&ALL_REDUCE, &unchecked, 65).is_ok());
}

#[test]
fn several_algorithms_make_sweeps_that_differ_only_in_their_algorithm() {
    let algorithms = |args: &[&str], world| -> Vec<Algorithm> {
        sweep_configs(&ALL_REDUCE, &perf(args), world)
            .unwrap()
            .iter()
            .map(|config| config.algorithm)
            .collect()
    };
    // Innermost: each type's sweeps are consecutive and interleave with each other only.
    let configs =
        sweep_configs(&ALL_REDUCE, &perf(&["-A", "ring,auto", "-d", "f32,f64"]), 4).unwrap();
    let shape: Vec<(ElementType, Algorithm)> = configs
        .iter()
        .map(|config| (config.element_type, config.algorithm))
        .collect();
    assert_eq!(
        shape,
        [
            (ElementType::F32, Algorithm::Ring),
            (ElementType::F32, Algorithm::Auto),
            (ElementType::F64, Algorithm::Ring),
            (ElementType::F64, Algorithm::Auto),
        ]
    );
    assert!(configs[0].interleaves_with(&configs[1]));
    assert!(!configs[1].interleaves_with(&configs[2]));
    // `all` leaves out what the world cannot run, and says so; a list that names it is refused.
    assert_eq!(
        algorithms(&["-A", "all"], 3),
        [Algorithm::Auto, Algorithm::Ring, Algorithm::Direct]
    );
    assert_eq!(algorithms(&["-A", "all"], 4).len(), 4);
    assert!(refused(&["-A", "ring,hd", "-g", "3"]).contains("power-of-two"));
    let (verdict, text) = {
        let mut out = Vec::new();
        let command = parse(&["-A", "all", "-g", "3", "-b", "4", "-e", "4", "-n", "1"]).unwrap();
        let verdict = execute(command, &mut out, false).unwrap();
        (verdict, String::from_utf8(out).unwrap())
    };
    assert_eq!(verdict, ruccl_perf::cli::Verdict::Passed);
    assert!(
        text.contains("# -A all: halving-doubling skipped, 3 ranks are not a power of two"),
        "{text}"
    );
    assert!(text.contains("algorithm auto,ring,direct\n"), "{text}");
}

#[test]
fn options_of_another_backend_are_usage_errors() {
    for args in [
        &["--map", "0:0,1:0"][..],
        &["--ranks-per-gpu", "2"][..],
        &["--require-gpu"][..],
        &["--nccl"][..],
    ] {
        let message = refused(args);
        assert!(message.contains("cuda"), "{message}");
    }
    assert!(
        parse(&["--map", "0:0", "-g", "2"]).is_err(),
        "--map fixes the world"
    );
    assert!(parse(&["--backend", "gpu"]).is_err());
}

#[cfg(not(feature = "cuda"))]
#[test]
fn the_cuda_backend_without_the_cuda_feature_is_a_usage_error() {
    for args in [
        &["--backend", "cuda"][..],
        &["run", "--backend", "cuda"][..],
    ] {
        assert!(refused(args).contains("--features cuda"));
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
