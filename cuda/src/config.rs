//! [`CudaConfig`]: how the executor sets itself up (kernels, contexts, peer access) and runs
//! (in place or not, how much idle device memory it keeps, the link model it reports).

use crate::kernels::KernelSource;
use ruccl_core::{LinkModel, Links};

/// Whether logical devices that share a GPU also get separate CUDA contexts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContextPolicy {
    /// Every logical device on a GPU uses the GPU's primary context (the one the CUDA runtime and
    /// PyTorch use), each with its own stream, events and buffers: ranks on one GPU do not
    /// time-slice between contexts, and copies between them are plain device-to-device copies.
    /// The default (`RUCCL_CUDA_CONTEXTS=shared`).
    #[default]
    SharedPrimary,
    /// The first logical device on a GPU uses the primary context; each further one gets a context
    /// of its own (`cuCtxCreate`), so ranks on one GPU talk through the same inter-context peer
    /// copies as ranks on different GPUs. A refused context is an error
    /// ([`CudaError::ContextRefused`](crate::CudaError::ContextRefused)), never a fallback
    /// (`RUCCL_CUDA_CONTEXTS=separate`).
    Separate,
    /// As [`ContextPolicy::Separate`], but where the driver refuses another context that rank
    /// falls back to the primary one, and the topology report says so
    /// (`RUCCL_CUDA_CONTEXTS=separate-where-allowed`; under [`REQUIRE_HARDWARE_ENV`] this
    /// becomes [`ContextPolicy::Separate`]).
    SeparateWhereAllowed,
}

impl ContextPolicy {
    /// The environment variable [`CudaConfig::from_env`] reads for this setting.
    pub const ENV: &'static str = "RUCCL_CUDA_CONTEXTS";
}

/// The environment variable that turns every fallback into a failure when set to `1`: a refused
/// context ([`ContextPolicy::Separate`]), and in the hardware tests a missing GPU, a missing NVRTC
/// or any other skip. `gpu-check.sh run` sets it; nothing sets it on machines without a GPU.
pub const REQUIRE_HARDWARE_ENV: &str = "RUCCL_CUDA_REQUIRE_HARDWARE";

/// Whether [`REQUIRE_HARDWARE_ENV`] is set to `1`.
pub fn hardware_required() -> bool {
    std::env::var(REQUIRE_HARDWARE_ENV).is_ok_and(|value| value.trim() == "1")
}

/// The executor's configuration. `CudaConfig::default()` is what [`CudaCollective::new`] uses.
///
/// [`CudaCollective::new`]: crate::CudaCollective::new
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CudaConfig {
    /// Where the kernels' PTX comes from.
    pub kernels: KernelSource,
    /// Contexts for logical devices sharing a GPU.
    pub contexts: ContextPolicy,
    /// Whether to enable peer access between contexts on different GPUs that support it.
    pub peer_access: bool,
    /// Whether a failed peer-access enable (on GPUs that support peer access) may fall back to
    /// copies the driver stages, recorded in the topology report. `false` (the default): it is
    /// [`CudaError::PeerAccessFailed`](crate::CudaError::PeerAccessFailed).
    pub peer_fallback: bool,
    /// In place (the default): where a plan's working buffer is exactly a rank's input
    /// (all-reduce, reduce-scatter, broadcast), `begin` works in the input's own allocation and
    /// copies nothing. Out of place (`false`): every generation copies each input into a working
    /// buffer of its own and leaves the input untouched — what nccl-tests calls out-of-place,
    /// for the perf tool's second column.
    pub in_place: bool,
    /// The most bytes of idle device memory each logical device keeps for later generations
    /// (working buffers, scratch, staging, dropped tensors; see `cache.rs`). `0` keeps none:
    /// every buffer is freed when released.
    pub cache_bytes: usize,
    /// The α–β model `Algorithm::Auto` prices plans with; `None` for the executor's estimate
    /// ([`CudaConfig::estimated_link_model`]).
    pub link_model: Option<LinkModel>,
}

