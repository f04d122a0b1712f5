//! The exported plans of the committed corpus (`tests/data/export_*.xml`) and their broken
//! variants (`tests/data/broken_export_*.xml`) are what `export` writes today: this test
//! compares them, and rewrites them when run with `RUCCL_MSCCL_BLESS=1`
//! (`RUCCL_MSCCL_BLESS=1 cargo test -p ruccl-msccl --test committed_exports`). Their verdicts
//! are asserted in `verdicts.rs`.

use ruccl_core::{Algorithm, Collective, Plan, ReduceOperation};
use std::path::Path;

/// `(file stem, collective, algorithm, world, input length)`.
const PLANS: [(&str, Collective, Algorithm, usize, usize); 6] = [
    (
        "export_allreduce_ring_n4",
        Collective::AllReduce(ReduceOperation::Sum),
        Algorithm::Ring,
        4,
        4,
    ),
    (
        "export_allreduce_direct_n3",
        Collective::AllReduce(ReduceOperation::Sum),
        Algorithm::Direct,
        3,
        3,
    ),
    (
        "export_reduce_scatter_halving_doubling_n4",
        Collective::ReduceScatter(ReduceOperation::Sum),
        Algorithm::HalvingDoubling,
        4,
        4,
    ),
    (
        "export_alltoall_direct_n3",
        Collective::AllToAll,
        Algorithm::Direct,
        3,
        3,
    ),
    (
        "export_broadcast_ring_n4_root2",
        Collective::Broadcast { root: 2 },
        Algorithm::Ring,
        4,
        4,
    ),
    (
        "export_gather_ring_n3_root1",
        Collective::Gather { root: 1 },
        Algorithm::Ring,
        3,
        1,
    ),
];

/// The exported text of every committed export, by file stem.
fn exports() -> Vec<(String, String)> {
    PLANS
        .iter()
        .map(|&(stem, collective, algorithm, world, input_len)| {
            let plan = Plan::new(collective, algorithm, world, input_len)
                .unwrap_or_else(|error| panic!("{stem}: {error}"));
            (stem.to_owned(), ruccl_msccl::export(&plan))
        })
        .collect()
}

/// `text` with the first line containing `needle` changed by `edit` (`None` deletes it).
fn edit_first(text: &str, needle: &str, edit: impl Fn(&str) -> Option<String>) -> String {
    let mut done = false;
    let mut out = String::new();
    for line in text.lines() {
        if !done && line.contains(needle) {
            done = true;
            if let Some(changed) = edit(line) {
                out.push_str(&changed);
                out.push('\n');
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The broken variants: `(file stem, the defect, text)`.
fn broken(exports: &[(String, String)]) -> Vec<(String, String)> {
    let find = |stem: &str| {
        exports
            .iter()
            .find(|(name, _)| name == stem)
            .map(|(_, text)| text.clone())
            .unwrap_or_default()
    };
    let comment = |text: &str, defect: &str| format!("<!-- Broken: {defect} -->\n{text}");
    let ring = find("export_allreduce_ring_n4");
    let missing = edit_first(&ring, "type=\"rrc\"", |line| {
        Some(line.replace("type=\"rrc\"", "type=\"r\""))
    });
    let alltoall = find("export_alltoall_direct_n3");
    let last_receive = alltoall
        .lines()
        .rfind(|line| line.contains("type=\"r\""))
        .unwrap_or_default()
        .to_owned();
    let unmatched = edit_first(&alltoall, &last_receive, |_| None);
    let direct = find("export_allreduce_direct_n3");
    let gpu1 = direct.find("<gpu id=\"1\"").unwrap_or(direct.len());
    let (head, tail) = direct.split_at(gpu1);
    let unwaited: String = head
        .lines()
        .map(|line| {
            let line = match (line.find("depid=\""), line.find(" hasdep")) {
                (Some(start), Some(end)) if line.contains("<step") => {
                    format!("{}depid=\"-1\" deps=\"-1\"{}", &line[..start], &line[end..])
                }
                _ => line.to_owned(),
            };
            line + "\n"
        })
        .collect::<String>()
        + tail;
    vec![
        (
            "broken_export_allreduce_ring_n4_missing".to_owned(),
            comment(
                &missing,
                "the first rrc of the exported ring (gpu 0) is a plain receive: its own contribution is lost",
            ),
        ),
        (
            "broken_export_alltoall_direct_n3_unmatched".to_owned(),
            comment(
                &unmatched,
                "one receive of gpu 0 is deleted: the send of gpu 1 it met now meets nothing",
            ),
        ),
        (
            "broken_export_allreduce_direct_n3_unwaited".to_owned(),
            comment(
                &unwaited,
                "every wait (depid/deps) of gpu 0 is dropped: its folds no longer wait for the receives into scratch",
            ),
        ),
    ]
}

#[test]
fn committed_exports_are_what_export_writes() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let bless = std::env::var_os("RUCCL_MSCCL_BLESS").is_some();
    let exports = exports();
    let mut stale = Vec::new();
    for (stem, text) in exports.iter().chain(&broken(&exports)) {
        let path = folder.join(format!("{stem}.xml"));
        if bless {
            std::fs::write(&path, text)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(stem.clone());
        }
    }
    assert!(
        stale.is_empty(),
        "stale, rewrite with RUCCL_MSCCL_BLESS=1: {}",
        stale.join(", ")
    );
}
