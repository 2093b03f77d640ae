//! The release executable's function order (`symbol-order.txt`, see `build.rs`) is what the
//! linker reads: one symbol per line, each once. A list that is not (a merge gone wrong, a
//! profile with names decorated by their file) would be ignored by the linker without a
//! word, so it is checked here.

#[test]
fn symbol_order_is_one_linkable_symbol_per_line() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/symbol-order.txt");
    let text = std::fs::read_to_string(path).expect("cli/symbol-order.txt (./x.sh symbol-order)");
    let mut seen = std::collections::HashSet::new();
    let header: Vec<&str> = text.lines().take_while(|l| l.starts_with('#')).collect();
    // The header: what it is, the compiler whose symbol names it lists (`build.rs` compares
    // that with its own) and how many of them the release build it was written for had
    // (`symbol-order.py coverage` compares a build with that). The linker skips lines
    // starting with `#`.
    assert_eq!(header.len(), 3, "{header:?}");
    assert!(header[0].starts_with("# "), "{:?}", header[0]);
    assert!(header[1].starts_with("# rustc "), "{:?}", header[1]);
    let matched: usize = header[2]
        .strip_prefix("# matched ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not `# matched N …`: {:?}", header[2]));
    for (n, line) in text.lines().enumerate().skip(header.len()) {
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
    assert!(
        (1000..=seen.len()).contains(&matched),
        "matched {matched} of {}: the count was not taken from the build the list was linked into",
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

/// `symbol-order.py coverage` (run by `./x.sh install` and `./x.sh bench` after a release
/// build) passes a build that still has the recorded count of the list's functions and fails
/// one that lost more than 5 % of them, saying how to regenerate the list.
#[test]
fn coverage_fails_a_build_that_no_longer_has_the_listed_functions() {
    let adaptor = env!("CARGO_BIN_EXE_adaptor-host");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/symbol-order.py");
    let nm = std::process::Command::new("nm")
        .args(["--defined-only", adaptor])
        .output()
        .expect("nm (binutils)");
    let present: Vec<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| s.starts_with("_ZN7adaptor"))
        .take(20)
        .map(str::to_owned)
        .collect();
    assert_eq!(
        present.len(),
        20,
        "functions of the runtime crate in {adaptor}"
    );
    let dir = tempfile::tempdir().unwrap();
    let coverage = |names: &[String]| {
        let list = dir.path().join("symbol-order.txt");
        let header = "# list\n# rustc test\n# matched 20 functions of the release build it was written for\n";
        std::fs::write(&list, format!("{header}{}\n", names.join("\n"))).unwrap();
        std::process::Command::new("python3")
            .arg(script)
            .args(["coverage", adaptor])
            .arg(&list)
            .output()
            .expect("python3")
    };
    let all = coverage(&present);
    assert!(
        all.status.success(),
        "{}",
        String::from_utf8_lossy(&all.stderr)
    );
    assert!(
        String::from_utf8_lossy(&all.stdout).contains("20 of its 20 functions"),
        "{}",
        String::from_utf8_lossy(&all.stdout)
    );
    // Two of the twenty renamed (as another feature resolution renames them): 18 < 95 % of 20.
    let mut renamed = present.clone();
    renamed[0].push_str("_renamed");
    renamed[1].push_str("_renamed");
    let lost = coverage(&renamed);
    assert_eq!(lost.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&lost.stderr).contains("run ./x.sh symbol-order"),
        "{}",
        String::from_utf8_lossy(&lost.stderr)
    );
}
