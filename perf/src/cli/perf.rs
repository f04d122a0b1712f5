//! The sweeps (`all-reduce-perf`, `reduce-scatter-perf`, `all-gather-perf`, `broadcast-perf`):
//! one sweep per element type, operation and root asked for, all under one header and one
//! footer as nccl-tests prints them (or one JSON document), rows as they are measured; the
//! largest size reduced to what fits in memory; an optional trace; then, with `--nccl`, the same
//! all-reduce sweeps through NCCL.

use super::args::{PerfArgs, Roots};
use super::output::Printer;
use super::progress::Progress;
use super::{CliError, Verdict, outcome_json, seconds};
use crate::backend::{Backend, Devices, OnDevice, Ran, run_on};
use crate::collectives::PerfCollective;
use crate::memory::{self, Budget};
use crate::probe::Probe;
use crate::schedule::Schedule;
use crate::stop::Stop;
use crate::sweep::nccl_json::NcclJson;
use crate::sweep::{
    Average, Instruments, Places, Sizes, Step, SweepConfig, SweepError, SweepEvent, format_size,
    json, sweep, table,
};
use crate::trace::TraceFile;
use ruccl_core::{Algorithm, Collective, LinkModel, ReduceOperation};
use ruccl_sim::HostTensors;
use std::io::Write;
use std::sync::Arc;
use std::sync::{Mutex, PoisonError};

/// Every sweep `args` asks of `collective` over `world` ranks — element type by element type,
/// operation by operation, root by root — or the usage error that makes none.
pub fn sweep_configs(
    collective: &'static PerfCollective,
    args: &PerfArgs,
    world: usize,
) -> Result<Vec<SweepConfig>, CliError> {
    let step = if args.step_factor == 1 {
        Step::Bytes(args.step_bytes.0)
    } else {
        Step::Factor(args.step_factor as usize)
    };
    let operations = match (&args.operations, collective.reduces()) {
        (Some(selection), true) => selection.0.clone(),
        _ => vec![ReduceOperation::Sum],
    };
    let roots: Vec<usize> = match (args.root, collective.rooted()) {
        (Some(Roots::All), true) => (0..world).collect(),
        (Some(Roots::One(root)), true) => vec![root],
        _ => vec![0],
    };
    let average = Average::from_code(args.average)
        .ok_or_else(|| CliError::Usage(format!("-a {}: expected 0, 1, 2 or 3", args.average)))?;
    let timeout = seconds("--timeout", args.timeout_s)?;
    let mut algorithms = runnable_algorithms(collective, args, world);
    let mut roots = roots;
    let schedule = match &args.schedule {
        Some(path) => {
            let schedule = Schedule::load(path).map_err(CliError::Usage)?;
            let imported = schedule.collective();
            let erased = |c: Collective| c.with_operation(ReduceOperation::Sum).with_root(0);
            if erased(imported) != erased(collective.kind) {
                return Err(CliError::Usage(format!(
                    "--schedule {}: the schedule computes {imported}, not {}",
                    path.display(),
                    collective.nccl_name
                )));
            }
            if schedule.world() != world {
                return Err(CliError::Usage(format!(
                    "--schedule {}: the schedule is for {} gpus, not {world} ranks (-g {})",
                    path.display(),
                    schedule.world(),
                    schedule.world()
                )));
            }
            // The schedule fixes the root and the plan.
            roots = vec![imported.root().unwrap_or(0)];
            algorithms = vec![Algorithm::Custom];
            Some(Arc::new(schedule))
        }
        None => None,
    };
    let mut configs = Vec::new();
    for &element_type in &args.element_types.0 {
        for &operation in &operations {
            for &root in &roots {
                // Innermost: sweeps that differ only in their algorithm run interleaved.
                for &algorithm in &algorithms {
                    let config = SweepConfig {
                        collective,
                        operation,
                        root,
                        algorithm,
                        element_type,
                        world,
                        sizes: Sizes {
                            min: args.min_bytes.0,
                            max: args.max_bytes.0,
                            step,
                        },
                        iterations: args.iterations as usize,
                        warmup: args.warmup as usize,
                        checks: args.checks as usize,
                        average,
                        timeout,
                        schedule: schedule.clone(),
                        ..SweepConfig::default()
                    };
                    config.validate().map_err(CliError::Usage)?;
                    configs.push(config);
                }
            }
        }
    }
    if configs.is_empty() {
        return Err(CliError::Usage("nothing to measure".to_owned()));
    }
    Ok(configs)
}

