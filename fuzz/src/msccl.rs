//! Target `msccl`: MSCCL XML through `ruccl_msccl::parse`, `check` and `lower`, against ruCCL's
//! own checker.
//!
//! The first byte picks a mode:
//!
//! - **text**: the rest is the XML, any bytes;
//! - **export**: a built-in plan (collective, root, algorithm, world 1..=6, an input length)
//!   exported by `ruccl_msccl::export`, then up to 4 line edits;
//! - **corpus**: a program of `msccl/tests/data/`, then up to 4 line edits.
//!
//! A line edit deletes, repeats or swaps `<step>` lines, or rewrites one attribute of a step or
//! threadblock (type, offsets, count, dependency, hasdep, peers) — so inputs are mostly the
//! schedules people write, slightly wrong.
//!
//! What must hold, for every input: nothing panics; and `check` and `lower` agree with
//! `Plan::from_parts`. For an input length where every chunk holds at least one element:
//!
//! - `check` accepts → in every declared mode, `lower` gives parts that `from_parts` accepts,
//!   except an all-reduce refused with `FoldOrder` (and then the report's lowering says so too);
//! - `check` refuses the result (a missing, doubled or wrong contribution, an uninitialized
//!   read) → `lower` in that mode gives parts that `from_parts` refuses (or `FoldOrder`);
//! - `check` refuses anything else (deadlock, race, unmatched, bad peer, …) → `lower` refuses
//!   it as `Unsound`;
//! - every plan `from_parts` accepts exports to XML that `check` accepts.

use crate::bytes::{Reader, Writer};
use ruccl_core::{Algorithm, Collective, Plan};
use ruccl_msccl::{LowerOptions, MscclCollective, MscclError, Outcome, Program, export, parse};

/// The committed programs the corpus mode starts from.
const PROGRAMS: [&str; 8] = [
    include_str!("../../msccl/tests/data/allreduce_ring_n3.xml"),
    include_str!("../../msccl/tests/data/allreduce_deps_n2.xml"),
    include_str!("../../msccl/tests/data/alltoall_direct_n3.xml"),
    include_str!("../../msccl/tests/data/broadcast_chain_n3.xml"),
    include_str!("../../msccl/tests/data/reduce_scatter_scratch_n2.xml"),
    include_str!("../../msccl/tests/data/allgather_sends_first_ll_n2.xml"),
    include_str!("../../msccl/tests/data/export_allreduce_direct_n3.xml"),
    include_str!("../../msccl/tests/data/export_gather_ring_n3_root1.xml"),
];

/// One edit of the text, by line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edit {
    /// Delete a step.
    Delete {
        /// The step, counted over the file's steps (modulo their number).
        line: u16,
    },
    /// Repeat a step.
    Repeat {
        /// The step.
        line: u16,
    },
    /// Swap two steps.
    Swap {
        /// One step.
        line: u16,
        /// The other.
        other: u16,
    },
    /// Rewrite an attribute of a step (or of its threadblock, for peers).
    Set {
        /// The step.
        line: u16,
        /// Which of [`ATTRIBUTES`] (modulo their number).
        attribute: u8,
        /// Which of the attribute's values (modulo their number).
        value: u8,
    },
}

/// Attributes an edit rewrites, and the values it picks from.
pub const ATTRIBUTES: [(&str, &[&str]); 10] = [
    (
        "type",
        &["s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop"],
    ),
    ("srcoff", &["0", "1", "2", "3", "-1"]),
    ("dstoff", &["0", "1", "2", "3", "-1"]),
    ("cnt", &["0", "1", "2", "3"]),
    ("depid", &["-1", "0", "1", "2"]),
    ("deps", &["-1", "0", "1", "2", "3"]),
    ("hasdep", &["0", "1"]),
    ("srcbuf", &["i", "o", "s"]),
    ("send", &["-1", "0", "1", "2"]),
    ("recv", &["-1", "0", "1", "2"]),
];

