//! The program as the executors load it: validated ranks, threadblocks and instructions, the
//! executors' own step numbering and dependency waits, and the connections sends and receives
//! travel on.
//!
//! Everything the executors' loaders refuse is refused here, with the step it is about; what
//! they accept but that could never run right (a dependency nobody signals, an offset past the
//! allocated buffer) is refused too, since on hardware it hangs or corrupts memory.

use super::violation::{StepRef, Violation, ViolationKind};
use crate::program::{Buffer, MscclCollective, Operand, Program, Step, StepKind};
use std::collections::HashMap;
use std::ops::Range;

/// The executors refuse `cnt` at or above this (`MSCCL_MAX_COUNT`).
const MAX_COUNT: i64 = 72;
/// The executors fuse at most this many `re` of a threadblock (`MSCCL_MAX_REDUCE_FUSION`).
const MAX_REDUCE_FUSION: usize = 16;

/// An instruction that is not a `nop`.
#[derive(Clone, Debug)]
pub(crate) struct Op {
    pub(crate) gpu: usize,
    /// Index into [`Model::tbs`].
    pub(crate) tb: usize,
    /// Position among the threadblock's ops (nops left out).
    pub(crate) pos: usize,
    /// The step as the file names it.
    pub(crate) at: StepRef,
    pub(crate) kind: StepKind,
    /// Chunks moved: the executors' own count for the transmission it belongs to.
    pub(crate) count: usize,
    pub(crate) src: Operand,
    pub(crate) dst: Operand,
    /// The message it receives, if any (index into [`Model::messages`]).
    pub(crate) recv_msg: Option<usize>,
    /// The message it sends, if any.
    pub(crate) send_msg: Option<usize>,
}

impl Op {
    /// The chunks it reads from `src`, if it reads it (`count` > 0).
    pub(crate) fn reads(&self) -> Option<(Buffer, Range<usize>)> {
        (self.kind.reads_src() && self.count > 0).then(|| operand_range(self.src, self.count))
    }

    /// The chunks it writes in `dst` (`re` reads them too).
    pub(crate) fn writes(&self) -> Option<(Buffer, Range<usize>)> {
        (self.kind.writes_dst() && self.count > 0).then(|| operand_range(self.dst, self.count))
    }
}

/// The chunk range of a validated operand (offsets were checked to be non-negative).
fn operand_range(operand: Operand, count: usize) -> (Buffer, Range<usize>) {
    let start = usize::try_from(operand.offset).unwrap_or(0);
    (operand.buffer, start..start + count)
}

/// A threadblock as loaded (its rank and id are its ops' `at`).
#[derive(Clone, Debug)]
pub(crate) struct Tb {
    /// Its ops, a range of [`Model::ops`].
    pub(crate) ops: Range<usize>,
}

/// One message: the `k`-th send on a connection meets the `k`-th receive.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Message {
    pub(crate) send: usize,
    pub(crate) recv: usize,
}

/// A happens-before edge between ops and why it exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EdgeKind {
    /// The next instruction of a threadblock.
    Program,
    /// A `depid`/`deps` wait.
    Dependency,
    /// A message from its send to its receive.
    Message,
    /// With one-message buffers: a send waits for the receive of the previous message.
    Slot,
}

/// The validated program: ops by threadblock, and every edge MSCCL's executors order by.
pub(crate) struct Model {
    pub(crate) collective: MscclCollective,
    pub(crate) world: usize,
    pub(crate) chunks: usize,
    /// Per rank: chunks of input, output (as allocated) and scratch (as declared).
    pub(crate) sizes: Vec<[usize; 3]>,
    pub(crate) tbs: Vec<Tb>,
    /// Per rank, its threadblocks (indices into `tbs`), in id order.
    pub(crate) tbs_of: Vec<Vec<usize>>,
    pub(crate) ops: Vec<Op>,
    pub(crate) messages: Vec<Message>,
    /// Per connection (sender, receiver, channel), its message indices in order.
    pub(crate) connections: Vec<Vec<usize>>,
    /// Dependency edges `(waited-for op, waiting op)`.
    pub(crate) dependencies: Vec<(usize, usize)>,
    pub(crate) nops: usize,
}

