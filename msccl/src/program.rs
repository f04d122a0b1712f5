//! The parsed form of one MSCCL `<algo>`: what the file says, before any judgement.
//!
//! Numbers are kept as written (`i64`), negative and out-of-range values included, so that
//! [`Program::check`](crate::Program::check) can name the step that is wrong instead of the
//! parser refusing the file. The meaning of every field is the executors' (see the crate's
//! README, "The format, as the executors read it").

use std::fmt;

/// One of a rank's three buffers, as a step names it (`srcbuf`/`dstbuf`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buffer {
    /// `i`: the collective's input (the user's send buffer).
    Input,
    /// `o`: the collective's output (the user's receive buffer).
    Output,
    /// `s`: the executor's scratch buffer, `s_chunks` chunks per rank.
    Scratch,
}

impl Buffer {
    /// The letter the format uses: `i`, `o` or `s`.
    pub const fn letter(self) -> &'static str {
        match self {
            Buffer::Input => "i",
            Buffer::Output => "o",
            Buffer::Scratch => "s",
        }
    }

    /// The buffer a letter names.
    pub fn from_letter(letter: &str) -> Option<Buffer> {
        match letter {
            "i" => Some(Buffer::Input),
            "o" => Some(Buffer::Output),
            "s" => Some(Buffer::Scratch),
            _ => None,
        }
    }
}

impl fmt::Display for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.letter())
    }
}

/// The instruction of a step (`type`): the nine the executors interpret.
///
/// `src` is `srcbuf[srcoff..srcoff+cnt]`, `dst` is `dstbuf[dstoff..dstoff+cnt]`, `recv` the
/// next message from the threadblock's `recv` peer, `send` a message to its `send` peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepKind {
    /// `s`: send `src`.
    Send,
    /// `r`: receive into `dst`.
    Recv,
    /// `rcs`: receive into `dst` and send the received data on.
    RecvCopySend,
    /// `rrs`: receive, reduce with `src`, send the result on (nothing is written locally).
    RecvReduceSend,
    /// `rrc`: receive, reduce with `src`, write the result to `dst`.
    RecvReduceCopy,
    /// `rrcs`: receive, reduce with `src`, write the result to `dst` and send it on.
    RecvReduceCopySend,
    /// `cpy`: copy `src` to `dst`.
    Copy,
    /// `re`: `dst = src ⊕ dst`.
    Reduce,
    /// `nop`: no data; its `depid`/`deps` wait is carried by the next instruction.
    Nop,
}

impl StepKind {
    /// Every kind, in the order of the executors' instruction codes (`nop` last).
    pub const ALL: [StepKind; 9] = [
        StepKind::Send,
        StepKind::Recv,
        StepKind::RecvCopySend,
        StepKind::RecvReduceSend,
        StepKind::RecvReduceCopy,
        StepKind::RecvReduceCopySend,
        StepKind::Copy,
        StepKind::Reduce,
        StepKind::Nop,
    ];

    /// The name the format uses (`s`, `r`, `rcs`, `rrs`, `rrc`, `rrcs`, `cpy`, `re`, `nop`).
    pub const fn name(self) -> &'static str {
        match self {
            StepKind::Send => "s",
            StepKind::Recv => "r",
            StepKind::RecvCopySend => "rcs",
            StepKind::RecvReduceSend => "rrs",
            StepKind::RecvReduceCopy => "rrc",
            StepKind::RecvReduceCopySend => "rrcs",
            StepKind::Copy => "cpy",
            StepKind::Reduce => "re",
            StepKind::Nop => "nop",
        }
    }

    /// The kind a name stands for.
    pub fn from_name(name: &str) -> Option<StepKind> {
        StepKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// Whether it takes a message from the threadblock's `recv` peer.
    pub const fn receives(self) -> bool {
        matches!(
            self,
            StepKind::Recv
                | StepKind::RecvCopySend
                | StepKind::RecvReduceSend
                | StepKind::RecvReduceCopy
                | StepKind::RecvReduceCopySend
        )
    }

    /// Whether it sends a message to the threadblock's `send` peer.
    pub const fn sends(self) -> bool {
        matches!(
            self,
            StepKind::Send
                | StepKind::RecvCopySend
                | StepKind::RecvReduceSend
                | StepKind::RecvReduceCopySend
        )
    }

    /// Whether it reads `src` (`re` also reads `dst`).
    pub const fn reads_src(self) -> bool {
        matches!(
            self,
            StepKind::Send
                | StepKind::RecvReduceSend
                | StepKind::RecvReduceCopy
                | StepKind::RecvReduceCopySend
                | StepKind::Copy
                | StepKind::Reduce
        )
    }

    /// Whether it writes `dst`.
    pub const fn writes_dst(self) -> bool {
        matches!(
            self,
            StepKind::Recv
                | StepKind::RecvCopySend
                | StepKind::RecvReduceCopy
                | StepKind::RecvReduceCopySend
                | StepKind::Copy
                | StepKind::Reduce
        )
    }

    /// Whether it applies the reduction operation.
    pub const fn reduces(self) -> bool {
        matches!(
            self,
            StepKind::RecvReduceSend
                | StepKind::RecvReduceCopy
                | StepKind::RecvReduceCopySend
                | StepKind::Reduce
        )
    }
}

