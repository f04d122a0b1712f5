//! Where a process sits on its machine: [`node_local_rank`] (MPI's shared-memory split of
//! `MPI_COMM_WORLD`) and [`local_devices`], which hands each process of a node its share of
//! the node's devices. The launcher is the system's (`mpirun` with a hostfile, Slurm's `srun`;
//! `mpi/README.md`, "Several machines"); these two turn what it started into a device list for
//! [`HierarchicalCommunicator::new`](crate::HierarchicalCommunicator::new).

use crate::engine::in_flight::mpi_error;
use crate::engine::runtime::lock_mpi;
use crate::error::InterProcessError;
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use ruccl_core::DeviceId;
use std::ffi::c_int;

/// This process's place among the processes of its node (those that share memory with it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeLocal {
    /// This process's index among its node's processes, in `MPI_COMM_WORLD` order.
    pub rank: usize,
    /// The number of processes on its node.
    pub ranks: usize,
}

/// This process's node-local rank: `MPI_Comm_split_type(MPI_COMM_WORLD,
/// MPI_COMM_TYPE_SHARED)`, keyed by the world rank. A collective over the whole job: every
/// process must call it, in the same order as its other setup calls, after
/// [`MpiRuntime::initialize`](crate::MpiRuntime::initialize) (before it, or after MPI is
/// finalised, an error).
pub fn node_local_rank() -> Result<NodeLocal, InterProcessError> {
    let mpi_guard = lock_mpi();
    if !mpi::environment::is_initialized() || mpi::environment::is_finalized() {
        return Err(InterProcessError::Internal {
            message: "node_local_rank needs MPI initialised (MpiRuntime::initialize)".to_owned(),
        });
    }
    let world = SimpleCommunicator::world().as_raw();
    let (mut world_rank, mut rank, mut size): (c_int, c_int, c_int) = (0, 0, 0);
    // SAFETY: reads of `const` globals of rsmpi's C shim (MPI_COMM_TYPE_SHARED, MPI_INFO_NULL,
    // MPI_COMM_NULL), statically initialised; nothing writes them.
    let (shared, info, null) = unsafe {
        (
            ffi::RSMPI_COMM_TYPE_SHARED,
            ffi::RSMPI_INFO_NULL,
            ffi::RSMPI_COMM_NULL,
        )
    };
    let mut node = null;
    // SAFETY: `world` is MPI_COMM_WORLD (MPI is initialised, checked above, under the MPI lock);
    // `world_rank`, `node`, `rank` and `size` are locals MPI writes; `node` is freed below.
    let codes = unsafe {
        let split = ffi::MPI_Comm_rank(world, &mut world_rank);
        if split != 0 {
            [split, 0, 0]
        } else {
            let split = ffi::MPI_Comm_split_type(world, shared, world_rank, info, &mut node);
            if split != 0 || node == null {
                [split.max(1), 0, 0]
            } else {
                [
                    split,
                    ffi::MPI_Comm_rank(node, &mut rank),
                    ffi::MPI_Comm_size(node, &mut size),
                ]
            }
        }
    };
    if node != null {
        // SAFETY: `node` is the communicator MPI_Comm_split_type created for this call alone;
        // nothing is pending on it.
        unsafe { ffi::MPI_Comm_free(&mut node) };
    }
    drop(mpi_guard);
    if let Some(code) = codes.into_iter().find(|code| *code != 0) {
        return Err(mpi_error("MPI_Comm_split_type", code));
    }
    Ok(NodeLocal {
        rank: usize::try_from(rank).unwrap_or(0),
        ranks: usize::try_from(size).unwrap_or(1).max(1),
    })
}

/// Why a node's devices cannot be shared out among its processes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceMapError {
    /// The node has fewer devices than processes, or a count its processes do not divide.
    #[error("{devices} devices do not split evenly among the node's {ranks} processes")]
    Uneven {
        /// Devices on the node.
        devices: usize,
        /// Processes on the node.
        ranks: usize,
    },
    /// The node-local rank is outside the node's processes.
    #[error("node-local rank {rank} is outside the node's {ranks} processes")]
    RankOutOfRange {
        /// The rank given.
        rank: usize,
        /// Processes on the node.
        ranks: usize,
    },
}

/// This process's share of its node's devices: `node_devices` (every device of the node, in
/// the order its processes should take them) cut into `node.ranks` equal blocks, block
/// `node.rank`. One device per process (`CUDA_VISIBLE_DEVICES`-style) when the counts are
/// equal; several local ranks per process when the node has more devices than processes.
///
/// ```
/// use ruccl_core::DeviceId;
/// use ruccl_mpi::{NodeLocal, local_devices};
///
/// let node: Vec<DeviceId> = (0..4).map(DeviceId::new).collect();
/// let second = NodeLocal { rank: 1, ranks: 2 };
/// assert_eq!(local_devices(second, &node), Ok(vec![DeviceId::new(2), DeviceId::new(3)]));
/// ```
pub fn local_devices(
    node: NodeLocal,
    node_devices: &[DeviceId],
) -> Result<Vec<DeviceId>, DeviceMapError> {
    let (devices, ranks) = (node_devices.len(), node.ranks);
    if node.rank >= ranks {
        return Err(DeviceMapError::RankOutOfRange {
            rank: node.rank,
            ranks,
        });
    }
    if devices < ranks || devices % ranks != 0 {
        return Err(DeviceMapError::Uneven { devices, ranks });
    }
    let block = devices / ranks;
    Ok(node_devices[node.rank * block..(node.rank + 1) * block].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(count: u32) -> Vec<DeviceId> {
        (0..count).map(DeviceId::new).collect()
    }

    #[test]
    fn every_process_of_a_node_takes_its_own_block_and_together_they_take_all() {
        for (devices, ranks) in [(1, 1), (4, 1), (4, 2), (4, 4), (6, 3)] {
            let node = ids(devices);
            let mut taken = Vec::new();
            for rank in 0..ranks {
                let mine = local_devices(NodeLocal { rank, ranks }, &node).unwrap();
                assert_eq!(mine.len(), devices as usize / ranks);
                taken.extend(mine);
            }
            assert_eq!(taken, node);
        }
    }

    #[test]
    fn uneven_counts_and_ranks_outside_the_node_are_refused() {
        let two = NodeLocal { rank: 0, ranks: 2 };
        assert_eq!(
            local_devices(two, &ids(3)),
            Err(DeviceMapError::Uneven {
                devices: 3,
                ranks: 2
            })
        );
        assert!(local_devices(NodeLocal { rank: 0, ranks: 3 }, &ids(2)).is_err());
        assert_eq!(
            local_devices(NodeLocal { rank: 2, ranks: 2 }, &ids(4)),
            Err(DeviceMapError::RankOutOfRange { rank: 2, ranks: 2 })
        );
    }
}
