//! No two modules of the command import each other, directly or around a longer loop: each one
//! builds on the ones it uses, as a bench's steps do (flags, plan, run, report). Read from the
//! sources: every `crate::`, `self::` and `super::` path outside comments and unit tests (in `use`
//! declarations, their braces expanded, and inline), resolved to the module that holds it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`bench::send`, `main` for the crate root) → its source.
fn modules(dir: &Path, prefix: &[String], out: &mut BTreeMap<Vec<String>, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        let mut module = prefix.to_vec();
        if path.is_dir() {
            module.push(name);
            modules(&path, &module, out);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        if name != "mod" && !(prefix.is_empty() && name == "main") {
            module.push(name);
        }
        out.insert(module, std::fs::read_to_string(&path).unwrap());
    }
}

/// `src` without comments and without its unit tests (from `#[cfg(test)]` on).
fn code(src: &str) -> String {
    let src = src.split("#[cfg(test)]").next().unwrap();
    src.lines()
        .map(|l| l.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a `use` tree names, its braces expanded (`a::{b, c::d}` → `a::b`, `a::c::d`).
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap().trim().to_string()];
    };
    let (head, rest) = tree.split_at(open);
    let Some(close) = rest.rfind('}') else {
        return Vec::new();
    };
    let inner = &rest[1..close];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| format!("{head}{p}"))
        .collect()
}

/// Every path of `code` that starts with `crate::`, `self::` or `super::`.
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    for line in code.split_inclusive('\n') {
        let decl = line.trim_start();
        let decl = ["pub(crate) ", "pub "]
            .iter()
            .find_map(|p| decl.strip_prefix(p))
            .unwrap_or(decl);
        if let Some(tree) = decl.strip_prefix("use ") {
            let start = at + line.len() - tree.len();
            let end = code[start..].find(';').map_or(code.len(), |e| start + e);
            out.extend(expand(&code[start..end]));
        }
        at += line.len();
    }
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    for start in ["crate::", "self::", "super::"] {
        for (at, _) in code.match_indices(start) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let len = code[at..].find(|c| !ident(c)).unwrap_or(code.len() - at);
            out.push(code[at..at + len].trim_end_matches(':').to_string());
        }
    }
    out.retain(|p| {
        ["crate::", "self::", "super::"]
            .iter()
            .any(|s| p.starts_with(s))
    });
    out
}

/// The module `path`, named from `module`, resolves to: the longest known module it starts with.
fn resolve(
    path: &str,
    module: &[String],
    known: &BTreeMap<Vec<String>, String>,
) -> Option<Vec<String>> {
    let mut full: Vec<String> = module.to_vec();
    let mut segments = path.split("::").peekable();
    match segments.peek() {
        Some(&"crate") => {
            full.clear();
            segments.next();
        }
        Some(&"self") => {
            segments.next();
        }
        _ => {}
    }
    while segments.peek() == Some(&"super") {
        full.pop();
        segments.next();
    }
    full.extend(segments.map(String::from));
    (0..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|m| known.contains_key(m))
}

/// Each module and the modules it uses.
fn uses(known: &BTreeMap<Vec<String>, String>) -> BTreeMap<&Vec<String>, BTreeSet<Vec<String>>> {
    known
        .iter()
        .map(|(module, source)| {
            let to = paths(&code(source))
                .iter()
                .filter_map(|p| resolve(p, module, known))
                // A module's own items, and the root (which declares every module), are no import.
                .filter(|m| m != module && !m.is_empty())
                .collect();
            (module, to)
        })
        .collect()
}

/// Every loop of `uses`, as `a -> b -> a`: a module that reaches itself again through what it uses.
fn loops(uses: &BTreeMap<&Vec<String>, BTreeSet<Vec<String>>>) -> Vec<String> {
    let mut loops = Vec::new();
    for &start in uses.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<(&Vec<String>, Vec<&Vec<String>>)> = vec![(start, vec![start])];
        while let Some((at, trail)) = stack.pop() {
            for next in uses.get(at).into_iter().flatten() {
                if next == start {
                    let names: Vec<String> = trail.iter().map(|m| m.join("::")).collect();
                    loops.push(format!("{} -> {}", names.join(" -> "), start.join("::")));
                } else if seen.insert(next) {
                    let mut t = trail.clone();
                    t.push(next);
                    stack.push((next, t));
                }
            }
        }
    }
    loops
}