impl fmt::Display for StepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The collective an `<algo>` claims (`coll`), by the names the executors know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MscclCollective {
    /// `allreduce`.
    AllReduce,
    /// `allgather`.
    AllGather,
    /// `reduce_scatter` (microsoft/msccl) or `reducescatter` (msccl-executor-nccl, RCCL).
    ReduceScatter,
    /// `alltoall`.
    AllToAll,
    /// `broadcast`: the root is whichever rank's input the program spreads.
    Broadcast,
    /// `reduce`: the root is whichever rank the program reduces to.
    Reduce,
    /// `gather` (msccl-executor-nccl, RCCL).
    Gather,
    /// `scatter` (msccl-executor-nccl, RCCL).
    Scatter,
    /// `custom` (microsoft/msccl): no defined result, checked for everything but the result.
    Custom,
    /// `send`, `recv` or `alltoallv` (msccl-executor-nccl, RCCL): point-to-point and
    /// variable-size exchanges whose result the format does not define; like `custom`.
    PointToPoint,
}

impl MscclCollective {
    /// The collective a `coll` value names.
    pub fn from_name(name: &str) -> Option<MscclCollective> {
        Some(match name {
            "allreduce" => MscclCollective::AllReduce,
            "allgather" => MscclCollective::AllGather,
            "reduce_scatter" | "reducescatter" => MscclCollective::ReduceScatter,
            "alltoall" => MscclCollective::AllToAll,
            "broadcast" => MscclCollective::Broadcast,
            "reduce" => MscclCollective::Reduce,
            "gather" => MscclCollective::Gather,
            "scatter" => MscclCollective::Scatter,
            "custom" => MscclCollective::Custom,
            "send" | "recv" | "alltoallv" => MscclCollective::PointToPoint,
            _ => return None,
        })
    }

    /// Whether its output is a reduction.
    pub const fn reduces(self) -> bool {
        matches!(
            self,
            MscclCollective::AllReduce | MscclCollective::ReduceScatter | MscclCollective::Reduce
        )
    }

    /// Whether [`Program::check`](crate::Program::check) can judge its result.
    pub const fn has_result(self) -> bool {
        !matches!(
            self,
            MscclCollective::Custom | MscclCollective::PointToPoint
        )
    }

    /// The chunks of a rank's input and output buffers the executors allocate for `world`
    /// ranks and `chunks` chunks per loop: they cut `count × multiplier` elements into `chunks`
    /// (the multiplier is `world` for all-gather, reduce-scatter and all-to-all), so
    /// all-gather's input is `chunks / world` chunks and its output `chunks`; gather's output
    /// and scatter's input are `world × chunks` (their multiplier is 1). Saturating.
    pub fn buffer_chunks(self, world: u64, chunks: u64) -> (u64, u64) {
        let share = chunks.checked_div(world).unwrap_or(0);
        let all = world.saturating_mul(chunks);
        match self {
            MscclCollective::AllGather => (share, chunks),
            MscclCollective::ReduceScatter => (chunks, share),
            MscclCollective::Gather => (chunks, all),
            MscclCollective::Scatter => (all, chunks),
            MscclCollective::AllReduce
            | MscclCollective::AllToAll
            | MscclCollective::Broadcast
            | MscclCollective::Reduce
            | MscclCollective::Custom
            | MscclCollective::PointToPoint => (chunks, chunks),
        }
    }
}

/// The wire protocol an `<algo>` asks for (`proto`). It changes speed, never the result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// `Simple`.
    Simple,
    /// `LL`.
    Ll,
    /// `LL128`.
    Ll128,
}

impl Protocol {
    /// The name the format uses.
    pub const fn name(self) -> &'static str {
        match self {
            Protocol::Simple => "Simple",
            Protocol::Ll => "LL",
            Protocol::Ll128 => "LL128",
        }
    }

    /// The protocol a name stands for.
    pub fn from_name(name: &str) -> Option<Protocol> {
        [Protocol::Simple, Protocol::Ll, Protocol::Ll128]
            .into_iter()
            .find(|protocol| protocol.name() == name)
    }
}

/// How the user's buffers sit when the executor runs the program; a program declares which it
/// supports (`inplace`, `outofplace`), and is checked in each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// The input lies inside the output (or the output inside the input): the same memory,
    /// as NCCL defines in-place for each collective.
    InPlace,
    /// Input and output are separate allocations.
    OutOfPlace,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::InPlace => "in place",
            Mode::OutOfPlace => "out of place",
        })
    }
}