/// Validate `program` and load it as the executors do.
pub(crate) fn load(program: &Program) -> Result<Model, Violation> {
    let world = usize::try_from(program.world)
        .ok()
        .filter(|&world| world > 0)
        .ok_or_else(|| Violation::new(ViolationKind::BadStep, "ngpus must be at least 1"))?;
    let chunks = usize::try_from(program.chunks)
        .ok()
        .filter(|&chunks| chunks > 0)
        .ok_or_else(|| {
            Violation::new(ViolationKind::BadStep, "nchunksperloop must be at least 1")
        })?;
    let collective = program.collective;
    if matches!(
        collective,
        MscclCollective::AllGather | MscclCollective::ReduceScatter | MscclCollective::AllToAll
    ) && chunks % world != 0
    {
        return Err(Violation::new(
            ViolationKind::BadStep,
            format!(
                "nchunksperloop={chunks} does not split into one block per rank of {world}: {} needs a multiple of ngpus",
                program.coll
            ),
        ));
    }
    let (input, output) = collective.buffer_chunks(world as u64, chunks as u64);
    let (input, output) = (
        usize::try_from(input).unwrap_or(usize::MAX),
        usize::try_from(output).unwrap_or(usize::MAX),
    );
    let channels = usize::try_from(program.channels).unwrap_or(0);

    // Ranks: one <gpu> per id in 0..world.
    let mut gpu_of_rank: Vec<Option<usize>> = vec![None; world];
    for (index, gpu) in program.gpus.iter().enumerate() {
        let rank = usize::try_from(gpu.id).ok().filter(|&rank| rank < world);
        let Some(rank) = rank else {
            return Err(Violation::new(
                ViolationKind::BadGpu,
                format!(
                    "<gpu id=\"{}\"> (line {}) is outside the world of {world} ranks",
                    gpu.id, gpu.position.line
                ),
            ));
        };
        if gpu_of_rank[rank].replace(index).is_some() {
            return Err(Violation::new(
                ViolationKind::BadGpu,
                format!(
                    "gpu {rank} is described twice (again at line {})",
                    gpu.position.line
                ),
            )
            .on_gpu(rank));
        }
    }
    let mut sizes = Vec::with_capacity(world);
    let mut tbs = Vec::new();
    let mut tbs_of = Vec::with_capacity(world);
    let mut ops = Vec::new();
    let mut waits = Vec::new();
    let mut signals: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut nops = 0;
    let mut sends: HashMap<(usize, usize, usize), (usize, Vec<usize>)> = HashMap::new();
    let mut recvs: HashMap<(usize, usize, usize), (usize, Vec<usize>)> = HashMap::new();
    for (rank, index) in gpu_of_rank.iter().enumerate() {
        let Some(index) = *index else {
            return Err(Violation::new(
                ViolationKind::BadGpu,
                format!("rank {rank} has no <gpu>: it would run nothing"),
            )
            .on_gpu(rank));
        };
        let gpu = &program.gpus[index];
        let declared = |value: i64, what: &str| {
            usize::try_from(value).map_err(|_| {
                Violation::new(
                    ViolationKind::BadStep,
                    format!(
                        "{what}=\"{value}\" (line {}) is negative",
                        gpu.position.line
                    ),
                )
                .on_gpu(rank)
            })
        };
        let limits = [
            declared(gpu.input_chunks, "i_chunks")?.min(input),
            declared(gpu.output_chunks, "o_chunks")?.min(output),
            declared(gpu.scratch_chunks, "s_chunks")?,
        ];
        sizes.push(limits);
        // Threadblocks: ids 0..n, each once.
        let mut by_id: Vec<Option<usize>> = vec![None; gpu.threadblocks.len()];
        for (position, tb) in gpu.threadblocks.iter().enumerate() {
            let id = usize::try_from(tb.id).ok().filter(|&id| id < by_id.len());
            let Some(id) = id else {
                return Err(Violation::new(
                    ViolationKind::BadThreadblock,
                    format!(
                        "<tb id=\"{}\"> (line {}): a rank with {} threadblocks numbers them 0..{}",
                        tb.id,
                        tb.position.line,
                        by_id.len(),
                        by_id.len()
                    ),
                )
                .on_gpu(rank));
            };
            if by_id[id].replace(position).is_some() {
                return Err(Violation::new(
                    ViolationKind::BadThreadblock,
                    format!("tb {id} appears twice (again at line {})", tb.position.line),
                )
                .on_gpu(rank));
            }
        }
        let first_tb = tbs.len();
        let mut mine = Vec::with_capacity(by_id.len());
        for (id, position) in by_id.iter().enumerate() {
            let tb = &gpu.threadblocks[position.unwrap_or(0)];
            let tb_line = tb.position.line;
            let bad_peer = |peer: i64, what: &str| -> Result<Option<usize>, Violation> {
                if peer == -1 {
                    return Ok(None);
                }
                match usize::try_from(peer) {
                    Ok(peer) if peer < world && peer != rank => Ok(Some(peer)),
                    _ => Err(Violation::new(
                        ViolationKind::BadPeer,
                        format!(
                            "tb {id} (line {tb_line}) has {what}=\"{peer}\": a peer is -1 or another rank of 0..{world}"
                        ),
                    )
                    .on_gpu(rank)),
                }
            };
            let send = bad_peer(tb.send, "send")?;
            let recv = bad_peer(tb.recv, "recv")?;
            let channel = usize::try_from(tb.channel)
                .ok()
                .filter(|&channel| channel < channels)
                .ok_or_else(|| {
                    Violation::new(
                        ViolationKind::BadThreadblock,
                        format!(
                            "tb {id} (line {tb_line}) uses channel {} of nchannels={}",
                            tb.channel, program.channels
                        ),
                    )
                    .on_gpu(rank)
                })?;
            let tb_index = first_tb + id;
            mine.push(tb_index);
            let first_op = ops.len();
            let loaded = load_steps(rank, id, tb_index, &tb.steps, limits, send, recv)?;
            nops += loaded.nops;
            waits.extend(
                loaded
                    .waits
                    .iter()
                    .map(|&(op, depid, deps, at)| (first_op + op, depid, deps, at)),
            );
            signals.push(
                loaded
                    .signals
                    .iter()
                    .map(|&(op, number)| (first_op + op, number))
                    .collect::<Vec<_>>(),
            );
            for op in loaded.ops {
                if op.kind.sends() && op.count > 0 {
                    if let Some(peer) = send {
                        push_end(
                            &mut sends,
                            (rank, peer, channel),
                            tb_index,
                            ops.len(),
                            &op,
                            "sends to",
                            peer,
                        )?;
                    }
                }
                if op.kind.receives() && op.count > 0 {
                    if let Some(peer) = recv {
                        push_end(
                            &mut recvs,
                            (peer, rank, channel),
                            tb_index,
                            ops.len(),
                            &op,
                            "receives from",
                            peer,
                        )?;
                    }
                }
                ops.push(op);
            }
            tbs.push(Tb {
                ops: first_op..ops.len(),
            });
        }
        tbs_of.push(mine);
    }
    let dependencies = resolve_waits(&tbs_of, &ops, &signals, waits)?;
    let (messages, connections) = match_messages(&mut ops, sends, recvs)?;
    Ok(Model {
        collective,
        world,
        chunks,
        sizes,
        tbs,
        tbs_of,
        ops,
        messages,
        connections,
        dependencies,
        nops,
    })
}

