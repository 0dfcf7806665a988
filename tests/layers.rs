//! The import graph of `src/`: layers import only downward and no files import each other in a
//! cycle (docs/architecture.md, "Layers"). Reads every source file, resolves each `crate::`,
//! `super::` and `self::` path (in `use` trees and in code) to the file that defines the module,
//! and checks the file graph. Test modules (`#[cfg(test)] mod … { … }`) and comments are skipped;
//! binaries (src/bin) sit above everything and are not checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first: a module may import its own layer and the layers below it. Names
/// are the crate's top-level modules.
const LAYERS: &[&[&str]] = &[
    &["error", "env"],
    &["limits"],
    &["config", "threads"],
    &["ir"],
    &["memory"],
    &["kernels"],
    &["codegen"],
    &["lower", "passes"],
    &["api"],
    &["backends", "weights"],
    &["onnx"],
    &["cli", "compliance", "registry"],
];

fn layer_of(top: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&top))
}

/// A source file and its module path (`src/a/b.rs` and `src/a/b/mod.rs` → `["a", "b"]`).
struct Source {
    path: PathBuf,
    module: Vec<String>,
    text: String,
}

fn collect(dir: &Path, out: &mut Vec<Source>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("read src").map(|e| e.expect("entry").path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "bin") {
                continue;
            }
            collect(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(src_dir()).expect("under src");
            let mut module: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
            let last = module.pop().expect("file name");
            if last != "mod.rs" && last != "lib.rs" {
                module.push(last.trim_end_matches(".rs").to_string());
            }
            let text = std::fs::read_to_string(&p).expect("read source");
            out.push(Source { path: p, module, text });
        }
    }
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// `text` without comments, string and char literals (replaced by spaces) and without
/// `#[cfg(test)]` items.
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'"' || (b[i] == b'r' && i + 1 < b.len() && (b[i + 1] == b'"' || b[i + 1] == b'#')) {
            // A string: plain, or raw with `#` fences.
            if b[i] == b'r' {
                let mut j = i + 1;
                let mut hashes = 0;
                while j < b.len() && b[j] == b'#' {
                    hashes += 1;
                    j += 1;
                }
                if j < b.len() && b[j] == b'"' {
                    let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                    j += 1;
                    while j < b.len() && !b[j..].starts_with(&close) {
                        j += 1;
                    }
                    i = (j + close.len()).min(b.len());
                    out.push(' ');
                    continue;
                }
                out.push('r');
                i += 1;
                continue;
            }
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(' ');
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') {
            // A char literal (not a lifetime).
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(' ');
        } else {
            let ch = text[i..].chars().next().expect("char");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    drop_cfg_test(&out)
}

/// Removes every `#[cfg(test)]` item (through its balanced braces or its `;`).
fn drop_cfg_test(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let (mut depth, mut end) = (0i32, after.len());
        for (k, c) in after.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = k + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Colons,
    Open,
    Close,
    Comma,
    Star,
    Semi,
    Other,
}

fn tokens(text: &str) -> Vec<Tok> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' || c == b'$' {
            let s = i;
            i += 1;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(text[s..i].trim_start_matches('$').to_string()));
            continue;
        }
        out.push(match c {
            b':' if b.get(i + 1) == Some(&b':') => {
                i += 1;
                Tok::Colons
            }
            b'{' => Tok::Open,
            b'}' => Tok::Close,
            b',' => Tok::Comma,
            b'*' => Tok::Star,
            b';' => Tok::Semi,
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            _ => Tok::Other,
        });
        i += 1;
    }
    out
}

/// Expands the `use` tree starting at `toks[i]` with `prefix`; returns the index after it.
fn use_tree(toks: &[Tok], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    loop {
        match toks.get(i) {
            Some(Tok::Ident(s)) if s == "as" => {
                i += 2; // `as name`
            }
            Some(Tok::Ident(s)) => {
                path.push(s.clone());
                i += 1;
                if toks.get(i) == Some(&Tok::Colons) {
                    i += 1;
                    continue;
                }
            }
            Some(Tok::Star) => i += 1,
            Some(Tok::Open) => {
                i += 1;
                loop {
                    match toks.get(i) {
                        Some(Tok::Close) => {
                            i += 1;
                            break;
                        }
                        Some(Tok::Comma) => i += 1,
                        None => return i,
                        _ => i = use_tree(toks, i, path.clone(), out),
                    }
                }
                return i;
            }
            _ => {}
        }
        // End of this branch: skip a trailing `as x`.
        if let Some(Tok::Ident(s)) = toks.get(i)
            && s == "as"
        {
            i += 2;
        }
        out.push(path);
        return i;
    }
}

/// Every path (as segments) that starts with `crate`, `super` or `self` in `text`.
fn paths(text: &str) -> Vec<Vec<String>> {
    let toks = tokens(text);
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Ident(s) if s == "use" => {
                i = use_tree(&toks, i + 1, Vec::new(), &mut out);
            }
            Tok::Ident(s) if (s == "crate" || s == "super" || s == "self") && toks.get(i + 1) == Some(&Tok::Colons) => {
                // A path in code: `crate::a::b::f(…)`, up to the first non-path token.
                let prev_colons = i > 0 && toks[i - 1] == Tok::Colons;
                let mut p = vec![s.clone()];
                let mut j = i + 1;
                while toks.get(j) == Some(&Tok::Colons) {
                    match toks.get(j + 1) {
                        Some(Tok::Ident(n)) => {
                            p.push(n.clone());
                            j += 2;
                        }
                        _ => break,
                    }
                }
                if !prev_colons {
                    out.push(p);
                }
                i = j;
            }
            _ => i += 1,
        }
    }
    out
}