/// Where something is in the file: 1-based line and column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Position {
    /// The line, from 1.
    pub line: u32,
    /// The column (in characters), from 1.
    pub column: u32,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// A step's `srcbuf`/`srcoff` or `dstbuf`/`dstoff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Operand {
    /// The buffer.
    pub buffer: Buffer,
    /// The first chunk, as written (`-1` where the step does not use it).
    pub offset: i64,
}

/// One `<step>`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Step {
    /// `s`: the step's number as written (the executors count steps by position; see the README).
    pub s: i64,
    /// `type`.
    pub kind: StepKind,
    /// `srcbuf`, `srcoff`.
    pub src: Operand,
    /// `dstbuf`, `dstoff`.
    pub dst: Operand,
    /// `cnt`: chunks moved.
    pub count: i64,
    /// `depid`: the threadblock whose progress this step waits for, `-1` for none.
    pub depid: i64,
    /// `deps`: the step of `depid` it waits for.
    pub deps: i64,
    /// `hasdep`: `1` if another threadblock waits for this step (it then publishes its progress).
    pub hasdep: i64,
    /// Where the element starts.
    pub position: Position,
}

/// One `<tb>`: a threadblock, running its steps in order.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Threadblock {
    /// `id`.
    pub id: i64,
    /// `send`: the peer every send of this threadblock goes to, `-1` for none.
    pub send: i64,
    /// `recv`: the peer every receive of this threadblock comes from, `-1` for none.
    pub recv: i64,
    /// `chan`: the channel whose connections it uses.
    pub channel: i64,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Where the element starts.
    pub position: Position,
}

/// One `<gpu>`: a rank's buffers and threadblocks.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Gpu {
    /// `id`: the rank.
    pub id: i64,
    /// `i_chunks`: input chunks the program may address.
    pub input_chunks: i64,
    /// `o_chunks`: output chunks the program may address.
    pub output_chunks: i64,
    /// `s_chunks`: scratch chunks the executor allocates for this rank.
    pub scratch_chunks: i64,
    /// The threadblocks, in file order.
    pub threadblocks: Vec<Threadblock>,
    /// Where the element starts.
    pub position: Position,
}

/// One parsed MSCCL `<algo>`: a schedule for every rank, as the file states it.
///
/// Build one with [`parse`](crate::parse); judge it with [`check`](Program::check); turn it
/// into a ruCCL plan with [`lower`](Program::lower).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    pub(crate) name: Option<String>,
    pub(crate) collective: MscclCollective,
    pub(crate) coll: String,
    pub(crate) world: i64,
    pub(crate) chunks: i64,
    pub(crate) channels: i64,
    pub(crate) protocol: Protocol,
    pub(crate) inplace: i64,
    pub(crate) outofplace: Option<i64>,
    pub(crate) redop: Option<String>,
    pub(crate) gpus: Vec<Gpu>,
    pub(crate) position: Position,
}

impl Program {
    /// `name`, if given.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The collective `coll` names.
    pub fn collective(&self) -> MscclCollective {
        self.collective
    }

    /// `coll` as written.
    pub fn collective_name(&self) -> &str {
        &self.coll
    }

    /// `ngpus`: the number of ranks, as written.
    pub fn world(&self) -> i64 {
        self.world
    }

    /// `nchunksperloop`: how many chunks the collective's buffer is cut into, as written.
    pub fn chunks(&self) -> i64 {
        self.chunks
    }

    /// `nchannels`, as written.
    pub fn channels(&self) -> i64 {
        self.channels
    }

    /// `proto`.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// `redop`, if given (msccl-tools writes none; the executors take the operation from the call).
    pub fn redop(&self) -> Option<&str> {
        self.redop.as_deref()
    }

    /// The modes the program declares it supports: `inplace="1"` gives in place;
    /// `outofplace="1"`, or `inplace="0"` without an `outofplace` attribute (microsoft/msccl's
    /// style, where `inplace` alone selects the one mode), gives out of place.
    pub fn modes(&self) -> Vec<Mode> {
        let mut modes = Vec::new();
        if self.inplace != 0 {
            modes.push(Mode::InPlace);
        }
        let out_of_place = match self.outofplace {
            Some(value) => value != 0,
            None => self.inplace == 0,
        };
        if out_of_place {
            modes.push(Mode::OutOfPlace);
        }
        modes
    }

    /// The `<gpu>` elements, in file order.
    pub fn gpus(&self) -> &[Gpu] {
        &self.gpus
    }

    /// Where `<algo>` starts.
    pub fn position(&self) -> Position {
        self.position
    }

    /// Every `<step>` of every threadblock, `nop`s included.
    pub fn step_count(&self) -> usize {
        self.gpus
            .iter()
            .flat_map(|gpu| &gpu.threadblocks)
            .map(|tb| tb.steps.len())
            .sum()
    }
}
