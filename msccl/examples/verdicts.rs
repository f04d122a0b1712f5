//! Check every MSCCL XML file under the folders given (default: `../shared/msccl-corpus`
//! relative to the repository root) and print one verdict line per file.

use std::path::{Path, PathBuf};
use std::time::Instant;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|entry| entry.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "xml") {
            out.push(path);
        }
    }
}

/// One markdown table row: file, collective, ranks, steps, verdict, lowering.
fn row(
    name: &str,
    program: Option<&ruccl_msccl::Program>,
    checked: &Result<Result<ruccl_msccl::Report, ruccl_msccl::Violation>, &ruccl_msccl::MscclError>,
) -> String {
    use ruccl_msccl::{Agreement, Outcome};
    let (coll, world, steps) = program.map_or((String::new(), 0, 0), |program| {
        (
            program.collective_name().to_owned(),
            program.world(),
            program.step_count(),
        )
    });
    let (verdict, lowered) = match checked {
        Err(error) => (format!("PARSE ERROR: {error}"), String::new()),
        Ok(Err(violation)) => (format!("FAIL: {}", violation.kind), String::new()),
        Ok(Ok(report)) => {
            let verdict = match report.outcome {
                Outcome::Unsupported => "UNSUPPORTED".to_owned(),
                Outcome::Verified {
                    agreement: Some(Agreement::Bitwise),
                    ..
                } => "PASS, bitwise".to_owned(),
                Outcome::Verified {
                    agreement: Some(Agreement::TermsOnly { .. }),
                    ..
                } => "PASS, terms only".to_owned(),
                _ => "PASS".to_owned(),
            };
            let slot = if report.one_slot_deadlock.is_some() {
                " (needs >1 slot)"
            } else {
                ""
            };
            let lowered = match &report.lowered {
                Ok(lowered) => format!(
                    "{} steps, {}/{:.0}",
                    lowered.steps, lowered.busiest_sent, lowered.lower_bound
                ),
                Err(reason) if reason.contains("folded in another order") => {
                    "fold order".to_owned()
                }
                Err(_) => "—".to_owned(),
            };
            (format!("{verdict}{slot}"), lowered)
        }
    };
    format!("| {name} | {coll} | {world} | {steps} | {verdict} | {lowered} |")
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let markdown = args.first().is_some_and(|arg| arg == "--markdown");
    if markdown {
        args.remove(0);
    }
    let roots: Vec<PathBuf> = if args.is_empty() {
        vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/msccl-corpus")]
    } else {
        args.iter().map(PathBuf::from).collect()
    };
    let mut list = Vec::new();
    for root in &roots {
        let mut found = Vec::new();
        files(root, &mut found);
        list.extend(found.into_iter().map(|path| (root.clone(), path)));
    }
    for (root, path) in list {
        let name = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .to_string_lossy()
            .into_owned();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) => {
                println!("{name}: UNREADABLE {error}");
                continue;
            }
        };
        let start = Instant::now();
        let parsed = ruccl_msccl::parse(&text);
        let checked = parsed.as_ref().map(|program| program.check());
        let elapsed = start.elapsed().as_secs_f64() * 1e3;
        if markdown {
            println!("{}", row(&name, parsed.as_ref().ok(), &checked));
            continue;
        }
        let verdict = match checked {
            Err(error) => format!("PARSE ERROR {error}"),
            Ok(Ok(report)) => format!("PASS {report}"),
            Ok(Err(violation)) => format!("FAIL {violation}"),
        };
        println!("{name}: {verdict} [{elapsed:.1} ms]");
    }
}
