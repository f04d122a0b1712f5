//! The reduction kernels: CUDA C source, the PTX built from it, and per-context launch tables.
//!
//! # PTX strategy
//!
//! The source lives in `kernels/{common.cuh,fold.cu,mean.cu}` (concatenated into one
//! translation unit, [`KERNEL_SOURCE`]). By default the executor loads **PTX generated ahead of
//! time** and embedded in the crate ([`EMBEDDED_PTX`], `kernels/ruccl_kernels.ptx`), because a GPU
//! host may lack `libnvrtc` (the target host has it only inside PyTorch's wheel, off the loader
//! path), and the driver JIT-compiles PTX for whatever GPU it finds. The PTX is produced by
//! `scripts/gen-ptx.sh` with NVRTC 12.0 — which needs no GPU, so it runs on any x86-64 Linux
//! machine — for `compute_75`, the oldest architecture CUDA 13 supports, so one file serves every
//! GPU from Turing to Hopper (the H200 JITs it to `sm_90` at module load, `cuModuleLoadData`:
//! no NVRTC at run time). Its ISA version (8.0) is the newest that the oldest supported driver
//! (525, CUDA 12.0) accepts, so CUDA 12.x and 13.x drivers all load it. A test checks that the embedded PTX was
//! generated from the current source (a fingerprint in its header), so an edit to a `.cu` file
//! without regenerating fails CI.
//!
//! Two other sources can be chosen with [`KernelSource`] (or `RUCCL_CUDA_KERNELS`): a PTX file
//! (e.g. built by `nvcc -ptx` on the GPU host), or NVRTC at run time from [`KERNEL_SOURCE`], when
//! `libnvrtc` is loadable.

use crate::error::{CudaError, DriverResultExt, Result};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg,
    sys::{CUdevice_attribute, CUresult},
};
use cudarc::nvrtc::{CompileOptions, Ptx};
use ruccl_core::ElementType;
use ruccl_core::{DeviceId, ReduceOperation};
use std::path::PathBuf;
use std::sync::Arc;

/// The kernel source: `common.cuh`, `fold.cu` and `mean.cu`, concatenated in that order.
pub const KERNEL_SOURCE: &str = concat!(
    include_str!("../kernels/common.cuh"),
    include_str!("../kernels/fold.cu"),
    include_str!("../kernels/mean.cu"),
);

/// The PTX generated from [`KERNEL_SOURCE`] by `scripts/gen-ptx.sh`, with its provenance header.
pub const EMBEDDED_PTX: &str = include_str!("../kernels/ruccl_kernels.ptx");

/// The virtual architecture the PTX is generated for (NVRTC's `--gpu-architecture`).
pub const PTX_ARCH: &str = "compute_75";

/// The newest PTX ISA version the oldest supported driver (CUDA 12.0, driver 525) can
/// JIT-compile: [`max_ptx_isa`]`(REQUIRED_DRIVER_VERSION)`. The embedded PTX declares it, so every
/// CUDA 12.x and 13.x driver loads it.
pub const MAX_PTX_ISA: (u32, u32) = (8, 0);

/// The newest PTX ISA version a driver of `driver_version` (`cuDriverGetVersion` form, e.g.
/// `13000`) can compile, from the PTX ISA release notes: CUDA 12.x accepts ISA 8.x (12.0 → 8.0
/// … 12.5 and 12.6 → 8.5, 12.8 → 8.7, 12.9 → 8.8), CUDA 13.x accepts ISA 9.x (13.0 → 9.0,
/// 13.1 → 9.1, …), CUDA 11.x ISA 7.x; older drivers (which the probe refuses anyway) get 6.0.
/// `None` for a driver newer than 13.x: it accepts every ISA this table knows.
pub const fn max_ptx_isa(driver_version: i32) -> Option<(u32, u32)> {
    let (major, minor) = (driver_version / 1000, (driver_version % 1000) / 10);
    match (major, minor) {
        (11, _) => Some((7, minor as u32)),
        (..=10, _) => Some((6, 0)),
        (12, 0..=5) => Some((8, minor as u32)),
        (12, 6..=7) => Some((8, 5)),
        (12, 8) => Some((8, 7)),
        (12, _) => Some((8, 8)),
        (13, _) => Some((9, minor as u32)),
        _ => None,
    }
}

/// Check that `ptx` (from `origin`, for the message) declares an ISA version a driver of
/// `driver_version` accepts: [`CudaError::PtxTooNew`] naming both versions otherwise. PTX that
/// declares no version is left for the driver to judge.
pub fn check_ptx_isa(ptx: &str, origin: &str, driver_version: i32) -> Result<()> {
    let (Some(declared), Some(accepted)) = (ptx_isa_version(ptx), max_ptx_isa(driver_version))
    else {
        return Ok(());
    };
    if declared <= accepted {
        return Ok(());
    }
    Err(CudaError::PtxTooNew {
        origin: origin.to_owned(),
        ptx: declared,
        accepted,
        driver: driver_version,
    })
}

/// Header line of the generated PTX that records the source fingerprint.
pub const FINGERPRINT_PREFIX: &str = "// ruccl-source-fnv1a64: ";

/// Threads per block of every kernel launch.
pub const BLOCK_THREADS: u32 = 256;

