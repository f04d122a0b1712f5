//! Writes the readable seed inputs of every target to `fuzz/corpus/<target>/seed-<name>`:
//!
//! ```sh
//! cargo run --manifest-path fuzz/Cargo.toml --example write_seeds
//! ```

use std::path::Path;

fn main() -> std::io::Result<()> {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (target, name, bytes) in ruccl_fuzz::seed_inputs() {
        let folder = corpus.join(target);
        std::fs::create_dir_all(&folder)?;
        let path = folder.join(format!("seed-{name}"));
        std::fs::write(&path, &bytes)?;
        println!("{} ({} bytes)", path.display(), bytes.len());
    }
    Ok(())
}
