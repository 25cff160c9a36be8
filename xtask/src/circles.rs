//! Import circles between the modules of one crate: `cargo xtask layers` fails on any.
//!
//! # How it reads
//! A module's imports are the paths it names that start at `crate`, `super` or `self`, in `use`
//! declarations or inline, each resolved to the deepest module of the crate it reaches (a path
//! to an item resolves to the module that holds it). A file's test module (`#[cfg(test)]`, any
//! attributes, then `mod`) is left out: a test module imports its own file by design. A crate
//! with both `lib.rs` and `main.rs` has one root, their imports together.
//!
//! # What it does not count
//! A plain path from a module to its own child (`list::list(..)` in a `mod.rs`) is the module
//! tree's own direction and draws no arrow; so a `mod.rs` that holds items its children import
//! back (`super::AppState`) is not a circle here, while two siblings, or a module and one of
//! its ancestors by `crate::` path, importing each other are (the controller's `parent` ⇄
//! `finalizer` ⇄ `kinds`, the devcluster's `cluster` ⇄ `simulator`).
//!
//! # Assumptions
//! It reads text, not a parse: modules are files (`a.rs`, `a/mod.rs`, `a/b.rs`) and inline
//! `mod x { … }` blocks, braces are matched without regard to string literals, and no import
//! hides in a macro. It is a guard, not a compiler.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};

/// A module's path inside its crate (`["controller", "parent"]`); the root is empty.
type ModPath = Vec<String>;

/// The circles among the modules of the crate whose sources are under `src`: each a list of
/// modules (`controller::parent`), sorted, every one of which reaches every other.
pub fn circles(src: &Path) -> Result<Vec<Vec<String>>> {
    let mut sources = Vec::new();
    for (module, file) in modules(src)? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        split_inline(&module, &code_of(&text), &mut sources);
    }
    let known: BTreeSet<ModPath> = sources.iter().map(|(m, _)| m.clone()).collect();
    let mut graph: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (module, code) in &sources {
        graph
            .entry(module.clone())
            .or_default()
            .extend(imports(module, code, &known));
    }
    Ok(strongly_connected(&graph)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| c.iter().map(|m| display(m)).collect())
        .collect())
}

fn display(module: &ModPath) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

/// Every `.rs` file under `src` (but `src/bin/`) with the module it holds (the root twice for
/// a crate with both `lib.rs` and `main.rs`).
fn modules(src: &Path) -> Result<Vec<(ModPath, PathBuf)>> {
    let mut out = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                if path != src.join("bin") {
                    dirs.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src)?;
            let mut module: ModPath = rel
                .parent()
                .into_iter()
                .flat_map(|p| p.components())
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let stem = rel.file_stem().unwrap_or_default().to_string_lossy();
            let holds_dir =
                stem == "mod" || (module.is_empty() && (stem == "lib" || stem == "main"));
            if !holds_dir {
                module.push(stem.into_owned());
            }
            out.push((module, path));
        }
    }
    Ok(out)
}

/// `code` of `module` as its own code and that of each inline module (`mod log { … }`), each
/// a module of its own, recursively.
fn split_inline(module: &ModPath, code: &str, out: &mut Vec<(ModPath, String)>) {
    let mut own = String::new();
    let mut rest = code;
    while let Some((start, name, open)) = next_inline_module(rest) {
        own.push_str(&rest[..start]);
        let mut depth = 0;
        let close = rest[open..]
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map_or(rest.len(), |(i, _)| open + i);
        let mut inner = module.clone();
        inner.push(name.to_string());
        split_inline(&inner, rest.get(open + 1..close).unwrap_or_default(), out);
        rest = rest.get(close + 1..).unwrap_or_default();
    }
    own.push_str(rest);
    out.push((module.clone(), own));
}

/// The first `mod NAME {` of `code`: where it starts, NAME, and where its `{` is.
fn next_inline_module(code: &str) -> Option<(usize, &str, usize)> {
    word_starts(code, "mod").find_map(|i| {
        let after = code[i + 3..].trim_start();
        let name_len = after.find(|c: char| !is_ident(c)).unwrap_or(after.len());
        let name = &after[..name_len];
        let open_rel = after[name_len..].trim_start();
        if name.is_empty() || !open_rel.starts_with('{') {
            return None;
        }
        Some((i, name, code.len() - open_rel.len()))
    })
}

