//! `run`: a scenario on the backend's device behind the fault decorator, under the command
//! line's fault plan.

use super::args::RunArgs;
use super::{CliError, Verdict, seconds, write_trace};
use crate::backend::{Devices, OnDevice, Ran, run_on};
use crate::scenario::{GenerationRow, ScenarioConfig, json, run_scenario, table};
use ruccl_core::DeviceId;
use ruccl_sim::{FaultyDevice, HostTensors, Tracer};
use std::io::Write;

/// The scenario `args` asks for over `world` ranks.
fn scenario_config(args: &RunArgs, world: usize) -> Result<ScenarioConfig, CliError> {
    Ok(ScenarioConfig {
        world,
        length: args.length.0,
        element_type: args.element_type,
        operation: args.operation,
        generations: args.generations,
        timeout: seconds("--timeout", args.timeout_s)?,
    })
}

/// The scenario of one command, run on whichever device the backend builds.
struct Scenario<'a> {
    args: &'a RunArgs,
    out: &'a mut (dyn Write + Send),
}

impl OnDevice for Scenario<'_> {
    type Output = Vec<GenerationRow>;

    fn run<D: HostTensors>(
        self,
        device: &D,
        devices: &Devices,
    ) -> Result<Vec<GenerationRow>, CliError> {
        let args = self.args;
        let config = scenario_config(args, devices.world)?;
        let plan = args.plan();
        let faults = plan.to_string();
        let ranks: Vec<DeviceId> = (0..config.world as u32).map(DeviceId::new).collect();
        let faulty = FaultyDevice::new(device.clone(), ranks, plan);
        let tracer = Tracer::new();
        let rows = run_scenario(&faulty, &config, &tracer)?;
        let description = format!("{} behind the fault injector", devices.description);
        let text = if args.output.json {
            format!("{:#}\n", json::scenario_json(&config, &faults, &rows))
        } else {
            let mut text: String = devices
                .title
                .iter()
                .map(|line| format!("# {line}\n"))
                .collect();
            text.push_str(&table::scenario_header(&config, &description, &faults));
            for row in &rows {
                text.push_str(&table::scenario_row(row, config.world));
            }
            text.push_str(&table::scenario_footer(&rows));
            text
        };
        self.out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
            .map_err(CliError::Output)?;
        if let Some(path) = &args.output.trace {
            write_trace(path, &tracer, config.world)?;
        }
        Ok(rows)
    }
}

/// Run the scenario and print it.
pub(crate) fn scenario(args: &RunArgs, out: &mut (dyn Write + Send)) -> Result<Verdict, CliError> {
    let command = Scenario {
        args,
        out: &mut *out,
    };
    let rows = match run_on(&args.backend, args.world, command)? {
        Ran::Ran(rows) => rows,
        Ran::Skipped(reason) => {
            writeln!(out, "{reason}").map_err(CliError::Output)?;
            return Ok(Verdict::Passed);
        }
    };
    let disagreed = rows.iter().filter(|row| !row.agreed()).count();
    let wrong: u64 = rows.iter().map(|row| row.wrong).sum();
    Ok(match (disagreed, wrong) {
        (0, 0) => Verdict::Passed,
        (0, wrong) => Verdict::Failed(format!("{wrong} wrong elements in Ok outputs")),
        (disagreed, _) => Verdict::Failed(format!(
            "{disagreed} generations broke agreement (ranks got different outcomes)"
        )),
    })
}