/// Resident blocks per multiprocessor the grid is sized for (2048 threads / [`BLOCK_THREADS`]).
const BLOCKS_PER_MULTIPROCESSOR: u32 = 8;

/// The most sources one fold kernel launch takes (`RUCCL_FOLD_MAX` in `fold.cu`): the source
/// pointers travel by value in the kernel's parameters. A fold over more sources is chained
/// (see `exchange.rs`).
pub const FOLD_MAX: usize = 16;

/// The binary operator a combining step folds with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CombineOp {
    /// Addition (also `Mean`'s).
    Sum,
    /// Multiplication.
    Product,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

impl CombineOp {
    /// Every operator, in kernel-table order.
    pub const ALL: [CombineOp; 4] = [
        CombineOp::Sum,
        CombineOp::Product,
        CombineOp::Min,
        CombineOp::Max,
    ];

    /// The operator a generation of `operation` folds with (`Mean` folds as `Sum`).
    pub fn of(operation: ReduceOperation) -> Self {
        match operation.combining() {
            ReduceOperation::Sum | ReduceOperation::Mean => CombineOp::Sum,
            ReduceOperation::Product => CombineOp::Product,
            ReduceOperation::Min => CombineOp::Min,
            ReduceOperation::Max => CombineOp::Max,
        }
    }

    /// The operator's part of a kernel name.
    pub const fn kernel_part(self) -> &'static str {
        match self {
            CombineOp::Sum => "sum",
            CombineOp::Product => "prod",
            CombineOp::Min => "min",
            CombineOp::Max => "max",
        }
    }

    /// The operator's position in a row of the kernel table: an explicit match, so the table
    /// never depends on the order of [`CombineOp::ALL`].
    const fn slot(self) -> usize {
        match self {
            CombineOp::Sum => 0,
            CombineOp::Product => 1,
            CombineOp::Min => 2,
            CombineOp::Max => 3,
        }
    }
}

/// The element types the executor has kernels for, in the order [`kernel_names`] lists them (the
/// kernel table places each by an explicit match, not by this order): every type `ruccl_core`
/// defines today. A type the core adds later is not here until `kernels/*.cu` has
/// its kernels; until then the executor refuses its tensors with
/// [`CudaError::UnsupportedElementType`] (never a panic).
pub const KERNEL_TYPES: [ElementType; 10] = [
    ElementType::F32,
    ElementType::F64,
    ElementType::F16,
    ElementType::BF16,
    ElementType::I32,
    ElementType::I64,
    ElementType::I8,
    ElementType::U8,
    ElementType::U32,
    ElementType::U64,
];

/// An element type's part of a kernel name (`None` for a type the executor has no kernels for).
pub const fn type_part(element_type: ElementType) -> Option<&'static str> {
    Some(match element_type {
        ElementType::F32 => "f32",
        ElementType::F64 => "f64",
        ElementType::F16 => "f16",
        ElementType::BF16 => "bf16",
        ElementType::I32 => "i32",
        ElementType::I64 => "i64",
        ElementType::I8 => "i8",
        ElementType::U8 => "u8",
        ElementType::U32 => "u32",
        ElementType::U64 => "u64",
        // `ElementType` is non-exhaustive: a type added later has no kernels yet.
        _ => return None,
    })
}

/// The element type's row in the kernel table: an explicit match, so the table never depends on
/// the order of `ElementType::ALL` (which another crate owns). `None` for a type without kernels.
const fn type_slot(element_type: ElementType) -> Option<usize> {
    Some(match element_type {
        ElementType::F32 => 0,
        ElementType::F64 => 1,
        ElementType::F16 => 2,
        ElementType::BF16 => 3,
        ElementType::I32 => 4,
        ElementType::I64 => 5,
        ElementType::I8 => 6,
        ElementType::U8 => 7,
        ElementType::U32 => 8,
        ElementType::U64 => 9,
        _ => return None,
    })
}

/// Whether the executor takes `element_type` tensors at all (uploads them, runs any collective
/// on them): every type it has kernels for ([`KERNEL_TYPES`]). Any other type is refused with
/// [`CudaError::UnsupportedElementType`].
pub const fn supports_type(element_type: ElementType) -> bool {
    type_slot(element_type).is_some()
}

/// Whether the executor has kernels for `operation` on `element_type`: every operation on every
/// element type it takes (each type has a fold kernel per operator and a mean kernel; the kernel
/// table has a slot for each, [`kernel_names`]).
pub const fn supports(element_type: ElementType, operation: ReduceOperation) -> bool {
    let _ = operation;
    supports_type(element_type)
}

/// [`CudaError::UnsupportedElementType`] for a type without kernels, or its name part.
fn checked_type_part(element_type: ElementType) -> Result<&'static str> {
    type_part(element_type).ok_or(CudaError::UnsupportedElementType { element_type })
}

/// The fold kernel's entry point for `op` on `element_type`, e.g. `ruccl_fold_sum_bf16`
/// ([`CudaError::UnsupportedElementType`] for a type without kernels).
pub fn fold_kernel_name(op: CombineOp, element_type: ElementType) -> Result<String> {
    Ok(format!(
        "ruccl_fold_{}_{}",
        op.kernel_part(),
        checked_type_part(element_type)?
    ))
}

