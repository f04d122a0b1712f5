//! Happens-before: the order every execution the executors allow respects, and deadlock.
//!
//! An op happens before another if a chain of these edges joins them: the next instruction of
//! a threadblock; a `depid`/`deps` wait on the op whose signal ends it; a message from its send
//! to its receive (first-in first-out per connection, so the pairing is fixed). With those
//! edges alone every connection buffers without bound. A connection of `B` message slots adds
//! an edge from the receive of message `k` to the send of message `k + B`: a send completes as
//! soon as its data is in the connection's buffer, and an instruction that receives and sends
//! (`rcs`, `rrs`, `rrcs`) needs its incoming data and a free outgoing slot at once. The
//! executors' waits are monotone and every threadblock is sequential, so the program is a Kahn
//! process network: it deadlocks under a buffering exactly when these edges form a cycle, and
//! what runs with `B` slots runs with any more.
//!
//! How many slots: a connection has `NCCL_STEPS` = 8 buffer steps; the executors cut every
//! transmission to at most one chunk of the protocol, which is `MSCCL_CHUNKSTEPS` = 4 steps for
//! Simple and one step for LL and LL128. So at least 2 messages (Simple) or 8 (LL, LL128) are
//! in flight on every connection; [`ViolationKind::BufferDeadlock`] is a cycle under that bound,
//! and the report says whether the program also runs with one slot.

use super::model::{EdgeKind, Model};
use super::violation::{Violation, ViolationKind};

/// Ops in an order every execution could have taken, and the edges that order them.
pub(crate) struct Order {
    /// A topological order of the ops under unbounded buffering.
    pub(crate) topological: Vec<usize>,
    /// Predecessors of every op under unbounded buffering (CSR: `preds[starts[v]..starts[v+1]]`).
    pub(crate) starts: Vec<usize>,
    pub(crate) preds: Vec<u32>,
}

impl Order {
    /// The ops every execution runs before `op`, directly.
    pub(crate) fn predecessors(&self, op: usize) -> &[u32] {
        &self.preds[self.starts[op]..self.starts[op + 1]]
    }
}

/// Every happens-before edge, `(from, to, why)`; with `slots` > 0, the edges of connections
/// that buffer that many messages.
fn edges(model: &Model, slots: usize) -> Vec<(usize, usize, EdgeKind)> {
    let mut edges = Vec::with_capacity(model.ops.len() * 2 + model.dependencies.len());
    for tb in &model.tbs {
        for op in tb.ops.start + 1..tb.ops.end {
            edges.push((op - 1, op, EdgeKind::Program));
        }
    }
    for &(from, to) in &model.dependencies {
        edges.push((from, to, EdgeKind::Dependency));
    }
    for message in &model.messages {
        edges.push((message.send, message.recv, EdgeKind::Message));
    }
    if slots > 0 {
        for connection in &model.connections {
            for (earlier, later) in connection.iter().zip(connection.iter().skip(slots)) {
                let (earlier, later) = (model.messages[*earlier], model.messages[*later]);
                edges.push((earlier.recv, later.send, EdgeKind::Slot));
            }
        }
    }
    edges
}

/// Order the ops, or name a deadlock: first with unbounded buffers, then with `slots`
/// messages per connection.
pub(crate) fn order(model: &Model, slots: usize) -> Result<Order, Violation> {
    let count = model.ops.len();
    let unbounded = edges(model, 0);
    let topological = sort(count, &unbounded)
        .map_err(|stuck| deadlock(model, &unbounded, &stuck, ViolationKind::Deadlock, 0))?;
    if let Some(violation) = deadlock_with(model, slots) {
        return Err(violation);
    }
    let mut starts = vec![0usize; count + 1];
    for &(_, to, _) in &unbounded {
        starts[to + 1] += 1;
    }
    for index in 0..count {
        starts[index + 1] += starts[index];
    }
    let mut fill = starts.clone();
    let mut preds = vec![0u32; unbounded.len()];
    for &(from, to, _) in &unbounded {
        preds[fill[to]] = u32::try_from(from).unwrap_or(u32::MAX);
        fill[to] += 1;
    }
    Ok(Order {
        topological,
        starts,
        preds,
    })
}