/// Whether `args` asks for every algorithm (`-A all`): then one `world` cannot run is skipped
/// rather than refused.
fn every_algorithm(args: &PerfArgs) -> bool {
    <Algorithm as super::Listed>::all()
        .iter()
        .all(|algorithm| args.algorithms.0.contains(algorithm))
}

/// The algorithms `args` asks for that `world` ranks can run: all of them, except that with
/// `-A all` halving-doubling is left out of a world that is not a power of two.
fn runnable_algorithms(
    collective: &PerfCollective,
    args: &PerfArgs,
    world: usize,
) -> Vec<Algorithm> {
    let every = every_algorithm(args);
    let skip_hd = every && !world.is_power_of_two();
    // All-to-all has a direct plan only (`Plan::new` refuses the others).
    let direct_only = every && collective.kind == Collective::AllToAll;
    args.algorithms
        .0
        .iter()
        .copied()
        .filter(|&algorithm| !(skip_hd && algorithm == Algorithm::HalvingDoubling))
        .filter(|&algorithm| {
            !(direct_only && matches!(algorithm, Algorithm::Ring | Algorithm::HalvingDoubling))
        })
        .collect()
}

/// A note for every algorithm `-A all` leaves out of this world.
fn skipped_algorithms(
    collective: &PerfCollective,
    args: &PerfArgs,
    world: usize,
) -> Option<String> {
    if runnable_algorithms(collective, args, world).len() == args.algorithms.0.len() {
        return None;
    }
    Some(if collective.kind == Collective::AllToAll {
        "-A all: ring and halving-doubling skipped, all-to-all has a direct plan only".to_owned()
    } else {
        format!("-A all: halving-doubling skipped, {world} ranks are not a power of two")
    })
}

/// A note when sizes are rounded down — to whole elements, and for reduce-scatter and all-gather
/// to whole blocks of `W` — as nccl-tests rounds them, naming the first.
fn rounding(configs: &[SweepConfig]) -> Option<String> {
    configs.iter().find_map(|config| {
        let rounded = config
            .sizes
            .iter()
            .take(64)
            .chain([config.sizes.max])
            .find(|&size| config.setup(size).bytes != size)?;
        let setup = config.setup(rounded);
        // Every collective but all-reduce, broadcast and reduce splits a size into W blocks.
        let blocks = if config.collective().output_len(config.world, 1) == Some(1) {
            String::new()
        } else {
            format!(" in {} equal blocks", config.world)
        };
        Some(format!(
            "sizes are rounded down to whole {} elements{blocks}, as nccl-tests does: {rounded} B is measured as {} B",
            config.element_type.nccl_name(),
            setup.bytes
        ))
    })
}

/// Notes for flags the collective ignores, as nccl-tests ignores them.
fn ignored_flags(collective: &PerfCollective, args: &PerfArgs) -> Vec<String> {
    let mut notes = Vec::new();
    if args.operations.is_some() && !collective.reduces() {
        notes.push(format!(
            "-o ignored: {} does not reduce (redop none)",
            collective.nccl_name
        ));
    }
    if args.root.is_some() && !collective.rooted() {
        notes.push(format!(
            "-r ignored: {} has no root (root -1)",
            collective.nccl_name
        ));
    }
    notes
}

