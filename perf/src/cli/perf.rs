//! `all-reduce-perf`: one sweep per element type and operation asked for, on the backend's
//! device, printed as the nccl-tests table (rows as they are measured) or as JSON, with an
//! optional trace file; then, with `--nccl`, the same sweeps through NCCL.

use super::args::PerfArgs;
use super::progress::Progress;
use super::{CliError, Verdict, seconds, write_trace};
use crate::backend::{Backend, Devices, OnDevice, Ran, run_on};
use crate::sweep::{Instruments, PerfRow, SweepConfig, SweepError, SweepEvent, json, sweep, table};
use ruccl_core::sync::Mutex;
use ruccl_core::{DeviceId, ElementType, ReduceOperation};
use ruccl_sim::{HostTensors, LinkModel, Tracer, TracingDevice};
use serde_json::Value;
use std::io::Write;

/// The sweep of one element type and operation that `args` asks for over `world` ranks. Every
/// size holds at least one element.
fn sweep_config(
    args: &PerfArgs,
    world: usize,
    element_type: ElementType,
    operation: ReduceOperation,
) -> Result<SweepConfig, CliError> {
    let link_model = LinkModel::new(args.model.alpha_us * 1e-6, args.model.beta_gbps * 1e9)
        .map_err(|error| CliError::Usage(format!("--alpha-us/--beta-gbps: {error}")))?;
    let config = SweepConfig {
        min_bytes: args.min_bytes.0.max(element_type.size()),
        max_bytes: args.max_bytes.0,
        step_factor: args.step_factor as usize,
        world,
        element_type,
        operation,
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

/// Every sweep `args` asks for over `world` ranks, element type by element type, operation by
/// operation — or the usage error that makes none.
pub fn sweep_configs(args: &PerfArgs, world: usize) -> Result<Vec<SweepConfig>, CliError> {
    let mut configs = Vec::new();
    for &element_type in &args.element_types.0 {
        for &operation in &args.operations.0 {
            configs.push(sweep_config(args, world, element_type, operation)?);
        }
    }
    Ok(configs)
}

/// Where the sweep's callback writes: the output and the first write error.
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

/// The rows of every sweep, the device they ran on, and the first sweep's failure.
struct Measured {
    sweeps: Vec<(SweepConfig, Vec<PerfRow>)>,
    description: String,
    failure: Option<SweepError>,
}

/// The sweeps of one command, run on whichever device the backend builds.
struct Sweeps<'a> {
    args: &'a PerfArgs,
    out: &'a mut (dyn Write + Send),
    progress: bool,
}

impl OnDevice for Sweeps<'_> {
    type Output = Measured;

    fn run<D: HostTensors>(self, device: &D, devices: &Devices) -> Result<Measured, CliError> {
        let args = self.args;
        let configs = sweep_configs(args, devices.world)?;
        let json_only = args.output.json;
        let tracer = args.output.trace.as_ref().map(|_| Tracer::new());
        let instruments = Instruments {
            ledger: devices.ledger.clone(),
            tracer: tracer.clone(),
        };
        let printer = Mutex::new(Printer {
            out: self.out,
            progress: Progress::new(self.progress),
            failed: None,
        });
        if !json_only {
            let title: String = devices
                .title
                .iter()
                .map(|line| format!("# {line}\n"))
                .collect();
            printer.lock().write(&title);
        }
        let mut measured = Measured {
            sweeps: Vec::new(),
            description: devices.description.clone(),
            failure: None,
        };
        for config in configs {
            if !json_only {
                printer
                    .lock()
                    .write(&table::header(&config, &devices.description));
            }
            let rows = Mutex::new(Vec::new());
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
                        rows.lock().push(row.clone());
                    }
                }
            };
            let outcome = match &tracer {
                Some(tracer) => {
                    let ranks = (0..config.world as u32).map(DeviceId::new).collect();
                    let traced = TracingDevice::new(device.clone(), ranks, tracer.clone());
                    sweep(&traced, &config, &instruments, &on_event)
                }
                None => sweep(device, &config, &instruments, &on_event),
            };
            let rows = rows.into_inner();
            let mut shown = printer.lock();
            shown.progress.clear();
            if !json_only {
                shown.write(&table::footer(&rows));
            }
            drop(shown);
            if let Err(error) = outcome {
                measured.failure.get_or_insert(error);
            }
            measured.sweeps.push((config, rows));
        }
        let mut printer = printer.into_inner();
        if let Some(error) = printer.failed.take() {
            return Err(CliError::Output(error));
        }
        if let (Some(path), Some(tracer)) = (&args.output.trace, &tracer) {
            write_trace(path, tracer, devices.world)?;
        }
        Ok(measured)
    }
}

