//! How much each checker explores: the `full` profile (CI, `cargo loom`, `cargo shuttle`) or the
//! `quick` one (mutation testing, where every mutant rebuilds and reruns the suite).
//!
//! Chosen by the environment variable `RUCCL_MODELS_PROFILE` (`full`, the default, or `quick`).
//! The profile only ever scales iteration counts and drops the largest loom models; which
//! properties are checked does not change.

/// The environment variable that selects the profile.
pub const PROFILE_VARIABLE: &str = "RUCCL_MODELS_PROFILE";

/// How much to explore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// The budgets the README reports: loom exhaustive where promised, thousands of shuttle
    /// iterations, 10 000 generations of real threads.
    Full,
    /// A fraction of that, to run the whole suite per mutant in well under a minute.
    Quick,
}

impl Profile {
    /// The profile the environment asks for (`full` unless `RUCCL_MODELS_PROFILE=quick`).
    pub fn current() -> Self {
        match std::env::var(PROFILE_VARIABLE) {
            Ok(value) if value.eq_ignore_ascii_case("quick") => Profile::Quick,
            _ => Profile::Full,
        }
    }

    /// `full` under the full profile, `quick` under the quick one.
    pub fn pick<T>(self, full: T, quick: T) -> T {
        match self {
            Profile::Full => full,
            Profile::Quick => quick,
        }
    }

    /// Whether this is the quick profile.
    pub fn is_quick(self) -> bool {
        self == Profile::Quick
    }
}