/// Reduce every sweep's largest size to what fits in `budget`, as nccl-tests reduces maxBytes;
/// the notes to print, or a usage error if even the smallest size does not fit.
pub(crate) fn fit_memory(
    configs: &mut [SweepConfig],
    budget: &Budget,
    copies: u64,
) -> Result<Vec<String>, CliError> {
    let usable = budget.usable();
    let mut notes = Vec::new();
    for config in configs.iter_mut() {
        let world = config.world;
        // The batch of inputs made ahead takes at most an eighth of what a rank may use.
        let per_rank = usable / world.max(1) as u64;
        config.batch_bytes = config.batch_bytes.min((per_rank / 8) as usize);
        let need = |config: &SweepConfig, bytes: usize| {
            let setup = config.setup(bytes);
            let input = setup.counts.send as u64 * config.element_type.size() as u64;
            let batch = if setup.counts.feeds_back() {
                0
            } else {
                (config.batch_bytes as u64).max(input)
            };
            memory::estimate(
                setup.counts,
                config.element_type.size(),
                world,
                copies,
                batch,
            )
        };
        let smallest = need(config, config.sizes.min);
        if smallest > usable {
            return Err(CliError::does_not_fit(
                budget,
                format!(
                    "the smallest size (-b {}) needs an estimated {} over {world} ranks; {} — try a smaller -b or fewer ranks",
                    format_size(config.sizes.min),
                    memory::human(smallest),
                    budget
                ),
            ));
        }
        let largest = need(config, config.sizes.max);
        if largest > usable {
            // The estimate grows with the size: the largest that fits, by bisection.
            let (mut fits, mut too_big) = (config.sizes.min, config.sizes.max);
            while too_big - fits > 1 {
                let middle = fits + (too_big - fits) / 2;
                if need(config, middle) <= usable {
                    fits = middle;
                } else {
                    too_big = middle;
                }
            }
            notes.push(format!(
                "Reducing maxBytes to {fits} due to memory limitation"
            ));
            notes.push(format!(
                "(ruccl-perf: maxBytes {} needs an estimated {} over {world} ranks; {})",
                config.sizes.max,
                memory::human(largest),
                budget
            ));
            config.sizes.max = fits;
        }
    }
    notes.dedup();
    Ok(notes)
}

/// What the command prints as it goes, shared with rank 0's thread.
struct Shown<'a> {
    printer: Printer<'a>,
    totals: table::Totals,
    json: bool,
    style: table::Style,
    rows: u64,
    nccl_json: Option<NcclJson>,
    iterations: usize,
}

/// The sweeps of one command, run on whichever device the backend builds.
struct Sweeps<'a> {
    collective: &'static PerfCollective,
    args: &'a PerfArgs,
    out: &'a mut (dyn Write + Send),
    progress: bool,
    stop: &'a Stop,
}

