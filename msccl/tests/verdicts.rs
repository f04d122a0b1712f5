//! The committed corpus (`tests/data/`): hand-written programs, broken variants of each with
//! the defect named in the file's first line, and malformed texts; every file's verdict is
//! asserted here, down to the step named.

use ruccl_msccl::{Agreement, MscclError, Outcome, ViolationKind, parse};
use std::path::Path;

/// What a file must get.
enum Verdict {
    /// `check` accepts it; for reductions, with this agreement.
    Pass(Option<Agreement>),
    /// `check` accepts everything but cannot judge the result (custom collectives).
    Unsupported,
    /// `check` refuses it: kind, and the step named as `(gpu, tb, step)`, or the gpu alone.
    Fail(ViolationKind, Named),
    /// `parse` refuses it at this line.
    Malformed(u32),
}

/// Where a violation must point.
enum Named {
    Step(u32, u32, u32),
    Gpu(usize),
}

use Named::{Gpu, Step};
use Verdict::{Fail, Malformed, Pass, Unsupported};

fn expectations() -> Vec<(&'static str, Verdict)> {
    vec![
        ("allgather_ring_n2", Pass(None)),
        ("allgather_sends_first_ll_n2", Pass(None)),
        ("allreduce_deps_n2", Pass(Some(Agreement::Bitwise))),
        ("allreduce_ring_n3", Pass(Some(Agreement::Bitwise))),
        ("alltoall_direct_n3", Pass(None)),
        ("broadcast_chain_n3", Pass(None)),
        ("reduce_scatter_scratch_n2", Pass(Some(Agreement::Bitwise))),
        ("custom_forward_n2", Unsupported),
        (
            "broken_allgather_sends_first_simple_n2",
            Fail(ViolationKind::BufferDeadlock, Step(0, 0, 2)),
        ),
        (
            "broken_allreduce_deps_n2_cycle",
            Fail(ViolationKind::Deadlock, Step(1, 0, 0)),
        ),
        (
            "broken_allreduce_deps_n2_never_signalled",
            Fail(ViolationKind::Deadlock, Step(0, 2, 1)),
        ),
        (
            "broken_allreduce_deps_n2_race",
            Fail(ViolationKind::Race, Step(1, 2, 1)),
        ),
        (
            "broken_allreduce_ring_n3_bad_peer",
            Fail(ViolationKind::BadPeer, Gpu(2)),
        ),
        (
            "broken_allreduce_ring_n3_doubled",
            Fail(ViolationKind::DoubledContribution, Step(2, 0, 4)),
        ),
        (
            "broken_allreduce_ring_n3_missing",
            Fail(ViolationKind::MissingContribution, Step(0, 0, 1)),
        ),
        (
            "broken_allreduce_ring_n3_out_of_range",
            Fail(ViolationKind::OutOfRange, Step(1, 0, 0)),
        ),
        (
            "broken_allreduce_ring_n3_unmatched",
            Fail(ViolationKind::Unmatched, Step(1, 0, 3)),
        ),
        (
            "broken_alltoall_direct_n3_bad_channel",
            Fail(ViolationKind::BadThreadblock, Gpu(2)),
        ),
        (
            "broken_alltoall_direct_n3_count_mismatch",
            Fail(ViolationKind::CountMismatch, Step(1, 2, 1)),
        ),
        (
            "broken_alltoall_direct_n3_race",
            Fail(ViolationKind::Race, Step(0, 1, 1)),
        ),
        (
            "broken_alltoall_direct_n3_shared_connection",
            Fail(ViolationKind::BadThreadblock, Step(0, 2, 0)),
        ),
        (
            "broken_alltoall_direct_n3_uninitialized",
            Fail(ViolationKind::UninitializedRead, Step(0, 1, 0)),
        ),
        (
            "broken_alltoall_direct_n3_wrong_block",
            Fail(ViolationKind::WrongData, Step(1, 2, 1)),
        ),
        (
            "broken_broadcast_chain_n3_unmatched",
            Fail(ViolationKind::Unmatched, Step(0, 0, 1)),
        ),
        (
            "broken_reduce_scatter_scratch_n2_doubled",
            Fail(ViolationKind::DoubledContribution, Step(1, 0, 4)),
        ),
        (
            "broken_reduce_scatter_scratch_n2_missing",
            Fail(ViolationKind::MissingContribution, Step(0, 0, 3)),
        ),
        ("export_allreduce_direct_n3", Pass(Some(Agreement::Bitwise))),
        ("export_allreduce_ring_n4", Pass(Some(Agreement::Bitwise))),
        ("export_alltoall_direct_n3", Pass(None)),
        ("export_broadcast_ring_n4_root2", Pass(None)),
        ("export_gather_ring_n3_root1", Pass(None)),
        (
            "export_reduce_scatter_halving_doubling_n4",
            Pass(Some(Agreement::Bitwise)),
        ),
        (
            "broken_export_allreduce_direct_n3_unwaited",
            Fail(ViolationKind::Race, Step(0, 0, 1)),
        ),
        (
            "broken_export_allreduce_ring_n4_missing",
            Fail(ViolationKind::MissingContribution, Step(0, 1, 0)),
        ),
        (
            "broken_export_alltoall_direct_n3_unmatched",
            Fail(ViolationKind::Unmatched, Step(1, 0, 0)),
        ),
        ("malformed_missing_cnt", Malformed(4)),
        ("malformed_not_a_number", Malformed(2)),
        ("malformed_step_type", Malformed(4)),
        ("malformed_unclosed", Malformed(3)),
    ]
}

