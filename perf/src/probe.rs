//! [`Probe`]: the tools' own pass-through decorator around any device. It counts what each
//! rank sends in the steps of the generation being run (the scenario runner's traffic, also in
//! a generation that fails part-way) and, with a trace, records every device call and every
//! rank's collective call as it happens (see [`crate::trace`]).
//!
//! A device call is put on the track of the rank whose thread makes it: each harness thread
//! binds itself to its rank ([`bind_rank`]) and says which generation it is in
//! ([`Probe::call`]). The plan runs on the thread of the last rank to arrive, inside that rank's
//! call, so its `begin`, steps and `finish` land on that rank's track, inside its call.
//!
//! Generations of one communicator run their plans one after another (a generation's plan starts
//! only after every rank has left the previous generation), so one counter of the plan in flight
//! is enough: a rank reads it right after its own call returns, before it can take part in the
//! next generation.

use crate::trace::{Slice, SliceName, TraceSink};
use ruccl_core::{Algorithm, DeviceId, NativeCollectiveDevice, Plan, Step};
use ruccl_sim::{Intercept, Intercepted};
use std::cell::RefCell;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A device behind the [`Probe`].
pub type Probed<D> = Intercepted<D, Probe>;

thread_local! {
    /// What the current harness thread is doing.
    static CONTEXT: RefCell<Context> = const { RefCell::new(Context::new()) };
}

/// A harness thread's rank and current call.
struct Context {
    rank: Option<usize>,
    generation: u64,
    /// The device calls this thread made inside its current call (a bounded list: one
    /// generation's plan).
    device_calls: Vec<(Duration, Duration)>,
    /// The plan this thread ran inside its current call: from `begin`'s start to the last call's
    /// end, its algorithm and the elements its completed steps moved.
    plan: Option<(Duration, Duration, &'static str, usize)>,
}

impl Context {
    const fn new() -> Self {
        Self {
            rank: None,
            generation: 0,
            device_calls: Vec::new(),
            plan: None,
        }
    }
}

/// Make the calling thread rank `rank`'s: its device calls go on that rank's track.
pub fn bind_rank(rank: usize) {
    CONTEXT.with(|context| context.borrow_mut().rank = Some(rank));
}

/// What one generation's plan did, as far as it got.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanTraffic {
    /// Plans begun so far (a generation whose plan never began leaves this unchanged).
    pub begun: u64,
    /// The algorithm of the last plan begun.
    pub algorithm: Option<Algorithm>,
    /// Elements each rank sent to other ranks in the last plan's completed steps.
    pub sent: Vec<usize>,
    /// Elements each rank received from other ranks in the last plan's completed steps.
    pub received: Vec<usize>,
}

impl PlanTraffic {
    /// The most elements any rank sent or received (a root receives all a reduce or a gather
    /// moves).
    pub fn busiest(&self) -> usize {
        self.sent
            .iter()
            .chain(&self.received)
            .copied()
            .max()
            .unwrap_or(0)
    }
}

#[derive(Debug)]
struct Shared {
    world: usize,
    counting: bool,
    sink: Option<TraceSink>,
    traffic: Mutex<PlanTraffic>,
}

/// The [`Intercept`] of a [`Probed`] device; clones share the counters and the trace.
#[derive(Clone, Debug)]
pub struct Probe {
    shared: Arc<Shared>,
}

impl Probe {
    /// A probe for `world` ranks that counts each plan's traffic if `counting` and records to
    /// `sink` if given. With neither, it only passes calls on.
    pub fn new(world: usize, counting: bool, sink: Option<TraceSink>) -> Self {
        Self {
            shared: Arc::new(Shared {
                world,
                counting,
                sink,
                traffic: Mutex::new(PlanTraffic {
                    sent: vec![0; world],
                    received: vec![0; world],
                    ..PlanTraffic::default()
                }),
            }),
        }
    }

    /// `device` behind this probe.
    pub fn wrap<D>(&self, device: D) -> Probed<D> {
        Intercepted::with(device, self.clone())
    }

    /// The traffic of the last plan begun (see the module's note on when it is this rank's).
    pub fn traffic(&self) -> PlanTraffic {
        self.lock().clone()
    }

