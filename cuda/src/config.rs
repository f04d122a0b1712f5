//! [`CudaConfig`]: how the executor sets itself up (kernels, contexts, peer access).

use crate::kernels::KernelSource;

/// Whether logical devices that share a GPU also get separate CUDA contexts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContextPolicy {
    /// The first logical device on a GPU uses the GPU's primary context (the one the CUDA runtime
    /// and PyTorch use); each further one gets its own context (`cuCtxCreate`), so ranks on one
    /// GPU talk through the same inter-context peer copies as ranks on different GPUs. Where the
    /// driver refuses another context, that rank falls back to the primary one (the topology
    /// report says so).
    #[default]
    SeparateWhereAllowed,
    /// As [`ContextPolicy::SeparateWhereAllowed`], but a refused context is an error
    /// ([`CudaError::ContextRefused`](crate::CudaError::ContextRefused)) instead of a fallback:
    /// what [`CudaConfig::from_env`] chooses under [`REQUIRE_HARDWARE_ENV`], so that a check
    /// meant to cover separate contexts cannot pass on a shared one.
    Separate,
    /// Every logical device on a GPU uses its primary context (separate streams and buffers only).
    SharedPrimary,
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
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CudaConfig {
    /// Where the kernels' PTX comes from.
    pub kernels: KernelSource,
    /// Contexts for logical devices sharing a GPU.
    pub contexts: ContextPolicy,
    /// Whether to enable peer access between contexts on different GPUs that support it.
    pub peer_access: bool,
}

impl Default for CudaConfig {
    fn default() -> Self {
        Self {
            kernels: KernelSource::default(),
            contexts: ContextPolicy::default(),
            peer_access: true,
        }
    }
}

impl CudaConfig {
    /// The default configuration, overridden by `RUCCL_CUDA_KERNELS` (`embedded`, `nvrtc` or a
    /// PTX path) and `RUCCL_CUDA_CONTEXTS` (`separate` or `shared`) where they are set. Under
    /// [`REQUIRE_HARDWARE_ENV`] separate contexts are required ([`ContextPolicy::Separate`]):
    /// a refused context fails construction instead of falling back.
    pub fn from_env() -> Self {
        let contexts = std::env::var(ContextPolicy::ENV).ok();
        Self::from_settings(
            KernelSource::from_env(),
            contexts.as_deref(),
            hardware_required(),
        )
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
            Some("separate") => config.contexts = ContextPolicy::SeparateWhereAllowed,
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

    /// This configuration with peer access enabled or not.
    pub fn with_peer_access(mut self, peer_access: bool) -> Self {
        self.peer_access = peer_access;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_uses_embedded_ptx_separate_contexts_and_peer_access() {
        let config = CudaConfig::default();
        assert_eq!(config.kernels, KernelSource::Embedded);
        assert_eq!(config.contexts, ContextPolicy::SeparateWhereAllowed);
        assert!(config.peer_access);
    }

    #[test]
    fn requiring_hardware_turns_the_context_fallback_into_an_error() {
        let relaxed = CudaConfig::from_settings(None, None, false);
        assert_eq!(relaxed.contexts, ContextPolicy::SeparateWhereAllowed);
        let strict = CudaConfig::from_settings(None, None, true);
        assert_eq!(strict.contexts, ContextPolicy::Separate);
        let strict = CudaConfig::from_settings(None, Some("separate"), true);
        assert_eq!(strict.contexts, ContextPolicy::Separate);
        // Sharing on purpose is a configuration, not a fallback: it stays allowed.
        let shared = CudaConfig::from_settings(None, Some(" shared "), true);
        assert_eq!(shared.contexts, ContextPolicy::SharedPrimary);
    }

    #[test]
    fn builders_change_one_setting_each() {
        let config = CudaConfig::default()
            .with_kernels(KernelSource::Nvrtc)
            .with_contexts(ContextPolicy::SharedPrimary)
            .with_peer_access(false);
        assert_eq!(config.kernels, KernelSource::Nvrtc);
        assert_eq!(config.contexts, ContextPolicy::SharedPrimary);
        assert!(!config.peer_access);
    }
}