fn data(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(format!("{name}.xml"));
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

#[test]
fn every_committed_file_gets_its_expected_verdict() {
    let mut failures = Vec::new();
    for (name, expected) in expectations() {
        let text = data(name);
        let parsed = parse(&text);
        let problem = match (&expected, parsed) {
            (Malformed(line), Err(error)) => {
                let at = error.position().map(|position| position.line);
                (at != Some(*line))
                    .then(|| format!("parse error at {at:?}, expected line {line}: {error}"))
            }
            (_, Err(error)) => Some(format!("does not parse: {error}")),
            (Malformed(_), Ok(_)) => Some("parses, but must not".to_owned()),
            (expected, Ok(program)) => match (expected, program.check()) {
                (Pass(agreement), Ok(report)) => match report.outcome {
                    Outcome::Verified {
                        agreement: found, ..
                    } if found == *agreement => None,
                    other => Some(format!("passes with {other:?}, expected {agreement:?}")),
                },
                (Unsupported, Ok(report)) => (report.outcome != Outcome::Unsupported)
                    .then(|| format!("{:?}", report.outcome)),
                (Fail(kind, named), Err(violation)) => {
                    let place = match named {
                        Step(gpu, tb, step) => violation
                            .at
                            .is_some_and(|at| (at.gpu, at.tb, at.step) == (*gpu, *tb, *step)),
                        Gpu(gpu) => violation.gpu == Some(*gpu),
                    };
                    (violation.kind != *kind || !place)
                        .then(|| format!("fails differently: {violation}"))
                }
                (_, Ok(report)) => Some(format!("passes: {:?}", report.outcome)),
                (_, Err(violation)) => Some(format!("fails: {violation}")),
            },
        };
        if let Some(problem) = problem {
            failures.push(format!("{name}: {problem}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_committed_file_is_listed() {
    let listed: Vec<&str> = expectations().iter().map(|(name, _)| *name).collect();
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    for entry in std::fs::read_dir(folder).expect("tests/data") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|ext| ext == "xml") {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_owned();
            assert!(
                listed.contains(&stem.as_str()),
                "{stem}.xml has no expected verdict"
            );
        }
    }
}

#[test]
fn a_violation_displays_kind_place_and_the_other_step() {
    let program = parse(&data("broken_alltoall_direct_n3_race")).expect("parses");
    let violation = program.check().expect_err("races");
    let text = violation.to_string();
    assert!(
        text.starts_with("race at gpu 0 tb 1 step 1 (line 9), chunk o[2]"),
        "{text}"
    );
    assert!(text.contains("gpu 0 tb 0 step 0"), "{text}");
    assert_eq!(violation.other.map(|other| other.tb), Some(0));
}

#[test]
fn the_one_slot_margin_is_reported_without_failing() {
    let program = parse(&data("allreduce_ring_n3")).expect("parses");
    let report = program.check().expect("passes");
    assert_eq!(report.slots, 2);
    let one_slot = report
        .one_slot_deadlock
        .expect("a ring of rrs needs two slots");
    assert_eq!(one_slot.kind, ViolationKind::BufferDeadlock);
}

#[test]
fn garbage_is_refused_with_a_position_not_a_panic() {
    for text in [
        "",
        "\u{0}",
        "<",
        "<algo",
        "<algo/>",
        "<x/>",
        "]]>",
        "<algo ngpus=\"1\">",
    ] {
        let error = parse(text).expect_err(text);
        let _ = error.to_string();
    }
    let error = parse("<algo coll=\"allreduce\" proto=\"Simple\" ngpus=\"-2\" nchunksperloop=\"1\" nchannels=\"1\" inplace=\"1\"/>")
        .expect_err("negative world");
    assert!(matches!(error, MscclError::Format { .. }), "{error}");
}

#[test]
fn a_hundred_megabytes_of_garbage_is_refused_at_once() {
    let garbage = "x".repeat(100 << 20);
    let start = std::time::Instant::now();
    let error = parse(&garbage).expect_err("too large");
    assert!(matches!(error, MscclError::TooLarge { .. }), "{error}");
    assert!(
        start.elapsed().as_millis() < 100,
        "took {:?}",
        start.elapsed()
    );
}

#[test]
fn an_input_length_beyond_the_address_space_is_refused_not_overflowed() {
    let program = parse(&data("alltoall_direct_n3")).expect("parses");
    let error = program.lower(usize::MAX - 2).expect_err("too long");
    assert!(matches!(error, MscclError::Length { .. }), "{error}");
    let error = program.lower(4).expect_err("not three blocks");
    assert!(matches!(error, MscclError::Length { .. }), "{error}");
}

#[test]
fn a_program_too_wide_to_check_is_refused_by_the_parser() {
    // One rank with 9000 threadblocks of one nop each: 9000 steps × 9000 threadblocks.
    let mut xml = String::from(
        "<algo proto=\"Simple\" nchannels=\"1\" nchunksperloop=\"1\" ngpus=\"1\" coll=\"custom\" inplace=\"1\"><gpu id=\"0\" i_chunks=\"1\" o_chunks=\"1\" s_chunks=\"0\">",
    );
    for id in 0..9000 {
        xml.push_str(&format!(
            "<tb id=\"{id}\" send=\"-1\" recv=\"-1\" chan=\"0\"><step s=\"0\" type=\"nop\" srcbuf=\"i\" srcoff=\"-1\" dstbuf=\"o\" dstoff=\"-1\" cnt=\"0\" depid=\"-1\" deps=\"-1\" hasdep=\"0\"/></tb>"
        ));
    }
    xml.push_str("</gpu></algo>");
    let error = parse(&xml).expect_err("too wide");
    assert!(matches!(error, MscclError::TooLarge { .. }), "{error}");
}

#[test]
fn a_report_displays_on_one_line() {
    let program = parse(&data("allreduce_ring_n3")).expect("parses");
    let text = program.check().expect("passes").to_string();
    assert_eq!(
        text,
        "allreduce on 3 gpus, 3 chunks, 15 steps, 3 connections: verified, bitwise; needs more than one slot per connection (has 2); lowers to 4 ruCCL steps, busiest rank sends 4 chunks (bound 4)"
    );
}