/// The default of [`CudaConfig::cache_bytes`]: 2 GiB of idle buffers per logical device.
pub const DEFAULT_CACHE_BYTES: usize = 2 << 30;

/// The environment variable [`CudaConfig::from_env`] reads for [`CudaConfig::in_place`]
/// (`0` for out of place).
pub const IN_PLACE_ENV: &str = "RUCCL_CUDA_IN_PLACE";

impl Default for CudaConfig {
    fn default() -> Self {
        Self {
            kernels: KernelSource::default(),
            contexts: ContextPolicy::default(),
            peer_access: true,
            peer_fallback: false,
            in_place: true,
            cache_bytes: DEFAULT_CACHE_BYTES,
            link_model: None,
        }
    }
}

impl CudaConfig {
    /// The default configuration, overridden by `RUCCL_CUDA_KERNELS` (`embedded`, `nvrtc` or a
    /// PTX path), `RUCCL_CUDA_CONTEXTS` (`shared`, `separate` or `separate-where-allowed`) and
    /// `RUCCL_CUDA_IN_PLACE`
    /// (`0` for out of place) where they are set. Under
    /// [`REQUIRE_HARDWARE_ENV`] separate contexts are required ([`ContextPolicy::Separate`]):
    /// a refused context fails construction instead of falling back.
    pub fn from_env() -> Self {
        let contexts = std::env::var(ContextPolicy::ENV).ok();
        let mut config = Self::from_settings(
            KernelSource::from_env(),
            contexts.as_deref(),
            hardware_required(),
        );
        if std::env::var(IN_PLACE_ENV).is_ok_and(|value| value.trim() == "0") {
            config.in_place = false;
        }
        config
    }

    /// The executor's α–β estimate for an H200-class machine, until measured: α = 10 µs per
    /// step (a step queues its copies, event records and waits and, when combining, a fold
    /// launch on every rank's stream; each costs a few µs of host and device latency), β = 300
    /// GB/s on each rank's port ([`Links::PerRank`]: one full-duplex NVLink 4 port is 450 GB/s
    /// per direction, of which peer copies reach about two thirds; logical ranks sharing one
    /// GPU copy through its HBM at a similar or higher rate). An estimate, not a measurement:
    /// the perf tool's busbw column, against the device-to-device copy bandwidth measured in
    /// the same run ([`CudaCollective::copy_bandwidth`]), is what should replace it.
    ///
    /// [`CudaCollective::copy_bandwidth`]: crate::CudaCollective::copy_bandwidth
    pub fn estimated_link_model() -> LinkModel {
        LinkModel::new(10e-6, 300e9, Links::PerRank).unwrap_or_default()
    }

    /// The link model the executor reports: [`CudaConfig::link_model`], or the estimate.
    pub fn effective_link_model(&self) -> LinkModel {
        self.link_model.unwrap_or_else(Self::estimated_link_model)
    }

    /// [`CudaConfig::from_env`] with the environment's values passed in.
    fn from_settings(
        kernels: Option<KernelSource>,
        contexts: Option<&str>,
        hardware_required: bool,
    ) -> Self {
        let mut config = Self::default();
        if let Some(kernels) = kernels {
            config.kernels = kernels;
        }
        match contexts.map(str::trim) {
            Some("shared") => config.contexts = ContextPolicy::SharedPrimary,
            Some("separate") => config.contexts = ContextPolicy::Separate,
            Some("separate-where-allowed") => {
                config.contexts = ContextPolicy::SeparateWhereAllowed;
            }
            _ => {}
        }
        if hardware_required && config.contexts == ContextPolicy::SeparateWhereAllowed {
            config.contexts = ContextPolicy::Separate;
        }
        config
    }

    /// This configuration with `kernels` as the PTX source.
    pub fn with_kernels(mut self, kernels: KernelSource) -> Self {
        self.kernels = kernels;
        self
    }