/// The mean-scaling kernel's entry point for `element_type`, e.g. `ruccl_mean_f16`
/// ([`CudaError::UnsupportedElementType`] for a type without kernels).
pub fn mean_kernel_name(element_type: ElementType) -> Result<String> {
    Ok(format!("ruccl_mean_{}", checked_type_part(element_type)?))
}

/// Every entry point the executor loads: 40 fold kernels (one per type of [`KERNEL_TYPES`] and
/// operator), then 10 mean kernels (one per type).
pub fn kernel_names() -> Vec<String> {
    let fold = KERNEL_TYPES.into_iter().flat_map(|element_type| {
        CombineOp::ALL
            .into_iter()
            .filter_map(move |op| fold_kernel_name(op, element_type).ok())
    });
    let mean = KERNEL_TYPES
        .into_iter()
        .filter_map(|element_type| mean_kernel_name(element_type).ok());
    fold.chain(mean).collect()
}

/// 64-bit FNV-1a of `bytes`: the fingerprint recorded in the generated PTX's header.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The fingerprint of the current [`KERNEL_SOURCE`].
pub fn source_fingerprint() -> u64 {
    fnv1a64(KERNEL_SOURCE.as_bytes())
}

/// The provenance header `scripts/gen-ptx.sh` puts before the PTX it generates.
pub fn ptx_header(compiler: &str) -> String {
    format!(
        "// ruccl-cuda reduction kernels. GENERATED by cuda/scripts/gen-ptx.sh from\n\
         // cuda/kernels/{{common.cuh,fold.cu,mean.cu}}: edit those, then regenerate.\n\
         // ruccl-compiler: {compiler}, --gpu-architecture={PTX_ARCH}\n\
         {FINGERPRINT_PREFIX}{:016x}\n",
        source_fingerprint()
    )
}

/// The source fingerprint recorded in a generated PTX's header, if it has one.
pub fn ptx_fingerprint(ptx: &str) -> Option<u64> {
    ptx.lines()
        .find_map(|line| line.strip_prefix(FINGERPRINT_PREFIX))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
}

/// The PTX ISA version (`.version major.minor`) a PTX text declares.
pub fn ptx_isa_version(ptx: &str) -> Option<(u32, u32)> {
    let version = ptx
        .lines()
        .find_map(|line| line.trim().strip_prefix(".version "))?;
    let (major, minor) = version.trim().split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The target (`.target sm_XX`) a PTX text declares.
pub fn ptx_target(ptx: &str) -> Option<&str> {
    ptx.lines()
        .find_map(|line| line.trim().strip_prefix(".target "))
        .map(str::trim)
}

/// The names of the kernels (`.entry`) a PTX text defines.
pub fn ptx_entries(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix(".visible .entry ")?;
            Some(rest.split('(').next().unwrap_or(rest).trim())
        })
        .collect()
}

/// Where the NVRTC library this process loaded lies (read from `/proc/self/maps`), once NVRTC
/// has been used; `None` before that, or where the maps file is not readable.
pub fn nvrtc_library() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| {
            path.rsplit('/')
                .next()
                .is_some_and(|file| file.starts_with("libnvrtc.so"))
        })
        .map(str::to_owned)
}

/// Where the executor gets its PTX.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelSource {
    /// The PTX embedded in the crate ([`EMBEDDED_PTX`]). Needs nothing but the driver.
    #[default]
    Embedded,
    /// A PTX file, e.g. `nvcc -ptx` output on the GPU host.
    PtxFile(PathBuf),
    /// Compile [`KERNEL_SOURCE`] with NVRTC when the executor is built (needs `libnvrtc`).
    Nvrtc,
}

impl KernelSource {
    /// The environment variable [`KernelSource::from_env`] reads.
    pub const ENV: &'static str = "RUCCL_CUDA_KERNELS";

    /// Read [`KernelSource::ENV`]: `embedded`, `nvrtc`, or a path to a PTX file. `None` when it is
    /// unset or empty.
    pub fn from_env() -> Option<Self> {
        let value = std::env::var(Self::ENV).ok()?;
        match value.trim() {
            "" => None,
            "embedded" => Some(KernelSource::Embedded),
            "nvrtc" => Some(KernelSource::Nvrtc),
            path => Some(KernelSource::PtxFile(PathBuf::from(path))),
        }
    }

    /// Where this source's PTX comes from, for messages: `embedded PTX`, `NVRTC 12.0`, or the
    /// file's path.
    pub fn origin(&self) -> String {
        match self {
            KernelSource::Embedded => "embedded PTX".to_owned(),
            KernelSource::PtxFile(path) => path.display().to_string(),
            KernelSource::Nvrtc => match nvrtc_version() {
                Some(version) => format!("NVRTC {version}"),
                None => "NVRTC".to_owned(),
            },
        }
    }

    /// The PTX text this source gives.
    pub fn ptx(&self) -> Result<String> {
        let ptx = match self {
            KernelSource::Embedded => EMBEDDED_PTX.to_owned(),
            KernelSource::PtxFile(path) => {
                std::fs::read_to_string(path).map_err(|error| CudaError::PtxFile {
                    path: path.display().to_string(),
                    message: error.to_string(),
                })?
            }
            KernelSource::Nvrtc => compile_with_nvrtc()?,
        };
        check_ptx(&ptx)?;
        Ok(ptx)
    }
}

