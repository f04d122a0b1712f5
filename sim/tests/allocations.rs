//! A steady generation allocates no buffer, at any size: after the first generations, the
//! simulated device builds working buffers, copies aside and outputs in the allocations earlier
//! generations left in its pool, so a timed loop measures the collective, not page faults.
//! (Bookkeeping — a few small vectors per generation, more when a step is cut across threads,
//! and a step's layout on a thread that last ran another, its size set by the transfers, not the
//! tensor — is counted and printed, not asserted: malloc's own caches serve it.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_core::{Collective, CollectiveOptions, DeviceId, NativeCommunicator, ReduceOperation};
use ruccl_sim::{HostTensors, HostValues, SimDevice};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An allocation this large is a buffer (the size from which the device's pool keeps
/// allocations, `MIN_POOLED_BYTES`: below it malloc's caches serve them, above it glibc maps
/// fresh pages, each faulted in on first touch).
const BUFFER_BYTES: usize = 64 << 10;

/// The system allocator, counting what it is asked for.
struct Counting;

/// Allocations (and growths) of at least [`BUFFER_BYTES`], and of any size.
static BUFFERS: AtomicUsize = AtomicUsize::new(0);
static ALL: AtomicUsize = AtomicUsize::new(0);

impl Counting {
    fn count(size: usize) {
        ALL.fetch_add(1, Ordering::Relaxed);
        if size >= BUFFER_BYTES {
            BUFFERS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

// SAFETY: every call forwards to the system allocator with the caller's own arguments; counting
// is the only addition.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::count(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::count(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator, with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::count(new_size);
        // SAFETY: as for `dealloc`; the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A collective call that gives up (on every rank alike) after a minute instead of hanging.
fn bounded() -> CollectiveOptions {
    CollectiveOptions::default().with_timeout(std::time::Duration::from_secs(60))
}

/// `(buffer allocations, all allocations)` over `timed` generations of `collective` on `world`
/// ranks with `elements` f32 each, after `warm` generations, every output fed back as the next
/// input (nccl-tests' loop).
fn count(
    collective: Collective,
    world: usize,
    elements: usize,
    in_place: bool,
    (warm, timed): (usize, usize),
) -> (usize, usize) {
    let device = SimDevice::builder()
        .in_place(in_place)
        .census(false)
        .record_traffic(false)
        .build();
    let devices: Vec<DeviceId> = (0..world as u32).map(DeviceId::new).collect();
    let communicator = NativeCommunicator::new(devices.clone(), device.clone()).unwrap();
    let barrier = Barrier::new(world);
    let before = std::sync::Mutex::new((0, 0));
    let counted: Vec<(usize, usize)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let (communicator, device) = (&communicator, device.clone());
                let (barrier, before, on) = (&barrier, &before, devices[rank]);
                scope.spawn(move || {
                    let values = HostValues::F32(vec![1.0; elements]);
                    let mut tensor = device.upload(on, &values).unwrap();
                    drop(values);
                    let call = |tensor| {
                        communicator
                            // Bounded: a rendezvous that hangs fails every rank alike, in time.
                            .collective(rank, tensor, collective, bounded())
                            .unwrap()
                    };
                    for _ in 0..warm {
                        tensor = call(tensor);
                    }
                    barrier.wait();
                    if rank == 0 {
                        let now = (BUFFERS.load(Ordering::SeqCst), ALL.load(Ordering::SeqCst));
                        *before.lock().unwrap() = now;
                    }
                    barrier.wait();
                    for _ in 0..timed {
                        tensor = call(tensor);
                    }
                    barrier.wait();
                    let (buffers, all) = *before.lock().unwrap();
                    let counted = (
                        BUFFERS.load(Ordering::SeqCst) - buffers,
                        ALL.load(Ordering::SeqCst) - all,
                    );
                    barrier.wait();
                    drop(tensor);
                    counted
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    });
    counted[0]
}

#[test]
fn steady_generations_allocate_no_buffer_at_any_size() {
    let sum = ReduceOperation::Sum;
    // (world, elements, warm and timed generations): up to 64 MiB per rank (256 MiB over the
    // ranks), fewer generations where each is long in a debug
    // build.
    let sizes = [
        (4, 1, (8, 20)),
        (4, 64 << 10, (8, 20)),
        (4, 1 << 20, (4, 6)),
        (2, 256 << 10, (8, 20)),
        (8, 1 << 20, (3, 4)),
        (4, 16 << 20, (2, 2)),
    ];
    for (world, elements, generations) in sizes {
        // The collectives whose output can be the next input.
        for collective in [
            Collective::AllReduce(sum),
            Collective::Broadcast { root: 0 },
        ] {
            for in_place in [true, false] {
                let (buffers, all) = count(collective, world, elements, in_place, generations);
                let timed = generations.1;
                eprintln!(
                    "{collective:?} W = {world}, {} B per rank, in place {in_place}: {buffers} \
                     buffers and {all} allocations in {timed} generations",
                    elements * 4
                );
                assert_eq!(
                    buffers, 0,
                    "{collective:?} W = {world}, {elements} f32, in place {in_place}: a steady \
                     generation allocated a buffer"
                );
            }
        }
    }
}
