//! Imported MSCCL schedules: `--schedule FILE` on a sweep, `ruccl-perf verify FILE...` and
//! `ruccl-perf export`. Parsing, checking, lowering and exporting are `ruccl-msccl`'s; here a
//! checked program becomes the plan of every generation of a sweep, at each size.

use ruccl_core::{Collective, Plan, ReduceOperation};
use ruccl_msccl::{LowerOptions, Outcome, Program};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// A checked MSCCL program a sweep runs instead of a built-in algorithm.
#[derive(Debug)]
pub struct Schedule {
    path: PathBuf,
    program: Program,
    /// The collective it computes (root as its data flow shows; operation `Sum`).
    collective: Collective,
    /// The last plan lowered: `(input length, operation, plan)`. Every rank of a generation asks
    /// for the same one, so one entry serves a whole size.
    last: Mutex<Option<(usize, ReduceOperation, Plan)>>,
}

impl Schedule {
    /// Read, parse and check the program at `path`: refused with the reason if it cannot be
    /// read, is not MSCCL XML, breaks MSCCL's semantics, or defines no result ruCCL can run.
    pub fn load(path: &Path) -> Result<Schedule, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("--schedule {}: cannot read it: {error}", path.display()))?;
        let program = ruccl_msccl::parse(&text)
            .map_err(|error| format!("--schedule {}: {error}", path.display()))?;
        let report = program
            .check()
            .map_err(|violation| format!("--schedule {}: {violation}", path.display()))?;
        if matches!(report.outcome, Outcome::Unsupported) {
            return Err(format!(
                "--schedule {}: a `{}` program defines no result to run",
                path.display(),
                program.collective_name()
            ));
        }
        // The collective, as the lowering names it (it infers a root from the data flow).
        let probe = program
            .lower(program.chunks().max(1) as usize)
            .map_err(|error| format!("--schedule {}: {error}", path.display()))?;
        Ok(Schedule {
            path: path.to_owned(),
            collective: probe.collective,
            program,
            last: Mutex::new(None),
        })
    }

    /// The file it came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its ranks.
    pub fn world(&self) -> usize {
        usize::try_from(self.program.world()).unwrap_or(0)
    }

    /// The collective it computes, with `Sum` for a reduction.
    pub fn collective(&self) -> Collective {
        self.collective
    }

    /// The verified plan for inputs of `input_len` elements reducing with `operation`.
    pub fn plan(&self, input_len: usize, operation: ReduceOperation) -> Result<Plan, String> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((len, op, plan)) = last.as_ref() {
            if (*len, *op) == (input_len, operation) {
                return Ok(plan.clone());
            }
        }
        let options = LowerOptions::default().with_operation(operation);
        // One element per chunk, proved, then stretched to the size when the chunks divide it
        // (`Plan::scaled` needs no new proof): a 64 MiB schedule is checked on its chunks, not
        // on millions of elements. Other sizes are lowered and proved as they are.
        let chunks = usize::try_from(self.program.chunks()).unwrap_or(0).max(1);
        let (base, factor) = if input_len > chunks && input_len % chunks == 0 {
            (chunks, input_len / chunks)
        } else {
            (input_len, 1)
        };
        let parts = self
            .program
            .lower_with(base, options)
            .map_err(|error| format!("{}: {error}", self.path.display()))?;
        let plan = Plan::from_parts(parts)
            .map_err(|violation| format!("{}: {violation}", self.path.display()))?;
        let plan = plan
            .scaled(factor)
            .map_err(|error| format!("{}: {error}", self.path.display()))?;
        *last = Some((input_len, operation, plan.clone()));
        Ok(plan)
    }
}

/// One line per file of `ruccl-perf verify`: `PASS path: report`, `FAIL path: violation`, or
/// `UNREADABLE path: why`, and the status it adds (0 pass, 1 a violation, 2 unreadable).
pub fn verify_file(path: &Path) -> (String, u8) {
    let name = path.display();
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => return (format!("UNREADABLE {name}: {error}"), 2),
    };
    let program = match ruccl_msccl::parse(&text) {
        Ok(program) => program,
        Err(error) => return (format!("UNREADABLE {name}: {error}"), 2),
    };
    match program.check() {
        Ok(report) if matches!(report.outcome, Outcome::Unsupported) => {
            (format!("UNSUPPORTED {name}: {report}"), 0)
        }
        Ok(report) => (format!("PASS {name}: {report}"), 0),
        Err(violation) => (format!("FAIL {name}: {violation}"), 1),
    }
}
