//! The driver probe: find out, without panicking, whether a usable CUDA driver is here.
//!
//! cudarc loads `libcuda` lazily on the first driver call and **panics** if it cannot (and panics
//! again, per entry point, if a symbol is missing). So before this crate makes any cudarc driver
//! call, [`probe`] opens the same library cudarc would open — the same candidate names, in the
//! same order, from cudarc's own `get_lib_name_candidates` — checks that every entry point this
//! crate reaches through cudarc is exported, and then, through its own handle, calls `cuInit`,
//! `cuDriverGetVersion` and `cuDeviceGetCount`. Every failure is a typed [`CudaError`].
//!
//! Once `cuInit` has run, the library handle is kept open for the rest of the process (unloading
//! an initialised driver is not supported); cudarc's own handle to the same library then finds it
//! already loaded.

use crate::error::{CudaError, Result};
use libloading::Library;
use std::ffi::{c_int, c_uint};
use std::sync::OnceLock;

/// The CUDA version the bindings are built for (`cuda-12000`), in `cuDriverGetVersion` form: the
/// lowest API this crate needs, so one binary runs on every CUDA 12.x and 13.x driver (525 series
/// or newer). The embedded PTX (ISA 8.0, from NVRTC 12.0) needs the same.
pub const REQUIRED_DRIVER_VERSION: i32 = 12000;

/// The driver entry points this crate reaches, directly or through cudarc's safe layer, with the
/// `cuda-12000` bindings (`cuCtxCreate_v2` and `cuEventElapsedTime`, the 12.x names, which CUDA 13
/// drivers still export for binaries built against 12.x). A driver lacking any of them would make
/// cudarc panic mid-call.
pub const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDeviceGetName",
    "cuDeviceCanAccessPeer",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxCreate_v2",
    "cuCtxDestroy_v2",
    "cuCtxGetCurrent",
    "cuCtxPopCurrent_v2",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuCtxEnablePeerAccess",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventDestroy_v2",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemcpyPeerAsync",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
    "cuGetErrorName",
    "cuGetErrorString",
];

/// What the probe found: a loadable driver, new enough, with at least one GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverInfo {
    /// The library name that loaded (e.g. `libcuda.so.1`).
    pub library: String,
    /// `cuDriverGetVersion`'s answer, e.g. `12080` for CUDA 12.8.
    pub version: i32,
    /// Number of CUDA devices (GPUs) visible to this process.
    pub device_count: usize,
}

impl DriverInfo {
    /// The driver's CUDA version as `major.minor`.
    pub fn version_string(&self) -> String {
        format!("{}.{}", self.version / 1000, self.version % 1000 / 10)
    }
}

/// The library names cudarc tries for the driver, in its order (repeats removed).
pub fn driver_candidates() -> Vec<String> {
    let mut candidates: Vec<String> = Vec::new();
    for name in ["cuda", "nvcuda"]
        .iter()
        .flat_map(|name| cudarc::get_lib_name_candidates(name))
    {
        if !candidates.contains(&name) {
            candidates.push(name);
        }
    }
    candidates
}

/// Probe for the CUDA driver cudarc would load. The result is computed once per process (the
/// driver cannot appear or vanish while it runs) and cloned to every caller.
pub fn probe() -> Result<DriverInfo> {
    static PROBED: OnceLock<Result<DriverInfo>> = OnceLock::new();
    PROBED
        .get_or_init(|| probe_candidates(&driver_candidates()))
        .clone()
}

type CuInit = unsafe extern "C" fn(c_uint) -> c_int;
type CuDriverGetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGetCount = unsafe extern "C" fn(*mut c_int) -> c_int;

/// Probe the first of `candidates` that loads. Exposed to the crate so tests can point it at
/// libraries that are certainly absent, or present but not a CUDA driver.
pub(crate) fn probe_candidates(candidates: &[String]) -> Result<DriverInfo> {
    let Some((library, handle)) = candidates.iter().find_map(|name| {
        // SAFETY: opening a shared library runs its initialisers. The names are the CUDA driver's
        // (exactly the ones cudarc would open next) or, in tests, system libraries whose
        // initialisers are already run in every process (libc). No symbol is used yet.
        unsafe { Library::new(name) }
            .ok()
            .map(|handle| (name.clone(), handle))
    }) else {
        return Err(CudaError::DriverNotFound {
            searched: candidates.to_vec(),
        });
    };
    for symbol in REQUIRED_SYMBOLS {
        // SAFETY: the symbol is only looked up, never called or dereferenced, so its type is
        // irrelevant; `*const ()` is a thin pointer like any exported function address.
        if unsafe { handle.get::<*const ()>(symbol.as_bytes()) }.is_err() {
            return Err(CudaError::MissingDriverSymbol {
                library,
                symbol: (*symbol).to_owned(),
            });
        }
    }
    // From here on the driver may be initialised: keep it loaded for the life of the process.
    let handle: &'static Library = Box::leak(Box::new(handle));
    query_driver(library, handle)
}