    /// This configuration with `contexts` as the context policy.
    pub fn with_contexts(mut self, contexts: ContextPolicy) -> Self {
        self.contexts = contexts;
        self
    }

    /// This configuration allowing (`true`) or refusing (`false`, the default) a fallback to
    /// driver-staged copies where enabling peer access fails; see [`CudaConfig::peer_fallback`].
    pub fn with_peer_fallback(mut self, fallback: bool) -> Self {
        self.peer_fallback = fallback;
        self
    }

    /// This configuration with peer access enabled or not.
    pub fn with_peer_access(mut self, peer_access: bool) -> Self {
        self.peer_access = peer_access;
        self
    }

    /// This configuration in place (`true`) or out of place (`false`); see
    /// [`CudaConfig::in_place`].
    pub fn with_in_place(mut self, in_place: bool) -> Self {
        self.in_place = in_place;
        self
    }

    /// This configuration keeping at most `bytes` of idle buffers per logical device.
    pub fn with_cache_bytes(mut self, bytes: usize) -> Self {
        self.cache_bytes = bytes;
        self
    }

    /// This configuration reporting `model` as its link model (e.g. one measured on the machine).
    pub fn with_link_model(mut self, model: LinkModel) -> Self {
        self.link_model = Some(model);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_uses_embedded_ptx_one_shared_context_strict_peer_access_in_place_and_a_cache() {
        let config = CudaConfig::default();
        assert_eq!(config.kernels, KernelSource::Embedded);
        assert_eq!(config.contexts, ContextPolicy::SharedPrimary);
        assert!(config.peer_access);
        assert!(!config.peer_fallback);
        assert!(config.in_place);
        assert_eq!(config.cache_bytes, DEFAULT_CACHE_BYTES);
        assert_eq!(config.link_model, None);
    }

    #[test]
    fn the_link_model_is_the_estimate_unless_one_is_given() {
        let estimate = CudaConfig::estimated_link_model();
        assert_eq!(estimate.links(), Links::PerRank);
        assert!(
            estimate.beta() > LinkModel::default().beta(),
            "NVLink beats PCIe"
        );
        assert_eq!(CudaConfig::default().effective_link_model(), estimate);
        let measured = LinkModel::new(7e-6, 123e9, Links::PerRank).expect("a valid model");
        let config = CudaConfig::default().with_link_model(measured);
        assert_eq!(config.effective_link_model(), measured);
    }

    #[test]
    fn requiring_hardware_turns_the_context_fallback_into_an_error() {
        let default = CudaConfig::from_settings(None, None, true);
        assert_eq!(default.contexts, ContextPolicy::SharedPrimary);
        let relaxed = CudaConfig::from_settings(None, Some("separate-where-allowed"), false);
        assert_eq!(relaxed.contexts, ContextPolicy::SeparateWhereAllowed);
        let strict = CudaConfig::from_settings(None, Some("separate-where-allowed"), true);
        assert_eq!(strict.contexts, ContextPolicy::Separate);
        let strict = CudaConfig::from_settings(None, Some("separate"), false);
        assert_eq!(strict.contexts, ContextPolicy::Separate);
        // Sharing on purpose is a configuration, not a fallback: it stays allowed.
        let shared = CudaConfig::from_settings(None, Some(" shared "), true);
        assert_eq!(shared.contexts, ContextPolicy::SharedPrimary);
    }

    #[test]
    fn builders_change_one_setting_each() {
        let config = CudaConfig::default()
            .with_kernels(KernelSource::Nvrtc)
            .with_contexts(ContextPolicy::Separate)
            .with_peer_access(false)
            .with_peer_fallback(true)
            .with_in_place(false)
            .with_cache_bytes(0);
        assert_eq!(config.kernels, KernelSource::Nvrtc);
        assert_eq!(config.contexts, ContextPolicy::Separate);
        assert!(!config.peer_access);
        assert!(config.peer_fallback);
        assert!(!config.in_place);
        assert_eq!(config.cache_bytes, 0);
    }
}
