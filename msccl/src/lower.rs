//! [`Program::lower`]: a checked program as ruCCL plan parts.

use crate::check::Analysis;
use crate::error::MscclError;
use crate::program::Program;

/// What a program's lowering costs, at one element per chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lowered {
    /// ruCCL steps.
    pub steps: usize,
}

/// The summary of `program`'s lowering for a report.
pub(crate) fn summary(_program: &Program, _analysis: &Analysis) -> Result<Lowered, MscclError> {
    Err(MscclError::Unsupported {
        collective: "lowering is not written yet".to_owned(),
    })
}