/// Reject PTX that cannot be handed to the driver: empty, without kernels, or with a NUL byte
/// (cudarc would panic turning it into a C string).
pub fn check_ptx(ptx: &str) -> Result<()> {
    if ptx.contains('\0') {
        return Err(CudaError::InvalidPtx {
            reason: "contains a NUL byte",
        });
    }
    if ptx_entries(ptx).is_empty() {
        return Err(CudaError::InvalidPtx {
            reason: "defines no kernel entry point",
        });
    }
    Ok(())
}

/// Whether an NVRTC library cudarc can load is present.
pub fn nvrtc_available() -> bool {
    // SAFETY: `is_culib_present` opens and closes the NVRTC library candidates, running their
    // initialisers only; no NVRTC function is called.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// NVRTC's version as `major.minor`, when NVRTC is loadable.
pub fn nvrtc_version() -> Option<String> {
    if !nvrtc_available() {
        return None;
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is loadable (checked above), so cudarc resolves `nvrtcVersion`; both
    // out-pointers are live locals the library writes once.
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    (status == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).then(|| format!("{major}.{minor}"))
}

/// The options [`KERNEL_SOURCE`] is compiled with, at run time and by `gen-ptx.sh`.
pub fn compile_options() -> CompileOptions {
    CompileOptions {
        arch: Some(PTX_ARCH),
        name: Some("ruccl_kernels.cu".to_owned()),
        ..CompileOptions::default()
    }
}

/// Compile [`KERNEL_SOURCE`] to PTX with NVRTC. Fails with [`CudaError::NvrtcNotFound`] (instead
/// of cudarc's panic) when no NVRTC library can be loaded.
pub fn compile_with_nvrtc() -> Result<String> {
    if !nvrtc_available() {
        return Err(CudaError::NvrtcNotFound {
            searched: cudarc::get_lib_name_candidates("nvrtc"),
        });
    }
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(KERNEL_SOURCE, compile_options()).map_err(
        |error| CudaError::NvrtcCompile {
            log: match error {
                cudarc::nvrtc::CompileError::CompileError { nvrtc, log, .. } => {
                    format!("{nvrtc:?}: {}", log.to_string_lossy())
                }
                other => format!("{other:?}"),
            },
        },
    )?;
    Ok(ptx.to_src())
}

/// Fold kernels: one per element type and operator.
const FOLD_SLOTS: usize = KERNEL_TYPES.len() * CombineOp::ALL.len();
/// Mean kernels: one per element type.
const MEAN_SLOTS: usize = KERNEL_TYPES.len();

/// Where the fold kernel for `op` on `element_type` sits in [`KernelTable::fold`] (`None` for a
/// type without kernels).
const fn fold_slot(op: CombineOp, element_type: ElementType) -> Option<usize> {
    match type_slot(element_type) {
        Some(row) => Some(row * CombineOp::ALL.len() + op.slot()),
        None => None,
    }
}

/// `slot`, or [`CudaError::UnsupportedElementType`] when `element_type` has none.
fn slot_of(slot: Option<usize>, element_type: ElementType) -> Result<usize> {
    slot.ok_or(CudaError::UnsupportedElementType { element_type })
}

/// Every kernel of one context, by slot: `fold[fold_slot(op, type)]`,
/// `mean[type_slot(type)]`. Built by looking every entry point up by name and storing it at the
/// slot of the (type, operator) the name was made from, so the order in which the types and
/// operators are enumerated cannot matter. Generic over the stored value so the placement is
/// tested without a GPU (with names).
#[derive(Debug)]
pub(crate) struct KernelTable<F> {
    fold: Vec<F>,
    mean: Vec<F>,
}

impl<F> KernelTable<F> {
    /// Look up every kernel with `load` (given the entry point's name) and place it.
    pub(crate) fn build(mut load: impl FnMut(&str) -> Result<F>) -> Result<Self> {
        let mut fold: Vec<Option<F>> = (0..FOLD_SLOTS).map(|_| None).collect();
        let mut mean: Vec<Option<F>> = (0..MEAN_SLOTS).map(|_| None).collect();
        for element_type in KERNEL_TYPES {
            for op in CombineOp::ALL {
                let name = fold_kernel_name(op, element_type)?;
                let slot = slot_of(fold_slot(op, element_type), element_type)?;
                place(&mut fold, slot, load(&name)?, &name)?;
            }
            let name = mean_kernel_name(element_type)?;
            let slot = slot_of(type_slot(element_type), element_type)?;
            place(&mut mean, slot, load(&name)?, &name)?;
        }
        Ok(Self {
            fold: filled(fold)?,
            mean: filled(mean)?,
        })
    }

    /// The fold kernel for `op` on `element_type` ([`CudaError::UnsupportedElementType`] for a
    /// type without kernels).
    pub(crate) fn fold(&self, op: CombineOp, element_type: ElementType) -> Result<&F> {
        let slot = slot_of(fold_slot(op, element_type), element_type)?;
        self.fold.get(slot).ok_or_else(|| CudaError::KernelTable {
            reason: format!(
                "no slot {slot} for the {} fold on {element_type}",
                op.kernel_part()
            ),
        })
    }

    /// The mean kernel for `element_type` ([`CudaError::UnsupportedElementType`] for a type
    /// without kernels).
    pub(crate) fn mean(&self, element_type: ElementType) -> Result<&F> {
        let slot = slot_of(type_slot(element_type), element_type)?;
        self.mean.get(slot).ok_or_else(|| CudaError::KernelTable {
            reason: format!("no slot {slot} for the mean on {element_type}"),
        })
    }
}

/// Put `value` (the kernel `name`) at `slot`, which must exist and be empty.
fn place<F>(table: &mut [Option<F>], slot: usize, value: F, name: &str) -> Result<()> {
    match table.get_mut(slot) {
        Some(entry @ None) => {
            *entry = Some(value);
            Ok(())
        }
        Some(Some(_)) => Err(CudaError::KernelTable {
            reason: format!("`{name}` maps to slot {slot}, which is taken"),
        }),
        None => Err(CudaError::KernelTable {
            reason: format!("`{name}` maps to slot {slot}, past the table's end"),
        }),
    }
}

/// The table's values, once every slot is filled.
fn filled<F>(table: Vec<Option<F>>) -> Result<Vec<F>> {
    table
        .into_iter()
        .collect::<Option<Vec<F>>>()
        .ok_or_else(|| CudaError::KernelTable {
            reason: "a slot was left empty".to_owned(),
        })
}

/// The kernels loaded into one context, and the grid size that fills its GPU.
pub(crate) struct Kernels {
    table: KernelTable<CudaFunction>,
    /// Blocks that fill the GPU: multiprocessors × resident blocks per multiprocessor.
    max_blocks: u32,
}

impl Kernels {
    /// Load `ptx` into `context` and look up every entry point. A kernel the PTX lacks is
    /// [`CudaError::MissingKernel`]. The caller has saved the thread's context.
    pub(crate) fn load(context: &Arc<CudaContext>, ptx: &str, device: DeviceId) -> Result<Self> {
        let module = context
            .load_module(Ptx::from_src(ptx))
            .during("cuModuleLoadData", Some(device))?;
        let table = KernelTable::build(|name| {
            module.load_function(name).map_err(|error| {
                if error.0 == CUresult::CUDA_ERROR_NOT_FOUND {
                    CudaError::MissingKernel {
                        name: name.to_owned(),
                        device,
                    }
                } else {
                    CudaError::driver("cuModuleGetFunction", Some(device), error)
                }
            })
        })?;
        let multiprocessors = context
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .during("cuDeviceGetAttribute", Some(device))?;
        let max_blocks = u32::try_from(multiprocessors.max(1))
            .unwrap_or(1)
            .saturating_mul(BLOCKS_PER_MULTIPROCESSOR);
        Ok(Self { table, max_blocks })
    }

    /// Queue `dst[i] = ((x0[i] op x1[i]) op x2[i]) ...` for `i < len` on `stream`, a left fold
    /// over `sources` (`x0, x1, ...`, in that order; 1 to [`FOLD_MAX`] of them) rounded to the
    /// storage type after every operation. Whether the fold is supported is the kernel table's
    /// to say ([`CudaError::KernelTable`] otherwise); more sources are a
    /// [`CudaError::FoldSources`], never a truncated fold.
    ///
    /// # Safety
    /// `dst` and every source must be device addresses in `stream`'s context, each valid for
    /// `len` elements of `element_type`. A source may be `dst` itself (each thread reads its
    /// element of every source before writing it); no source may otherwise overlap `dst`. None
    /// may be accessed by other streams until the kernel completes (the caller orders that with
    /// events).
    pub(crate) unsafe fn fold(
        &self,
        stream: &CudaStream,
        device: DeviceId,
        (element_type, op): (ElementType, CombineOp),
        dst: u64,
        sources: &[u64],
        len: usize,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        if sources.is_empty() || sources.len() > FOLD_MAX {
            return Err(CudaError::FoldSources {
                sources: sources.len(),
                max: FOLD_MAX,
            });
        }
        let function = self.table.fold(op, element_type)?;
        let mut table = [0_u64; FOLD_MAX];
        table[..sources.len()].copy_from_slice(sources);
        // `sources.len() <= FOLD_MAX`, so this never saturates.
        let count = u32::try_from(sources.len()).unwrap_or(u32::MAX);
        let elements = len as u64;
        let mut launch = stream.launch_builder(function);
        launch.arg(&dst).arg(&table).arg(&count).arg(&elements);
        // SAFETY: the kernel's signature is (Storage*, RucclSources, unsigned int, unsigned long
        // long), matched by a u64 device address, `[u64; FOLD_MAX]` (the struct's
        // `const void* p[RUCCL_FOLD_MAX]`, same size and alignment), a u32 and a u64. The kernel
        // reads only the first `count` pointers; the caller guarantees each is valid for `len`
        // elements in this stream's context, and the grid-stride loop stays below `len`.
        unsafe { launch.launch(self.config(len)) }.during("cuLaunchKernel (fold)", Some(device))?;
        Ok(())
    }

    /// Queue `data[i] = data[i] / world` for `i < len` on `stream`: one correctly rounded
    /// division for floats (in f32 for f16 and bf16, then one rounding to storage), truncation
    /// toward zero for integers (see `mean.cu`).
    ///
    /// # Safety
    /// `data` must be a device address in `stream`'s context, valid for `len` elements of
    /// `element_type` and not accessed by other streams until the kernel completes.
    pub(crate) unsafe fn mean(
        &self,
        stream: &CudaStream,
        device: DeviceId,
        element_type: ElementType,
        data: u64,
        len: usize,
        world: u32,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let function = self.table.mean(element_type)?;
        let count = len as u64;
        let mut launch = stream.launch_builder(function);
        launch.arg(&data).arg(&count).arg(&world);
        // SAFETY: the kernel's signature is (Storage*, unsigned long long, unsigned int), matched
        // by a u64 device address, a u64 count and a u32; the caller guarantees `data` is valid
        // for `len` elements in this stream's context.
        unsafe { launch.launch(self.config(len)) }.during("cuLaunchKernel (mean)", Some(device))?;
        Ok(())
    }

    fn config(&self, len: usize) -> LaunchConfig {
        grid_for(len, self.max_blocks)
    }
}

/// The launch shape for `len` elements: [`BLOCK_THREADS`] per block, enough blocks to give each
/// element a thread, capped at `max_blocks` (the grid-stride loop covers the rest).
pub(crate) fn grid_for(len: usize, max_blocks: u32) -> LaunchConfig {
    let wanted = len.div_ceil(BLOCK_THREADS as usize);
    let blocks = u32::try_from(wanted)
        .unwrap_or(u32::MAX)
        .clamp(1, max_blocks.max(1));
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_type_and_operator_has_a_distinct_kernel() {
        let names = kernel_names();
        assert_eq!(names.len(), 10 * 4 + 10);
        assert_eq!(names.iter().collect::<BTreeSet<_>>().len(), names.len());
        assert!(names.contains(&"ruccl_fold_prod_bf16".to_owned()));
        assert!(names.contains(&"ruccl_mean_i64".to_owned()));
        for name in [
            "ruccl_fold_sum_i8",
            "ruccl_fold_prod_u8",
            "ruccl_fold_min_u32",
            "ruccl_fold_max_u64",
            "ruccl_mean_i8",
            "ruccl_mean_u8",
            "ruccl_mean_u32",
            "ruccl_mean_u64",
        ] {
            assert!(names.contains(&name.to_owned()), "{name}");
        }
    }

    #[test]
    fn the_executor_has_kernels_for_every_element_type_the_core_defines() {
        // A type `ruccl_core` adds later fails here (not at compile time: `ElementType` is
        // non-exhaustive) until `kernels/*.cu` and `KERNEL_TYPES` cover it.
        for element_type in ElementType::ALL {
            assert!(KERNEL_TYPES.contains(&element_type), "{element_type}");
            assert!(supports_type(element_type), "{element_type}");
            for operation in ReduceOperation::ALL {
                assert!(
                    supports(element_type, operation),
                    "{element_type} {operation}"
                );
            }
        }
        assert_eq!(
            KERNEL_TYPES.iter().collect::<BTreeSet<_>>().len(),
            KERNEL_TYPES.len()
        );
    }

    #[test]
    fn a_type_without_a_slot_is_the_typed_unsupported_error() {
        // What every lookup answers for a type added to the core later (none can be built
        // here, so the shared step is checked with the missing slot it would get).
        match slot_of(None, ElementType::U64) {
            Err(CudaError::UnsupportedElementType { element_type }) => {
                assert_eq!(element_type, ElementType::U64);
            }
            other => panic!("expected UnsupportedElementType, got {other:?}"),
        }
        assert_eq!(slot_of(Some(3), ElementType::U64).ok(), Some(3));
        let message = CudaError::UnsupportedElementType {
            element_type: ElementType::U8,
        }
        .to_string();
        assert!(message.contains("uint8"), "{message}");
    }

    #[test]
    fn kernel_names_spell_the_new_integer_types_as_the_source_does() {
        assert_eq!(
            fold_kernel_name(CombineOp::Sum, ElementType::I8).ok(),
            Some("ruccl_fold_sum_i8".to_owned())
        );
        assert_eq!(
            fold_kernel_name(CombineOp::Max, ElementType::U64).ok(),
            Some("ruccl_fold_max_u64".to_owned())
        );
        assert_eq!(
            mean_kernel_name(ElementType::U32).ok(),
            Some("ruccl_mean_u32".to_owned())
        );
        assert_eq!(type_part(ElementType::U8), Some("u8"));
    }

    #[test]
    fn mean_folds_with_the_sum_kernel() {
        assert_eq!(CombineOp::of(ReduceOperation::Mean), CombineOp::Sum);
        assert_eq!(CombineOp::of(ReduceOperation::Product), CombineOp::Product);
        assert_eq!(CombineOp::of(ReduceOperation::Min), CombineOp::Min);
        assert_eq!(CombineOp::of(ReduceOperation::Max), CombineOp::Max);
    }

    #[test]
    fn the_source_defines_every_kernel_the_executor_loads() {
        // The .cu files spell names through macros: check each macro instantiation is there.
        for element_type in KERNEL_TYPES {
            let part = type_part(element_type).expect("a kernel type has a name part");
            let fold = format!("RUCCL_FOLD_KERNELS_FOR({part}, ");
            let mean = format!("RUCCL_MEAN_KERNEL({part}, ");
            assert!(KERNEL_SOURCE.contains(&fold), "{fold}");
            assert!(KERNEL_SOURCE.contains(&mean), "{mean}");
        }
        for op in CombineOp::ALL {
            let line = format!("RUCCL_FOLD_KERNEL({}, ", op.kernel_part());
            assert!(KERNEL_SOURCE.contains(&line), "{line}");
        }
    }

    #[test]
    fn the_fold_fan_in_is_the_one_the_source_declares() {
        let line = format!("#define RUCCL_FOLD_MAX {FOLD_MAX}\n");
        assert!(
            KERNEL_SOURCE.contains(&line),
            "fold.cu must declare `{line}`"
        );
    }

    #[test]
    fn every_fold_kernel_in_the_ptx_takes_the_source_table_by_value() {
        // The launch passes `[u64; FOLD_MAX]` as the second parameter: the PTX must declare a
        // parameter of exactly that many bytes for every fold kernel, or a launch would read
        // past the table.
        let table = ".param .align 8 .b8 ";
        let size = format!("[{}]", FOLD_MAX * 8);
        for name in kernel_names()
            .iter()
            .filter(|name| name.starts_with("ruccl_fold_"))
        {
            let entry = format!(".visible .entry {name}(");
            let start = EMBEDDED_PTX
                .find(&entry)
                .expect("every fold kernel is in the PTX");
            let signature: String = EMBEDDED_PTX[start..].lines().take(6).collect();
            assert!(
                signature.contains(table) && signature.contains(&size),
                "{name}: {signature}"
            );
        }
    }

    #[test]
    fn the_embedded_ptx_defines_exactly_the_kernels_the_executor_loads() {
        let defined: BTreeSet<&str> = ptx_entries(EMBEDDED_PTX).into_iter().collect();
        let expected = kernel_names();
        let expected: BTreeSet<&str> = expected.iter().map(String::as_str).collect();
        assert_eq!(defined, expected);
    }

    #[test]
    fn the_embedded_ptx_was_generated_from_the_current_source() {
        assert_eq!(
            ptx_fingerprint(EMBEDDED_PTX),
            Some(source_fingerprint()),
            "kernels/*.cu changed since kernels/ruccl_kernels.ptx was generated: \
             run cuda/scripts/gen-ptx.sh"
        );
    }

    #[test]
    fn the_embedded_ptx_is_isa_9_0_or_older_for_sm_75_so_driver_580_jits_it_for_any_gpu() {
        let isa = ptx_isa_version(EMBEDDED_PTX).expect("the PTX declares its ISA version");
        assert!(
            isa <= MAX_PTX_ISA,
            "PTX ISA {isa:?} is newer than driver 580 accepts"
        );
        assert_eq!(ptx_target(EMBEDDED_PTX), Some("sm_75"));
        assert_eq!(check_ptx(EMBEDDED_PTX).map_err(|e| e.to_string()), Ok(()));
        let required = crate::probe::REQUIRED_DRIVER_VERSION;
        assert_eq!(max_ptx_isa(required), Some(MAX_PTX_ISA));
        assert!(check_ptx_isa(EMBEDDED_PTX, "embedded PTX", required).is_ok());
    }

    #[test]
    fn each_driver_accepts_the_ptx_isa_of_its_own_cuda_version() {
        assert_eq!(max_ptx_isa(12_000), Some((8, 0)));
        assert_eq!(max_ptx_isa(12_060), Some((8, 5)));
        assert_eq!(max_ptx_isa(12_080), Some((8, 7)));
        assert_eq!(max_ptx_isa(12_090), Some((8, 8)));
        assert_eq!(max_ptx_isa(13_000), Some((9, 0)));
        assert_eq!(max_ptx_isa(13_010), Some((9, 1)));
        assert_eq!(max_ptx_isa(14_000), None);
    }

    #[test]
    fn ptx_newer_than_the_driver_is_a_typed_error_naming_both_versions() {
        let ptx = ".version 9.1\n.target sm_75\n.visible .entry k(\n";
        match check_ptx_isa(ptx, "NVRTC 13.1", 13_000) {
            Err(CudaError::PtxTooNew {
                origin,
                ptx,
                accepted,
                driver,
            }) => {
                assert_eq!(origin, "NVRTC 13.1");
                assert_eq!((ptx, accepted, driver), ((9, 1), (9, 0), 13_000));
            }
            other => panic!("expected PtxTooNew, got {other:?}"),
        }
        assert!(check_ptx_isa(ptx, "NVRTC 13.1", 13_010).is_ok());
        assert!(check_ptx_isa(ptx, "NVRTC 13.1", 14_000).is_ok());
        // No declared version: the driver judges.
        assert!(check_ptx_isa(".visible .entry k(\n", "file", 13_000).is_ok());
    }

    #[test]
    fn the_kernel_table_maps_every_type_and_operator_to_its_own_kernel() {
        let table = KernelTable::build(|name| Ok(name.to_owned())).expect("a consistent table");
        for element_type in KERNEL_TYPES {
            for op in CombineOp::ALL {
                assert_eq!(
                    table.fold(op, element_type).ok(),
                    fold_kernel_name(op, element_type).ok().as_ref(),
                    "{element_type} {op:?}"
                );
                assert!(
                    table.fold(op, element_type).is_ok(),
                    "{element_type} {op:?}"
                );
            }
            assert_eq!(
                table.mean(element_type).ok(),
                mean_kernel_name(element_type).ok().as_ref(),
                "{element_type}"
            );
            assert!(table.mean(element_type).is_ok(), "{element_type}");
        }
        // Pinned: the new integer types sit in their own rows, after the original six.
        assert_eq!(
            table.fold(CombineOp::Product, ElementType::I8).ok(),
            Some(&"ruccl_fold_prod_i8".to_owned())
        );
        assert_eq!(
            table.fold(CombineOp::Min, ElementType::U8).ok(),
            Some(&"ruccl_fold_min_u8".to_owned())
        );
        assert_eq!(
            table.fold(CombineOp::Sum, ElementType::U32).ok(),
            Some(&"ruccl_fold_sum_u32".to_owned())
        );
        assert_eq!(
            table.mean(ElementType::U64).ok(),
            Some(&"ruccl_mean_u64".to_owned())
        );
        assert_eq!(fold_slot(CombineOp::Sum, ElementType::I8), Some(24));
        assert_eq!(fold_slot(CombineOp::Max, ElementType::U64), Some(39));
        assert_eq!(type_slot(ElementType::U8), Some(7));
    }

    #[test]
    fn the_kernel_table_slots_are_distinct_and_in_range() {
        let mut fold = BTreeSet::new();
        let mut mean = BTreeSet::new();
        for element_type in KERNEL_TYPES {
            for op in CombineOp::ALL {
                let slot = fold_slot(op, element_type).expect("a kernel type has a row");
                assert!(slot < FOLD_SLOTS && fold.insert(slot), "{slot}");
            }
            let slot = type_slot(element_type).expect("a kernel type has a row");
            assert!(slot < MEAN_SLOTS && mean.insert(slot), "{slot}");
        }
        assert_eq!((fold.len(), mean.len()), (FOLD_SLOTS, MEAN_SLOTS));
    }

    #[test]
    fn a_failing_lookup_fails_the_whole_table() {
        let result = KernelTable::build(|name| {
            if name == "ruccl_fold_min_f16" {
                Err(CudaError::MissingKernel {
                    name: name.to_owned(),
                    device: DeviceId::new(0),
                })
            } else {
                Ok(())
            }
        });
        assert!(matches!(
            result,
            Err(CudaError::MissingKernel { name, .. }) if name == "ruccl_fold_min_f16"
        ));
    }

    #[test]
    fn ptx_without_kernels_or_with_nul_is_rejected() {
        assert!(matches!(
            check_ptx(".version 9.0\n.target sm_75\n"),
            Err(CudaError::InvalidPtx { .. })
        ));
        assert!(matches!(
            check_ptx(".visible .entry k(\n)\0"),
            Err(CudaError::InvalidPtx { .. })
        ));
    }

    #[test]
    fn ptx_header_fields_parse_back() {
        let header = ptx_header("NVRTC 13.0");
        assert_eq!(ptx_fingerprint(&header), Some(source_fingerprint()));
        let ptx = ".version 8.7\n.target sm_90a\n.visible .entry ruccl_mean_f32(\n";
        assert_eq!(ptx_isa_version(ptx), Some((8, 7)));
        assert_eq!(ptx_target(ptx), Some("sm_90a"));
        assert_eq!(ptx_entries(ptx), vec!["ruccl_mean_f32"]);
    }

    #[test]
    fn fnv1a64_matches_reference_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn a_missing_ptx_file_is_a_typed_error() {
        let source = KernelSource::PtxFile(PathBuf::from("/nonexistent/ruccl.ptx"));
        assert!(matches!(source.ptx(), Err(CudaError::PtxFile { .. })));
    }

    #[test]
    fn a_missing_nvrtc_is_a_typed_error_not_a_panic() {
        if !nvrtc_available() {
            assert!(matches!(
                KernelSource::Nvrtc.ptx(),
                Err(CudaError::NvrtcNotFound { .. })
            ));
        }
    }

    /// NVRTC is only the fallback to the shipped PTX: where it is absent, even the hardware run
    /// reports an allowed skip.
    #[test]
    #[ignore = "needs NVRTC (libnvrtc.so.12 or newer on the loader path): run with --include-ignored"]
    fn nvrtc_compiles_the_embedded_kernels() {
        match KernelSource::Nvrtc.ptx() {
            Err(CudaError::NvrtcNotFound { searched }) => {
                println!(
                    "SKIP (allowed): nvrtc_compiles_the_embedded_kernels: no NVRTC library ({} names tried); the fallback is unavailable",
                    searched.len()
                );
            }
            Ok(ptx) => {
                let defined: BTreeSet<&str> = ptx_entries(&ptx).into_iter().collect();
                assert_eq!(defined.len(), kernel_names().len());
            }
            Err(other) => panic!("NVRTC failed: {other}"),
        }
    }

    #[test]
    fn grids_cover_small_tensors_and_cap_large_ones() {
        assert_eq!(grid_for(1, 1056).grid_dim, (1, 1, 1));
        assert_eq!(grid_for(257, 1056).grid_dim, (2, 1, 1));
        assert_eq!(grid_for(1 << 30, 1056).grid_dim, (1056, 1, 1));
        assert_eq!(grid_for(1 << 30, 0).grid_dim, (1, 1, 1));
        assert_eq!(grid_for(10, 8).block_dim, (BLOCK_THREADS, 1, 1));
    }
}
