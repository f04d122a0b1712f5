//! The communicator registry under concurrent use. Here the facade's `Arc` is under test: the
//! registry hands it out.

use super::{Group, Handle, HarnessArc, Stopping, Task, concurrently, run_and_check};
use crate::device::{devices, lean};
use crate::properties;
use crate::script::Script;
use crate::watch::Watch;
use ruccl_core::sync::Arc;
use ruccl_core::{NativeCommunicator, NativeCommunicators};
use ruccl_sim::{FaultPlan, SimDevice};

type Communicator = Arc<NativeCommunicator<SimDevice>>;

fn lookup(registry: &NativeCommunicators<SimDevice>, world: usize, reversed: bool) -> Communicator {
    let mut list = devices(world);
    if reversed {
        list.reverse();
    }
    match registry.communicator(list) {
        Ok(communicator) => communicator,
        Err(error) => panic!("harness: the registry refused a valid device list: {error}"),
    }
}

/// Concurrent `communicator(devices)` calls: `callers - 1` threads ask for devices `[0, 1]`, one
/// asks for `[1, 0]` (the same devices in another order).
///
/// Checks **registry**: the calls for one list all got the same communicator; the other order got
/// another one.
pub fn concurrent_lookups(callers: usize) {
    let registry = HarnessArc::new(NativeCommunicators::new(lean()));
    let tasks: Vec<Task<Communicator>> = (0..callers)
        .map(|caller| {
            let registry = HarnessArc::clone(&registry);
            let reversed = caller + 1 == callers;
            Box::new(move || lookup(&registry, 2, reversed)) as Task<Communicator>
        })
        .collect();
    let mut handles = concurrently(tasks);
    let Some(reversed) = handles.pop() else {
        return;
    };
    properties::registry_same_list(&handles);
    if let Some(first) = handles.first() {
        properties::registry_distinct_lists(first, &reversed);
    }
}

/// Replacement of an aborted communicator: one thread gets the communicator for `[0, 1]`, aborts
/// it and asks again; another asks for the same list concurrently. The second request of the
/// first thread gets a fresh, live communicator; the other thread got the old one or that same
/// fresh one (never a third); a later request gets the fresh one again. With `use_it`, the two
/// ranks then run `generations` generations on the replacement.
///
/// Checks **registry** and **abort** (an aborted communicator is never handed out again), and —
/// with `use_it` — **agreement**, **reuse**, **failure delivery**, **no hang, no poison** and
/// **resources** on the replacement.
pub fn aborted_communicator_is_replaced(use_it: bool, generations: usize) {
    let device = lean();
    let registry = HarnessArc::new(NativeCommunicators::new(device.clone()));
    let aborting = HarnessArc::clone(&registry);
    let asking = HarnessArc::clone(&registry);
    let tasks: Vec<Task<Vec<Communicator>>> = vec![
        Box::new(move || {
            let first = lookup(&aborting, 2, false);
            first.abort("replace me");
            let replacement = lookup(&aborting, 2, false);
            properties::registry_replaces_aborted(&first, &replacement);
            vec![first, replacement]
        }),
        Box::new(move || vec![lookup(&asking, 2, false)]),
    ];
    let mut results = concurrently(tasks).into_iter().flatten();
    let (Some(first), Some(replacement), Some(other)) =
        (results.next(), results.next(), results.next())
    else {
        return;
    };
    if !Arc::ptr_eq(&other, &first) {
        properties::registry_same_list(&[Arc::clone(&replacement), other]);
    }
    let again = lookup(&registry, 2, false);
    properties::registry_same_list(&[Arc::clone(&replacement), again]);
    if use_it {
        let group = HarnessArc::new(Group {
            communicator: Handle::Shared(replacement),
            device,
            script: Script::all_reduce(2, generations, 3),
            plan: FaultPlan::none(),
            watch: Watch::current(),
        });
        run_and_check(group, Vec::new(), Stopping::default());
    }
}
