//! Verdicts over the published schedules in `../shared/msccl-corpus` (relative to the
//! repository root; read in place, never copied here). Skipped, with a note, when the folder
//! is absent. Every verdict is asserted: the reasons for each FAIL, from the executors'
//! semantics, are in the crate README's verdict table. Run with `--nocapture` to see the table.

use ruccl_msccl::{Agreement, Outcome, ViolationKind, parse};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug)]
enum Expected {
    /// Verified, no reduction.
    Pass,
    /// Verified reduction, every rank the same bits.
    Bitwise,
    /// Verified reduction, ranks fold in different orders.
    Terms,
    /// A custom collective: no result to check, the rest holds.
    Unsupported,
    /// Refused for this reason.
    Fail(ViolationKind),
}

use Expected::{Bitwise, Fail, Pass, Terms, Unsupported};

fn corpus() -> Option<PathBuf> {
    let folder = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/msccl-corpus");
    folder.is_dir().then_some(folder)
}

fn expectations() -> Vec<(&'static str, Expected)> {
    vec![
        ("real/msccl-tools/ap1_nop.xml", Bitwise),
        ("real/msccl-tools/ap2_nop.xml", Bitwise),
        (
            "real/msccl-tools/experiments_alltonext_16in.xml",
            Fail(ViolationKind::Race),
        ),
        (
            "real/msccl-tools/experiments_alltonext_2in.xml",
            Fail(ViolationKind::Race),
        ),
        (
            "real/msccl-tools/experiments_alltonext_4in.xml",
            Fail(ViolationKind::Race),
        ),
        (
            "real/msccl-tools/experiments_alltonext_8in.xml",
            Fail(ViolationKind::Race),
        ),
        ("real/msccl-tools/experiments_ar_ap_1.xml", Bitwise),
        (
            "real/msccl-tools/experiments_ar_ap_16.xml",
            Fail(ViolationKind::BadThreadblock),
        ),
        ("real/msccl-tools/experiments_ar_ap_2.xml", Bitwise),
        (
            "real/msccl-tools/experiments_ar_ap_32.xml",
            Fail(ViolationKind::BadThreadblock),
        ),
        ("real/msccl-tools/experiments_ar_ap_4.xml", Bitwise),
        ("real/msccl-tools/experiments_ar_ap_8.xml", Bitwise),
        (
            "real/msccl-tools/experiments_ar_multi_ar_1.xml",
            Fail(ViolationKind::BadThreadblock),
        ),
        (
            "real/msccl-tools/experiments_ar_multi_ar_2.xml",
            Fail(ViolationKind::BadThreadblock),
        ),
        (
            "real/msccl-tools/experiments_ar_multi_ar_4.xml",
            Fail(ViolationKind::BadThreadblock),
        ),
        (
            "real/msccl-tools/experiments_ar_multi_ar_8.xml",
            Fail(ViolationKind::BadThreadblock),
        ),
        ("real/msccl-tools/experiments_ar_ring_1_16.xml", Bitwise),
        ("real/msccl-tools/experiments_ar_ring_1_24.xml", Bitwise),
        ("real/msccl-tools/experiments_ar_ring_1_32.xml", Bitwise),
        ("real/msccl-tools/experiments_ar_ring_1_8.xml", Bitwise),
        ("real/msccl-tools/experiments_ar_ring_2_16.xml", Bitwise),
        ("real/msccl-tools/experiments_ar_ring_2_4.xml", Bitwise),
        ("real/msccl-tools/experiments_ar_ring_2_8.xml", Bitwise),
        ("real/msccl-tools/experiments_ar_ring_4_2.xml", Bitwise),
        ("real/msccl-tools/experiments_ar_ring_4_4.xml", Bitwise),
        ("real/msccl-tools/experiments_ar_ring_4_8.xml", Bitwise),
        ("real/msccl-tools/experiments_ar_ring_8_1.xml", Bitwise),
        ("real/msccl-tools/experiments_ar_ring_8_2.xml", Bitwise),
        ("real/msccl-tools/experiments_ar_ring_8_4.xml", Bitwise),
        ("real/rccl/all-reduce-allpairs-ll-n1g16.xml", Bitwise),
        ("real/rccl/all-reduce-ring-ll.xml", Bitwise),
        ("real/rccl/all-to-all-2d-hierarchical-ll-n2g32.xml", Pass),
        ("real/rccl/allgather-8n-0-1kb.xml", Pass),
        ("real/rccl/allgather-8n-1kb-4kb.xml", Pass),
        ("real/rccl/allgather-8n-1mb-40mb.xml", Pass),
        ("real/rccl/allgather-8n-1mb-4mb.xml", Pass),
        ("real/rccl/allgather-8n-4kb-8kb.xml", Pass),
        ("real/rccl/allgather-8n-8kb-1mb.xml", Pass),
        ("real/rccl/allgather-allpairs-16n-16tb.xml", Pass),
        ("real/rccl/allgather-allpairs-8n-ll.xml", Pass),
        ("real/rccl/allreduce-1step-4n-ll-1pass.xml", Terms),
        ("real/rccl/allreduce-allpairs-16n-16tb.xml", Terms),
        ("real/rccl/allreduce-allpairs-8n-Simple-1pass.xml", Terms),
        ("real/rccl/allreduce-allpairs-8n-ll-1pass-op.xml", Terms),
        ("real/rccl/allreduce-allpairs-8n-ll-1pass.xml", Terms),
        ("real/rccl/allreduce-allpairs-8n-ll-32tb-op.xml", Bitwise),
        ("real/rccl/allreduce-allpairs-8n-ll-32tb.xml", Bitwise),
        ("real/rccl/allreduce_1step_mccl_8_2_2048_LL.xml", Terms),
        ("real/rccl/alltoall-8n-0-9kb.xml", Pass),
        ("real/rccl/alltoall-8n-190kb-512kb.xml", Pass),
        ("real/rccl/alltoall-8n-4kb-8kb.xml", Pass),
        ("real/rccl/alltoall-8n-512kb-7mb.xml", Pass),
        ("real/rccl/alltoall-8n-7mb-43mb.xml", Pass),
        ("real/rccl/alltoall-8n-9kb-190kb.xml", Pass),
        ("generated/allgather_allpairs_n8_i1.xml", Pass),
        ("generated/allgather_allpairs_outofplace_n16_k1.xml", Pass),
        ("generated/allgather_allpairs_outofplace_n4_k2.xml", Pass),
        ("generated/allgather_pcie_hierarchical_n4_i1.xml", Pass),
        ("generated/allgather_recursive_doubling_n8_i1.xml", Pass),
        ("generated/allgather_ring_n16_c1_i1.xml", Pass),
        ("generated/allgather_ring_n2_c1_i1.xml", Pass),
        ("generated/allgather_ring_n4_c1_i1.xml", Pass),
        ("generated/allgather_ring_n8_c2_i1.xml", Pass),
        ("generated/allgather_ring_outofplace_n4.xml", Pass),
        ("generated/allreduce_1step_n4_i1.xml", Terms),
        ("generated/allreduce_allpairs_n4_i1.xml", Bitwise),
        ("generated/allreduce_allpairs_v2_n8_i1.xml", Bitwise),
        (
            "generated/allreduce_hierarchical_n16_4x4_i1_LL.xml",
            Bitwise,
        ),
        ("generated/allreduce_hierarchical_n4_2x2_i1.xml", Bitwise),
        ("generated/allreduce_hierarchical_n8_4x2_i1.xml", Bitwise),
        ("generated/allreduce_multinode_allpairs_n16_i1.xml", Bitwise),
        ("generated/allreduce_ncv4_n4_i1.xml", Bitwise),
        ("generated/allreduce_rdh_n8_i1.xml", Bitwise),
        ("generated/allreduce_ring_n16_c1_i1.xml", Bitwise),
        ("generated/allreduce_ring_n2_c1_i1.xml", Bitwise),
        ("generated/allreduce_ring_n3_c1_i1.xml", Bitwise),
        ("generated/allreduce_ring_n4_c1_i1.xml", Bitwise),
        ("generated/allreduce_ring_n8_c1_i2.xml", Bitwise),
        ("generated/allreduce_ring_n8_c2_i1.xml", Bitwise),
        ("generated/allreduce_ring_outofplace_n4_c2.xml", Bitwise),
        (
            "generated/allreduce_ring_outofplace_n8_c2_LL128.xml",
            Bitwise,
        ),
        ("generated/allreduce_ring_simple_n4_i1.xml", Bitwise),
        ("generated/alltoall_allpairs_n16_i1.xml", Pass),
        ("generated/alltoall_allpairs_n2_i1.xml", Pass),
        ("generated/alltoall_allpairs_n4_i1.xml", Pass),
        ("generated/alltoall_allpairs_n8_i2.xml", Pass),
        ("generated/alltoall_inplace_scratch_n4.xml", Pass),
        ("generated/alltoall_inplace_scratch_n8.xml", Pass),
        ("generated/alltoall_three_step_n8_2x4_i1.xml", Pass),
        ("generated/alltoall_two_step_n8_2x4.xml", Pass),
        (
            "generated/custom_alltonext_backward_n24_i1.xml",
            Unsupported,
        ),
        ("generated/reduce_scatter_allpairs_n4.xml", Bitwise),
        ("generated/reduce_scatter_allpairs_n8.xml", Bitwise),
        ("generated/reduce_scatter_ring_inplace_n8_c2.xml", Bitwise),
        (
            "generated/reduce_scatter_ring_outofplace_n16_c4_LL.xml",
            Bitwise,
        ),
        (
            "generated/reduce_scatter_ring_outofplace_n4_c1.xml",
            Bitwise,
        ),
    ]
}

