//! `run`: a scenario on the backend's device behind the fault decorator, under the command
//! line's fault plan (checked against the run first), rows printed as generations complete.

use super::args::RunArgs;
use super::output::Printer;
use super::progress::Progress;
use super::{CliError, Verdict, outcome_json, seconds};
use crate::backend::{Devices, OnDevice, Ran, run_on};
use crate::collectives::Counts;
use crate::memory::{self, Budget};
use crate::probe::Probe;
use crate::scenario::faults::FaultRun;
use crate::scenario::{ScenarioConfig, Summary, check_faults, json, run_scenario, table};
use crate::stop::Stop;
use crate::sweep::Places;
use crate::trace::TraceFile;
use ruccl_core::{DeviceId, LinkModel, Plan, TensorInfo};
use ruccl_sim::{FaultyDevice, HostTensors};
use std::io::Write;

/// The scenario `args` asks for over `world` ranks, checked: its shape, its memory, and the fault
/// plan against it (with the device's `model`, which resolves `Auto`).
fn scenario_config(
    args: &RunArgs,
    world: usize,
    model: &LinkModel,
    copies: u64,
) -> Result<ScenarioConfig, CliError> {
    if args.root >= world {
        return Err(CliError::Usage(format!(
            "-r {}: the root is outside the world of {world} ranks (0 to {})",
            args.root,
            world - 1
        )));
    }
    let collective = args.collective.0.collective(args.operation, args.root);
    let config = ScenarioConfig {
        world,
        collective,
        algorithm: args.algorithm,
        length: args.length.0,
        element_type: args.element_type,
        generations: args.generations,
        timeout: seconds("--timeout", args.timeout_s)?,
    };
    config.validate().map_err(CliError::Usage)?;
    let output = collective.output_len(world, config.length).unwrap_or(0);
    let counts = Counts {
        send: config.length,
        recv: output,
        param: config.length,
        root_only: false,
    };
    let need = memory::estimate(counts, config.element_type.size(), world, copies, 0);
    let budget = Budget::new(args.memory_limit.map(|size| size.0 as u64), world);
    if need > budget.usable() {
        return Err(CliError::does_not_fit(
            &budget,
            format!(
                "-l {} needs an estimated {} per generation over {world} ranks; {}",
                config.length,
                memory::human(need),
                budget
            ),
        ));
    }
    let input = TensorInfo {
        len: config.length,
        element: config.element_type,
    };
    let plan = Plan::with_model(collective, config.algorithm, world, input, model)
        .map_err(|error| CliError::Usage(error.to_string()))?;
    let run = FaultRun {
        world,
        generations: config.generations,
        steps: plan.steps().len(),
    };
    check_faults(&args.plan(), run).map_err(|reason| {
        CliError::Usage(format!(
            "--fault: {reason} (the plan: {} {}, {} steps)",
            plan.algorithm(),
            collective,
            run.steps
        ))
    })?;
    Ok(config)
}

/// The scenario of one command, run on whichever device the backend builds.
struct Scenario<'a> {
    args: &'a RunArgs,
    out: &'a mut (dyn Write + Send),
    progress: bool,
    stop: &'a Stop,
}

