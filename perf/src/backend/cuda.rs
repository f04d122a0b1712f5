//! The CUDA backend (feature `cuda`): the executor of `ruccl-cuda` on the GPUs the driver shows,
//! mapped to ranks by `--map`, `--ranks-per-gpu` or `-g`. Without a CUDA driver or GPU it prints
//! a `SKIP:` line and runs nothing (exit 0), unless `--require-gpu` is given.

use super::{Devices, Ran, using_device};
use crate::cli::{BackendArgs, CliError};
use crate::sweep::Places;
use ruccl_core::DeviceId;
use ruccl_cuda::{CudaCollective, CudaConfig, DeviceMap, probe};

/// Host copies of a rank's larger buffer a measurement holds at once on the CUDA backend: the
/// pattern it uploads from and the check's download.
const CUDA_HOST_COPIES: u64 = 2;

/// The map for `gpus` GPUs when none is given: `world` ranks round-robin over them (`-g`), or
/// `ranks_per_gpu` on each, or by default 4 logical ranks on a lone GPU and one rank per GPU on
/// several.
pub fn default_map(
    gpus: usize,
    world: Option<usize>,
    ranks_per_gpu: Option<usize>,
) -> Result<DeviceMap, String> {
    if let Some(world) = world {
        let ordinals: Vec<usize> = (0..gpus).collect();
        return DeviceMap::round_robin(world, &ordinals).map_err(|error| error.to_string());
    }
    let per_gpu = ranks_per_gpu
        .unwrap_or(if gpus == 1 { 4 } else { 1 })
        .max(1);
    let pairs = (0..gpus).flat_map(|gpu| {
        (0..per_gpu).map(move |slot| (DeviceId::new((gpu * per_gpu + slot) as u32), gpu))
    });
    DeviceMap::new(pairs).map_err(|error| error.to_string())
}

/// `map` with its devices renumbered `0..W` in increasing order, each on the same GPU: the tools
/// address rank `r` as device `r`.
pub fn ranked(map: &DeviceMap) -> Result<DeviceMap, String> {
    DeviceMap::new(
        map.iter()
            .enumerate()
            .map(|(rank, (_, gpu))| (DeviceId::new(rank as u32), gpu)),
    )
    .map_err(|error| error.to_string())
}

/// Bytes per copy of the device-to-device copy-bandwidth baseline.
const BASELINE_BYTES: usize = 256 << 20;
/// Timed copies of the baseline.
const BASELINE_COPIES: u32 = 20;

/// The executor `args` asks for, twice — out of place (every generation copies its inputs into
/// working buffers of their own) and in place (the executor works in the inputs' allocations) —
/// or why there is none here (`SKIP: ...`: no GPU). The title carries each GPU's own
/// device-to-device copy bandwidth, measured now: the baseline to read `busbw` against.
pub(super) fn build(
    args: &BackendArgs,
    world: Option<u32>,
) -> Result<Ran<(Places<CudaCollective>, Devices)>, CliError> {
    let map = match &args.map {
        Some(text) => {
            let map: DeviceMap = text
                .parse()
                .map_err(|error| CliError::Usage(format!("--map {text}: {error}")))?;
            Some(ranked(&map).map_err(CliError::Usage)?)
        }
        None => None,
    };
    let driver = match probe() {
        Ok(driver) => driver,
        Err(error) if !args.require_gpu && error.is_no_gpu() => {
            return Ok(Ran::Skipped(format!(
                "SKIP: no CUDA driver or GPU: {error}"
            )));
        }
        Err(error) => return Err(CliError::Backend(error.to_string())),
    };
    let map = match map {
        Some(map) => map,
        None => default_map(
            driver.device_count,
            world.map(|world| world as usize),
            args.ranks_per_gpu.map(|ranks| ranks as usize),
        )
        .map_err(CliError::Usage)?,
    };
    let world = map.len();
    let executor = |in_place: bool| {
        CudaCollective::with_config(map.clone(), CudaConfig::from_env().with_in_place(in_place))
            .map_err(|error| CliError::Backend(error.to_string()))
    };
    let device = executor(true)?;
    let out_of_place = executor(false)?;
    let mut title = vec![
        format!(
            "ruccl-cuda: {world} ranks, map {map}; driver CUDA {} ({})",
            driver.version_string(),
            driver.library
        ),
        "time = wall clock per collective (device work included); traffic: - (no ledger on a \
         GPU); model = the link model's time for the plan"
            .to_owned(),
    ];
    title.extend(device.topology().to_string().lines().map(str::to_owned));
    for gpu in map.ordinals() {
        title.push(
            match device.copy_bandwidth(gpu, BASELINE_BYTES, BASELINE_COPIES) {
                Ok(copy) => format!(
                    "device-to-device copy on GPU {gpu} (the baseline for busbw): {:.1} GB/s ({} B x {})",
                    copy.gb_per_second(),
                    copy.bytes,
                    copy.iterations
                ),
                Err(error) => format!("device-to-device copy on GPU {gpu}: not measured: {error}"),
            },
        );
    }
    let using_devices = map
        .iter()
        .enumerate()
        .map(|(rank, (_, gpu))| using_device(rank, gpu, 0, "CUDA GPU (ruccl-cuda)"))
        .collect();
    let devices = Devices {
        world,
        description: format!("ruccl-cuda ({world} ranks, map {map})"),
        title,
        using_devices,
        ledger: None,
        host_copies: CUDA_HOST_COPIES,
        bound_threads: None,
        nccl_version: 0,
    };
    let places = Places {
        out_of_place,
        in_place: device,
    };
    Ok(Ran::Ran((places, devices)))
}

#[cfg(test)]
mod tests {
    use super::{default_map, ranked};
    use ruccl_cuda::DeviceMap;

    #[test]
    fn the_default_map_puts_four_logical_ranks_on_a_lone_gpu() {
        let map = default_map(1, None, None).unwrap();
        assert_eq!(map.to_string(), "0:0,1:0,2:0,3:0");
        let map = default_map(2, None, None).unwrap();
        assert_eq!(map.to_string(), "0:0,1:1");
        let map = default_map(2, None, Some(2)).unwrap();
        assert_eq!(map.to_string(), "0:0,1:0,2:1,3:1");
    }

    #[test]
    fn a_world_goes_round_robin_over_the_gpus() {
        let map = default_map(2, Some(3), None).unwrap();
        assert_eq!(map.len(), 3);
        assert_eq!(map.ordinals().len(), 2);
    }

    #[test]
    fn an_explicit_map_is_renumbered_in_rank_order() {
        let map: DeviceMap = "7:1,3:0,5:0".parse().unwrap();
        assert_eq!(ranked(&map).unwrap().to_string(), "0:0,1:0,2:1");
    }
}
