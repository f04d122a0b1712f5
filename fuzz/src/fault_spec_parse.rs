//! Target `fault_spec_parse`: the text form of [`FaultSpec`] and [`FaultPlan`].
//!
//! The first byte picks a mode; the rest is either text or choices:
//!
//! - **spec text** / **plan text**: any string. Parsing never panics; what parses prints in a
//!   canonical form that parses back to the same value and prints the same again; a plan's error
//!   names the comma-separated piece at fault, that piece alone fails with the same error, and
//!   every piece before it parses.
//! - **structured**: a spec built from its fields, printed with the fields shuffled, padded with
//!   blanks and sometimes one repeated. A spec the grammar can express (a `rank` only where the
//!   site takes one) must parse back to itself; a repeated field must be refused as `Duplicate`;
//!   a spec it cannot express must be refused, never read as another spec.

use crate::bytes::{Reader, Writer};
use ruccl_sim::fault::{DropTarget, FaultAction, FaultPlan, FaultSite, FaultSpec, ParseFaultError};

/// The three modes, by the first byte modulo 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The rest is one spec's text.
    SpecText,
    /// The rest is a plan's text.
    PlanText,
    /// The rest is choices for [`Structured`].
    Structured,
}

/// A spec from its fields, and how to print it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Structured {
    /// The spec.
    pub spec: FaultSpec,
    /// A permutation seed for the fields after the site.
    pub shuffle: u8,
    /// Blanks to put around every field.
    pub blanks: u8,
    /// Repeat the field at this position (modulo the number of fields), if any.
    pub repeat: Option<u8>,
}

/// Decode `data` and check it; panics on any violation.
pub fn check(data: &[u8]) {
    let mut reader = Reader::new(data);
    match reader.below(3) {
        0 => check_spec_text(&String::from_utf8_lossy(reader.rest())),
        1 => check_plan_text(&String::from_utf8_lossy(reader.rest())),
        _ => check_structured(&Structured::decode(&mut reader)),
    }
}

/// Any text: no panic; what parses round-trips through its canonical form.
pub fn check_spec_text(text: &str) {
    match text.parse::<FaultSpec>() {
        Ok(spec) => assert_canonical(&spec, text),
        Err(error) => assert!(
            !error.to_string().is_empty(),
            "{text:?}: an empty error message"
        ),
    }
}

fn assert_canonical(spec: &FaultSpec, text: &str) {
    let canonical = spec.to_string();
    assert!(
        !canonical.contains(char::is_whitespace) && !canonical.contains(','),
        "{text:?}: canonical form {canonical:?} holds blanks or commas"
    );
    let again = canonical.parse::<FaultSpec>();
    assert_eq!(
        again.as_ref(),
        Ok(spec),
        "{text:?}: canonical form {canonical:?} parses to another spec"
    );
    assert_eq!(
        again.map(|spec| spec.to_string()),
        Ok(canonical.clone()),
        "{text:?}: the canonical form is not a fixed point"
    );
}

/// Any plan text: no panic; a parsed plan round-trips and holds one spec per piece; an error names
/// the first piece that fails, with that piece's own error.
pub fn check_plan_text(text: &str) {
    let pieces: Vec<&str> = text.split(',').collect();
    match text.parse::<FaultPlan>() {
        Ok(plan) => {
            let canonical = plan.to_string();
            assert_eq!(
                canonical.parse::<FaultPlan>().as_ref(),
                Ok(&plan),
                "{text:?}: canonical plan {canonical:?}"
            );
            if text.trim().is_empty() {
                assert!(plan.is_empty(), "{text:?}: a blank plan holds {plan:?}");
                return;
            }
            assert_eq!(
                plan.specs().len(),
                pieces.len(),
                "{text:?}: one spec per piece"
            );
            for (piece, spec) in pieces.iter().zip(plan.specs()) {
                assert_eq!(
                    piece.parse::<FaultSpec>().as_ref(),
                    Ok(spec),
                    "{text:?}: piece {piece:?}"
                );
                assert_canonical(spec, piece);
            }
        }
        Err(error) => {
            let message = error.to_string();
            assert!(!message.is_empty());
            assert!(
                text.trim().is_empty() || error.index < pieces.len(),
                "{text:?}: {error:?}"
            );
            let piece = pieces.get(error.index).copied().unwrap_or_default();
            assert_eq!(
                error.spec,
                piece.trim(),
                "{text:?}: the error quotes another piece"
            );
            assert_eq!(
                piece.parse::<FaultSpec>().err().as_ref(),
                Some(&error.error),
                "{text:?}: piece {piece:?}"
            );
            for earlier in &pieces[..error.index.min(pieces.len())] {
                assert!(
                    earlier.parse::<FaultSpec>().is_ok(),
                    "{text:?}: an earlier piece {earlier:?} fails too"
                );
            }
        }
    }
}

