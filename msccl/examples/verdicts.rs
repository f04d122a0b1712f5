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

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let roots: Vec<PathBuf> = if args.is_empty() {
        vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/msccl-corpus")]
    } else {
        args.iter().map(PathBuf::from).collect()
    };
    let mut list = Vec::new();
    for root in &roots {
        files(root, &mut list);
    }
    for path in list {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) => {
                println!("{name}: UNREADABLE {error}");
                continue;
            }
        };
        let start = Instant::now();
        let verdict = match ruccl_msccl::parse(&text) {
            Err(error) => format!("PARSE ERROR {error}"),
            Ok(program) => match program.check() {
                Ok(report) => format!("PASS {:?} {:?}", report.outcome, report.lowered),
                Err(violation) => format!("FAIL {violation}"),
            },
        };
        println!(
            "{name}: {verdict} [{:.1} ms]",
            start.elapsed().as_secs_f64() * 1e3
        );
    }
}
