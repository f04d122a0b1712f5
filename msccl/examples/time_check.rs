//! Time parse, check, lower and ruCCL's verify on one MSCCL file (run in release):
//! `cargo run --release -p ruccl-msccl --example time_check -- FILE [INPUT_LEN]`.

use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: time_check FILE [INPUT_LEN]");
        std::process::exit(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("{path}: {error}");
            std::process::exit(2);
        }
    };
    let start = Instant::now();
    let program = match ruccl_msccl::parse(&text) {
        Ok(program) => program,
        Err(error) => {
            eprintln!("{path}: {error}");
            std::process::exit(2);
        }
    };
    let parsed = start.elapsed();
    let start = Instant::now();
    let report = program.check();
    let checked = start.elapsed();
    println!(
        "{path}: {} steps, {} threadblocks, {} channels",
        program.step_count(),
        program
            .gpus()
            .iter()
            .map(|gpu| gpu.threadblocks.len())
            .sum::<usize>(),
        program.channels()
    );
    println!(
        "parse {:.1} ms, check {:.1} ms (with its one-element-per-chunk lowering and verify)",
        parsed.as_secs_f64() * 1e3,
        checked.as_secs_f64() * 1e3
    );
    match &report {
        Ok(report) => println!("{:?}\nlowered: {:?}", report.outcome, report.lowered),
        Err(violation) => println!("FAIL {violation}"),
    }
    let chunks = usize::try_from(program.chunks()).unwrap_or(0);
    let input_len = args
        .next()
        .and_then(|value| value.parse().ok())
        .unwrap_or(chunks * 64);
    let start = Instant::now();
    let parts = program.lower(input_len);
    let lowered = start.elapsed();
    let start = Instant::now();
    match parts.map(ruccl_core::Plan::from_parts) {
        Ok(Ok(plan)) => println!(
            "lower {:.1} ms, verify {:.1} ms: {} steps, input {input_len} elements, buffer {}",
            lowered.as_secs_f64() * 1e3,
            start.elapsed().as_secs_f64() * 1e3,
            plan.steps().len(),
            plan.buffer_len()
        ),
        Ok(Err(violation)) => println!("verify refuses: {violation}"),
        Err(error) => println!("lower: {error}"),
    }
}