impl OnDevice for Scenario<'_> {
    type Output = (Summary, Result<Verdict, String>);

    fn run<D: HostTensors>(
        self,
        places: &Places<D>,
        devices: &Devices,
    ) -> Result<Self::Output, CliError> {
        let Scenario {
            args,
            out,
            progress,
            stop,
        } = self;
        let device = &places.in_place;
        let config = scenario_config(
            args,
            devices.world,
            &device.link_model(),
            devices.host_copies,
        )?;
        let plan = args.plan();
        let faults = plan.to_string();
        let trace = match &args.output.trace {
            Some(path) => Some(
                TraceFile::create(path, config.world)
                    .map_err(|error| CliError::Usage(error.to_string()))?,
            ),
            None => None,
        };
        let ranks: Vec<DeviceId> = (0..config.world as u32).map(DeviceId::new).collect();
        let faulty = FaultyDevice::new(device.clone(), ranks, plan);
        let probe = Probe::new(config.world, true, trace.as_ref().map(TraceFile::sink));
        let description = format!("{} behind the fault injector", devices.description);
        let mut printer = Printer::new(out, stop);
        if args.output.json {
            printer.write(&json::head(&config, &faults, &description));
        } else {
            let title: String = devices
                .title
                .iter()
                .map(|line| format!("# {line}\n"))
                .collect();
            printer.write(&title);
            printer.write(&table::scenario_header(&config, &description, &faults));
        }
        let bar = Progress::new(progress, config.generations, "generations");
        let mut first = true;
        // Failed generations that no injected fault explains: none fired in that generation or
        // the one before (a value armed in one generation may fail in the next).
        let mut unexplained: Option<u64> = None;
        let mut unexplained_count = 0u64;
        let mut on_row = |row: &crate::scenario::GenerationRow| {
            if !row.errors.is_empty() {
                let explained = faulty.fired().iter().any(|fired| {
                    fired.generation <= row.generation && row.generation - fired.generation <= 1
                });
                if !explained {
                    unexplained_count += 1;
                    unexplained.get_or_insert(row.generation);
                }
            }
            let text = if args.output.json {
                json::row(row, first)
            } else {
                table::scenario_row(row, &config)
            };
            first = false;
            bar.around(|| printer.write(&text));
            bar.advance(1);
        };
        let ran = run_scenario(&faulty, &config, &probe, stop, &mut on_row);
        bar.finish();
        let (summary, failure) = match ran {
            Ok(summary) => (summary, Ok(())),
            Err(error) => (Summary::default(), Err(error.to_string())),
        };
        let verdict = failure.clone().map(|()| match (verdict(&summary), unexplained) {
            (Verdict::Passed, Some(generation)) => Verdict::Wrong(format!(
                "{unexplained_count} generations failed that no --fault explains (the first: generation {generation})"
            )),
            (verdict, _) => verdict,
        });
        let outcome = outcome_json(&verdict);
        if args.output.json {
            printer.write(&json::tail(&summary, &outcome));
        } else {
            printer.write(&table::scenario_footer(&summary));
        }
        if let Some(trace) = trace {
            trace.finish(outcome)?;
        }
        if let Some(error) = printer.take_error() {
            return Err(CliError::Output(error));
        }
        Ok((summary, verdict))
    }
}

/// How a scenario that ran turned out: wrong when any generation broke agreement or delivered
/// wrong values; a generation that failed on every rank alike is ruCCL working.
fn verdict(summary: &Summary) -> Verdict {
    if let Some(reason) = summary.stopped {
        return Verdict::Stopped(reason);
    }
    match (summary.disagreed, summary.wrong) {
        (0, 0) => Verdict::Passed,
        (0, wrong) => Verdict::Wrong(format!(
            "{wrong} wrong values in Ok outputs (elements that differ from the reference, plus all-reduce ranks whose bits differ from rank 0's)"
        )),
        (disagreed, _) => Verdict::Wrong(format!(
            "{disagreed} generations broke agreement (ranks got different outcomes)"
        )),
    }
}

/// Run the scenario and print it.
pub(crate) fn scenario(
    args: &RunArgs,
    out: &mut (dyn Write + Send),
    progress: bool,
    stop: &Stop,
) -> Result<Verdict, CliError> {
    // A scenario that cannot run is refused before any device is made (with the simulated
    // device's model; the backend's own is checked again once made).
    let world = args.world.map_or(4, |world| world as usize);
    scenario_config(
        args,
        world,
        &ruccl_sim::SimDevice::new().model(),
        memory::SIM_COPIES,
    )?;
    memory::check_threads(world).map_err(CliError::Resource)?;
    let command = Scenario {
        args,
        out: &mut *out,
        progress,
        stop,
    };
    let (_summary, verdict) = match run_on(&args.backend, args.world, command)? {
        Ran::Ran(ran) => ran,
        Ran::Skipped(reason) => {
            writeln!(out, "{reason}").map_err(CliError::Output)?;
            return Ok(Verdict::Passed);
        }
    };
    verdict.map_err(CliError::Backend)
}
