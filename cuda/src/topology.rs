//! [`Topology`]: what the executor set up — which context each logical device got, and which
//! peer links are enabled. Printed by `gpu-check.sh` for the reviewer.

use crate::error::DriverCode;
use ruccl_core::DeviceId;
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