    /// Run `call`, rank `rank`'s collective call of `generation` (of the collective `name`),
    /// recording it with its waits and the plan it ran when tracing.
    pub fn call<T, E>(
        &self,
        rank: usize,
        generation: u64,
        name: &'static str,
        call: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let Some(sink) = &self.shared.sink else {
            return call();
        };
        CONTEXT.with(|context| {
            let mut context = context.borrow_mut();
            context.rank = Some(rank);
            context.generation = generation;
            context.device_calls.clear();
            context.plan = None;
        });
        let start = sink.now();
        let outcome = call();
        let end = sink.now();
        let (device_calls, plan) = CONTEXT.with(|context| {
            let mut context = context.borrow_mut();
            (
                std::mem::take(&mut context.device_calls),
                context.plan.take(),
            )
        });
        let slice = |name, start, end, ok, elements| Slice {
            name,
            track: rank,
            start,
            end,
            generation,
            ok,
            elements,
        };
        sink.record(slice(
            SliceName::Call(name),
            start,
            end,
            Some(outcome.is_ok()),
            None,
        ));
        let mut at = start;
        for &(call_start, call_end) in &device_calls {
            if call_start > at {
                sink.record(slice(SliceName::Wait, at, call_start, None, None));
            }
            at = at.max(call_end);
        }
        if end > at {
            sink.record(slice(SliceName::Wait, at, end, None, None));
        }
        if let Some((plan_start, plan_end, algorithm, moved)) = plan {
            sink.record(slice(
                SliceName::Plan(algorithm),
                plan_start,
                plan_end,
                None,
                Some(moved),
            ));
        }
        outcome
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PlanTraffic> {
        self.shared
            .traffic
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Time `call` as a device call of the current thread and record it.
    fn device_call<T, E>(
        &self,
        name: SliceName,
        elements: Option<usize>,
        call: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let Some(sink) = &self.shared.sink else {
            return call();
        };
        let start = sink.now();
        let outcome = call();
        let end = sink.now();
        let (track, generation) = CONTEXT.with(|context| {
            let mut context = context.borrow_mut();
            context.device_calls.push((start, end));
            if let Some(plan) = context.plan.as_mut() {
                plan.1 = end;
                if outcome.is_ok() {
                    if let SliceName::Exchange { .. } = name {
                        plan.3 += elements.unwrap_or(0);
                    }
                }
            }
            (
                context.rank.unwrap_or(self.shared.world),
                context.generation,
            )
        });
        sink.record(Slice {
            name,
            track,
            start,
            end,
            generation,
            ok: Some(outcome.is_ok()),
            elements,
        });
        outcome
    }
}

impl<D: NativeCollectiveDevice> Intercept<D> for Probe {
    fn prepare(
        &self,
        inner: &D,
        tensor: D::Tensor,
        device: DeviceId,
    ) -> Result<D::Prepared, D::Error> {
        self.device_call(SliceName::Prepare, None, || inner.prepare(tensor, device))
    }

    fn begin(
        &self,
        inner: &D,
        devices: &[DeviceId],
        inputs: Vec<D::Prepared>,
        plan: &Plan,
    ) -> Result<D::Work, D::Error> {
        if self.shared.counting {
            let mut traffic = self.lock();
            traffic.begun += 1;
            traffic.algorithm = Some(plan.algorithm());
            traffic.sent.clear();
            traffic.sent.resize(self.shared.world, 0);
            traffic.received.clear();
            traffic.received.resize(self.shared.world, 0);
        }
        if let Some(sink) = &self.shared.sink {
            let start = sink.now();
            CONTEXT.with(|context| {
                context.borrow_mut().plan = Some((start, start, plan.algorithm().name(), 0));
            });
        }
        self.device_call(SliceName::Begin, Some(plan.buffer_len()), || {
            inner.begin(devices, inputs, plan)
        })
    }

    fn exchange(
        &self,
        inner: &D,
        work: &mut D::Work,
        index: usize,
        step: &Step,
    ) -> Result<(), D::Error> {
        // Counted for the trace only.
        let elements = match &self.shared.sink {
            Some(_) => step.transfers.iter().map(|t| t.range.len()).sum(),
            None => 0,
        };
        let name = SliceName::Exchange {
            step: index,
            combine: step.combine,
        };
        let outcome = self.device_call(name, Some(elements), || inner.exchange(work, step));
        if self.shared.counting && outcome.is_ok() {
            let mut traffic = self.lock();
            // A local copy crosses no link.
            for transfer in step.transfers.iter().filter(|t| t.crosses_a_link()) {
                if let Some(sent) = traffic.sent.get_mut(transfer.from) {
                    *sent += transfer.range.len();
                }
                if let Some(received) = traffic.received.get_mut(transfer.to) {
                    *received += transfer.range.len();
                }
            }
        }
        outcome
    }

    fn finish(&self, inner: &D, work: D::Work, plan: &Plan) -> Result<Vec<D::Tensor>, D::Error> {
        self.device_call(SliceName::Finish, None, || inner.finish(work, plan))
    }
}