#[test]
fn every_published_schedule_gets_its_verdict() {
    let Some(folder) = corpus() else {
        println!("note: ../shared/msccl-corpus is absent; the published schedules are not checked");
        return;
    };
    let mut failures = Vec::new();
    println!("{:<62} {:>6} {:>8}  verdict", "file", "steps", "ms");
    for (file, expected) in expectations() {
        let text = std::fs::read_to_string(folder.join(file))
            .unwrap_or_else(|error| panic!("{file}: {error}"));
        let start = Instant::now();
        let program = parse(&text).unwrap_or_else(|error| panic!("{file}: {error}"));
        let checked = program.check();
        let elapsed = start.elapsed().as_secs_f64() * 1e3;
        let verdict = match &checked {
            Ok(report) => match report.outcome {
                Outcome::Unsupported => "UNSUPPORTED".to_owned(),
                Outcome::Verified {
                    agreement: Some(Agreement::Bitwise),
                    ..
                } => "PASS (bitwise)".to_owned(),
                Outcome::Verified {
                    agreement: Some(Agreement::TermsOnly { .. }),
                    ..
                } => "PASS (terms only)".to_owned(),
                _ => "PASS".to_owned(),
            },
            Err(violation) => format!("FAIL {violation}"),
        };
        println!(
            "{file:<62} {:>6} {elapsed:>8.1}  {verdict}",
            program.step_count()
        );
        let agrees = match (&expected, &checked) {
            (Pass, Ok(report)) => matches!(
                report.outcome,
                Outcome::Verified {
                    agreement: None,
                    ..
                }
            ),
            (Bitwise, Ok(report)) => matches!(
                report.outcome,
                Outcome::Verified {
                    agreement: Some(Agreement::Bitwise),
                    ..
                }
            ),
            (Terms, Ok(report)) => matches!(
                report.outcome,
                Outcome::Verified {
                    agreement: Some(Agreement::TermsOnly { .. }),
                    ..
                }
            ),
            (Unsupported, Ok(report)) => report.outcome == Outcome::Unsupported,
            (Fail(kind), Err(violation)) => violation.kind == *kind,
            _ => false,
        };
        if !agrees {
            failures.push(format!("{file}: expected {expected:?}, got {verdict}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
