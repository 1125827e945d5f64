//! Every relative link in the repository's documentation leads somewhere: README.md, docs/*.md and
//! each crate's README.md, checked for the file a link names and, for a link into a Markdown file,
//! the heading its `#anchor` names (GitHub's slugs: lowercase, punctuation dropped, spaces to
//! hyphens, `-1`, `-2` … on repeats). Links with a scheme (`https:`, `mailto:`) are not checked.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// One link found in a Markdown file: the 1-based line it is on and its target as written.
#[derive(Debug, PartialEq)]
struct Link {
    line: usize,
    target: String,
}

/// The inline links (`[text](target)`, images too) and reference definitions (`[name]: target`)
/// of `text`, outside fenced code blocks and code spans.
fn links(text: &str) -> Vec<Link> {
    let mut found = Vec::new();
    let mut fence: Option<&str> = None;
    for (index, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        if let Some(open) = fence {
            if trimmed.starts_with(open) {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") {
            fence = Some("```");
            continue;
        }
        if trimmed.starts_with("~~~") {
            fence = Some("~~~");
            continue;
        }
        let line = without_code_spans(raw);
        let mut push = |target: &str| {
            found.push(Link {
                line: index + 1,
                target: target.to_string(),
            });
        };
        if let Some(definition) = reference_definition(&line) {
            push(definition);
            continue;
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = closing_paren(after) else {
                break;
            };
            let inside = after[..end].trim();
            let target = match inside.strip_prefix('<') {
                Some(angled) => angled.split('>').next().unwrap_or(""),
                None => inside.split_whitespace().next().unwrap_or(""),
            };
            push(target);
            rest = &after[end..];
        }
    }
    found
}

/// `line` with every code span (`` `…` ``, ``` `` … `` ```) blanked out.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let run = rest[start..].chars().take_while(|&c| c == '`').count();
        let ticks = &rest[start..start + run];
        let body = &rest[start + run..];
        match find_run(body, ticks) {
            Some(close) => rest = &body[close + run..],
            None => {
                out.push_str(ticks);
                rest = body;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Where a backtick run of exactly `ticks` starts in `text`.
fn find_run(text: &str, ticks: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find(ticks) {
        let start = from + at;
        let end = start + ticks.len();
        let longer_before = start > 0 && text.as_bytes()[start - 1] == b'`';
        let longer_after = text.as_bytes().get(end) == Some(&b'`');
        if !longer_before && !longer_after {
            return Some(start);
        }
        from = end;
    }
    None
}

/// The target of a reference definition, `[name]: target`, at the start of a line.
fn reference_definition(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix('[')?;
    let (_, after) = rest.split_once("]:")?;
    after.split_whitespace().next()
}

/// The index of the `)` that closes a link target starting at `text` (parentheses may nest).
fn closing_paren(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (at, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return Some(at),
            ')' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// The anchors GitHub gives the headings of `text`, outside fenced code blocks.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut found = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let hashes = trimmed.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !trimmed[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(trimmed[hashes..].trim().trim_end_matches('#').trim());
        let repeats = seen.entry(base.clone()).or_insert(0);
        found.push(match *repeats {
            0 => base.clone(),
            n => format!("{base}-{n}"),
        });
        *repeats += 1;
    }
    found
}

/// GitHub's slug of a heading: link text kept without its target, lowercase, every character
/// but letters, digits, `-` and `_` dropped, each space a hyphen.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    while let Some(at) = rest.find("](") {
        text.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        match closing_paren(after) {
            Some(end) => rest = &after[end + 1..],
            None => {
                rest = after;
                break;
            }
        }
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// `path` with `.` and `..` components resolved without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// What the checker needs to know of the files: whether a path exists, and a Markdown file's text.
trait Files {
    fn exists(&self, path: &Path) -> bool;
    fn markdown(&self, path: &Path) -> Option<String>;
}

/// The broken links of the Markdown file `doc` (a path relative to the repository root), one line
/// each: where the link is, its target, and what is wrong.
fn broken_links(files: &impl Files, doc: &Path) -> Vec<String> {
    let Some(text) = files.markdown(doc) else {
        return vec![format!("{}: cannot be read", doc.display())];
    };
    let dir = doc.parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for link in links(&text) {
        let target = link.target.as_str();
        let where_ = format!("{}:{}: ({target})", doc.display(), link.line);
        if target.is_empty() {
            broken.push(format!("{where_} an empty link"));
            continue;
        }
        if has_scheme(target) {
            continue;
        }
        let (file, anchor) = match target.split_once('#') {
            Some((file, anchor)) => (file, Some(anchor)),
            None => (target, None),
        };
        let file = file.split('?').next().unwrap_or(file);
        let resolved = if file.is_empty() {
            doc.to_path_buf()
        } else {
            normalize(&dir.join(file))
        };
        if resolved.starts_with("..") || file.starts_with('/') {
            broken.push(format!("{where_} leads outside the repository"));
            continue;
        }
        if !files.exists(&resolved) {
            broken.push(format!("{where_} no such file: {}", resolved.display()));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if resolved.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let Some(target_text) = files.markdown(&resolved) else {
            broken.push(format!("{where_} cannot read {}", resolved.display()));
            continue;
        };
        if !anchors(&target_text).iter().any(|a| a == anchor) {
            broken.push(format!(
                "{where_} no heading with anchor #{anchor} in {}",
                resolved.display()
            ));
        }
    }
    broken
}

/// Whether `target` starts with a URI scheme (`https:`, `mailto:`) rather than a path.
fn has_scheme(target: &str) -> bool {
    match target.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        }
        None => false,
    }
}

/// The repository's files, read from the work tree.
struct WorkTree(PathBuf);

impl Files for WorkTree {
    fn exists(&self, path: &Path) -> bool {
        self.0.join(path).exists()
    }

    fn markdown(&self, path: &Path) -> Option<String> {
        fs::read_to_string(self.0.join(path)).ok()
    }
}

/// README.md, docs/*.md and crates/*/README.md, relative to the repository root.
fn documentation(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![PathBuf::from("README.md")];
    let markdown_in = |dir: &str| -> Vec<PathBuf> {
        let Ok(entries) = fs::read_dir(root.join(dir)) else {
            return Vec::new();
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok())
            .map(|entry| Path::new(dir).join(entry.file_name()))
            .collect();
        found.sort();
        found
    };
    docs.extend(
        markdown_in("docs")
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    docs.extend(
        markdown_in("crates")
            .into_iter()
            .map(|krate| krate.join("README.md"))
            .filter(|readme| root.join(readme).is_file()),
    );
    docs
}

#[test]
fn every_relative_link_in_the_documentation_resolves() {
    let root = normalize(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    let files = WorkTree(root.clone());
    let docs = documentation(&root);
    assert!(
        docs.len() > 1,
        "found no docs/*.md beside README.md under {}",
        root.display()
    );
    let mut checked = 0;
    let mut broken = Vec::new();
    for doc in &docs {
        checked += files.markdown(doc).map_or(0, |text| links(&text).len());
        broken.extend(broken_links(&files, doc));
    }
    assert!(checked > 0, "no links found in {docs:?}");
    assert!(
        broken.is_empty(),
        "{} broken links of {checked}:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// Files held in memory, for checking the checker.
struct InMemory(BTreeMap<PathBuf, String>);

impl Files for InMemory {
    fn exists(&self, path: &Path) -> bool {
        self.0.contains_key(path) || self.0.keys().any(|file| file.starts_with(path))
    }

    fn markdown(&self, path: &Path) -> Option<String> {
        self.0.get(path).cloned()
    }
}

#[test]
fn the_checker_finds_broken_files_and_anchors_and_passes_good_ones() {
    let readme = "\
# Top

See [send](docs/send.md#the-locked-memory-limit), [io_uring](docs/io_uring.md#batches-records),
[a script](scripts/test), [gone](docs/gone.md), [here](#top), [there](#nowhere),
[web](https://example.invalid/x#y) and `[not a link](docs/gone.md)`.

```
[also not a link](docs/gone.md)
```

[ref]: docs/send.md#repeat-1
";
    let send = "\
# Send (`zcnet::tx`)

## The locked-memory limit

## Repeat

## Repeat

Back to [the top](../README.md#top) and [off the tree](../../elsewhere.md).
";
    let files = InMemory(BTreeMap::from([
        (PathBuf::from("README.md"), readme.to_string()),
        (PathBuf::from("docs/send.md"), send.to_string()),
        (
            PathBuf::from("docs/io_uring.md"),
            "# io_uring\n\n## Batches, records and buffers\n".to_string(),
        ),
        (PathBuf::from("scripts/test"), String::new()),
    ]));
    assert_eq!(
        broken_links(&files, Path::new("README.md")),
        [
            "README.md:3: (docs/io_uring.md#batches-records) no heading with anchor #batches-records in docs/io_uring.md",
            "README.md:4: (docs/gone.md) no such file: docs/gone.md",
            "README.md:4: (#nowhere) no heading with anchor #nowhere in README.md",
        ]
    );
    assert_eq!(
        broken_links(&files, Path::new("docs/send.md")),
        ["docs/send.md:9: (../../elsewhere.md) leads outside the repository"]
    );
    assert_eq!(
        anchors(send),
        [
            "send-zcnettx",
            "the-locked-memory-limit",
            "repeat",
            "repeat-1"
        ]
    );
    assert_eq!(
        slug("Guest suite (AF_VSOCK zero-copy, a real [NIC](x.md) driver)"),
        "guest-suite-af_vsock-zero-copy-a-real-nic-driver"
    );
    assert_eq!(slug("`zcnet probe --measure`"), "zcnet-probe---measure");
}
