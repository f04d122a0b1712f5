//! Writes the readable seed inputs of every target to `fuzz/corpus/<target>/seed-<name>`, and the
//! readable regressions to `fuzz/corpus/<target>/regression-<name>`:
//!
//! ```sh
//! cargo run --manifest-path fuzz/Cargo.toml --example write_seeds
//! ```

use std::path::Path;

fn main() -> std::io::Result<()> {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let seeds = ruccl_fuzz::seed_inputs()
        .into_iter()
        .map(|seed| ("seed", seed));
    let regressions = ruccl_fuzz::regression_inputs()
        .into_iter()
        .map(|regression| ("regression", regression));
    for (kind, (target, name, bytes)) in seeds.chain(regressions) {
        let folder = corpus.join(target);
        std::fs::create_dir_all(&folder)?;
        let path = folder.join(format!("{kind}-{name}"));
        std::fs::write(&path, &bytes)?;
        println!("{} ({} bytes)", path.display(), bytes.len());
    }
    Ok(())
}