/// A decoded input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Case {
    /// XML as given.
    Text(String),
    /// A built-in plan's export, edited.
    Export {
        /// Index into [`Collective::KINDS`].
        kind: u8,
        /// The root, modulo the world.
        root: u8,
        /// Index into [`Algorithm::BUILT_IN`].
        algorithm: u8,
        /// Ranks, 1..=6.
        world: u8,
        /// Input length factor: `world × (1 + factor)`.
        factor: u8,
        /// The edits.
        edits: Vec<Edit>,
    },
    /// A committed program, edited.
    Corpus {
        /// Index into [`PROGRAMS`].
        program: u8,
        /// The edits.
        edits: Vec<Edit>,
    },
}

fn decode_edits(reader: &mut Reader<'_>) -> Vec<Edit> {
    (0..reader.below(5))
        .map(|_| match reader.below(4) {
            0 => Edit::Delete { line: reader.u16() },
            1 => Edit::Repeat { line: reader.u16() },
            2 => Edit::Swap {
                line: reader.u16(),
                other: reader.u16(),
            },
            _ => Edit::Set {
                line: reader.u16(),
                attribute: reader.byte(),
                value: reader.byte(),
            },
        })
        .collect()
}

fn encode_edits(writer: &mut Writer, edits: &[Edit]) {
    writer.below(edits.len(), 5);
    for edit in edits {
        match *edit {
            Edit::Delete { line } => {
                writer.below(0, 4);
                writer.u16(line);
            }
            Edit::Repeat { line } => {
                writer.below(1, 4);
                writer.u16(line);
            }
            Edit::Swap { line, other } => {
                writer.below(2, 4);
                writer.u16(line);
                writer.u16(other);
            }
            Edit::Set {
                line,
                attribute,
                value,
            } => {
                writer.below(3, 4);
                writer.u16(line);
                writer.byte(attribute);
                writer.byte(value);
            }
        }
    }
}

impl Case {
    /// Decode any bytes.
    pub fn decode(data: &[u8]) -> Case {
        let mut reader = Reader::new(data);
        match reader.below(3) {
            0 => Case::Text(String::from_utf8_lossy(reader.rest()).into_owned()),
            1 => Case::Export {
                kind: reader.byte(),
                root: reader.byte(),
                algorithm: reader.byte(),
                world: reader.byte(),
                factor: reader.byte(),
                edits: decode_edits(&mut reader),
            },
            _ => Case::Corpus {
                program: reader.byte(),
                edits: decode_edits(&mut reader),
            },
        }
    }

    /// The bytes that decode to this case.
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::new();
        match self {
            Case::Text(text) => {
                writer.below(0, 3);
                writer.raw(text.as_bytes());
            }
            Case::Export {
                kind,
                root,
                algorithm,
                world,
                factor,
                edits,
            } => {
                writer.below(1, 3);
                for byte in [*kind, *root, *algorithm, *world, *factor] {
                    writer.byte(byte);
                }
                encode_edits(&mut writer, edits);
            }
            Case::Corpus { program, edits } => {
                writer.below(2, 3);
                writer.byte(*program);
                encode_edits(&mut writer, edits);
            }
        }
        writer.finish()
    }

    /// The XML text of the case, if any.
    pub fn text(&self) -> Option<String> {
        match self {
            Case::Text(text) => Some(text.clone()),
            Case::Export {
                kind,
                root,
                algorithm,
                world,
                factor,
                edits,
            } => {
                let world = 1 + usize::from(*world) % 6;
                let kinds = Collective::KINDS;
                let collective =
                    kinds[usize::from(*kind) % kinds.len()].with_root(usize::from(*root) % world);
                let algorithms = Algorithm::BUILT_IN;
                let algorithm = algorithms[usize::from(*algorithm) % algorithms.len()];
                let input_len = world * (1 + usize::from(*factor) % 8);
                let plan = Plan::new(collective, algorithm, world, input_len).ok()?;
                Some(apply(&export(&plan), edits))
            }
            Case::Corpus { program, edits } => {
                let text = PROGRAMS[usize::from(*program) % PROGRAMS.len()];
                Some(apply(text, edits))
            }
        }
    }
}

