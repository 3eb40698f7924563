//! The structure the docs promise holds in the code. The engine's modules form layers: no
//! module reaches, directly or through others, back into one that reaches it (no import
//! circles), and the sibling files of `wal/`, `ring/` and `stage/` do the same among
//! themselves. Method: read every source file, collect the `crate::x` and `super::x` paths
//! it names (comments stripped), and look for a cycle. And every `unsafe` block of the
//! workspace is in a file docs/SAFETY.md lists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

fn strip_comments(src: &str) -> String {
    src.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `prefix::name` in `src` (and the names of a `prefix::{a, b::c}` group).
fn names_after(src: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = src;
    while let Some(i) = rest.find(prefix) {
        rest = &rest[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

/// The module (top level, or sibling inside `dir`) each file of `dir` depends on.
fn graph(dir: &Path, prefix_of: impl Fn(&str) -> Vec<String>) -> Graph {
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("source directory") {
        let path = entry.expect("entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("name")
            .to_owned();
        let source = if path.is_dir() {
            std::fs::read_dir(&path)
                .expect("module directory")
                .map(|e| std::fs::read_to_string(e.expect("entry").path()).unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            std::fs::read_to_string(&path).expect("source")
        };
        modules.insert(name, strip_comments(&source));
    }
    let known: BTreeSet<String> = modules.keys().cloned().collect();
    let mut g = Graph::new();
    for (name, src) in &modules {
        let mut deps = BTreeSet::new();
        for prefix in prefix_of(name) {
            deps.extend(names_after(src, &prefix));
        }
        deps.retain(|d| d != name && known.contains(d));
        g.insert(name.clone(), deps);
    }
    g
}

/// A cycle in `g`, if it has one.
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(g: &Graph, v: &str, path: &mut Vec<String>, done: &mut BTreeSet<String>) -> bool {
        if let Some(i) = path.iter().position(|p| p == v) {
            path.drain(..i);
            path.push(v.to_owned());
            return true;
        }
        if done.contains(v) {
            return false;
        }
        path.push(v.to_owned());
        for w in g.get(v).into_iter().flatten() {
            if visit(g, w, path, done) {
                return true;
            }
        }
        path.pop();
        done.insert(v.to_owned());
        false
    }
    let mut done = BTreeSet::new();
    for v in g.keys() {
        let mut path = Vec::new();
        if visit(g, v, &mut path, &mut done) {
            return Some(path);
        }
    }
    None
}

#[test]
fn engine_modules_have_no_import_circles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut g = graph(&src, |_| vec!["crate::".to_owned()]);
    // The crate root and the test-only re-exports sit above everything.
    g.remove("lib");
    g.remove("internals");
    assert!(g.len() > 20, "found only {} modules", g.len());
    assert_eq!(find_cycle(&g), None, "import circle among {g:#?}");
    // A lower module never names the facade.
    for (module, deps) in &g {
        assert!(
            module == "wal" || !deps.contains("wal"),
            "{module} reaches up into the facade"
        );
    }
}

#[test]
fn files_inside_a_module_have_no_import_circles() {
    for dir in ["wal", "ring", "stage", "recovery", "tier", "shared"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
        let mut g = graph(&path, |_| {
            vec!["super::".to_owned(), format!("crate::{dir}::")]
        });
        g.remove("mod");
        assert!(g.len() >= 2, "{dir}: found only {} files", g.len());
        assert_eq!(find_cycle(&g), None, "{dir}: import circle among {g:#?}");
    }
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut g = Graph::new();
    g.insert("a".into(), ["b".to_owned()].into());
    g.insert("b".into(), ["c".to_owned()].into());
    g.insert("c".into(), ["a".to_owned()].into());
    assert_eq!(
        find_cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(
        names_after("use crate::{alpha, beta::x};", "crate::").len(),
        2
    );
}

/// The workspace root (two levels above this crate).
fn workspace() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// Rust files under `dir`, recursively, skipping build output.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() && name != "target" && !name.starts_with('.') {
            rust_files(&path, out);
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// Lines of `src` that open an `unsafe` block, function or impl (comments stripped).
fn unsafe_sites(src: &str) -> usize {
    strip_comments(src)
        .lines()
        .filter(|l| {
            let l = l.trim_end();
            // A string literal that names the keyword (this file) is no unsafe code.
            if l.contains("\"unsafe") {
                return false;
            }
            l.contains("unsafe {")
                || l.contains("unsafe fn ")
                || l.contains("unsafe impl")
                || l.ends_with("= unsafe")
        })
        .count()
}

#[test]
fn every_unsafe_block_is_in_the_safety_inventory() {
    let root = workspace();
    let inventory = std::fs::read_to_string(root.join("docs/SAFETY.md")).expect("docs/SAFETY.md");
    let mut files = Vec::new();
    for dir in ["crates", "benches", "examples"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut missing = Vec::new();
    for file in files {
        let src = std::fs::read_to_string(&file).expect("source");
        let sites = unsafe_sites(&src);
        if sites == 0 {
            continue;
        }
        let rel = file
            .strip_prefix(&root)
            .expect("inside the workspace")
            .to_string_lossy()
            .into_owned();
        let rows = inventory
            .lines()
            .filter(|l| l.starts_with('|') && l.contains(&format!("`{rel}`")))
            .count();
        if rows == 0 {
            missing.push(format!("{rel}: {sites} unsafe sites, not listed"));
        }
    }
    assert!(missing.is_empty(), "docs/SAFETY.md misses: {missing:#?}");
}