/// Record op `index` as the next send (or receive) on `key`; a connection end belongs to one
/// threadblock.
fn push_end(
    ends: &mut HashMap<(usize, usize, usize), (usize, Vec<usize>)>,
    key: (usize, usize, usize),
    tb: usize,
    index: usize,
    op: &Op,
    verb: &str,
    peer: usize,
) -> Result<(), Violation> {
    let entry = ends.entry(key).or_insert((tb, Vec::new()));
    if entry.0 != tb {
        return Err(Violation::new(
            ViolationKind::BadThreadblock,
            format!(
                "two threadblocks of gpu {} each {verb} gpu {peer} on channel {}: a connection end belongs to one threadblock",
                op.gpu, key.2
            ),
        )
        .at(op.at));
    }
    entry.1.push(index);
    Ok(())
}

/// A threadblock's ops, its waits and its signals (op indices local to the threadblock), to be
/// resolved once every threadblock is loaded.
struct Loaded {
    ops: Vec<Op>,
    nops: usize,
    /// `(first op of the waiting transmission, depid, deps, the step naming the wait)`.
    waits: Vec<(usize, i64, i64, StepRef)>,
    /// `(last op of a transmission with hasdep="1", the step number it publishes)`.
    signals: Vec<(usize, usize)>,
}