fn query_driver(library: String, handle: &'static Library) -> Result<DriverInfo> {
    let missing = |symbol: &str| CudaError::MissingDriverSymbol {
        library: library.clone(),
        symbol: symbol.to_owned(),
    };
    // SAFETY: `handle` is the CUDA driver library (it exports every REQUIRED_SYMBOLS entry), and
    // these are the driver API's documented C signatures: `CUresult cuInit(unsigned int)`,
    // `CUresult cuDriverGetVersion(int*)`, `CUresult cuDeviceGetCount(int*)`, with `CUresult` a
    // C enum (int-sized). The library is leaked, so the function pointers never dangle.
    let (init, version, count) = unsafe {
        (
            handle
                .get::<CuInit>(b"cuInit")
                .map_err(|_| missing("cuInit"))?,
            handle
                .get::<CuDriverGetVersion>(b"cuDriverGetVersion")
                .map_err(|_| missing("cuDriverGetVersion"))?,
            handle
                .get::<CuDeviceGetCount>(b"cuDeviceGetCount")
                .map_err(|_| missing("cuDeviceGetCount"))?,
        )
    };
    // SAFETY: `cuInit(0)` takes no pointers; the flags must be 0. It is idempotent.
    let code = unsafe { init(0) };
    if code != 0 {
        return Err(CudaError::NoDevice { code });
    }
    let mut version_value: c_int = 0;
    // SAFETY: the out-pointer is a live, aligned local `c_int` the driver writes once.
    let code = unsafe { version(&mut version_value) };
    if code != 0 {
        return Err(CudaError::NoDevice { code });
    }
    if version_value < REQUIRED_DRIVER_VERSION {
        return Err(CudaError::DriverTooOld {
            found: version_value,
            required: REQUIRED_DRIVER_VERSION,
        });
    }
    let mut devices: c_int = 0;
    // SAFETY: as above, a live local out-parameter; `cuInit` has succeeded.
    let code = unsafe { count(&mut devices) };
    if code != 0 || devices <= 0 {
        return Err(CudaError::NoDevice { code });
    }
    Ok(DriverInfo {
        library,
        version: version_value,
        device_count: usize::try_from(devices).unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_driver_not_found_naming_every_candidate() {
        let candidates = vec![
            "libruccl-no-such-driver.so".to_owned(),
            "libruccl-no-such-driver.so.1".to_owned(),
        ];
        match probe_candidates(&candidates) {
            Err(CudaError::DriverNotFound { searched }) => assert_eq!(searched, candidates),
            other => panic!("expected DriverNotFound, got {other:?}"),
        }
    }

    #[test]
    fn a_library_that_is_not_the_driver_is_a_missing_symbol() {
        // libc loads everywhere this crate runs and exports no CUDA entry point.
        let candidates = vec![
            "libruccl-no-such-driver.so".to_owned(),
            "libc.so.6".to_owned(),
        ];
        match probe_candidates(&candidates) {
            Err(CudaError::MissingDriverSymbol { library, symbol }) => {
                assert_eq!(library, "libc.so.6");
                assert_eq!(symbol, REQUIRED_SYMBOLS[0]);
            }
            other => panic!("expected MissingDriverSymbol, got {other:?}"),
        }
    }

    #[test]
    fn candidates_are_cudarcs_with_the_soname_first_among_versions() {
        let candidates = driver_candidates();
        assert_eq!(candidates.first().map(String::as_str), Some("libcuda.so"));
        assert!(candidates.iter().any(|name| name == "libcuda.so.1"));
    }

    #[test]
    fn probing_this_machine_gives_a_driver_or_a_typed_no_gpu_error() {
        match probe() {
            Ok(info) => {
                assert!(info.version >= REQUIRED_DRIVER_VERSION);
                assert!(info.device_count > 0);
            }
            Err(error) => {
                assert!(error.is_no_gpu(), "unexpected probe error: {error}");
                assert!(
                    !crate::config::hardware_required(),
                    "{error}, and {} is set",
                    crate::config::REQUIRE_HARDWARE_ENV
                );
            }
        }
    }

    #[test]
    fn required_symbols_include_every_versioned_entry_point_the_bindings_use() {
        for symbol in [
            "cuCtxCreate_v2",
            "cuCtxPopCurrent_v2",
            "cuEventElapsedTime",
            "cuMemcpyPeerAsync",
        ] {
            assert!(REQUIRED_SYMBOLS.contains(&symbol), "{symbol}");
        }
    }
}
