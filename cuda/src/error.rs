//! [`CudaError`]: every way the CUDA executor can fail, typed at this crate's boundary.
//!
//! Driver failures keep the CUDA call that failed, the logical device it was for (when there is
//! one) and the driver's own error code as a [`DriverCode`], which prints the `CUresult`'s name
//! without calling back into the driver (cudarc's `DriverError` asks `cuGetErrorString` for its
//! text, which would panic where no driver library can be loaded). Validation
//! failures name the rank and the mismatching values. The `Display` text is what the core hands
//! every rank of a failed generation, so each variant prints one self-contained line.

use crate::mapping::DeviceMapError;
use cudarc::driver::DriverError;
use cudarc::driver::sys::CUresult;
use ruccl_core::{DeviceId, ElementType, ReduceOperation, StepViolation};
use std::ops::Range;

/// A failure of the CUDA executor.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// No CUDA driver library (`libcuda`) could be loaded: this machine has no NVIDIA driver, or
    /// it is not on the loader's path.
    #[error("no CUDA driver: {} could be loaded", names(searched))]
    DriverNotFound {
        /// The library names tried, in order (the names cudarc itself would try).
        searched: Vec<String>,
    },

    /// A driver library was found but lacks an entry point this crate calls: the driver is older
    /// than the CUDA version the bindings were built for, or the library is not the CUDA driver.
    #[error(
        "the CUDA driver library `{library}` lacks the entry point `{symbol}` (driver too old?)"
    )]
    MissingDriverSymbol {
        /// The library that was loaded.
        library: String,
        /// The first missing entry point.
        symbol: String,
    },

    /// The driver supports an older CUDA version than the one this crate is built against.
    #[error(
        "the CUDA driver supports CUDA {}.{}, but ruccl-cuda needs {}.{} or newer",
        found / 1000, found % 1000 / 10, required / 1000, required % 1000 / 10
    )]
    DriverTooOld {
        /// `cuDriverGetVersion`'s answer, e.g. `12080` for CUDA 12.8.
        found: i32,
        /// The smallest version accepted, e.g. `13000`.
        required: i32,
    },

    /// `cuInit` failed or reported no CUDA-capable device.
    #[error("no usable CUDA device: cuInit returned CUresult {code}")]
    NoDevice {
        /// The raw `CUresult` of `cuInit` or `cuDeviceGetCount` (0 when the call succeeded but
        /// counted no device).
        code: i32,
    },

    /// The device map is malformed or names a GPU this machine does not have.
    #[error(transparent)]
    DeviceMap(#[from] DeviceMapError),

    /// A CUDA driver call failed.
    #[error("CUDA driver call {call} failed{}: {source}", device_suffix(*.device))]
    Driver {
        /// What was being done (the driver entry point or the cudarc call).
        call: &'static str,
        /// The logical device the call was for, if any.
        device: Option<DeviceId>,
        /// The driver's error code.
        #[source]
        source: DriverCode,
    },

    /// Work already queued on a device failed (a fault in a kernel or copy), reported when its
    /// stream was completed.
    #[error("asynchronous CUDA failure on {device}: {source}")]
    Asynchronous {
        /// The logical device whose stream reported the failure.
        device: DeviceId,
        /// The driver's error code.
        #[source]
        source: DriverCode,
    },

    /// The NVRTC library was asked for (to compile the kernels at run time) but is not loadable.
    #[error("NVRTC is not available: {} could be loaded", names(searched))]
    NvrtcNotFound {
        /// The library names tried.
        searched: Vec<String>,
    },

    /// NVRTC rejected the kernel source.
    #[error("NVRTC could not compile the ruccl-cuda kernels: {log}")]
    NvrtcCompile {
        /// The compiler's error and log.
        log: String,
    },

    /// A PTX file named in the configuration could not be read.
    #[error("cannot read PTX file {path}: {message}")]
    PtxFile {
        /// The path given.
        path: String,
        /// The I/O error's text.
        message: String,
    },

    /// The PTX text is unusable (empty, or contains a NUL byte).
    #[error("invalid PTX: {reason}")]
    InvalidPtx {
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A logical device is not in this executor's device map.
    #[error("{device} is not in the CUDA executor's device map")]
    UnknownDevice {
        /// The device asked for.
        device: DeviceId,
    },

    /// A tensor was submitted for a device other than the one it lives on.
    #[error("{}the tensor lives on {actual}, but it was submitted for {expected}", rank_prefix(*.rank))]
    WrongDevice {
        /// The rank (`None` in `prepare`, which does not know it).
        rank: Option<usize>,
        /// The device the rank runs on.
        expected: DeviceId,
        /// The device the tensor is on.
        actual: DeviceId,
    },

    /// A tensor's memory is on another physical GPU than its logical device maps to (it was made
    /// by an executor with a different device map).
    #[error(
        "{}the tensor for {device} is on GPU {actual_ordinal}, but {device} maps to GPU {expected_ordinal}",
        rank_prefix(*.rank)
    )]
    WrongGpu {
        /// The rank (`None` in `prepare`).
        rank: Option<usize>,
        /// The logical device.
        device: DeviceId,
        /// The GPU the device map gives.
        expected_ordinal: usize,
        /// The GPU the tensor's memory is on.
        actual_ordinal: usize,
    },

    /// `begin` was given no ranks.
    #[error("a collective needs at least one rank")]
    EmptyWorld,

    /// `begin` was given a different number of devices, inputs or plan ranks.
    #[error("{devices} devices and {inputs} inputs for a plan of {world} ranks")]
    WorldMismatch {
        /// Number of devices.
        devices: usize,
        /// Number of prepared inputs.
        inputs: usize,
        /// The plan's world.
        world: usize,
    },

    /// A rank's input has another length than the plan's input length.
    #[error("rank {rank} has {actual} elements, the plan expects {expected}")]
    LengthMismatch {
        /// The first rank that differs.
        rank: usize,
        /// The plan's input length.
        expected: usize,
        /// This rank's length.
        actual: usize,
    },

    /// Ranks submitted tensors of different element types.
    #[error("rank {rank} has {actual} elements, rank 0 has {expected}")]
    ElementTypeMismatch {
        /// The first rank that differs.
        rank: usize,
        /// Rank 0's element type.
        expected: ElementType,
        /// This rank's element type.
        actual: ElementType,
    },

    /// The executor has no kernel for this operation on this element type.
    #[error("{operation} is not supported on {element_type} elements")]
    Unsupported {
        /// The element type.
        element_type: ElementType,
        /// The operation.
        operation: ReduceOperation,
    },

    /// The executor has no kernels for this element type at all (a type `ruccl_core` added after
    /// this crate's kernels were written): its tensors are refused on upload and in `begin`,
    /// whatever the collective.
    #[error("ruccl-cuda does not support {element_type} elements (no kernels for this type)")]
    UnsupportedElementType {
        /// The element type.
        element_type: ElementType,
    },

    /// A plan's layout puts a rank's input or output outside its working buffer.
    #[error("rank {rank}'s {what} {range:?} is not within its {buffer_len}-element buffer")]
    LayoutOutOfBounds {
        /// The rank.
        rank: usize,
        /// `input` or `output`.
        what: &'static str,
        /// The range.
        range: Range<usize>,
        /// The buffer's length in elements.
        buffer_len: usize,
    },

    /// A step breaks one of the contract's rules for a step: a rank outside the world, a range
    /// outside the buffers, an element overwritten twice or reached twice by one sender (the
    /// core's statement of them, [`Step::check`](ruccl_core::Step::check)).
    #[error(transparent)]
    Step(#[from] StepViolation),

    /// A fold kernel launch was given no sources, or more than it takes (a defect in this crate,
    /// reported instead of folding fewer values).
    #[error("a fold launch takes 1 to {max} sources, not {sources}")]
    FoldSources {
        /// The sources given.
        sources: usize,
        /// The most one launch takes.
        max: usize,
    },

    /// A combining step was asked of a collective that has no operation to fold with (an
    /// all-gather or broadcast plan; `verify` refuses such plans, so only a hand-made step can).
    #[error("a combining step in a collective without a reduce operation")]
    CombineWithoutOperation,

    /// `finish` was given another plan than the generation began with.
    #[error(
        "finish was given a plan of {actual} ranks × {actual_len} elements, the generation began with {expected} × {expected_len}"
    )]
    PlanMismatch {
        /// The world the generation began with.
        expected: usize,
        /// Its buffer length.
        expected_len: usize,
        /// The world of the plan given to `finish`.
        actual: usize,
        /// Its buffer length.
        actual_len: usize,
    },

    /// No logical device of this executor runs on the GPU asked for.
    #[error("no logical device of this executor runs on GPU {ordinal}")]
    UnknownGpu {
        /// The GPU ordinal asked for.
        ordinal: usize,
    },

    /// A work was used after `finish` handed out its buffers (the core never does this).
    #[error("this collective's work was already finished")]
    WorkFinished,

    /// A device access would reach outside its buffer: a copy or kernel range past the end,
    /// or byte arithmetic that overflows. Checked in every build, before anything is queued.
    #[error("a device access of {bytes} bytes at offset {offset} overruns a {size}-byte buffer")]
    BufferOverrun {
        /// Where the access starts, in bytes.
        offset: usize,
        /// How many bytes it covers.
        bytes: usize,
        /// The buffer's size in bytes.
        size: usize,
    },

    /// A tensor was to be made from a buffer of the wrong size for its length and type.
    #[error("{len} elements of {element_type} do not fill a {bytes}-byte buffer exactly")]
    TensorSize {
        /// The tensor's length in elements.
        len: usize,
        /// Its element type.
        element_type: ElementType,
        /// The buffer's size in bytes.
        bytes: usize,
    },

    /// The context policy requires a context of its own for every further logical device on a
    /// GPU ([`ContextPolicy::Separate`](crate::ContextPolicy::Separate)), and the driver refused
    /// to create one.
    #[error(
        "the driver refused {device} a context of its own on GPU {ordinal} ({source}), and the context policy allows no fallback to the shared primary context"
    )]
    ContextRefused {
        /// The logical device.
        device: DeviceId,
        /// Its GPU.
        ordinal: usize,
        /// `cuCtxCreate`'s error.
        #[source]
        source: DriverCode,
    },

    /// Enabling peer access between contexts on two GPUs that support it failed, and the
    /// configuration allows no fallback to driver-staged copies
    /// ([`CudaConfig::peer_fallback`](crate::CudaConfig::peer_fallback) is `false`, the default).
    #[error(
        "enabling peer access from {from} (GPU {from_ordinal}) to {to} (GPU {to_ordinal}) failed ({source}), and the configuration allows no fallback to staged copies"
    )]
    PeerAccessFailed {
        /// The device whose context was to be granted access.
        from: DeviceId,
        /// Its GPU.
        from_ordinal: usize,
        /// The device whose memory it was to access.
        to: DeviceId,
        /// Its GPU.
        to_ordinal: usize,
        /// `cuCtxEnablePeerAccess`'s error.
        #[source]
        source: DriverCode,
    },

    /// The loaded PTX lacks a kernel the executor needs (the PTX came from another source than
    /// this crate's kernels, or from an older version of them).
    #[error("the PTX loaded for {device} has no kernel `{name}`")]
    MissingKernel {
        /// The entry point looked up.
        name: String,
        /// The logical device whose context the PTX was loaded into.
        device: DeviceId,
    },

    /// The kernels' PTX declares a newer ISA version than the driver can compile (typically: a
    /// newer NVRTC than the driver). Reported before the driver is asked to load it.
    #[error(
        "the kernels' PTX ISA {}.{} (from {origin}) is newer than the driver (CUDA {}.{}) accepts: ISA {}.{} at most",
        ptx.0, ptx.1, driver / 1000, driver % 1000 / 10, accepted.0, accepted.1
    )]
    PtxTooNew {
        /// Where the PTX came from: `embedded PTX`, `NVRTC 13.1`, or the file's path.
        origin: String,
        /// The ISA version the PTX declares.
        ptx: (u32, u32),
        /// The newest ISA version the driver accepts.
        accepted: (u32, u32),
        /// `cuDriverGetVersion`'s answer.
        driver: i32,
    },

    /// The kernel table could not be built consistently (two kernels for one slot, or one
    /// left empty): a defect in this crate, reported instead of launching a wrong kernel.
    #[error("the kernel table is inconsistent: {reason}")]
    KernelTable {
        /// What is wrong.
        reason: String,
    },

    /// More ranks than a kernel argument can count (`u32`).
    #[error("a world of {world} ranks is too large")]
    WorldTooLarge {
        /// The world size.
        world: usize,
    },

    /// A tensor or buffer would exceed the address space (`len * element size` overflows).
    #[error("{len} elements of {element_type} overflow the address space")]
    TooLarge {
        /// Number of elements asked for.
        len: usize,
        /// Their type.
        element_type: ElementType,
    },
}

