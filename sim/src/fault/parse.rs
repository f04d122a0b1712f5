//! The text form of fault specs and plans, for command lines and fuzzers.
//!
//! ```text
//! plan   := "" | spec ("," spec)*
//! spec   := site (":" field)*
//! site   := "prepare" | "begin" | "exchange" | "finish" | "outputs" | "drop"
//! field  := "rank=" N | "gen=" N | "step=" N | "count=" N
//!         | "what=" ("prepared" | "work" | "output")
//!         | "error" | "panic"
//! ```
//!
//! - `prepare`, `begin`, `exchange`, `finish` need exactly one action, `error` or `panic`.
//! - `exchange` takes `step` (absent: any step, so the first). Only `exchange` takes it.
//! - `outputs` needs `count` and takes no action (it returns the wrong number of outputs).
//! - `drop` needs `what`; its action is always a panic (`panic` may be written, `error` may not).
//! - `rank` is refused for `outputs` and `drop:what=work`, which belong to no rank.
//! - `gen` and `rank` absent mean every generation, every rank.
//! - Fields may come in any order, each at most once; whitespace around a spec is ignored.
//!
//! [`Display`](std::fmt::Display) writes the canonical form, which parses back to the same spec.

use super::plan::{DropTarget, FaultAction, FaultPlan, FaultSite, FaultSpec};
use std::fmt;
use std::str::FromStr;

/// Why a fault spec did not parse. Every variant names the part of the text at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseFaultError {
    /// The spec is empty.
    #[error("empty fault spec: expected a site such as `exchange:step=2:panic`")]
    Empty,
    /// The first part names no site.
    #[error(
        "unknown fault site `{0}`: expected one of prepare, begin, exchange, finish, outputs, drop"
    )]
    UnknownSite(String),
    /// A field is neither `key=value` with a known key nor an action.
    #[error("unknown field `{0}`: expected rank=, gen=, step=, count=, what=, error or panic")]
    UnknownField(String),
    /// A number field's value is not a non-negative integer.
    #[error("`{key}={value}`: expected a non-negative integer")]
    BadNumber {
        /// The key.
        key: &'static str,
        /// The value as written.
        value: String,
    },
    /// `what=` names no droppable value.
    #[error("`what={0}`: expected prepared, work or output")]
    BadTarget(String),
    /// A field (or an action) is given twice.
    #[error("`{0}` is given twice")]
    Duplicate(&'static str),
    /// A field that this site does not take.
    #[error("`{site}` does not take `{field}`")]
    NotAllowed {
        /// The site.
        site: &'static str,
        /// The field (key or action).
        field: String,
    },
    /// A field this site needs is missing.
    #[error("`{site}` needs {field}")]
    Missing {
        /// The site.
        site: &'static str,
        /// What is missing.
        field: &'static str,
    },
}

/// Why a fault plan did not parse: which spec, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("fault {index} `{spec}`: {error}")]
pub struct ParsePlanError {
    /// The spec's position in the plan (0-based).
    pub index: usize,
    /// The spec as written.
    pub spec: String,
    /// What is wrong with it.
    #[source]
    pub error: ParseFaultError,
}

/// The fields of one spec as written, before the site decides which it needs.
#[derive(Default)]
struct Fields {
    rank: Option<usize>,
    generation: Option<u64>,
    step: Option<usize>,
    count: Option<usize>,
    what: Option<DropTarget>,
    action: Option<FaultAction>,
}

impl Fields {
    fn parse<'a>(parts: impl Iterator<Item = &'a str>) -> Result<Self, ParseFaultError> {
        let mut fields = Fields::default();
        for part in parts {
            let part = part.trim();
            match part.split_once('=') {
                None => {
                    let action = match part {
                        "error" => FaultAction::Error,
                        "panic" => FaultAction::Panic,
                        _ => return Err(ParseFaultError::UnknownField(part.to_owned())),
                    };
                    set(&mut fields.action, "action", action)?;
                }
                Some(("rank", value)) => set(&mut fields.rank, "rank", number("rank", value)?)?,
                Some(("gen", value)) => set(&mut fields.generation, "gen", number("gen", value)?)?,
                Some(("step", value)) => set(&mut fields.step, "step", number("step", value)?)?,
                Some(("count", value)) => set(&mut fields.count, "count", number("count", value)?)?,
                Some(("what", value)) => {
                    let target = match value {
                        "prepared" => DropTarget::Prepared,
                        "work" => DropTarget::Work,
                        "output" => DropTarget::Output,
                        _ => return Err(ParseFaultError::BadTarget(value.to_owned())),
                    };
                    set(&mut fields.what, "what", target)?;
                }
                Some(_) => return Err(ParseFaultError::UnknownField(part.to_owned())),
            }
        }
        Ok(fields)
    }
}

fn set<T>(slot: &mut Option<T>, key: &'static str, value: T) -> Result<(), ParseFaultError> {
    if slot.replace(value).is_some() {
        return Err(ParseFaultError::Duplicate(key));
    }
    Ok(())
}

