//! The release executable's function order (`symbol-order.txt`, see `build.rs`) is what the
//! linker reads: one symbol per line, each once. A list that is not (a merge gone wrong, a
//! profile with names decorated by their file) would be ignored by the linker without a
//! word, so it is checked here.

#[test]
fn symbol_order_is_one_linkable_symbol_per_line() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/symbol-order.txt");
    let text = std::fs::read_to_string(path).expect("cli/symbol-order.txt (./x.sh symbol-order)");
    let mut seen = std::collections::HashSet::new();
    let mut lines = text.lines().enumerate();
    // The header: what it is, and the compiler whose symbol names it lists (`build.rs`
    // compares that with its own). The linker skips lines starting with `#`.
    let header: Vec<&str> = lines.by_ref().take(2).map(|(_, l)| l).collect();
    assert!(header[0].starts_with("# "), "{:?}", header[0]);
    assert!(header[1].starts_with("# rustc "), "{:?}", header[1]);
    for (n, line) in lines {
        assert!(
            !line.is_empty() && !line.contains(char::is_whitespace),
            "line {}: not a symbol: {line:?}",
            n + 1
        );
        assert!(
            !line.contains(';') && !line.contains(':'),
            "line {}: a profile name with its file still attached: {line}",
            n + 1
        );
        assert!(seen.insert(line), "line {}: {line} is listed twice", n + 1);
    }
    assert!(
        seen.len() >= 1000,
        "only {} symbols: the profile behind the list missed most of a run",
        seen.len()
    );
    // A run's own code is in it, mangled as the linker sees it (the crates built here with
    // the legacy scheme, the prebuilt standard library with v0).
    let mangled = seen
        .iter()
        .filter(|s| s.starts_with("_ZN") || s.starts_with("_R"))
        .count();
    assert!(
        mangled * 10 >= seen.len() * 9,
        "{mangled} of {} mangled",
        seen.len()
    );
    for part in ["7adaptor3run", "5tokio7runtime", "8wasmtime"] {
        assert!(
            seen.iter().any(|s| s.contains(part)),
            "no function of `{part}` in the list"
        );
    }
}
