//! `verify` and `export`: MSCCL XML schedules checked, and built-in plans written as MSCCL XML
//! (`ruccl-msccl` does the work; see [`crate::schedule`]).

use super::args::{ExportArgs, VerifyArgs};
use super::{CliError, Verdict};
use crate::schedule::verify_file;
use ruccl_core::{Collective, Plan};
use std::io::Write;

/// Check every file, one line each, then a summary line.
pub fn verify(args: &VerifyArgs, out: &mut (dyn Write + Send)) -> Result<Verdict, CliError> {
    let mut worst = 0;
    let (mut passed, mut unsupported, mut failed, mut unreadable) = (0, 0, 0, 0);
    for path in &args.files {
        let (line, status) = verify_file(path);
        writeln!(out, "{line}").map_err(CliError::Output)?;
        worst = worst.max(status);
        match status {
            0 if line.starts_with("UNSUPPORTED") => unsupported += 1,
            0 => passed += 1,
            1 => failed += 1,
            _ => unreadable += 1,
        }
    }
    let summary = format!(
        "{} files: {passed} pass, {unsupported} unsupported, {failed} fail, {unreadable} unreadable",
        args.files.len()
    );
    writeln!(out, "# {summary}").map_err(CliError::Output)?;
    match worst {
        0 => Ok(Verdict::Passed),
        1 => Ok(Verdict::Wrong(summary)),
        _ => Err(CliError::Usage(summary)),
    }
}

/// Build the plan `args` names and write it as MSCCL XML.
pub fn export(args: &ExportArgs, out: &mut (dyn Write + Send)) -> Result<Verdict, CliError> {
    let world = args.world as usize;
    let collective = args.collective.0.collective(args.operation, args.root);
    let length = match args.length {
        Some(size) => size.0,
        None => match collective {
            // One element per block of every rank: the smallest input that splits.
            Collective::ReduceScatter(_) | Collective::Scatter { .. } | Collective::AllToAll => {
                world
            }
            _ => world.max(1),
        },
    };
    let plan = Plan::new(collective, args.algorithm, world, length)
        .map_err(|error| CliError::Usage(format!("export: {error}")))?;
    let xml = ruccl_msccl::export(&plan);
    match &args.file {
        Some(path) => {
            // Written whole to a temporary beside it, then renamed: never a partial file.
            let temporary = path.with_extension("xml.partial");
            std::fs::write(&temporary, xml.as_bytes())
                .and_then(|()| std::fs::rename(&temporary, path))
                .map_err(CliError::Output)?;
        }
        None => out.write_all(xml.as_bytes()).map_err(CliError::Output)?,
    }
    Ok(Verdict::Passed)
}
