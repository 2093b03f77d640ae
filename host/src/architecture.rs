//! Checks on the crate's own source that keep the layering of the module tree true: which
//! modules may name wasmtime and WIT types, which may spawn, and which import cycles exist.
//! Test-only (compiled into the unit tests, reading `src/`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every production `.rs` file under `src/`, by module path: its code without the unit tests
/// and without comments.
fn sources() -> BTreeMap<String, String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&root, &mut files);
    files
        .into_iter()
        .filter_map(|path| {
            let rel = path.strip_prefix(&root).ok()?.with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            if parts == ["lib"] || parts == ["architecture"] {
                return None;
            }
            let text = std::fs::read_to_string(&path).ok()?;
            // Code only: the unit tests cut off, comments (doc links name modules too) dropped.
            let production: String = text
                .split("#[cfg(test)]")
                .next()
                .unwrap_or("")
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .map(|l| format!("{l}\n"))
                .collect();
            Some((parts.join("::"), production))
        })
        .collect()
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

#[test]
fn only_wasm_names_wasmtime_and_wit_types() {
    for (module, text) in sources() {
        if top(&module) == "wasm" {
            continue;
        }
        for needle in ["wasmtime", "wit::", "bindings::"] {
            assert!(
                !text.contains(needle),
                "{module} names `{needle}`: only wasm/ may"
            );
        }
    }
}

/// No code line outside the modules `allowed` accepts names any of `needles`.
fn only_in(allowed: impl Fn(&str) -> bool, needles: &[&str], what: &str) {
    for (module, text) in sources() {
        if allowed(&module) {
            continue;
        }
        for needle in needles {
            let code_lines = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .any(|l| l.contains(needle));
            assert!(!code_lines, "{module} names `{needle}`: {what}");
        }
    }
}

#[test]
fn only_the_tool_server_names_rmcp_and_axum() {
    only_in(
        |m| m == "tools::server" || m == "tools/server",
        &["rmcp::", "axum::"],
        "only tools/server may (the MCP and HTTP stack stay behind the `tools` feature)",
    );
}

#[test]
fn only_process_spawns() {
    only_in(
        |m| top(m) == "process",
        &[
            "Command::new",
            "process::Command",
            "posix_spawn",
            "libc::fork",
            "SYS_clone",
        ],
        "it spawns; only process/ may",
    );
}

#[test]
fn import_cycles_are_only_the_documented_knots() {
    let sources = sources();
    let modules: BTreeSet<&str> = sources.keys().map(|m| top(m)).collect();
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (module, text) in &sources {
        let from = top(module);
        for (i, _) in text.match_indices("crate::") {
            let rest = &text[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if let Some(to) = modules.get(name.as_str())
                && *to != from
            {
                graph.entry(from).or_default().insert(to);
            }
        }
    }
    // Strongly connected components (Tarjan).
    struct Tarjan<'a> {
        graph: &'a BTreeMap<&'a str, BTreeSet<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        knots: Vec<BTreeSet<&'a str>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for &w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.stack.contains(&w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut knot = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    knot.insert(w);
                    if w == v {
                        break;
                    }
                }
                if knot.len() > 1 {
                    self.knots.push(knot);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph: &graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        knots: Vec::new(),
    };
    for &m in &modules {
        if !t.index.contains_key(m) {
            t.visit(m);
        }
    }
    let mut knots: Vec<Vec<&str>> = t
        .knots
        .iter()
        .map(|k| k.iter().copied().collect())
        .collect();
    knots.sort();
    // The knots the crate docs list: the facade and its pipeline; the vocabulary nouns.
    assert_eq!(
        knots,
        [
            vec!["agent", "run", "thread"],
            vec!["approval", "error", "event", "result", "structured"],
        ],
        "the module graph: {graph:#?}"
    );
}
