//! `docs/contract-rules.md` stays true: every test its table cites exists. (A rule whose test
//! is renamed or deleted must be fixed in the checklist, not silently lose its proof.)

use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// Every `.rs` file of the workspace (sources, tests, drivers), except build output.
fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && name != ".git" {
                rust_sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The test paths of a table row's last column: backticked `a::b::name` (a `*` leaf cites a
/// module's tests as a group, and is checked as a module).
fn cited_tests(row: &str) -> Vec<String> {
    let column = row.trim_end_matches('|').rsplit('|').next().unwrap_or("");
    column
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| t.contains("::") && !t.contains(' ') && !t.starts_with("adaptor::"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_test_the_contract_rules_cite_exists() {
    let root = workspace_root();
    let doc = std::fs::read_to_string(root.join("docs/contract-rules.md")).unwrap();
    let mut files = Vec::new();
    rust_sources(&root, &mut files);
    let text: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let table = doc.split("\n## ").next().unwrap();
    let mut cited = 0;
    let mut missing = Vec::new();
    for row in table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| rule"))
    {
        for path in cited_tests(row) {
            let leaf = path.rsplit("::").next().unwrap();
            let found = if leaf == "*" {
                let module = path.trim_end_matches("::*").trim_end_matches("::tests");
                let module = module.rsplit("::").next().unwrap();
                files
                    .iter()
                    .any(|f| f.file_stem().is_some_and(|s| s == module))
            } else {
                text.contains(&format!("fn {leaf}("))
            };
            cited += 1;
            if !found {
                missing.push(path);
            }
        }
    }
    assert!(cited > 50, "the table cites {cited} tests");
    assert!(
        missing.is_empty(),
        "cited tests that do not exist: {missing:?}"
    );
}
