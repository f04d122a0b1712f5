//! [`Violation`]: what is wrong with a program, and where.

use crate::program::{Buffer, Mode};
use std::fmt;

/// What kind of wrong a [`Violation`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ViolationKind {
    /// A `<gpu>` id is outside `0..ngpus`, repeated, or a rank has no `<gpu>` at all.
    BadGpu,
    /// Threadblock ids are not `0..n` without gaps or repeats, a channel is outside
    /// `0..nchannels`, or two threadblocks of a rank use one connection end.
    BadThreadblock,
    /// A `send`/`recv` peer is outside the world or the rank itself, or a step sends or
    /// receives in a threadblock without that peer.
    BadPeer,
    /// A step's chunks lie outside the buffer the executor allocates or the program declares.
    OutOfRange,
    /// A field the executors refuse: `cnt` outside `0..72`, `hasdep` not 0 or 1, a negative `s`,
    /// a buffer shape the collective cannot have.
    BadStep,
    /// A `depid` names no threadblock of the rank, or a dependency the executors reject.
    BadDependency,
    /// A send has no receive on its connection, or a receive no send.
    Unmatched,
    /// A send and the receive it meets move different numbers of chunks.
    CountMismatch,
    /// Some threadblocks wait for each other forever (or for a step that never signals),
    /// however large the connection buffers.
    Deadlock,
    /// The program deadlocks when each connection holds only as many messages as the
    /// executors guarantee for its protocol (2 for Simple, 8 for LL and LL128), though not with
    /// unbounded buffers.
    BufferDeadlock,
    /// Two steps of a rank touch the same chunk, one writing, with no order between them.
    Race,
    /// A step reads a chunk no step has written and that holds no input.
    UninitializedRead,
    /// An output chunk of a reduction lacks a rank's contribution.
    MissingContribution,
    /// An output chunk of a reduction holds a rank's contribution more than once.
    DoubledContribution,
    /// An output chunk holds other data than the collective defines (another chunk, another
    /// rank's, nothing at all).
    WrongData,
}

impl ViolationKind {
    /// A short lower-case name (`race`, `missing contribution`, …).
    pub const fn name(self) -> &'static str {
        match self {
            ViolationKind::BadGpu => "bad gpu",
            ViolationKind::BadThreadblock => "bad threadblock",
            ViolationKind::BadPeer => "bad peer",
            ViolationKind::OutOfRange => "out of range",
            ViolationKind::BadStep => "bad step",
            ViolationKind::BadDependency => "bad dependency",
            ViolationKind::Unmatched => "unmatched",
            ViolationKind::CountMismatch => "count mismatch",
            ViolationKind::Deadlock => "deadlock",
            ViolationKind::BufferDeadlock => "buffer deadlock",
            ViolationKind::Race => "race",
            ViolationKind::UninitializedRead => "uninitialized read",
            ViolationKind::MissingContribution => "missing contribution",
            ViolationKind::DoubledContribution => "doubled contribution",
            ViolationKind::WrongData => "wrong data",
        }
    }

    /// Whether the program is structurally sound but computes a wrong result: such a program
    /// still lowers to a plan (which [`Plan::from_parts`](ruccl_core::Plan::from_parts) then
    /// refuses); the others do not lower.
    pub const fn is_result(self) -> bool {
        matches!(
            self,
            ViolationKind::UninitializedRead
                | ViolationKind::MissingContribution
                | ViolationKind::DoubledContribution
                | ViolationKind::WrongData
        )
    }
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A step of the file: rank, threadblock, and the step's position in it (which the
/// executors count by, and msccl-tools writes as `s`), with its line. Compact (`u32`s): the
/// parser's bounds keep every index far below.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StepRef {
    /// The rank (`<gpu id>`).
    pub gpu: u32,
    /// The threadblock (`<tb id>`).
    pub tb: u32,
    /// The step's position in its threadblock, from 0.
    pub step: u32,
    /// The line of its `<step>` element.
    pub line: u32,
}

impl StepRef {
    pub(crate) fn new(gpu: usize, tb: usize, step: usize, line: u32) -> Self {
        let compact = |value: usize| u32::try_from(value).unwrap_or(u32::MAX);
        StepRef {
            gpu: compact(gpu),
            tb: compact(tb),
            step: compact(step),
            line,
        }
    }
}

impl fmt::Display for StepRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gpu {} tb {} step {} (line {})",
            self.gpu, self.tb, self.step, self.line
        )
    }
}

/// Why [`Program::check`](crate::Program::check) refuses a program: the kind, where (gpu,
/// threadblock, step, buffer, chunk), the other step involved, and in which mode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct Violation {
    /// What is wrong.
    pub kind: ViolationKind,
    /// The rank it is on, where there is one.
    pub gpu: Option<usize>,
    /// The step it is about, where there is one.
    pub at: Option<StepRef>,
    /// The buffer it is about, where there is one.
    pub buffer: Option<Buffer>,
    /// The chunk of `buffer` it is about.
    pub chunk: Option<usize>,
    /// The other step involved: the racing access, the send a receive met, the step waited for.
    pub other: Option<StepRef>,
    /// The mode it happens in, where it depends on one.
    pub mode: Option<Mode>,
    /// The sentence that explains it.
    pub detail: String,
}

impl Violation {
    pub(crate) fn new(kind: ViolationKind, detail: impl Into<String>) -> Self {
        Violation {
            kind,
            gpu: None,
            at: None,
            buffer: None,
            chunk: None,
            other: None,
            mode: None,
            detail: detail.into(),
        }
    }

    pub(crate) fn on_gpu(mut self, gpu: usize) -> Self {
        self.gpu = Some(gpu);
        self
    }

    pub(crate) fn at(mut self, step: StepRef) -> Self {
        self.gpu = Some(step.gpu as usize);
        self.at = Some(step);
        self
    }

    pub(crate) fn chunk(mut self, buffer: Buffer, chunk: usize) -> Self {
        self.buffer = Some(buffer);
        self.chunk = Some(chunk);
        self
    }

    pub(crate) fn other(mut self, step: StepRef) -> Self {
        self.other = Some(step);
        self
    }

    pub(crate) fn in_mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// The threadblock, where there is one.
    pub fn tb(&self) -> Option<usize> {
        self.at.map(|step| step.tb as usize)
    }

    /// The step's position in its threadblock, where there is one.
    pub fn step(&self) -> Option<usize> {
        self.at.map(|step| step.step as usize)
    }

    fn describe(&self) -> String {
        let mut text = self.kind.name().to_owned();
        match (self.at, self.gpu) {
            (Some(step), _) => text.push_str(&format!(" at {step}")),
            (None, Some(gpu)) => text.push_str(&format!(" on gpu {gpu}")),
            (None, None) => {}
        }
        if let (Some(buffer), Some(chunk)) = (self.buffer, self.chunk) {
            text.push_str(&format!(", chunk {buffer}[{chunk}]"));
        }
        if let Some(mode) = self.mode {
            text.push_str(&format!(" ({mode})"));
        }
        text.push_str(": ");
        text.push_str(&self.detail);
        text
    }
}