impl OnDevice for Sweeps<'_> {
    type Output = (Verdict, Vec<SweepConfig>);

    fn run<D: HostTensors>(
        self,
        places: &Places<D>,
        devices: &Devices,
    ) -> Result<Self::Output, CliError> {
        let Sweeps {
            collective,
            args,
            out,
            progress,
            stop,
        } = self;
        let mut configs = sweep_configs(collective, args, devices.world)?;
        let budget = Budget::new(args.memory_limit.map(|size| size.0 as u64), devices.world);
        let reduced = fit_memory(&mut configs, &budget, devices.host_copies)?;
        let mut notes = Vec::new();
        notes.extend(rounding(&configs));
        notes.extend(ignored_flags(collective, args));
        notes.extend(skipped_algorithms(collective, args, devices.world));
        let model = places.out_of_place.link_model();
        let trace = match &args.output.trace {
            Some(path) => Some(
                TraceFile::create(path, devices.world)
                    .map_err(|error| CliError::Usage(error.to_string()))?,
            ),
            None => None,
        };
        let mut nccl_json = match &args.json_file {
            Some(path) => {
                Some(NcclJson::create(path).map_err(|error| CliError::Usage(error.to_string()))?)
            }
            None => None,
        };
        if let Some(document) = nccl_json.as_mut() {
            document.begin(&configs, devices.nccl_version, &devices.using_devices);
        }
        let style = table::Style {
            extra: args.extra_columns,
        };
        let min_bw = table::min_bandwidth();
        let probe = Probe::new(devices.world, false, trace.as_ref().map(TraceFile::sink));
        let probed = Places {
            out_of_place: probe.wrap(places.out_of_place.clone()),
            in_place: probe.wrap(places.in_place.clone()),
        };
        let instruments = Instruments {
            ledger: devices.ledger.clone(),
            // Measured only where it is shown.
            bound_threads: devices
                .bound_threads
                .filter(|_| args.extra_columns || args.output.json),
            probe,
            stop: stop.clone(),
        };
        let mut printer = Printer::new(out, stop);
        if let Some(document) = &nccl_json {
            printer.write(&format!(
                "# Writing JSON output to {}\n",
                document.target().display()
            ));
        }
        if args.output.json {
            printer.write(&json::head(&configs, &devices.description, &model));
        } else {
            let mut info = table::HeaderInfo {
                device: devices.description.clone(),
                using_devices: devices.using_devices.clone(),
                notes: devices.title.clone(),
                after_devices: reduced,
                nccl_version: devices.nccl_version,
                style,
            };
            info.notes.push(model_line(&model));
            info.notes.extend(notes.iter().cloned());
            printer.write(&table::header(&configs, &info));
        }
        let total: u64 = configs.iter().map(|config| config.sizes.count()).sum();
        let bar = Progress::new(progress, total, "sizes");
        let shown = Mutex::new(Shown {
            printer,
            totals: table::Totals::default(),
            json: args.output.json,
            style,
            rows: 0,
            nccl_json,
            iterations: args.iterations as usize,
        });
        let on_event = |event: SweepEvent<'_>| match event {
            SweepEvent::Started { bytes, place, .. } => {
                bar.message(format!("{} B {}", format_size(bytes), place.name()));
            }
            SweepEvent::Measured(row) => {
                let mut shown = shown.lock().unwrap_or_else(PoisonError::into_inner);
                shown.totals.add(row);
                let text = if shown.json {
                    json::row(row, shown.rows == 0)
                } else {
                    table::row(row, shown.style)
                };
                let iterations = shown.iterations;
                if let Some(document) = shown.nccl_json.as_mut() {
                    document.row(row, iterations);
                }
                shown.rows += 1;
                bar.around(|| shown.printer.write(&text));
                bar.advance(1);
            }
            SweepEvent::Skipped {
                config,
                setup,
                reason,
            } => {
                let mut shown = shown.lock().unwrap_or_else(PoisonError::into_inner);
                let text = if shown.json {
                    json::skipped(config, setup, reason, shown.rows == 0)
                } else {
                    table::skipped(config, setup, reason)
                };
                shown.rows += 1;
                bar.around(|| shown.printer.write(&text));
                bar.advance(1);
            }
        };
        let outcome = sweep(&probed, &configs, &instruments, &on_event);
        bar.finish();
        let mut shown = shown.into_inner().unwrap_or_else(PoisonError::into_inner);
        let verdict = match outcome {
            Ok(()) if shown.totals.wrong > 0 => Ok(Verdict::Wrong(format!(
                "{} wrong values (elements that differ from the reference, plus all-reduce ranks whose bits differ from rank 0's) in {} of {} checked measurements",
                shown.totals.wrong, shown.totals.failed, shown.totals.checked
            ))),
            Ok(()) => match min_bw {
                Some(min) if !table::bandwidth_passes(&shown.totals, min) => {
                    Ok(Verdict::Wrong(format!(
                        "the average bus bandwidth {} GB/s is below 90 % of NCCL_TESTS_MIN_BW={}",
                        table::general(shown.totals.average_busbw()),
                        table::general(min)
                    )))
                }
                _ => Ok(Verdict::Passed),
            },
            Err(SweepError::Stopped(reason)) => Ok(Verdict::Stopped(reason)),
            Err(error) => Err(error),
        };
        let described = verdict.clone().map_err(|e| e.to_string());
        let outcome = outcome_json(&described);
        if shown.json {
            let tail = json::tail(&shown.totals, &outcome);
            shown.printer.write(&tail);
        } else {
            let program = configs.first().map(table::program_name).unwrap_or_default();
            let footer = table::footer(&shown.totals, min_bw, &program, shown.style);
            shown.printer.write(&footer);
        }
        if let Some(document) = shown.nccl_json.take() {
            let errors: Vec<String> = match &described {
                Ok(Verdict::Passed) => Vec::new(),
                Ok(Verdict::Wrong(reason)) => vec![reason.clone()],
                Ok(Verdict::Stopped(reason)) => vec![reason.describe().to_owned()],
                Err(message) => vec![message.clone()],
            };
            document
                .finish(&shown.totals, min_bw, &errors)
                .map_err(|error| CliError::Output(std::io::Error::other(error.to_string())))?;
        }
        if let Some(trace) = trace {
            trace.finish(outcome)?;
        }
        if let Some(error) = shown.printer.take_error() {
            return Err(CliError::Output(error));
        }
        Ok((verdict?, configs))
    }
}