/// The modules of `known` that `module`'s code imports, itself left out.
fn imports(module: &ModPath, code: &str, known: &BTreeSet<ModPath>) -> BTreeSet<ModPath> {
    let mut paths = Vec::new();
    for tree in use_trees(code) {
        expand("", &tree, &mut paths);
    }
    paths.extend(inline_paths(code));
    paths
        .iter()
        .filter_map(|p| resolve(module, p, known))
        .filter(|target| target != module)
        .collect()
}

/// The code of a file: up to its test module, without line comments.
fn code_of(text: &str) -> String {
    let tests = text
        .match_indices("#[cfg(test)]")
        .map(|(i, _)| i)
        .find(|&i| {
            let mut after = text[i + "#[cfg(test)]".len()..].trim_start();
            // Other attributes may stand between (`#[allow(clippy::unwrap_used)]`).
            while after.starts_with("#[") {
                let Some(end) = after.find(']') else { break };
                after = after[end + 1..].trim_start();
            }
            after.starts_with("mod ") || after.starts_with("pub mod ")
        });
    let text = &text[..tests.unwrap_or(text.len())];
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The starts of `word` in `code` where it stands as a word of its own (not inside an
/// identifier, not after `$`).
fn word_starts<'a>(code: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    code.match_indices(word).map(|(i, _)| i).filter(move |&i| {
        let before = code[..i].chars().next_back();
        let after = code[i + word.len()..].chars().next();
        before.is_none_or(|c| !is_ident(c) && c != '$') && after.is_none_or(|c| !is_ident(c))
    })
}

/// The trees of the `use` declarations in `code`, whitespace and aliases (`as x`) taken out.
fn use_trees(code: &str) -> Vec<String> {
    word_starts(code, "use")
        .filter_map(|i| {
            let rest = &code[i + 3..];
            let tree = &rest[..rest.find(';')?];
            let mut out = String::new();
            let mut tokens = tree.split_whitespace().peekable();
            while let Some(token) = tokens.next() {
                if token == "as" {
                    // The alias, and any punctuation stuck to its end.
                    let alias = tokens.next().unwrap_or_default();
                    out.extend(alias.chars().skip_while(|c| is_ident(*c)));
                } else {
                    out.push_str(token);
                }
            }
            Some(out)
        })
        .collect()
}

/// The paths a use tree names (`a::{b, c::{d, self}}` → `a::b`, `a::c::d`, `a::c`).
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let Some(open) = tree.find('{') else {
        let path = format!("{prefix}{tree}");
        let path = path.strip_suffix("::self").unwrap_or(&path);
        out.push(path.trim_end_matches("::*").to_string());
        return;
    };
    let Some(inner) = tree[open + 1..].strip_suffix('}') else {
        return;
    };
    let prefix = format!("{prefix}{}", &tree[..open]);
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand(&prefix, &inner[start..i], out);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < inner.len() {
        expand(&prefix, &inner[start..], out);
    }
}

/// Paths in code that start at `crate`, `super` or `self` (`super::finalizer::set_on`).
fn inline_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for head in ["crate", "super", "self"] {
        for i in word_starts(code, head) {
            let rest = &code[i..];
            let mut end = 0;
            loop {
                end += rest[end..]
                    .find(|c: char| !is_ident(c))
                    .unwrap_or(rest.len() - end);
                let more = rest[end..].strip_prefix("::");
                if !more.is_some_and(|m| m.starts_with(is_ident)) {
                    break;
                }
                end += 2;
            }
            let path = &rest[..end];
            if path.contains("::") {
                out.push(path.to_string());
            }
        }
    }
    out
}

/// The deepest module of `known` that `path`, named in `module`, reaches; `None` for a path
/// that starts elsewhere (another crate, a name brought in by a `use`).
fn resolve(module: &ModPath, path: &str, known: &BTreeSet<ModPath>) -> Option<ModPath> {
    let mut segments = path.split("::").filter(|s| !s.is_empty()).peekable();
    let mut at: ModPath = match *segments.peek()? {
        "crate" => Vec::new(),
        "self" | "super" => module.clone(),
        _ => return None,
    };
    if segments.peek() == Some(&"crate") {
        segments.next();
    }
    while let Some(&s) = segments.peek() {
        match s {
            "self" => {}
            "super" => {
                at.pop()?;
            }
            _ => break,
        }
        segments.next();
    }
    for s in segments {
        let mut deeper = at.clone();
        deeper.push(s.to_string());
        if !known.contains(&deeper) {
            break;
        }
        at = deeper;
    }
    Some(at)
}

