//! `check` and `lower` agree with ruCCL's own checker, on thousands of slightly wrong programs:
//! the committed programs and exports of built-in plans, each with a few random line edits
//! (a step deleted, repeated or swapped; a type, offset, count, dependency or hasdep
//! rewritten). The fuzz target `msccl` (`fuzz/src/msccl.rs`) checks the same properties on
//! what libFuzzer finds; this is its deterministic, always-run counterpart.
//!
//! For an input length where every chunk holds an element: `check` accepts ⇒ every declared
//! mode lowers to parts `Plan::from_parts` accepts (an all-reduce may instead be refused for its
//! fold order); `check` refuses the result ⇒ the lowering in that mode is refused by
//! `from_parts`; `check` refuses anything else ⇒ `lower` refuses it as unsound.

use ruccl_core::{Algorithm, Collective, Plan};
use ruccl_msccl::{LowerOptions, MscclCollective, MscclError, Outcome, Program, export, parse};
use std::path::Path;

/// A xorshift generator: the same cases on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }
}

const ATTRIBUTES: [(&str, &[&str]); 8] = [
    (
        "type",
        &["s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop"],
    ),
    ("srcoff", &["0", "1", "2", "3"]),
    ("dstoff", &["0", "1", "2", "3"]),
    ("cnt", &["0", "1", "2"]),
    ("depid", &["-1", "0", "1", "2"]),
    ("deps", &["-1", "0", "1", "2"]),
    ("hasdep", &["0", "1"]),
    ("dstbuf", &["i", "o", "s"]),
];

/// `text` with up to four random edits of its `<step>` lines.
fn edit(text: &str, rng: &mut Rng) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for _ in 0..1 + rng.below(4) {
        let steps: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].contains("<step"))
            .collect();
        if steps.is_empty() {
            break;
        }
        let at = steps[rng.below(steps.len())];
        match rng.below(4) {
            0 => {
                lines.remove(at);
            }
            1 => {
                let copy = lines[at].clone();
                lines.insert(at, copy);
            }
            2 => {
                let other = steps[rng.below(steps.len())];
                lines.swap(at, other);
            }
            _ => {
                let (name, values) = ATTRIBUTES[rng.below(ATTRIBUTES.len())];
                let value = values[rng.below(values.len())];
                let key = format!(" {name}=\"");
                if let Some(start) = lines[at].find(&key) {
                    let from = start + key.len();
                    if let Some(length) = lines[at][from..].find('"') {
                        lines[at] = format!(
                            "{}{value}{}",
                            &lines[at][..from],
                            &lines[at][from + length..]
                        );
                    }
                }
            }
        }
    }
    lines.join("\n")
}

/// An input length at which every chunk of `program` holds two or three elements.
fn input_len(program: &Program) -> Option<usize> {
    let world = usize::try_from(program.world()).ok()?;
    let chunks = usize::try_from(program.chunks()).ok()?;
    let (blocks, per_block) = match program.collective() {
        MscclCollective::AllGather => (1, chunks / world),
        MscclCollective::ReduceScatter | MscclCollective::AllToAll => (world, chunks / world),
        MscclCollective::Scatter => (world, chunks),
        _ => (1, chunks),
    };
    (per_block > 0).then(|| blocks * (per_block * 2 + 1))
}

/// The agreement for one text; `Err` says how it breaks. Counts what `check` said.
fn agree(text: &str, tally: &mut [usize; 3]) -> Result<(), String> {
    let Ok(program) = parse(text) else {
        return Ok(());
    };
    let checked = program.check();
    let Some(input_len) = input_len(&program) else {
        return Ok(());
    };
    let lower = |mode| program.lower_with(input_len, LowerOptions::default().with_mode(mode));
    match checked {
        Ok(report) => {
            tally[0] += 1;
            if report.outcome == Outcome::Unsupported {
                return Ok(());
            }
            for mode in program.modes() {
                match lower(mode) {
                    Ok(parts) => {
                        Plan::from_parts(parts).map_err(|violation| {
                            format!("check accepts, from_parts refuses ({mode}): {violation}")
                        })?;
                    }
                    Err(MscclError::FoldOrder { .. })
                        if program.collective() == MscclCollective::AllReduce => {}
                    Err(error) => return Err(format!("check accepts, lower refuses: {error}")),
                }
            }
        }
        Err(violation) if violation.kind.is_result() => {
            tally[1] += 1;
            let mode = violation.mode.unwrap_or(program.modes()[0]);
            match lower(mode) {
                Ok(parts) => {
                    if Plan::from_parts(parts).is_ok() {
                        return Err(format!("check refuses ({violation}), from_parts accepts"));
                    }
                }
                Err(MscclError::FoldOrder { .. }) => {}
                Err(error) => return Err(format!("a wrong result does not lower: {error}")),
            }
        }
        Err(violation) => {
            tally[2] += 1;
            for mode in program.modes() {
                if !matches!(
                    lower(mode),
                    Err(MscclError::Unsound(_) | MscclError::Unsupported { .. })
                ) {
                    return Err(format!("check refuses ({violation}), the program lowers"));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn check_lower_and_from_parts_agree_on_edited_programs() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut bases: Vec<String> = std::fs::read_dir(folder)
        .expect("tests/data")
        .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path()).ok())
        .collect();
    for world in [2, 3, 4] {
        for collective in Collective::KINDS {
            for algorithm in Algorithm::BUILT_IN {
                if let Ok(plan) =
                    Plan::new(collective.with_root(world - 1), algorithm, world, world * 2)
                {
                    bases.push(export(&plan));
                }
            }
        }
    }
    bases.sort();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut tally = [0usize; 3];
    let mut failures = Vec::new();
    for round in 0..6000 {
        let base = &bases[round % bases.len()];
        let text = if round < bases.len() {
            base.clone()
        } else {
            edit(base, &mut rng)
        };
        if let Err(problem) = agree(&text, &mut tally) {
            failures.push(format!("{problem}\n{text}"));
            if failures.len() > 3 {
                break;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // The edits must reach every verdict often enough to mean something.
    assert!(
        tally.iter().all(|&count| count > 200),
        "accepted, wrong result, unsound: {tally:?}"
    );
}