/// Whether the grammar can write `spec`: `outputs` and `drop:what=work` take no rank.
pub fn expressible(spec: &FaultSpec) -> bool {
    spec.rank.is_none() || spec.site.takes_rank()
}

/// A spec printed with shuffled, padded and possibly repeated fields.
pub fn check_structured(case: &Structured) {
    let spec = case.spec;
    let text = case.render();
    let parsed = text.parse::<FaultSpec>();
    if case.repeat.is_some() {
        assert!(
            matches!(parsed, Err(ParseFaultError::Duplicate(_))),
            "{text:?} repeats a field, yet parses as {parsed:?}"
        );
    } else if expressible(&spec) {
        assert_eq!(parsed, Ok(spec), "{text:?} is {spec:?}");
        assert_canonical(&spec, &text);
    } else {
        assert!(
            parsed.is_err(),
            "{text:?} ({spec:?}, which the grammar cannot express) parses as {parsed:?}"
        );
    }
    check_spec_text(&spec.to_string());
}

impl Structured {
    /// Decode a structured case; every input decodes to one.
    pub fn decode(reader: &mut Reader<'_>) -> Self {
        let action = if reader.flag() {
            FaultAction::Panic
        } else {
            FaultAction::Error
        };
        let number = |reader: &mut Reader<'_>| match reader.below(4) {
            0 => usize::MAX - reader.below(3),
            1 => reader.u32() as usize,
            _ => reader.below(8),
        };
        let site = match reader.below(8) {
            0 => FaultSite::Prepare(action),
            1 => FaultSite::Begin(action),
            2 => {
                let step = reader.flag().then(|| number(reader));
                FaultSite::Exchange { step, action }
            }
            3 => FaultSite::Finish(action),
            4 => FaultSite::Outputs {
                count: number(reader),
            },
            5 => FaultSite::Drop(DropTarget::Prepared),
            6 => FaultSite::Drop(DropTarget::Work),
            _ => FaultSite::Drop(DropTarget::Output),
        };
        let rank = reader.flag().then(|| number(reader));
        let generation = reader.flag().then(|| match reader.below(3) {
            0 => u64::MAX,
            1 => reader.u64(),
            _ => reader.below(8) as u64,
        });
        Self {
            spec: FaultSpec {
                site,
                rank,
                generation,
            },
            shuffle: reader.byte(),
            blanks: reader.byte(),
            repeat: reader.flag().then(|| reader.byte()),
        }
    }

    /// The bytes that decode to this case (numbers up to 7, or full-width ones).
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::new();
        writer.byte(2);
        let spec = &self.spec;
        let action = match spec.site {
            FaultSite::Prepare(action)
            | FaultSite::Begin(action)
            | FaultSite::Exchange { action, .. }
            | FaultSite::Finish(action) => action,
            _ => FaultAction::Error,
        };
        writer.flag(action == FaultAction::Panic);
        let number = |writer: &mut Writer, value: usize| {
            if value < 8 {
                writer.below(2, 4);
                writer.below(value, 8);
            } else {
                writer.below(1, 4);
                writer.u32(value as u32);
            }
        };
        match spec.site {
            FaultSite::Prepare(_) => writer.below(0, 8),
            FaultSite::Begin(_) => writer.below(1, 8),
            FaultSite::Exchange { step, .. } => {
                writer.below(2, 8);
                writer.flag(step.is_some());
                if let Some(step) = step {
                    number(&mut writer, step);
                }
            }
            FaultSite::Finish(_) => writer.below(3, 8),
            FaultSite::Outputs { count } => {
                writer.below(4, 8);
                number(&mut writer, count);
            }
            FaultSite::Drop(DropTarget::Prepared) => writer.below(5, 8),
            FaultSite::Drop(DropTarget::Work) => writer.below(6, 8),
            _ => writer.below(7, 8),
        }
        writer.flag(spec.rank.is_some());
        if let Some(rank) = spec.rank {
            number(&mut writer, rank);
        }
        writer.flag(spec.generation.is_some());
        if let Some(generation) = spec.generation {
            writer.below(1, 3);
            writer.u64(generation);
        }
        writer.byte(self.shuffle);
        writer.byte(self.blanks);
        writer.flag(self.repeat.is_some());
        if let Some(repeat) = self.repeat {
            writer.byte(repeat);
        }
        writer.finish()
    }

    /// The fields after the site keyword, in canonical order.
    fn fields(&self) -> Vec<String> {
        let spec = &self.spec;
        let mut fields = Vec::new();
        match spec.site {
            FaultSite::Drop(target) => fields.push(format!("what={target}")),
            FaultSite::Exchange {
                step: Some(step), ..
            } => fields.push(format!("step={step}")),
            FaultSite::Outputs { count } => fields.push(format!("count={count}")),
            _ => {}
        }
        if let Some(rank) = spec.rank {
            fields.push(format!("rank={rank}"));
        }
        if let Some(generation) = spec.generation {
            fields.push(format!("gen={generation}"));
        }
        match spec.site {
            FaultSite::Prepare(action)
            | FaultSite::Begin(action)
            | FaultSite::Exchange { action, .. }
            | FaultSite::Finish(action) => fields.push(action.to_string()),
            _ => {}
        }
        fields
    }

    /// The text: the keyword, then the fields in shuffled order, each padded with blanks.
    pub fn render(&self) -> String {
        let mut fields = self.fields();
        let mut state = u32::from(self.shuffle);
        for index in (1..fields.len()).rev() {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            fields.swap(index, (state >> 16) as usize % (index + 1));
        }
        if let Some(repeat) = self.repeat {
            if !fields.is_empty() {
                let copy = fields[usize::from(repeat) % fields.len()].clone();
                fields.push(copy);
            }
        }
        let pad = |text: &str| {
            let blank = [" ", "\t", "  "][usize::from(self.blanks) % 3];
            if self.blanks & 4 == 0 {
                text.to_owned()
            } else {
                format!("{blank}{text}{blank}")
            }
        };
        let mut text = pad(self.spec.site.keyword());
        for field in &fields {
            text.push(':');
            text.push_str(&pad(field));
        }
        text
    }
}

