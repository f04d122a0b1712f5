//! Times each readable seed's check (release build: `cargo run --release --example time_seeds`).
fn main() {
    for (target, name, bytes) in ruccl_fuzz::seed_inputs() {
        let check = ruccl_fuzz::TARGETS
            .iter()
            .find(|(n, _)| *n == target)
            .map(|(_, c)| *c)
            .unwrap_or_else(|| panic!("{target}"));
        let started = std::time::Instant::now();
        check(&bytes);
        println!(
            "{:>10.3} ms  {target}/{name}",
            started.elapsed().as_secs_f64() * 1e3
        );
    }
}