/// The text with `edits` applied to its `<step>` (and `<tb>`) lines.
pub fn apply(text: &str, edits: &[Edit]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let steps = |lines: &[String]| -> Vec<usize> {
        lines
            .iter()
            .enumerate()
            .filter(|(_, line)| line.contains("<step"))
            .map(|(index, _)| index)
            .collect()
    };
    for edit in edits {
        let found = steps(&lines);
        if found.is_empty() {
            break;
        }
        let at = |line: u16| found[usize::from(line) % found.len()];
        match *edit {
            Edit::Delete { line } => {
                lines.remove(at(line));
            }
            Edit::Repeat { line } => {
                let index = at(line);
                let copy = lines[index].clone();
                lines.insert(index, copy);
            }
            Edit::Swap { line, other } => lines.swap(at(line), at(other)),
            Edit::Set {
                line,
                attribute,
                value,
            } => {
                let (name, values) = ATTRIBUTES[usize::from(attribute) % ATTRIBUTES.len()];
                let value = values[usize::from(value) % values.len()];
                // Peers live on the threadblock line above the step.
                let mut index = at(line);
                if name == "send" || name == "recv" {
                    while index > 0 && !lines[index].contains("<tb") {
                        index -= 1;
                    }
                }
                lines[index] = set_attribute(&lines[index], name, value);
            }
        }
    }
    lines.join("\n")
}

/// `line` with attribute `name` set to `value` (unchanged if it has none).
fn set_attribute(line: &str, name: &str, value: &str) -> String {
    let key = format!(" {name}=\"");
    let Some(start) = line.find(&key) else {
        return line.to_owned();
    };
    let value_start = start + key.len();
    let Some(length) = line[value_start..].find('"') else {
        return line.to_owned();
    };
    format!(
        "{}{value}{}",
        &line[..value_start],
        &line[value_start + length..]
    )
}

/// An input length for `program` at which every chunk holds at least one element (two or
/// three, unevenly), or `None` if its shape is not one any length fits.
fn input_len(program: &Program) -> Option<usize> {
    let world = usize::try_from(program.world()).ok()?;
    let chunks = usize::try_from(program.chunks()).ok()?;
    let (blocks, per_block) = match program.collective() {
        MscclCollective::AllGather => (1, chunks.checked_div(world)?),
        MscclCollective::ReduceScatter | MscclCollective::AllToAll => {
            (world, chunks.checked_div(world)?)
        }
        MscclCollective::Scatter => (world, chunks),
        _ => (1, chunks),
    };
    (per_block > 0).then(|| blocks * (per_block * 2 + 1))
}

/// Decode `data` and check it; panics on any violation.
pub fn check(data: &[u8]) {
    let case = Case::decode(data);
    if let Some(text) = case.text() {
        check_text(&text);
    }
}

/// The properties of the module documentation, for one text.
pub fn check_text(text: &str) {
    let Ok(program) = parse(text) else { return };
    let checked = program.check();
    if let Err(violation) = &checked {
        assert!(!violation.to_string().is_empty(), "an empty violation");
    }
    let Some(input_len) = input_len(&program) else {
        return;
    };
    let modes = program.modes();
    let lower = |mode| program.lower_with(input_len, LowerOptions::default().with_mode(mode));
    match checked {
        Ok(report) => {
            let Outcome::Verified { .. } = report.outcome else {
                for &mode in &modes {
                    assert!(
                        matches!(lower(mode), Err(MscclError::Unsupported { .. })),
                        "an unsupported collective lowers"
                    );
                }
                return;
            };
            for &mode in &modes {
                match lower(mode) {
                    Ok(parts) => match Plan::from_parts(parts) {
                        Ok(plan) => check_export(&plan),
                        Err(violation) => panic!(
                            "check accepts, ruCCL refuses the lowering ({mode}, n={input_len}): {violation}\n{text}"
                        ),
                    },
                    Err(MscclError::FoldOrder { .. }) => {
                        assert_eq!(program.collective(), MscclCollective::AllReduce);
                        assert!(
                            report.lowered.is_err() || modes.len() > 1,
                            "lower refuses the fold order, the report lowers: {:?}",
                            report.lowered
                        );
                    }
                    Err(error) => panic!("check accepts, lower refuses ({mode}): {error}\n{text}"),
                }
            }
        }
        Err(violation) if violation.kind.is_result() => {
            let mode = violation.mode.unwrap_or(modes[0]);
            match lower(mode) {
                Ok(parts) => {
                    if let Ok(plan) = Plan::from_parts(parts) {
                        panic!(
                            "check refuses ({violation}), ruCCL accepts the lowering ({} steps)\n{text}",
                            plan.steps().len()
                        );
                    }
                }
                Err(MscclError::FoldOrder { .. }) => {}
                Err(error) => {
                    panic!("a wrong result does not lower ({violation}): {error}\n{text}")
                }
            }
        }
        Err(violation) => {
            for &mode in &modes {
                assert!(
                    matches!(
                        lower(mode),
                        Err(MscclError::Unsound(_) | MscclError::Unsupported { .. })
                    ),
                    "check refuses ({violation}) but the program lowers\n{text}"
                );
            }
        }
    }
}