/// Readable seeds: `(name, bytes)`.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let text = |mode: u8, text: &str| {
        let mut writer = Writer::new();
        writer.byte(mode);
        writer.raw(text.as_bytes());
        writer.finish()
    };
    let structured = |site, rank, generation, shuffle, blanks, repeat| {
        Structured {
            spec: FaultSpec {
                site,
                rank,
                generation,
            },
            shuffle,
            blanks,
            repeat,
        }
        .encode()
    };
    vec![
        (
            "spec_exchange",
            text(0, "exchange:step=2:rank=1:gen=3:panic"),
        ),
        ("spec_prepare", text(0, "prepare:rank=0:gen=1:error")),
        ("spec_outputs", text(0, "outputs:count=1:gen=0")),
        ("spec_drop_work", text(0, "drop:what=work:gen=4")),
        (
            "spec_drop_output_panic",
            text(0, " drop : what=output : rank=2 : panic "),
        ),
        ("spec_unknown_field", text(0, "finish:color=red:error")),
        ("spec_duplicate", text(0, "begin:gen=1:gen=2:error")),
        ("spec_bad_number", text(0, "prepare:rank=-1:error")),
        (
            "plan_three",
            text(
                1,
                "begin:error,exchange:step=0:panic, drop:what=prepared:rank=1",
            ),
        ),
        ("plan_blank", text(1, "   ")),
        ("plan_second_bad", text(1, "finish:panic,,outputs:count=2")),
        (
            "structured_exchange",
            structured(
                FaultSite::Exchange {
                    step: Some(3),
                    action: FaultAction::Panic,
                },
                Some(1),
                Some(2),
                5,
                4,
                None,
            ),
        ),
        (
            "structured_outputs_huge",
            structured(
                FaultSite::Outputs {
                    count: 4_000_000_000,
                },
                None,
                Some(u64::MAX),
                1,
                5,
                None,
            ),
        ),
        (
            "structured_repeat",
            structured(
                FaultSite::Prepare(FaultAction::Error),
                Some(0),
                Some(1),
                3,
                0,
                Some(1),
            ),
        ),
        (
            "structured_drop_work_with_rank",
            structured(FaultSite::Drop(DropTarget::Work), Some(1), None, 0, 0, None),
        ),
        (
            "structured_outputs_with_rank",
            structured(
                FaultSite::Outputs { count: 0 },
                Some(0),
                Some(0),
                2,
                6,
                None,
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::{Structured, seeds};
    use crate::bytes::Reader;

    #[test]
    fn structured_seeds_decode_to_themselves() {
        for (name, bytes) in seeds() {
            if bytes.first() == Some(&2) {
                let mut reader = Reader::new(&bytes[1..]);
                let case = Structured::decode(&mut reader);
                assert_eq!(case.encode(), bytes, "{name}");
            }
        }
    }
}
