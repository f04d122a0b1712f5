//! `run`: a scenario on simulated devices under the command line's fault plan.

use super::args::RunArgs;
use super::{CliError, Verdict, seconds, write_trace};
use crate::SimDevice;
use crate::fault::FaultyDevice;
use crate::perf::{ScenarioConfig, json, run_scenario, scenario_table};
use crate::trace::Tracer;
use ruccl_core::DeviceId;
use std::io::Write;

/// The scenario `args` asks for.
pub(crate) fn scenario_config(args: &RunArgs) -> Result<ScenarioConfig, CliError> {
    Ok(ScenarioConfig {
        world: args.world as usize,
        length: args.length.0,
        element_type: args.element_type,
        operation: args.operation,
        generations: args.generations,
        timeout: seconds("--timeout", args.timeout_s)?,
    })
}

/// Run the scenario and print it.
pub(crate) fn scenario(args: &RunArgs, out: &mut (dyn Write + Send)) -> Result<Verdict, CliError> {
    let config = scenario_config(args)?;
    let plan = args.plan();
    let faults = plan.to_string();
    let devices: Vec<DeviceId> = (0..config.world as u32).map(DeviceId::new).collect();
    let device = FaultyDevice::new(SimDevice::new(), devices, plan);
    let tracer = Tracer::new();
    let rows = run_scenario(&device, &config, &tracer)?;
    let description = "simulated devices behind the fault injector";
    let text = if args.output.json {
        format!("{:#}\n", json::scenario_json(&config, &faults, &rows))
    } else {
        let mut text = scenario_table::scenario_header(&config, description, &faults);
        for row in &rows {
            text.push_str(&scenario_table::scenario_row(row, config.world));
        }
        text.push_str(&scenario_table::scenario_footer(&rows));
        text
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(CliError::Output)?;
    if let Some(path) = &args.output.trace {
        write_trace(path, &tracer.spans(), config.world)?;
    }
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