/// The deadlock of a program that ran with unbounded buffers, when connections hold `slots`
/// messages, if it has one.
pub(crate) fn deadlock_with(model: &Model, slots: usize) -> Option<Violation> {
    let bounded = edges(model, slots);
    sort(model.ops.len(), &bounded).err().map(|stuck| {
        deadlock(
            model,
            &bounded,
            &stuck,
            ViolationKind::BufferDeadlock,
            slots,
        )
    })
}

/// Kahn's algorithm: a topological order, or the ops left on or behind a cycle.
fn sort(count: usize, edges: &[(usize, usize, EdgeKind)]) -> Result<Vec<usize>, Vec<bool>> {
    let mut indegree = vec![0usize; count];
    let mut starts = vec![0usize; count + 1];
    for &(from, to, _) in edges {
        indegree[to] += 1;
        starts[from + 1] += 1;
    }
    for index in 0..count {
        starts[index + 1] += starts[index];
    }
    let mut fill = starts.clone();
    let mut successors = vec![0usize; edges.len()];
    for &(from, to, _) in edges {
        successors[fill[from]] = to;
        fill[from] += 1;
    }
    let mut ready: Vec<usize> = (0..count).filter(|&op| indegree[op] == 0).collect();
    // Take ops in ascending index order among the ready ones, so the order is deterministic
    // and keeps threadblocks' runs together.
    ready.reverse();
    let mut order = Vec::with_capacity(count);
    while let Some(op) = ready.pop() {
        order.push(op);
        for &next in &successors[starts[op]..starts[op + 1]] {
            indegree[next] -= 1;
            if indegree[next] == 0 {
                ready.push(next);
            }
        }
    }
    if order.len() == count {
        Ok(order)
    } else {
        Err(indegree.iter().map(|&degree| degree > 0).collect())
    }
}

/// Name a cycle among the `stuck` ops: walk back along edges between stuck ops until an op
/// repeats; report the op of the cycle that waits on another threadblock (a dependency, a
/// message or a slot) and the op it waits for.
fn deadlock(
    model: &Model,
    edges: &[(usize, usize, EdgeKind)],
    stuck: &[bool],
    kind: ViolationKind,
    slots: usize,
) -> Violation {
    let count = model.ops.len();
    let mut back: Vec<Option<(usize, EdgeKind)>> = vec![None; count];
    for &(from, to, why) in edges {
        if stuck[from] && stuck[to] && back[to].is_none_or(|(_, old)| old == EdgeKind::Program) {
            back[to] = Some((from, why));
        }
    }
    let Some(start) = (0..count).find(|&op| stuck[op] && back[op].is_some()) else {
        return Violation::new(kind, "the threadblocks wait for each other");
    };
    // Walk back until an op repeats: the walk then runs around a cycle.
    let mut seen = vec![false; count];
    let mut op = start;
    while !seen[op] {
        seen[op] = true;
        match back[op] {
            Some((previous, _)) => op = previous,
            None => break,
        }
    }
    let mut cycle = vec![op];
    let mut current = op;
    while let Some((previous, _)) = back[current] {
        if previous == op || cycle.len() > count {
            break;
        }
        cycle.push(previous);
        current = previous;
    }
    let waiter = cycle
        .iter()
        .copied()
        .find(|&op| back[op].is_some_and(|(_, why)| why != EdgeKind::Program))
        .unwrap_or(op);
    let (waited, why) = back[waiter].unwrap_or((waiter, EdgeKind::Program));
    let how = match why {
        EdgeKind::Program => "runs after",
        EdgeKind::Dependency => "waits (depid/deps) for",
        EdgeKind::Message => "receives the message sent by",
        EdgeKind::Slot => "sends only once a slot of the connection is freed by the receive of",
    };
    let buffering = match kind {
        ViolationKind::BufferDeadlock => format!(
            " — it runs only if a connection buffers more than {slots} message{}",
            if slots == 1 { "" } else { "s" }
        ),
        _ => String::new(),
    };
    Violation::new(
        kind,
        format!(
            "it {how} {}, and that one (through a cycle of {} steps) waits for it{buffering}",
            model.ops[waited].at,
            cycle.len()
        ),
    )
    .at(model.ops[waiter].at)
    .other(model.ops[waited].at)
}