/// A CUDA driver error code (`CUresult`), printed as its name and number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{:?} ({})", .0, *.0 as u32)]
pub struct DriverCode(pub CUresult);

impl From<DriverError> for DriverCode {
    fn from(error: DriverError) -> Self {
        DriverCode(error.0)
    }
}

impl CudaError {
    /// Wrap a driver error from `call`, made for `device`.
    pub(crate) fn driver(
        call: &'static str,
        device: Option<DeviceId>,
        source: impl Into<DriverCode>,
    ) -> Self {
        CudaError::Driver {
            call,
            device,
            source: source.into(),
        }
    }

    /// The driver error code, for errors that carry one.
    pub fn driver_code(&self) -> Option<DriverCode> {
        match self {
            CudaError::Driver { source, .. } | CudaError::Asynchronous { source, .. } => {
                Some(*source)
            }
            _ => None,
        }
    }

    /// Whether this error means "there is no usable GPU here", so hardware tests should skip
    /// rather than fail.
    pub fn is_no_gpu(&self) -> bool {
        matches!(
            self,
            CudaError::DriverNotFound { .. }
                | CudaError::NoDevice { .. }
                | CudaError::MissingDriverSymbol { .. }
                | CudaError::DriverTooOld { .. }
        )
    }
}

/// `none of the N library names (first, ..., last)`, or `no library name was given`.
pub(crate) fn names(searched: &[String]) -> String {
    match searched {
        [] => "no library name was tried, so none".to_owned(),
        [only] => format!("`{only}` (the only name tried) not"),
        [first, .., last] => format!(
            "none of the {} library names tried (`{first}` ... `{last}`)",
            searched.len()
        ),
    }
}

