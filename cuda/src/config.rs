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
    /// Every logical device on a GPU uses its primary context (separate streams and buffers only).
    SharedPrimary,
}

impl ContextPolicy {
    /// The environment variable [`CudaConfig::from_env`] reads for this setting.
    pub const ENV: &'static str = "RUCCL_CUDA_CONTEXTS";
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
    /// PTX path) and `RUCCL_CUDA_CONTEXTS` (`separate` or `shared`) where they are set.
    pub fn from_env() -> Self {
        let mut config = Self::default();
        if let Some(kernels) = KernelSource::from_env() {
            config.kernels = kernels;
        }
        match std::env::var(ContextPolicy::ENV).as_deref().map(str::trim) {
            Ok("shared") => config.contexts = ContextPolicy::SharedPrimary,
            Ok("separate") => config.contexts = ContextPolicy::SeparateWhereAllowed,
            _ => {}
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