/// Load one threadblock's steps the way the executors' loaders do: a `nop`'s wait moves to the
/// next instruction; consecutive `re` into the same destination from the same source buffer
/// (no `depid` of their own, at most [`MAX_REDUCE_FUSION`] per threadblock in a row) fuse into
/// one transmission that takes the last one's `cnt` and `hasdep`; the step number a
/// transmission signals is the executors' running count, which equals the position of its last
/// step when every `nop` has a `depid`.
fn load_steps(
    rank: usize,
    tb_id: usize,
    tb_index: usize,
    steps: &[Step],
    limits: [usize; 3],
    send: Option<usize>,
    recv: Option<usize>,
) -> Result<Loaded, Violation> {
    struct Transmission {
        ops: Range<usize>,
        waits: Vec<(i64, i64, StepRef)>,
        hasdep: bool,
        count: usize,
        reductions: usize,
        kind: StepKind,
    }
    let mut ops: Vec<Op> = Vec::new();
    let mut transmissions: Vec<Transmission> = Vec::new();
    let mut pending: Vec<(i64, i64, StepRef)> = Vec::new();
    // (dst buffer, dst offset, src buffer) of a fusable run of `re`, and the threadblock's
    // running count of reductions (the executors compare that count, not the run's length).
    let mut fusion: Option<(Buffer, i64, Buffer)> = None;
    let mut reductions = 0;
    let mut nops = 0;
    for (position, step) in steps.iter().enumerate() {
        let at = StepRef::new(rank, tb_id, position, step.position.line);
        let bad = |kind: ViolationKind, detail: String| Violation::new(kind, detail).at(at);
        if step.s < 0 {
            return Err(bad(
                ViolationKind::BadStep,
                format!("s=\"{}\" is negative", step.s),
            ));
        }
        // The loaders take any negative depid as none.
        if step.depid >= 0 {
            pending.push((step.depid, step.deps, at));
        }
        if step.kind == StepKind::Nop {
            nops += 1;
            continue;
        }
        if step.hasdep != 0 && step.hasdep != 1 {
            return Err(bad(
                ViolationKind::BadStep,
                format!("hasdep=\"{}\" is not 0 or 1", step.hasdep),
            ));
        }
        if !(0..MAX_COUNT).contains(&step.count) {
            return Err(bad(
                ViolationKind::BadStep,
                format!(
                    "cnt=\"{}\" is outside 0..{MAX_COUNT}, which the executors refuse",
                    step.count
                ),
            ));
        }
        let count = usize::try_from(step.count).unwrap_or(0);
        if step.kind.sends() && send.is_none() {
            return Err(bad(
                ViolationKind::BadPeer,
                format!("a {} step in a threadblock with send=\"-1\"", step.kind),
            ));
        }
        if step.kind.receives() && recv.is_none() {
            return Err(bad(
                ViolationKind::BadPeer,
                format!("a {} step in a threadblock with recv=\"-1\"", step.kind),
            ));
        }
        for (used, operand, what) in [
            (step.kind.reads_src(), step.src, "source"),
            (step.kind.writes_dst(), step.dst, "destination"),
        ] {
            if !used {
                continue;
            }
            let limit = limits[operand.buffer as usize];
            let start = usize::try_from(operand.offset).ok();
            let fits = start.is_some_and(|start| start.saturating_add(count.max(1)) <= limit);
            if !fits {
                let chunk = start.map(|start| start.max(limit)).unwrap_or(0);
                return Err(Violation::new(
                    ViolationKind::OutOfRange,
                    format!(
                        "its {what} {}[{}..{}] leaves the {} chunks of buffer {} on this rank",
                        operand.buffer,
                        operand.offset,
                        operand.offset.saturating_add(step.count.max(1)),
                        limit,
                        operand.buffer
                    ),
                )
                .at(at)
                .chunk(operand.buffer, chunk));
            }
        }
        let continuation = step.kind == StepKind::Reduce
            && step.depid == -1
            && fusion == Some((step.dst.buffer, step.dst.offset, step.src.buffer));
        let index = ops.len();
        ops.push(Op {
            gpu: rank,
            tb: tb_index,
            pos: index,
            at,
            kind: step.kind,
            count,
            src: step.src,
            dst: step.dst,
            recv_msg: None,
            send_msg: None,
        });
        match transmissions.last_mut() {
            Some(last) if continuation => {
                last.ops.end = index + 1;
                last.count = count;
                last.hasdep = step.hasdep == 1;
                last.reductions += 1;
            }
            _ => {
                let waits = std::mem::take(&mut pending);
                if !waits.is_empty() && step.depid < 0 {
                    return Err(bad(
                        ViolationKind::BadDependency,
                        "a nop's wait must be followed by an instruction with a depid of its own, which the executors require".to_owned(),
                    ));
                }
                transmissions.push(Transmission {
                    ops: index..index + 1,
                    waits,
                    hasdep: step.hasdep == 1,
                    count,
                    reductions: usize::from(step.kind == StepKind::Reduce),
                    kind: step.kind,
                });
            }
        }
        if step.kind == StepKind::Reduce {
            reductions += 1;
            fusion = if step.hasdep == 1 || reductions == MAX_REDUCE_FUSION {
                None
            } else {
                Some((step.dst.buffer, step.dst.offset, step.src.buffer))
            };
        } else {
            fusion = None;
        }
    }
    // Executor step numbers: the running count, which skips ahead by a transmission's extra
    // waits (one per nop that carried it) and by a fused run's extra reductions.
    let mut waits = Vec::new();
    let mut signals = Vec::new();
    let mut number = 0usize;
    for transmission in &transmissions {
        if !transmission.waits.is_empty() {
            number += transmission.waits.len() - 1;
        }
        if transmission.kind == StepKind::Reduce && transmission.count > 0 {
            number += transmission.reductions - 1;
        }
        for op in &mut ops[transmission.ops.clone()] {
            op.count = transmission.count;
        }
        for &(depid, deps, at) in &transmission.waits {
            waits.push((transmission.ops.start, depid, deps, at));
        }
        if transmission.hasdep {
            signals.push((transmission.ops.end - 1, number));
        }
        number += 1;
    }
    Ok(Loaded {
        ops,
        nops,
        waits,
        signals,
    })
}

