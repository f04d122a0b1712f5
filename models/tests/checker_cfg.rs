//! `cargo loom` and `cargo shuttle` set their checker's cfg through `build.rustflags`, which a
//! `RUSTFLAGS` environment variable silently replaces: the checker's test files would then compile
//! to nothing and "pass". The aliases also set `RUCCL_MODELS_CHECKER`; this test fails when the
//! checker asked for is not the one compiled in. Under plain `cargo test` it has nothing to check.

#[test]
fn the_checker_asked_for_is_the_one_compiled_in() {
    let asked = std::env::var("RUCCL_MODELS_CHECKER").unwrap_or_default();
    let compiled = if cfg!(ruccl_loom) {
        "loom"
    } else if cfg!(ruccl_shuttle) {
        "shuttle"
    } else {
        ""
    };
    if !asked.is_empty() {
        assert_eq!(
            asked, compiled,
            "`cargo {asked}` ran without `--cfg ruccl_{asked}`: a RUSTFLAGS environment variable \
             overrides the alias's build.rustflags; unset it, or add `--cfg ruccl_{asked}` to it"
        );
    }
}