#[test]
fn no_two_modules_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut known = BTreeMap::new();
    modules(&src, &[], &mut known);
    assert!(known.len() > 10, "{known:?}");
    let found = loops(&uses(&known));
    assert!(
        found.is_empty(),
        "modules that import each other:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_reader_finds_a_loop_however_it_is_written() {
    let m = |path: &str| -> Vec<String> {
        path.split("::")
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    };
    let mut known = BTreeMap::new();
    known.insert(m(""), "mod a;\nmod c;".to_string());
    known.insert(
        m("a"),
        "use crate::a::b::{self, X as Y};\nmod b;".to_string(),
    );
    known.insert(
        m("a::b"),
        "// use crate::c;\nfn f() { crate::c::g() }".to_string(),
    );
    known.insert(m("c"), "fn g() {}".to_string());
    assert!(loops(&uses(&known)).is_empty());
    assert_eq!(
        expand("crate::a::{b::{self, X as Y}, Z}"),
        ["crate::a::b::self", "crate::a::b::X", "crate::a::Z"]
    );
    known.insert(m("c"), "fn g() { super::a::b::f() }".to_string());
    let found = loops(&uses(&known));
    assert!(
        found.contains(&"a::b -> c -> a::b".to_string()),
        "{found:?}"
    );
}

/// The modules under `crate::<step>` (the step itself among them).
fn under<'a>(
    known: &'a BTreeMap<Vec<String>, String>,
    step: &'a str,
) -> impl Iterator<Item = (&'a Vec<String>, &'a String)> + 'a {
    let prefix: Vec<String> = step.split("::").map(String::from).collect();
    known.iter().filter(move |(m, _)| m.starts_with(&prefix))
}

/// Each path a module of `from` names into a module of `to`, as `module: path`.
fn crossings(known: &BTreeMap<Vec<String>, String>, from: &str, to: &str) -> Vec<String> {
    let to: Vec<String> = to.split("::").map(String::from).collect();
    let mut found = Vec::new();
    for (module, source) in under(known, from) {
        for path in paths(&code(source)) {
            if resolve(&path, module, known).is_some_and(|m| m.starts_with(&to)) {
                found.push(format!("{}: {path}", module.join("::")));
            }
        }
    }
    found
}

/// A bench is parse → plan → run → report, each step using only the steps before it: the flags
/// (`bench::args`) name no later step, the plan runs nothing and reports nothing, the runs never
/// print a report's table, sweep or picture, and the report takes from the runs only what they
/// hand over (their rows and how they ended), never calling a driver.
#[test]
fn a_bench_is_parse_plan_run_report() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut known = BTreeMap::new();
    modules(&src, &[], &mut known);
    let mut wrong = Vec::new();
    for later in ["bench::plan", "bench::run", "bench::report"] {
        wrong.extend(crossings(&known, "bench::args", later));
    }
    for later in ["bench::run", "bench::report"] {
        wrong.extend(crossings(&known, "bench::plan", later));
    }
    wrong.extend(crossings(&known, "bench::run", "bench::report"));
    const HANDED_OVER: [&str; 4] = ["Rounds", "RxRuns", "RxSent", "VsockRuns"];
    wrong.extend(
        crossings(&known, "bench::report", "bench::run")
            .into_iter()
            .filter(|c| !HANDED_OVER.iter().any(|t| c.ends_with(&format!("::{t}")))),
    );
    assert!(
        wrong.is_empty(),
        "a step of a bench that uses a later one:\n{}",
        wrong.join("\n")
    );
    for step in ["bench::args", "bench::plan", "bench::run", "bench::report"] {
        assert!(under(&known, step).next().is_some(), "no {step}");
    }
}