/// Turn every wait into an edge from the op whose signal satisfies it: the executors wait until
/// the threadblock's published step number reaches `deps`, and only transmissions with
/// `hasdep="1"` publish, so the first such transmission numbered `deps` or later ends the wait.
fn resolve_waits(
    tbs_of: &[Vec<usize>],
    ops: &[Op],
    signals: &[Vec<(usize, usize)>],
    waits: Vec<(usize, i64, i64, StepRef)>,
) -> Result<Vec<(usize, usize)>, Violation> {
    let mut edges = Vec::with_capacity(waits.len());
    for (waiting, depid, deps, at) in waits {
        let rank = ops[waiting].gpu;
        let target = usize::try_from(depid)
            .ok()
            .and_then(|id| tbs_of[rank].get(id).copied())
            .ok_or_else(|| {
                Violation::new(
                    ViolationKind::BadDependency,
                    format!(
                        "depid=\"{depid}\" names no threadblock of gpu {rank}, which has {}",
                        tbs_of[rank].len()
                    ),
                )
                .at(at)
            })?;
        let deps = usize::try_from(deps).map_err(|_| {
            Violation::new(
                ViolationKind::BadDependency,
                format!("deps=\"{deps}\" is negative: the executors would wait forever"),
            )
            .at(at)
        })?;
        let signal = signals[target]
            .iter()
            .find(|&&(_, number)| number >= deps)
            .map(|&(op, _)| op);
        let Some(signal) = signal else {
            let mut violation = Violation::new(
                ViolationKind::Deadlock,
                format!(
                    "it waits for tb {depid} step {deps}, but no step of tb {depid} from step {deps} on has hasdep=\"1\", so nothing ever signals it"
                ),
            )
            .at(at);
            if let Some(op) = ops
                .iter()
                .find(|op| op.tb == target && op.at.step as usize == deps)
            {
                violation = violation.other(op.at);
            }
            return Err(violation);
        };
        edges.push((signal, waiting));
    }
    Ok(edges)
}

