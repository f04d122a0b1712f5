//! `all-reduce-perf`: the sweep on simulated devices, printed as the nccl-tests table (rows as
//! they are measured) or as one JSON document, with an optional trace file.

use super::args::PerfArgs;
use super::progress::Progress;
use super::{CliError, Verdict, seconds, write_trace};
use crate::SimDevice;
use crate::cost::LinkModel;
use crate::perf::{Instruments, PerfRow, SweepConfig, SweepEvent, json, sweep, table};
use crate::trace::{Tracer, TracingDevice};
use ruccl_core::DeviceId;
use ruccl_core::sync::Mutex;
use std::io::Write;

/// The sweep `args` asks for, or why there is none.
pub(crate) fn sweep_config(args: &PerfArgs) -> Result<SweepConfig, CliError> {
    let link_model = LinkModel::new(args.model.alpha_us * 1e-6, args.model.beta_gbps * 1e9)
        .map_err(|error| CliError::Usage(format!("--alpha-us/--beta-gbps: {error}")))?;
    let config = SweepConfig {
        min_bytes: args.min_bytes.0,
        max_bytes: args.max_bytes.0,
        step_factor: args.step_factor as usize,
        world: args.world as usize,
        element_type: args.element_type,
        operation: args.operation,
        iterations: args.iterations as usize,
        warmup: args.warmup as usize,
        check: args.check == 1,
        timeout: seconds("--timeout", args.timeout_s)?,
        link_model,
    };
    config
        .validate()
        .map_err(|error| CliError::Usage(error.to_string()))?;
    Ok(config)
}

/// Where the callback of the sweep writes: the output and the first write error.
struct Printer<'a> {
    out: &'a mut (dyn Write + Send),
    progress: Progress,
    failed: Option<std::io::Error>,
}

impl Printer<'_> {
    fn write(&mut self, text: &str) {
        if self.failed.is_none() {
            if let Err(error) = self
                .out
                .write_all(text.as_bytes())
                .and_then(|()| self.out.flush())
            {
                self.failed = Some(error);
            }
        }
    }
}

/// Run the sweep and print it.
pub(crate) fn all_reduce_perf(
    args: &PerfArgs,
    out: &mut (dyn Write + Send),
    progress: bool,
) -> Result<Verdict, CliError> {
    let config = sweep_config(args)?;
    let mut builder = SimDevice::builder();
    if let Some(threads) = args.device_threads {
        builder = builder.threads(threads as usize);
    }
    let device = builder.build();
    let description = format!(
        "simulated devices (host memory, up to {} threads per step)",
        device.threads()
    );
    let tracer = args.output.trace.as_ref().map(|_| Tracer::new());
    let instruments = Instruments {
        ledger: Some(device.ledger().clone()),
        tracer: tracer.clone(),
    };
    let json_only = args.output.json;
    let printer = Mutex::new(Printer {
        out,
        progress: Progress::new(progress),
        failed: None,
    });
    if !json_only {
        printer.lock().write(&table::header(&config, &description));
    }
    let on_event = |event: SweepEvent<'_>| {
        let mut printer = printer.lock();
        match event {
            SweepEvent::Started {
                index,
                total,
                bytes,
            } => printer.progress.show(index, total, bytes),
            SweepEvent::Measured(row) => {
                printer.progress.clear();
                if !json_only {
                    printer.write(&table::row(row));
                }
            }
        }
    };
    let outcome = match &tracer {
        Some(tracer) => {
            let devices = (0..config.world as u32).map(DeviceId::new).collect();
            let traced = TracingDevice::new(device, devices, tracer.clone());
            sweep(&traced, &config, &instruments, &on_event)
        }
        None => sweep(&device, &config, &instruments, &on_event),
    };
    let mut printer = printer.into_inner();
    printer.progress.clear();
    let rows = outcome?;
    if json_only {
        let document = json::sweep_json(&config, &description, &rows);
        printer.write(&format!("{document:#}\n"));
    } else {
        printer.write(&table::footer(&rows));
    }
    if let Some(error) = printer.failed.take() {
        return Err(CliError::Output(error));
    }
    if let (Some(path), Some(tracer)) = (&args.output.trace, &tracer) {
        write_trace(path, &tracer.spans(), config.world)?;
    }
    Ok(verdict(&rows))
}

fn verdict(rows: &[PerfRow]) -> Verdict {
    let wrong: u64 = rows.iter().filter_map(|row| row.wrong).sum();
    if wrong == 0 {
        Verdict::Passed
    } else {
        Verdict::Failed(format!("{wrong} wrong elements"))
    }
}
