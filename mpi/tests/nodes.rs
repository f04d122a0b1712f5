//! Several machines, simulated on one: Open MPI processes grouped into "nodes", each node with
//! its own device list, each process taking its share of its node's devices
//! ([`local_devices`]) and joining one hierarchical communicator — what a hostfile or `srun`
//! job does across machines (`mpi/README.md`, "Several machines").
//!
//! Each process reads its node from the environment, as a per-node setting would be:
//! `RUCCL_TEST_NODE` (the node's number, default 0) and `RUCCL_TEST_NODE_DEVICES` (the node's
//! devices, comma-separated, default `0,1`). `run-tests.sh` starts the nodes with `mpirun`'s
//! MPMD form, e.g. two nodes of one process each:
//!
//! ```text
//! mpirun -np 1 -x RUCCL_TEST_NODE=0 -x RUCCL_TEST_NODE_DEVICES=0,1 nodes : \
//!        -np 1 -x RUCCL_TEST_NODE=1 -x RUCCL_TEST_NODE_DEVICES=0,1,2 nodes
//! ```
//!
//! The node-local rank within a simulated node comes from a split by node number (all
//! processes really share this machine, where [`node_local_rank`] — checked too — puts them all
//! on one node). Every rank's all-reduce result is checked against the reference; the exit
//! status is non-zero if anything failed on any process.

mod common;
use common::{input, passed_everywhere, reference, same_bits};
use ruccl_core::{DeviceId, ElementType, ReduceOperation};
use ruccl_mpi::{
    HierarchicalCommunicator, MpiRuntime, NodeLocal, Waiting, local_devices, node_local_rank,
};
use ruccl_sim::{SimDevice, SimTensor};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

const GENEROUS: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let runtime = match MpiRuntime::initialize() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot initialise MPI: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (process, processes) = (runtime.process(), runtime.processes());
    let control = match runtime.communicator(Waiting::Deadlines, Some(Instant::now() + GENEROUS)) {
        Ok(control) => control,
        Err(error) => {
            eprintln!("[process {process}] cannot create the control communicator: {error}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = run(&runtime);
    if let Err(reason) = &outcome {
        eprintln!("[process {process}] {reason}");
    }
    let ok = passed_everywhere(&control, &runtime, process, outcome.is_err(), GENEROUS);
    if process == 0 {
        let verdict = if ok { "ok" } else { "FAILED" };
        println!("test nodes_with_their_own_device_lists ({processes} processes) ... {verdict}");
    }
    drop(control);
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn run(runtime: &MpiRuntime) -> Result<(), String> {
    let (process, processes) = (runtime.process(), runtime.processes());
    // Every process of this job shares this machine: one node, ranked in world order.
    let machine = node_local_rank().map_err(|error| format!("node_local_rank: {error}"))?;
    let expected = NodeLocal {
        rank: process,
        ranks: processes,
    };
    if machine != expected {
        return Err(format!(
            "node_local_rank gave {machine:?}, expected {expected:?}"
        ));
    }

    let node: u16 = std::env::var("RUCCL_TEST_NODE")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(0);
    let node_devices: Vec<DeviceId> = std::env::var("RUCCL_TEST_NODE_DEVICES")
        .unwrap_or_else(|_| "0,1".to_owned())
        .split(',')
        .map(|id| id.trim().parse().map(DeviceId::new))
        .collect::<Result<_, _>>()
        .map_err(|error| format!("RUCCL_TEST_NODE_DEVICES: {error}"))?;
    // The simulated node: the processes with this node number, in world order.
    let deadline = Some(Instant::now() + GENEROUS);
    let group = runtime
        .split(Some(node), Waiting::Deadlines, deadline)
        .map_err(|error| format!("the node split: {error}"))?
        .ok_or("no node communicator")?;
    let local = NodeLocal {
        rank: ruccl_mpi::InterProcess::process(&group),
        ranks: ruccl_mpi::InterProcess::processes(&group),
    };
    let devices = local_devices(local, &node_devices).map_err(|error| error.to_string())?;
    println!("process {process}: node {node} rank {local:?}, devices {devices:?}");

    let engine = runtime
        .communicator(Waiting::Deadlines, deadline)
        .map(Arc::new)
        .map_err(|error| error.to_string())?;
    let communicator =
        HierarchicalCommunicator::new(devices.clone(), SimDevice::new(), engine, deadline)
            .map_err(|error| error.to_string())?;
    let world = communicator.world_size();
    let len = 24;
    let (element, operation) = (ElementType::F32, ReduceOperation::Sum);
    let want = reference(world, len, element, operation);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..devices.len())
            .map(|rank| {
                let (communicator, devices, want) = (&communicator, &devices, &want);
                scope.spawn(move || -> Result<(), String> {
                    let global = communicator.global_rank(rank).ok_or("no global rank")?;
                    let tensor =
                        SimTensor::new(devices[rank], input(global, len, element, operation));
                    let output = communicator
                        .all_reduce(rank, tensor, operation)
                        .map_err(|error| format!("rank {rank}: {error}"))?;
                    if same_bits(output.values(), want) {
                        Ok(())
                    } else {
                        Err(format!("global rank {global}: a wrong sum"))
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap_or(Err("a rank panicked".to_owned())))
            .collect::<Result<Vec<()>, String>>()
    })?;
    Ok(())
}