/// The header line describing the device's link model.
fn model_line(model: &LinkModel) -> String {
    let links = match model.links() {
        ruccl_core::Links::Shared => "one link shared by all transfers of a step",
        _ => "one port per rank",
    };
    format!(
        "link model (what auto resolves with; the model column): alpha {} us per step, gamma {} us per transfer, beta {} GB/s, {links}",
        table::general(model.alpha() * 1e6),
        table::general(model.transfer_cost() * 1e6),
        table::general(model.beta() / 1e9)
    )
}

/// Run the sweeps of `collective` that `args` asks for on `places`, described by `devices`
/// (instead of the device `args.backend` names: a harness's own device), printing them to `out`
/// as the command would; the NCCL baseline is not run.
pub fn sweeps_on<D: HostTensors>(
    collective: &'static PerfCollective,
    args: &PerfArgs,
    places: &Places<D>,
    devices: &Devices,
    out: &mut (dyn Write + Send),
    stop: &Stop,
) -> Result<Verdict, CliError> {
    let command = Sweeps {
        collective,
        args,
        out,
        progress: false,
        stop,
    };
    command.run(places, devices).map(|(verdict, _)| verdict)
}

/// Run the sweeps of `collective` that `args` asks for and print them.
pub(crate) fn sweeps(
    collective: &'static PerfCollective,
    args: &PerfArgs,
    out: &mut (dyn Write + Send),
    progress: bool,
    stop: &Stop,
) -> Result<Verdict, CliError> {
    // Flags that make no run are refused before any device is made.
    if let Some(message) = args.nccl_tests.unsupported() {
        return Err(CliError::Usage(message));
    }
    // nccl-tests' ranks: -t threads of -g GPUs each.
    let mut with_threads;
    let args = match args.nccl_tests.threads {
        Some(threads) if args.backend.backend == Backend::Sim => {
            let world = u64::from(threads) * u64::from(args.world.unwrap_or(1));
            if world > 1024 {
                return Err(CliError::Usage(format!(
                    "-t {threads} × -g {}: {world} ranks, more than 1024",
                    args.world.unwrap_or(1)
                )));
            }
            with_threads = args.clone();
            with_threads.world = Some(world as u32);
            with_threads.nccl_tests.threads = None;
            &with_threads
        }
        Some(_) => {
            return Err(CliError::Usage(
                "-t/--nthreads: give the CUDA backend's ranks with -g, --map or --ranks-per-gpu"
                    .to_owned(),
            ));
        }
        None => args,
    };
    let world = args.world.map_or(4, |world| world as usize);
    sweep_configs(collective, args, world)?;
    crate::memory::check_threads(world).map_err(CliError::Resource)?;
    if args.baseline.nccl && args.backend.backend != Backend::Cuda {
        return Err(CliError::Usage(
            "--nccl is the CUDA backend's baseline: add --backend cuda".to_owned(),
        ));
    }
    if args.baseline.nccl && !cfg!(feature = "nccl") {
        return Err(CliError::Usage(
            "--nccl: this ruccl-perf was built without the `nccl` feature; build it with \
             `--features nccl`"
                .to_owned(),
        ));
    }
    if args.baseline.nccl && !std::ptr::eq(collective, &crate::collectives::ALL_REDUCE) {
        return Err(CliError::Usage(
            "--nccl: the NCCL baseline measures all-reduce only".to_owned(),
        ));
    }
    let command = Sweeps {
        collective,
        args,
        out: &mut *out,
        progress,
        stop,
    };
    let (verdict, _configs) = match run_on(&args.backend, args.world, command)? {
        Ran::Ran(measured) => measured,
        Ran::Skipped(reason) => {
            writeln!(out, "{reason}").map_err(CliError::Output)?;
            return Ok(Verdict::Passed);
        }
    };
    #[cfg(feature = "nccl")]
    if args.baseline.nccl && verdict == Verdict::Passed {
        return baseline(&_configs, out);
    }
    Ok(verdict)
}