/// An accepted plan exports to XML that `check` accepts.
fn check_export(plan: &Plan) {
    let xml = export(plan);
    let program = parse(&xml).unwrap_or_else(|error| panic!("an export does not parse: {error}"));
    if let Err(violation) = program.check() {
        panic!("an export fails its check: {violation}\n{xml}");
    }
}

/// Readable seeds: every committed program unedited and once edited each way, exports of a
/// few plans, and texts at the edges of the format.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let corpus = |program: u8, edits: Vec<Edit>| Case::Corpus { program, edits }.encode();
    let exported = |kind: u8, algorithm: u8, world: u8, edits: Vec<Edit>| {
        Case::Export {
            kind,
            root: 1,
            algorithm,
            world,
            factor: 1,
            edits,
        }
        .encode()
    };
    vec![
        ("ring_allreduce", corpus(0, vec![])),
        ("deps_allreduce", corpus(1, vec![])),
        ("alltoall", corpus(2, vec![])),
        ("broadcast", corpus(3, vec![])),
        ("reduce_scatter", corpus(4, vec![])),
        ("sends_first", corpus(5, vec![])),
        ("export_direct_allreduce", corpus(6, vec![])),
        ("export_gather", corpus(7, vec![])),
        ("ring_dropped_step", corpus(0, vec![Edit::Delete { line: 4 }])),
        ("ring_rrc_becomes_r", corpus(0, vec![Edit::Set { line: 2, attribute: 0, value: 1 }])),
        ("deps_never_signalled", corpus(1, vec![Edit::Set { line: 3, attribute: 6, value: 0 }])),
        ("alltoall_swapped", corpus(2, vec![Edit::Swap { line: 1, other: 2 }])),
        ("reduce_scatter_repeated", corpus(4, vec![Edit::Repeat { line: 3 }])),
        ("export_ring_allreduce", exported(0, 0, 3, vec![])),
        ("export_hd_reduce_scatter", exported(1, 2, 3, vec![])),
        ("export_direct_alltoall", exported(7, 1, 2, vec![Edit::Set { line: 0, attribute: 2, value: 2 }])),
        ("export_ring_broadcast", exported(3, 0, 4, vec![Edit::Set { line: 5, attribute: 3, value: 2 }])),
        ("text_empty", Case::Text(String::new()).encode()),
        ("text_unclosed", Case::Text("<algo name=\"x\"".to_owned()).encode()),
        (
            "text_one_rank",
            Case::Text(
                "<algo proto=\"LL\" nchannels=\"1\" nchunksperloop=\"1\" ngpus=\"1\" coll=\"allreduce\" inplace=\"1\"><gpu id=\"0\" i_chunks=\"1\" o_chunks=\"1\" s_chunks=\"0\"/></algo>"
                    .to_owned(),
            )
            .encode(),
        ),
    ]
}