fn rank_prefix(rank: Option<usize>) -> String {
    rank.map(|r| format!("rank {r}: ")).unwrap_or_default()
}

fn device_suffix(device: Option<DeviceId>) -> String {
    device.map(|d| format!(" on {d}")).unwrap_or_default()
}

/// Shorthand used throughout the crate.
pub type Result<T, E = CudaError> = std::result::Result<T, E>;

/// Attach a call name and device to a cudarc driver result.
pub(crate) trait DriverResultExt<T> {
    /// Map the error to [`CudaError::Driver`].
    fn during(self, call: &'static str, device: Option<DeviceId>) -> Result<T>;
}

impl<T> DriverResultExt<T> for std::result::Result<T, DriverError> {
    fn during(self, call: &'static str, device: Option<DeviceId>) -> Result<T> {
        self.map_err(|source| CudaError::driver(call, device, source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_too_old_prints_versions_as_major_dot_minor() {
        let error = CudaError::DriverTooOld {
            found: 12080,
            required: 13000,
        };
        assert_eq!(
            error.to_string(),
            "the CUDA driver supports CUDA 12.8, but ruccl-cuda needs 13.0 or newer"
        );
    }

    #[test]
    fn driver_error_names_call_and_device() {
        let error = CudaError::driver(
            "cuMemAlloc",
            Some(DeviceId::new(3)),
            DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY),
        );
        // Formatting must not call into the (absent) driver: this runs on machines without one.
        assert_eq!(
            error.to_string(),
            "CUDA driver call cuMemAlloc failed on device 3: CUDA_ERROR_OUT_OF_MEMORY (2)"
        );
        assert_eq!(
            error.driver_code(),
            Some(DriverCode(CUresult::CUDA_ERROR_OUT_OF_MEMORY))
        );
    }

    #[test]
    fn a_missing_library_names_the_first_and_last_candidates() {
        let error = CudaError::DriverNotFound {
            searched: vec![
                "libcuda.so".into(),
                "libcuda.so.13".into(),
                "libcuda.so.1".into(),
            ],
        };
        assert_eq!(
            error.to_string(),
            "no CUDA driver: none of the 3 library names tried (`libcuda.so` ... `libcuda.so.1`) could be loaded"
        );
    }

    #[test]
    fn a_ptx_too_new_for_the_driver_names_both_versions() {
        let error = CudaError::PtxTooNew {
            origin: "NVRTC 13.1".into(),
            ptx: (9, 1),
            accepted: (9, 0),
            driver: 13000,
        };
        assert_eq!(
            error.to_string(),
            "the kernels' PTX ISA 9.1 (from NVRTC 13.1) is newer than the driver (CUDA 13.0) accepts: ISA 9.0 at most"
        );
    }

    #[test]
    fn an_overrun_names_offset_length_and_buffer_size() {
        let error = CudaError::BufferOverrun {
            offset: 16,
            bytes: 8,
            size: 20,
        };
        assert_eq!(
            error.to_string(),
            "a device access of 8 bytes at offset 16 overruns a 20-byte buffer"
        );
    }

    #[test]
    fn only_missing_hardware_counts_as_no_gpu() {
        assert!(CudaError::DriverNotFound { searched: vec![] }.is_no_gpu());
        assert!(CudaError::NoDevice { code: 100 }.is_no_gpu());
        assert!(!CudaError::EmptyWorld.is_no_gpu());
        assert!(
            !CudaError::UnknownDevice {
                device: DeviceId::new(0)
            }
            .is_no_gpu()
        );
    }
}