/// The strongly connected components of `graph` (Tarjan's algorithm).
fn strongly_connected(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'g> {
        graph: &'g BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'g ModPath, (usize, usize)>,
        stack: Vec<&'g ModPath>,
        on_stack: BTreeSet<&'g ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g ModPath) {
        let n = s.index.len();
        s.index.insert(v, (n, n));
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let Some((w, _)) = s.graph.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.index[w].1;
                let entry = s.index.get_mut(v).expect("visited");
                entry.1 = entry.1.min(low);
            } else if s.on_stack.contains(w) {
                let number = s.index[w].0;
                let entry = s.index.get_mut(v).expect("visited");
                entry.1 = entry.1.min(number);
            }
        }
        let (number, low) = s.index[v];
        if number == low {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            component.sort();
            s.out.push(component);
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(path: &str) -> ModPath {
        path.split("::")
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    }

    fn known() -> BTreeSet<ModPath> {
        [
            "",
            "controller",
            "controller::parent",
            "controller::finalizer",
            "crd",
        ]
        .into_iter()
        .map(m)
        .collect()
    }

    #[test]
    fn use_trees_expand_to_every_path_they_name() {
        let code = "use super::{\n    error::LoadError as E,\n    finalizer::{self, FINALIZER},\n};\npub(crate) use crate::crd::*;";
        let mut paths = Vec::new();
        for tree in use_trees(code) {
            expand("", &tree, &mut paths);
        }
        assert_eq!(
            paths,
            [
                "super::error::LoadError",
                "super::finalizer",
                "super::finalizer::FINALIZER",
                "crate::crd"
            ]
        );
    }

    #[test]
    fn paths_resolve_to_the_deepest_module_they_reach() {
        let parent = m("controller::parent");
        let at = |p: &str| resolve(&parent, p, &known()).map(|m| display(&m));
        assert_eq!(
            at("super::finalizer::set_on").as_deref(),
            Some("controller::finalizer")
        );
        assert_eq!(at("crate::crd::WasmPlugin").as_deref(), Some("crd"));
        assert_eq!(at("super::Shared").as_deref(), Some("controller"));
        assert_eq!(at("super::super::crd").as_deref(), Some("crd"));
        assert_eq!(at("kube::Api"), None);
    }

    #[test]
    fn a_module_importing_its_importer_is_a_circle_and_tests_do_not_count() {
        let parent = m("controller::parent");
        let text = "use super::finalizer;\nfn f() { crate::crd::x(); }\n#[cfg(test)]\n#[allow(clippy::unwrap_used)]\nmod tests { use super::super::Shared; }";
        let found = imports(&parent, &code_of(text), &known());
        assert_eq!(found, [m("controller::finalizer"), m("crd")].into());
        let graph = BTreeMap::from([
            (parent.clone(), found),
            (m("controller::finalizer"), [parent.clone()].into()),
            (m("crd"), BTreeSet::new()),
        ]);
        let circles: Vec<_> = strongly_connected(&graph)
            .into_iter()
            .filter(|c| c.len() > 1)
            .collect();
        assert_eq!(circles, [vec![m("controller::finalizer"), parent]]);
    }

    #[test]
    fn an_inline_module_is_a_module_of_its_own() {
        let code = "use crate::a;\npub mod log {\n    pub fn f() { if x { crate::b::g(); } }\n}\nfn h() {}";
        let mut out = Vec::new();
        split_inline(&m(""), code, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].0, m("log"));
        assert!(out[0].1.contains("crate::b::g()"), "{out:?}");
        assert!(!out[1].1.contains("crate::b"), "{out:?}");
        assert!(out[1].1.contains("fn h()"), "{out:?}");
    }

    #[test]
    fn inline_paths_stop_at_the_path_and_skip_macro_crates() {
        let code = "let x = super::plan::decide(a, crate::crd::X {});\n$crate::__private::f();";
        assert_eq!(inline_paths(code), ["crate::crd::X", "super::plan::decide"]);
    }
}