/// The file (index into `files`) that `path`, written in module `from`, refers to; `None` for
/// external crates and the crate root.
fn resolve(path: &[String], from: &[String], modules: &BTreeMap<Vec<String>, usize>) -> Option<usize> {
    let mut base: Vec<String> = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("super") | Some("self") => from.to_vec(),
        _ => return None,
    };
    let mut rest = &path[1..];
    if path[0] == "super" {
        base.pop();
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop();
        rest = &rest[1..];
    }
    for seg in rest {
        let mut next = base.clone();
        next.push(seg.clone());
        if modules.contains_key(&next) {
            base = next;
        } else {
            break;
        }
    }
    if base.is_empty() { None } else { modules.get(&base).copied() }
}

fn is_prefix(a: &[String], b: &[String]) -> bool {
    a.len() <= b.len() && a == &b[..a.len()]
}

/// Strongly connected components with more than one file (Tarjan, iterative).
fn cycles(n: usize, edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    let (mut index, mut low, mut on) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut out, mut next) = (Vec::new(), Vec::new(), 0);
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work: Vec<(usize, Vec<usize>)> = vec![(root, edges[root].iter().copied().collect())];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on[root] = true;
        while let Some((v, todo)) = work.last_mut() {
            let v = *v;
            if let Some(w) = todo.pop() {
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on[w] = true;
                    work.push((w, edges[w].iter().copied().collect()));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                work.pop();
                if let Some((u, _)) = work.last() {
                    low[*u] = low[*u].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = stack.pop() {
                        on[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    if comp.len() > 1 {
                        out.push(comp);
                    }
                }
            }
        }
    }
    out
}

#[test]
fn layers_import_downward_and_files_have_no_cycles() {
    let mut files = Vec::new();
    collect(&src_dir(), &mut files);
    let modules: BTreeMap<Vec<String>, usize> = files.iter().enumerate().map(|(i, f)| (f.module.clone(), i)).collect();
    let mut edges = vec![BTreeSet::new(); files.len()];
    let mut upward = Vec::new();
    let mut unlayered = BTreeSet::new();
    for (i, f) in files.iter().enumerate() {
        if f.module.is_empty() {
            continue; // the crate root re-exports everything
        }
        let top = &f.module[0];
        let Some(from_layer) = layer_of(top) else {
            unlayered.insert(top.clone());
            continue;
        };
        for p in paths(&strip(&f.text)) {
            let Some(t) = resolve(&p, &f.module, &modules) else { continue };
            let target = &files[t].module;
            if t == i || is_prefix(target, &f.module) || is_prefix(&f.module, target) {
                continue; // a module and its own submodules
            }
            edges[i].insert(t);
            match layer_of(&target[0]) {
                Some(l) if l > from_layer => {
                    upward.push(format!("{} → {} ({})", rel(&f.path), rel(&files[t].path), p.join("::")))
                }
                Some(_) => {}
                None => {
                    unlayered.insert(target[0].clone());
                }
            }
        }
    }
    upward.sort();
    upward.dedup();
    let found: Vec<String> = cycles(files.len(), &edges)
        .into_iter()
        .map(|c| c.iter().map(|&k| rel(&files[k].path)).collect::<Vec<_>>().join(" ↔ "))
        .collect();
    assert!(unlayered.is_empty(), "top-level modules missing from LAYERS: {unlayered:?}");
    assert!(upward.is_empty(), "{} upward imports:\n{}", upward.len(), upward.join("\n"));
    assert!(found.is_empty(), "{} import cycles:\n{}", found.len(), found.join("\n"));
}

fn rel(p: &Path) -> String {
    p.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(p).display().to_string()
}

#[test]
fn the_checker_resolves_use_trees_and_code_paths() {
    let text = "use crate::ir::{shape::Shape, dtype::{self, DType as D}};\nuse super::x::*;\n\
                fn f() { crate::kernels::gemm::run(); let s = \"crate::fake::path\"; } // crate::comment\n";
    let p = paths(&strip(text));
    let joined: Vec<String> = p.iter().map(|v| v.join("::")).collect();
    assert_eq!(
        joined,
        [
            "crate::ir::shape::Shape",
            "crate::ir::dtype::self",
            "crate::ir::dtype::DType",
            "super::x",
            "crate::kernels::gemm::run"
        ]
    );
    let a = vec!["a".to_string()];
    let (b, c) = (vec!["b".to_string()], vec!["c".to_string()]);
    let edges = vec![BTreeSet::from([1]), BTreeSet::from([2]), BTreeSet::from([0])];
    assert_eq!(cycles(3, &edges).len(), 1);
    let acyclic = vec![BTreeSet::from([1]), BTreeSet::from([2]), BTreeSet::new()];
    assert!(cycles(3, &acyclic).is_empty());
    let modules = BTreeMap::from([(a.clone(), 0), (b.clone(), 1), (c, 2)]);
    let path: Vec<String> = ["crate", "b", "Item"].iter().map(|s| s.to_string()).collect();
    assert_eq!(resolve(&path, &a, &modules), Some(1));
    let path: Vec<String> = ["super", "c"].iter().map(|s| s.to_string()).collect();
    assert_eq!(resolve(&path, &a, &modules), Some(2));
}
