//! [`Topology`]: what the executor set up — which context each logical device got, and which
//! peer links are enabled. Printed by `gpu-check.sh` for the reviewer.

use crate::error::DriverCode;
use ruccl_core::DeviceId;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The context a logical device runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContextKind {
    /// The GPU's primary context (the first logical device on each GPU).
    Primary,
    /// A context of its own, created for this logical device.
    Separate,
    /// The primary context, shared with the GPU's first logical device: by configuration, or
    /// because the driver refused another context (the reason says which).
    SharedPrimary {
        /// Why the context is shared.
        reason: String,
    },
}

impl fmt::Display for ContextKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContextKind::Primary => f.write_str("primary context"),
            ContextKind::Separate => f.write_str("own context"),
            ContextKind::SharedPrimary { reason } => write!(f, "shared primary context ({reason})"),
        }
    }
}

/// One logical device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneInfo {
    /// The logical device.
    pub device: DeviceId,
    /// The GPU ordinal it runs on.
    pub ordinal: usize,
    /// The GPU's name as the driver reports it.
    pub gpu_name: String,
    /// Its context.
    pub context: ContextKind,
}

/// Whether one context may access another's memory directly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerStatus {
    /// Peer access is enabled: copies go over the GPUs' link (NVLink or PCIe).
    Enabled,
    /// The hardware does not support peer access between the two GPUs: the driver stages copies
    /// through host memory.
    Unsupported,
    /// Peer access was not attempted (disabled by configuration).
    NotAttempted,
    /// Enabling failed; copies still work, staged by the driver.
    Failed(DriverCode),
}

/// Peer access from one logical device's context to another's, on a different GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerLink {
    /// The device whose context was granted access.
    pub from: DeviceId,
    /// The device whose memory it may access.
    pub to: DeviceId,
    /// The outcome.
    pub status: PeerStatus,
}

/// The executor's setup, one entry per logical device and per cross-GPU context pair.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    /// Every logical device, in increasing order.
    pub lanes: Vec<LaneInfo>,
    /// Every ordered pair of distinct contexts on different GPUs.
    pub peers: Vec<PeerLink>,
}

impl Topology {
    /// One line for reports (`gpu-check.sh` prints it as the run's topology): ranks per GPU,
    /// how many ranks got which kind of context (with the reasons for sharing), and the peer
    /// links' outcomes, e.g. `8 ranks on 1 GPU (GPU 0 NVIDIA H200: 8 ranks); contexts: 1
    /// primary, 7 own, 0 shared; peer links: none (no cross-GPU pairs)`.
    pub fn summary(&self) -> String {
        let mut gpus: BTreeMap<usize, (&str, usize)> = BTreeMap::new();
        let (mut primary, mut own, mut shared) = (0, 0, 0);
        let mut reasons: BTreeSet<&str> = BTreeSet::new();
        for lane in &self.lanes {
            gpus.entry(lane.ordinal)
                .or_insert((lane.gpu_name.as_str(), 0))
                .1 += 1;
            match &lane.context {
                ContextKind::Primary => primary += 1,
                ContextKind::Separate => own += 1,
                ContextKind::SharedPrimary { reason } => {
                    shared += 1;
                    reasons.insert(reason);
                }
            }
        }
        let per_gpu: Vec<String> = gpus
            .iter()
            .map(|(ordinal, (name, ranks))| format!("GPU {ordinal} {name}: {ranks} ranks"))
            .collect();
        let shared_reasons = if reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", reasons.into_iter().collect::<Vec<_>>().join("; "))
        };
        let peers = if self.peers.is_empty() {
            "none (no cross-GPU pairs)".to_owned()
        } else {
            let count = |wanted: fn(&PeerStatus) -> bool| {
                self.peers
                    .iter()
                    .filter(|link| wanted(&link.status))
                    .count()
            };
            format!(
                "{} enabled, {} unsupported, {} failed, {} not attempted",
                count(|status| matches!(status, PeerStatus::Enabled)),
                count(|status| matches!(status, PeerStatus::Unsupported)),
                count(|status| matches!(status, PeerStatus::Failed(_))),
                count(|status| matches!(status, PeerStatus::NotAttempted)),
            )
        };
        format!(
            "{} ranks on {} GPU{} ({}); contexts: {primary} primary, {own} own, {shared} shared{shared_reasons}; peer links: {peers}",
            self.lanes.len(),
            gpus.len(),
            if gpus.len() == 1 { "" } else { "s" },
            per_gpu.join(", "),
        )
    }
}

