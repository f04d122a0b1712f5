//! [`MscclError`]: why a text is no MSCCL program, or a program no ruCCL plan.

use crate::check::Violation;
use crate::program::{Mode, Position};

/// Why [`parse`](crate::parse) refuses a text, or [`lower`](crate::Program::lower) a program.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MscclError {
    /// The text is not well-formed XML.
    #[error("{position}: not well-formed XML: {message}")]
    Syntax {
        /// Where the XML parser stopped.
        position: Position,
        /// What it found.
        message: String,
    },
    /// The XML is well-formed but not an MSCCL algorithm: a wrong root element, a missing
    /// attribute, a value that is not a number, an unknown step type, buffer or collective.
    #[error("{position}: {message}")]
    Format {
        /// The element (or attribute value) at fault.
        position: Position,
        /// What is wrong.
        message: String,
    },
    /// The input exceeds what is read or checked at all.
    #[error("{what} exceed the limit of {limit}")]
    TooLarge {
        /// Where, if anywhere in particular.
        position: Option<Position>,
        /// What is too large.
        what: String,
        /// The limit.
        limit: String,
    },
    /// The program cannot run at all (deadlock, race, unmatched send, bad peer, …): nothing
    /// to lower.
    #[error("the program cannot be lowered: {0}")]
    Unsound(Box<Violation>),
    /// The collective defines no result a ruCCL plan could compute (`custom` and the like).
    #[error("coll=\"{collective}\" has no ruCCL collective")]
    Unsupported {
        /// `coll` as written.
        collective: String,
    },
    /// The program does not declare the mode asked for (`inplace`/`outofplace`).
    #[error("the program does not declare {mode} execution")]
    Mode {
        /// The mode asked for.
        mode: Mode,
    },
    /// ruCCL's checker refuses the lowered plan (a program whose result `check` refuses).
    #[error("ruCCL's checker refuses the lowered plan: {reason}")]
    Refused {
        /// The checker's violation.
        reason: String,
    },
    /// The input length does not fit the collective's layout.
    #[error("an input of {input_len} elements does not fit: {reason}")]
    Length {
        /// The length asked for.
        input_len: usize,
        /// Why it does not fit.
        reason: String,
    },
    /// The lowering found no way to order its transfers into steps (a bug of this crate if it
    /// ever happens: every sound program has one).
    #[error("the program cannot be expressed as ruCCL steps: {reason}")]
    Inexpressible {
        /// What went wrong.
        reason: String,
    },
    /// The program's reductions, in the only order ruCCL's combining steps can fold them,
    /// leave ranks with different trees for one all-reduce output chunk: ruCCL requires
    /// identical bits on every rank.
    #[error(
        "gpu {gpu}'s output chunk {chunk} is folded in another order than gpu 0's once lowered (ruCCL folds ascending ranks, the receiver's own value at its position, a local value right after it): {reason}"
    )]
    FoldOrder {
        /// A rank whose output tree differs from rank 0's.
        gpu: usize,
        /// The output chunk.
        chunk: usize,
        /// Whether MSCCL itself would agree bitwise.
        reason: String,
    },
}

impl MscclError {
    /// Where in the text, for errors about the text.
    pub fn position(&self) -> Option<Position> {
        match self {
            MscclError::Syntax { position, .. } | MscclError::Format { position, .. } => {
                Some(*position)
            }
            MscclError::TooLarge { position, .. } => *position,
            _ => None,
        }
    }
}