fn number<T: FromStr>(key: &'static str, value: &str) -> Result<T, ParseFaultError> {
    value.parse().map_err(|_| ParseFaultError::BadNumber {
        key,
        value: value.to_owned(),
    })
}

/// The site keywords, in the order of the grammar.
const SITES: [&str; 7] = [
    "prepare", "describe", "begin", "exchange", "finish", "outputs", "drop",
];

/// Refuse a `key=value` field the site does not take.
fn refuse<T: fmt::Display>(
    site: &'static str,
    key: &str,
    value: Option<T>,
) -> Result<(), ParseFaultError> {
    match value {
        Some(value) => Err(ParseFaultError::NotAllowed {
            site,
            field: format!("{key}={value}"),
        }),
        None => Ok(()),
    }
}

/// Refuse an action the site does not take.
fn refuse_action(site: &'static str, action: Option<FaultAction>) -> Result<(), ParseFaultError> {
    match action {
        Some(action) => Err(ParseFaultError::NotAllowed {
            site,
            field: action.to_string(),
        }),
        None => Ok(()),
    }
}

fn required<T>(
    site: &'static str,
    field: &'static str,
    value: Option<T>,
) -> Result<T, ParseFaultError> {
    value.ok_or(ParseFaultError::Missing { site, field })
}

impl FromStr for FaultSpec {
    type Err = ParseFaultError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        if text.is_empty() {
            return Err(ParseFaultError::Empty);
        }
        let mut parts = text.split(':');
        let keyword = parts.next().unwrap_or_default().trim();
        let Some(&site) = SITES.iter().find(|&&site| site == keyword) else {
            return Err(ParseFaultError::UnknownSite(keyword.to_owned()));
        };
        let fields = Fields::parse(parts)?;
        if site != "exchange" {
            refuse(site, "step", fields.step)?;
        }
        if site != "outputs" {
            refuse(site, "count", fields.count)?;
        }
        if site != "drop" {
            refuse(site, "what", fields.what)?;
        }
        let action = || required(site, "an action, `error` or `panic`", fields.action);
        let site = match site {
            "prepare" => FaultSite::Prepare(action()?),
            "describe" => {
                // `describe` cannot fail: its fault is a panic, with or without the word.
                if fields.action == Some(FaultAction::Error) {
                    refuse_action(site, fields.action)?;
                }
                FaultSite::Describe
            }
            "begin" => FaultSite::Begin(action()?),
            "exchange" => FaultSite::Exchange {
                step: fields.step,
                action: action()?,
            },
            "finish" => FaultSite::Finish(action()?),
            "outputs" => {
                refuse_action(site, fields.action)?;
                refuse(site, "rank", fields.rank)?;
                FaultSite::Outputs {
                    count: required(site, "`count=N`", fields.count)?,
                }
            }
            _ => {
                if fields.action == Some(FaultAction::Error) {
                    refuse_action(site, fields.action)?;
                }
                let target = required(site, "`what=prepared|work|output`", fields.what)?;
                if target == DropTarget::Work {
                    refuse("drop:what=work", "rank", fields.rank)?;
                }
                FaultSite::Drop(target)
            }
        };
        Ok(FaultSpec {
            site,
            rank: fields.rank,
            generation: fields.generation,
        })
    }
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.site.keyword())?;
        match self.site {
            FaultSite::Drop(target) => write!(f, ":what={target}")?,
            FaultSite::Exchange {
                step: Some(step), ..
            } => write!(f, ":step={step}")?,
            FaultSite::Outputs { count } => write!(f, ":count={count}")?,
            _ => {}
        }
        // A rank on a site that takes none has no effect (see `FaultSpec::rank`), and the
        // parser refuses it there: leave it out, so the text always parses back.
        if let Some(rank) = self.rank.filter(|_| self.site.takes_rank()) {
            write!(f, ":rank={rank}")?;
        }
        if let Some(generation) = self.generation {
            write!(f, ":gen={generation}")?;
        }
        match self.site {
            FaultSite::Prepare(action)
            | FaultSite::Begin(action)
            | FaultSite::Exchange { action, .. }
            | FaultSite::Finish(action) => write!(f, ":{action}"),
            FaultSite::Describe => f.write_str(":panic"),
            FaultSite::Outputs { .. } | FaultSite::Drop(_) => Ok(()),
        }
    }
}

impl FromStr for FaultPlan {
    type Err = ParsePlanError;

    /// Specs separated by commas; an empty (or all-blank) text is the empty plan.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.trim().is_empty() {
            return Ok(FaultPlan::none());
        }
        text.split(',')
            .enumerate()
            .map(|(index, spec)| {
                spec.parse().map_err(|error| ParsePlanError {
                    index,
                    spec: spec.trim().to_owned(),
                    error,
                })
            })
            .collect::<Result<Vec<FaultSpec>, _>>()
            .map(FaultPlan::new)
    }
}

impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, spec) in self.specs().iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{spec}")?;
        }
        Ok(())
    }
}
