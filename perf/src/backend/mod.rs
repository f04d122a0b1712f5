//! The backends: what device a command runs on. Each is a small plug-in that builds its device
//! for the command's world — twice, working out of place and in place — and describes it; the
//! sweep, the scenario runner, their tables and JSON are the same for all.
//!
//! | backend | device                                        | file      |
//! |---------|-----------------------------------------------|-----------|
//! | `sim`   | [`SimDevice`]: host memory, a traffic ledger  | here      |
//! | `cuda`  | `ruccl_cuda::CudaCollective` (feature `cuda`) | `cuda.rs` |

#[cfg(feature = "cuda")]
pub mod cuda;

use crate::cli::{BackendArgs, CliError};
use crate::memory::SIM_ROW_COPIES;
use crate::sweep::Places;
use ruccl_core::{LinkModel, Links};
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
    /// One line for the table's title: `... on {description}`.
    pub description: String,
    /// Lines printed (as `#` comments) in the header: driver, map, topology.
    pub title: Vec<String>,
    /// nccl-tests' `# Using devices` block: one line per rank.
    pub using_devices: Vec<String>,
    /// The out-of-place device's traffic ledger, if it keeps one (the rows' `traffic_ratio`).
    pub ledger: Option<Ledger>,
    /// Host copies of a rank's larger buffer a measurement may hold at once, for the memory
    /// estimate (see [`crate::memory`]).
    pub host_copies: u64,
    /// The threads the host-memory bound is measured with before each row (the table's
    /// `bound`, [`crate::membound`]): the simulated device's; `None` where no host-memory
    /// bound applies (GPUs).
    pub bound_threads: Option<usize>,
    /// The NCCL version code the measurements run with (nccl-tests' `nccl-library=`), 0 when
    /// NCCL is not involved.
    pub nccl_version: u32,
}

/// A command, generic over the device: run it on whichever device the backend builds.
pub trait OnDevice {
    /// What the command returns.
    type Output;

    /// Run on `places` (the device out of place and in place), described by `devices`.
    fn run<D: HostTensors>(
        self,
        places: &Places<D>,
        devices: &Devices,
    ) -> Result<Self::Output, CliError>;
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

/// This machine's name, for the `# Using devices` block.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// One `# Using devices` line, nccl-tests' shape.
pub fn using_device(rank: usize, device: usize, bus: u32, name: &str) -> String {
    format!(
        "Rank {rank:2} Group  0 Pid {:6} on {:>10} device {device:2} [0000:{bus:02x}:00] {name}",
        std::process::id(),
        hostname()
    )
}

/// The simulated device's link model `args` asks for, if it asks for one.
pub fn sim_link_model(args: &BackendArgs) -> Result<Option<LinkModel>, CliError> {
    if args.alpha_us.is_none() && args.beta_gbps.is_none() && args.gamma_us.is_none() {
        return Ok(None);
    }
    let default = SimDevice::new().model();
    let alpha = args.alpha_us.map_or(default.alpha(), |us| us * 1e-6);
    let gamma = args
        .gamma_us
        .map_or(default.transfer_cost(), |us| us * 1e-6);
    let beta = args.beta_gbps.map_or(default.beta(), |gbps| gbps * 1e9);
    LinkModel::new(alpha, beta, Links::Shared)
        .and_then(|model| model.with_transfer_cost(gamma))
        .map(Some)
        .map_err(|error| CliError::Usage(format!("--alpha-us/--gamma-us/--beta-gbps: {error}")))
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
            let model = sim_link_model(args)?;
            let build = |in_place: bool| {
                // No census: the tool never reads it, and its shared registry would be one lock
                // operation per value made or dropped on the measured path. Only the
                // out-of-place device's ledger is read (the rows' `traffic_ratio`), and the sweep
                // pauses it while it times (`Instruments::ledger`).
                let mut builder = SimDevice::builder()
                    .in_place(in_place)
                    .record_traffic(!in_place)
                    .ledger_retention(Some(1))
                    .census(false);
                if let Some(threads) = args.device_threads {
                    builder = builder.threads(threads as usize);
                }
                if let Some(model) = model {
                    builder = builder.link_model(model);
                }
                builder.build()
            };
            let places = Places {
                out_of_place: build(false),
                in_place: build(true),
            };
            let world = world.unwrap_or(4) as usize;
            let name = "ruCCL simulated device (host memory)";
            let devices = Devices {
                world,
                description: format!(
                    "simulated devices (host memory, up to {} threads per step)",
                    places.in_place.threads()
                ),
                title: Vec::new(),
                using_devices: (0..world)
                    .map(|rank| using_device(rank, rank, 0, name))
                    .collect(),
                ledger: Some(places.out_of_place.ledger().clone()),
                host_copies: SIM_ROW_COPIES,
                bound_threads: Some(places.in_place.threads()),
                nccl_version: 0,
            };
            command.run(&places, &devices).map(Ran::Ran)
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
    let sim_only = [
        ("--device-threads", args.device_threads.is_some()),
        ("--alpha-us", args.alpha_us.is_some()),
        ("--gamma-us", args.gamma_us.is_some()),
        ("--beta-gbps", args.beta_gbps.is_some()),
    ];
    if let Some((flag, _)) = sim_only.iter().find(|(_, given)| *given) {
        return Err(CliError::Usage(format!(
            "{flag} applies to --backend sim only"
        )));
    }
    match cuda::build(args, world)? {
        Ran::Ran((places, devices)) => command.run(&places, &devices).map(Ran::Ran),
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