/// The NCCL baseline: the same all-reduce sweeps through NCCL, one rank per GPU, as tables.
/// NCCL's `avg` may round differently from the reference: its `#wrong` is shown, not counted.
#[cfg(feature = "nccl")]
fn baseline(configs: &[SweepConfig], out: &mut (dyn Write + Send)) -> Result<Verdict, CliError> {
    use crate::nccl::NcclBaseline;
    let print = |out: &mut (dyn Write + Send), text: &str| {
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(CliError::Output)
    };
    let gpus = ruccl_cuda::probe()
        .map_err(|error| CliError::Baseline(error.to_string()))?
        .device_count;
    let ordinals: Vec<usize> = (0..gpus).collect();
    let baseline = match NcclBaseline::new(&ordinals) {
        Ok(baseline) => baseline,
        Err(error) => {
            print(out, &format!("# NCCL baseline skipped: {error}\n"))?;
            return Ok(Verdict::Passed);
        }
    };
    let version = NcclBaseline::version().map_or_else(|e| e.to_string(), |v| v.to_string());
    let info = table::HeaderInfo {
        device: format!("NCCL {version} ({gpus} ranks, one per GPU, one thread)"),
        ..table::HeaderInfo::default()
    };
    let mut totals = table::Totals::default();
    let mut counted = 0;
    for config in configs {
        let config = SweepConfig {
            world: gpus,
            ..config.clone()
        };
        print(out, &table::header(std::slice::from_ref(&config), &info))?;
        for bytes in config.sizes.iter() {
            let row = baseline
                .measure(&config, bytes)
                .map_err(|error| CliError::Baseline(format!("{bytes} B: {error}")))?;
            print(out, &table::row(&row, table::Style::default()))?;
            totals.add(&row);
            if config.operation != ReduceOperation::Mean {
                counted += row.wrong();
            }
        }
    }
    let program = configs.first().map(table::program_name).unwrap_or_default();
    print(
        out,
        &table::footer(&totals, None, &program, table::Style::default()),
    )?;
    Ok(if counted == 0 {
        Verdict::Passed
    } else {
        Verdict::Wrong(format!("{counted} wrong elements in the NCCL baseline"))
    })
}