/// Pair the `k`-th send of every connection with its `k`-th receive.
#[allow(clippy::type_complexity)]
fn match_messages(
    ops: &mut [Op],
    sends: HashMap<(usize, usize, usize), (usize, Vec<usize>)>,
    mut recvs: HashMap<(usize, usize, usize), (usize, Vec<usize>)>,
) -> Result<(Vec<Message>, Vec<Vec<usize>>), Violation> {
    let mut keys: Vec<_> = sends.keys().chain(recvs.keys()).copied().collect();
    keys.sort_unstable();
    keys.dedup();
    let mut messages = Vec::new();
    let mut connections = Vec::with_capacity(keys.len());
    let empty = Vec::new();
    for key in keys {
        let sent = sends.get(&key).map_or(&empty, |(_, list)| list);
        let received = recvs.remove(&key).map_or_else(Vec::new, |(_, list)| list);
        let (from, to, channel) = key;
        let mut connection = Vec::with_capacity(sent.len().min(received.len()));
        for (index, (&send, &recv)) in sent.iter().zip(&received).enumerate() {
            if ops[send].count != ops[recv].count {
                return Err(Violation::new(
                    ViolationKind::CountMismatch,
                    format!(
                        "message {index} from gpu {from} to gpu {to} on channel {channel} is sent with cnt={} by {} and received with cnt={}",
                        ops[send].count, ops[send].at, ops[recv].count
                    ),
                )
                .at(ops[recv].at)
                .other(ops[send].at));
            }
            let id = messages.len();
            messages.push(Message { send, recv });
            ops[send].send_msg = Some(id);
            ops[recv].recv_msg = Some(id);
            connection.push(id);
        }
        if sent.len() != received.len() {
            let (op, detail) = if sent.len() > received.len() {
                (
                    sent[received.len()],
                    format!(
                        "it is send {} of gpu {from} to gpu {to} on channel {channel}, but gpu {to} receives only {} there",
                        received.len(),
                        received.len()
                    ),
                )
            } else {
                (
                    received[sent.len()],
                    format!(
                        "it is receive {} of gpu {to} from gpu {from} on channel {channel}, but gpu {from} sends only {} there",
                        sent.len(),
                        sent.len()
                    ),
                )
            };
            let mut violation = Violation::new(ViolationKind::Unmatched, detail).at(ops[op].at);
            if let Some(&last) = connection.last() {
                let message: &Message = &messages[last];
                let partner = if sent.len() > received.len() {
                    message.recv
                } else {
                    message.send
                };
                violation = violation.other(ops[partner].at);
            }
            return Err(violation);
        }
        connections.push(connection);
    }
    Ok((messages, connections))
}
