//! The backends: what device a command runs on. Each is a small plug-in that builds its device
//! for the command's world and describes it; the sweep, the scenario runner, their tables and
//! JSON are the same for all.
//!
//! | backend | device                                        | file      |
//! |---------|-----------------------------------------------|-----------|
//! | `sim`   | [`SimDevice`]: host memory, a traffic ledger  | here      |
//! | `cuda`  | `ruccl_cuda::CudaCollective` (feature `cuda`) | `cuda.rs` |

#[cfg(feature = "cuda")]
pub mod cuda;

use crate::cli::{BackendArgs, CliError};
use ruccl_sim::{HostTensors, Ledger, SimDevice};

/// Which devices the tools run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// Simulated devices: host memory as device memory, strict about the executor contract.
    Sim,
    /// GPUs through the CUDA executor (a build with the `cuda` feature).
    Cuda,
}

/// What a backend tells the command about the devices it built.
#[derive(Clone, Debug)]
pub struct Devices {
    /// The number of ranks: rank `r` runs on device `r`.
    pub world: usize,
    /// One line for the table's header: `... on {description}`.
    pub description: String,
    /// Lines printed (as `#` comments) before the first table: driver, map, topology.
    pub title: Vec<String>,
    /// The device's traffic ledger, if it keeps one (the table's `traffic` column).
    pub ledger: Option<Ledger>,
}

/// A command, generic over the device: run it on whichever device the backend builds.
pub trait OnDevice {
    /// What the command returns.
    type Output;

    /// Run on `device`, described by `devices`.
    fn run<D: HostTensors>(self, device: &D, devices: &Devices) -> Result<Self::Output, CliError>;
}

/// Whether a command ran, or the backend had no device to run it on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ran<T> {
    /// It ran.
    Ran(T),
    /// The backend has no device here; the line to print says why (the CUDA backend without a
    /// GPU: `SKIP: ...`, an exit status of 0, unless `--require-gpu`).
    Skipped(String),
}

/// Build the device `args` asks for, for `world` ranks (`None`: the backend's default), and run
/// `command` on it.
pub fn run_on<C: OnDevice>(
    args: &BackendArgs,
    world: Option<u32>,
    command: C,
) -> Result<Ran<C::Output>, CliError> {
    match args.backend {
        Backend::Sim => {
            refuse_cuda_options(args)?;
            let mut builder = SimDevice::builder();
            if let Some(threads) = args.device_threads {
                builder = builder.threads(threads as usize);
            }
            let device = builder.build();
            let devices = Devices {
                world: world.unwrap_or(4) as usize,
                description: format!(
                    "simulated devices (host memory, up to {} threads per step)",
                    device.threads()
                ),
                title: Vec::new(),
                ledger: Some(device.ledger().clone()),
            };
            command.run(&device, &devices).map(Ran::Ran)
        }
        Backend::Cuda => on_cuda(args, world, command),
    }
}

fn refuse_cuda_options(args: &BackendArgs) -> Result<(), CliError> {
    let given = [
        ("--map", args.map.is_some()),
        ("--ranks-per-gpu", args.ranks_per_gpu.is_some()),
        ("--require-gpu", args.require_gpu),
    ];
    match given.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(CliError::Usage(format!(
            "{flag} applies to --backend cuda only"
        ))),
        None => Ok(()),
    }
}

#[cfg(feature = "cuda")]
fn on_cuda<C: OnDevice>(
    args: &BackendArgs,
    world: Option<u32>,
    command: C,
) -> Result<Ran<C::Output>, CliError> {
    if args.device_threads.is_some() {
        return Err(CliError::Usage(
            "--device-threads applies to --backend sim only".to_owned(),
        ));
    }
    match cuda::build(args, world)? {
        Ran::Ran((device, devices)) => command.run(&device, &devices).map(Ran::Ran),
        Ran::Skipped(reason) => Ok(Ran::Skipped(reason)),
    }
}

#[cfg(not(feature = "cuda"))]
fn on_cuda<C: OnDevice>(_: &BackendArgs, _: Option<u32>, _: C) -> Result<Ran<C::Output>, CliError> {
    Err(CliError::Usage(
        "--backend cuda: this ruccl-perf was built without the `cuda` feature; build it with \
         `cargo run --release -p ruccl-perf --features cuda -- --backend cuda`"
            .to_owned(),
    ))
}