impl fmt::Display for Topology {
    /// One line per logical device, then one per peer link (or a note that all ranks share a GPU).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for lane in &self.lanes {
            writeln!(
                f,
                "{} -> GPU {} ({}), {}",
                lane.device, lane.ordinal, lane.gpu_name, lane.context
            )?;
        }
        if self.peers.is_empty() {
            writeln!(
                f,
                "no cross-GPU pairs: ranks on one GPU exchange by inter-context copies"
            )?;
        }
        for link in &self.peers {
            writeln!(f, "peer {} -> {}: {:?}", link.from, link.to, link.status)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_has_a_line_per_lane_and_link() {
        let topology = Topology {
            lanes: vec![
                LaneInfo {
                    device: DeviceId::new(0),
                    ordinal: 0,
                    gpu_name: "NVIDIA H200".into(),
                    context: ContextKind::Primary,
                },
                LaneInfo {
                    device: DeviceId::new(1),
                    ordinal: 1,
                    gpu_name: "NVIDIA H200".into(),
                    context: ContextKind::Primary,
                },
            ],
            peers: vec![PeerLink {
                from: DeviceId::new(0),
                to: DeviceId::new(1),
                status: PeerStatus::Enabled,
            }],
        };
        let text = topology.to_string();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.contains("device 1 -> GPU 1 (NVIDIA H200), primary context"));
        assert!(text.contains("peer device 0 -> device 1: Enabled"));
    }

    #[test]
    fn the_summary_counts_ranks_contexts_and_peer_outcomes_on_one_line() {
        let lane = |device: u32, ordinal: usize, context: ContextKind| LaneInfo {
            device: DeviceId::new(device),
            ordinal,
            gpu_name: "NVIDIA H200".into(),
            context,
        };
        let refused = || ContextKind::SharedPrimary {
            reason: "cuCtxCreate refused: CUDA_ERROR_OUT_OF_MEMORY (2)".into(),
        };
        let topology = Topology {
            lanes: vec![
                lane(0, 0, ContextKind::Primary),
                lane(1, 0, ContextKind::Separate),
                lane(2, 0, refused()),
                lane(3, 1, ContextKind::Primary),
            ],
            peers: vec![
                PeerLink {
                    from: DeviceId::new(0),
                    to: DeviceId::new(3),
                    status: PeerStatus::Enabled,
                },
                PeerLink {
                    from: DeviceId::new(3),
                    to: DeviceId::new(0),
                    status: PeerStatus::Unsupported,
                },
            ],
        };
        assert_eq!(
            topology.summary(),
            "4 ranks on 2 GPUs (GPU 0 NVIDIA H200: 3 ranks, GPU 1 NVIDIA H200: 1 ranks); \
             contexts: 2 primary, 1 own, 1 shared (cuCtxCreate refused: CUDA_ERROR_OUT_OF_MEMORY (2)); \
             peer links: 1 enabled, 1 unsupported, 0 failed, 0 not attempted"
        );
        let one_gpu = Topology {
            lanes: vec![lane(0, 0, ContextKind::Primary)],
            peers: vec![],
        };
        assert_eq!(
            one_gpu.summary(),
            "1 ranks on 1 GPU (GPU 0 NVIDIA H200: 1 ranks); contexts: 1 primary, 0 own, 0 shared; \
             peer links: none (no cross-GPU pairs)"
        );
    }

    #[test]
    fn one_gpu_topologies_say_copies_are_inter_context() {
        let topology = Topology {
            lanes: vec![LaneInfo {
                device: DeviceId::new(4),
                ordinal: 0,
                gpu_name: "GPU".into(),
                context: ContextKind::SharedPrimary {
                    reason: "configured".into(),
                },
            }],
            peers: vec![],
        };
        let text = topology.to_string();
        assert!(
            text.contains("shared primary context (configured)"),
            "{text}"
        );
        assert!(text.contains("no cross-GPU pairs"), "{text}");
    }
}