/// One document per sweep (the NCCL baseline's included); an array of them when there are
/// several.
fn one_document(mut documents: Vec<Value>) -> Value {
    if documents.len() == 1 {
        documents.remove(0)
    } else {
        Value::Array(documents)
    }
}

/// Run the sweeps and print them.
pub(crate) fn all_reduce_perf(
    args: &PerfArgs,
    out: &mut (dyn Write + Send),
    progress: bool,
) -> Result<Verdict, CliError> {
    // Flags that make no run are refused before any device is made.
    sweep_configs(args, 1)?;
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
    let sweeps = Sweeps {
        args,
        out: &mut *out,
        progress,
    };
    let measured = match run_on(&args.backend, args.world, sweeps)? {
        Ran::Ran(measured) => measured,
        Ran::Skipped(reason) => {
            writeln!(out, "{reason}").map_err(CliError::Output)?;
            return Ok(Verdict::Passed);
        }
    };
    if let Some(failure) = measured.failure {
        return Err(CliError::Sweep(failure));
    }
    let mut wrong = wrong_elements(measured.sweeps.iter().flat_map(|(_, rows)| rows));
    let mut documents: Vec<Value> = measured
        .sweeps
        .iter()
        .map(|(config, rows)| json::sweep_json(config, &measured.description, rows))
        .collect();
    if args.baseline.nccl {
        let (counted, baseline_documents) = baseline(args, out)?;
        wrong += counted;
        documents.extend(baseline_documents);
    }
    if args.output.json {
        let document = one_document(documents);
        writeln!(out, "{document:#}").map_err(CliError::Output)?;
    }
    Ok(if wrong == 0 {
        Verdict::Passed
    } else {
        Verdict::Failed(format!("{wrong} wrong elements"))
    })
}

/// Wrong elements over `rows` (unchecked rows count none).
fn wrong_elements<'a>(rows: impl Iterator<Item = &'a PerfRow>) -> u64 {
    rows.filter_map(|row| row.wrong).sum()
}

/// The NCCL baseline: the same sweeps through NCCL, one rank per GPU, as tables (or, with
/// `--json`, documents to print with the others). Returns the wrong elements that count (NCCL's
/// `avg` may round differently from the reference: its `#wrong` is shown, not counted).
#[cfg(feature = "nccl")]
fn baseline(args: &PerfArgs, out: &mut (dyn Write + Send)) -> Result<(u64, Vec<Value>), CliError> {
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
            if !args.output.json {
                print(out, &format!("# NCCL baseline skipped: {error}\n"))?;
            }
            return Ok((0, Vec::new()));
        }
    };
    let version = NcclBaseline::version().map_or_else(|e| e.to_string(), |v| v.to_string());
    let description = format!("NCCL {version} ({gpus} ranks, one per GPU, in place, one thread)");
    let mut wrong = 0;
    let mut documents = Vec::new();
    for config in sweep_configs(args, gpus)? {
        if !args.output.json {
            print(out, &table::header(&config, &description))?;
        }
        let mut rows = Vec::new();
        for bytes in config.sizes() {
            let row = baseline
                .measure(&config, bytes)
                .map_err(|error| CliError::Baseline(format!("{bytes} B: {error}")))?;
            if !args.output.json {
                print(out, &table::row(&row))?;
            }
            rows.push(row);
        }
        if !args.output.json {
            print(out, &table::footer(&rows))?;
        }
        if config.operation != ReduceOperation::Mean {
            wrong += wrong_elements(rows.iter());
        }
        documents.push(json::sweep_json(&config, &description, &rows));
    }
    Ok((wrong, documents))
}

#[cfg(not(feature = "nccl"))]
fn baseline(_: &PerfArgs, _: &mut (dyn Write + Send)) -> Result<(u64, Vec<Value>), CliError> {
    Ok((0, Vec::new()))
}
