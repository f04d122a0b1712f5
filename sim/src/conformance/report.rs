//! The outcome of a conformance run: what was checked, what failed, how long it took.

use std::fmt;
use std::time::Duration;

/// One failed check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConformanceFailure {
    /// The check's name, `/`-separated from general to specific, e.g. `all_reduce`,
    /// `exchange/pre_step_reads`, `validation/begin/length_mismatch`.
    pub check: String,
    /// The case: world, element type, operation, length, as applicable.
    pub case: String,
    /// What went wrong (an unexpected `Ok`, an error, a panic, a wrong value).
    pub detail: String,
}

impl fmt::Display for ConformanceFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}]: {}", self.check, self.case, self.detail)
    }
}

/// The report of [`run`](super::run). A conformance run never panics on a device's behalf: a
/// device's errors and panics become failures here.
#[derive(Clone, Debug, Default)]
pub struct ConformanceReport {
    /// Checks run (one per all-reduce case and rank, per crafted exchange, per validation).
    pub checks: usize,
    /// The checks that failed.
    pub failures: Vec<ConformanceFailure>,
    /// Wall-clock time of the run.
    pub elapsed: Duration,
    /// Combinations the device declared unsupported (checked to be rejected, not computed).
    pub unsupported: Vec<String>,
    /// Checks that could not run with this configuration, and why.
    pub skipped: Vec<String>,
}

impl ConformanceReport {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// The failures whose check name starts with `prefix` (e.g. `"exchange/"`).
    pub fn failures_of<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a ConformanceFailure> + 'a {
        self.failures
            .iter()
            .filter(move |failure| failure.check.starts_with(prefix))
    }

    /// Panic with a readable list of failures (the first 40) unless every check passed; for
    /// tests.
    #[track_caller]
    pub fn assert_passed(&self) {
        if !self.passed() {
            panic!("conformance failed:\n{self}");
        }
    }

    pub(crate) fn check(&mut self, outcome: Result<(), ConformanceFailure>) {
        self.checks += 1;
        if let Err(failure) = outcome {
            self.failures.push(failure);
        }
    }
}

/// How many failures `Display` lists.
const LISTED: usize = 40;

impl fmt::Display for ConformanceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} checks, {} failed, in {:.2?}",
            self.checks,
            self.failures.len(),
            self.elapsed
        )?;
        for failure in self.failures.iter().take(LISTED) {
            writeln!(f, "  {failure}")?;
        }
        if self.failures.len() > LISTED {
            writeln!(f, "  ... and {} more", self.failures.len() - LISTED)?;
        }
        Ok(())
    }
}
