//! The house's rules, kept by reading the code rather than by prose: `host/src` imports
//! only from its own layer or those below (the layers as ARCHITECTURE.md lists them, read
//! from there, so the list lives in one place), and every Rust file of the project
//! starts with a `//!` line that says what it owns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The project's root: this file is `tests/house.rs`, built from `host/`.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_owned()
}

/// Every `.rs` file under `dir`, `target/` and hidden folders left out.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.map(|entry| entry.expect("a readable folder")) {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && name != "node_modules" && !name.starts_with('.') {
                rust_files(&path, found);
            }
        } else if name.ends_with(".rs") {
            found.push(path);
        }
    }
}

/// The layers of "Layers of the host", from the top (1): each top-level module of
/// `host/src` its numbered item names as `` `name.rs` `` or `` `name/` ``.
fn layers(architecture: &str) -> BTreeMap<String, usize> {
    let section = architecture
        .split("\n## Layers of the host\n")
        .nth(1)
        .expect("ARCHITECTURE.md has a section \"Layers of the host\"");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut layers = BTreeMap::new();
    let mut layer = 0;
    for line in section.lines() {
        // An item is its numbered line and the indented lines under it; anything else
        // (a blank line, prose) is outside the list.
        match line.split_once(". ").and_then(|(number, _)| number.parse::<usize>().ok()) {
            Some(number) => layer = number,
            None if line.starts_with("   ") => {}
            None => layer = 0,
        }
        if layer == 0 {
            continue;
        }
        for quoted in line.split('`').skip(1).step_by(2) {
            let module = quoted.strip_suffix(".rs").or_else(|| quoted.strip_suffix('/'));
            // `bin/fleet/` is the binary: it reaches the library as `fleet::`, never `crate::`.
            if let Some(module) = module.filter(|module| !module.contains('/')) {
                layers.insert(module.to_owned(), layer);
            }
        }
    }
    layers
}

/// The top-level module a file of `host/src` belongs to: `fleet/apply.rs` is `fleet`.
fn module_of(relative: &Path) -> String {
    let first = relative.components().next().expect("a path in host/src");
    first.as_os_str().to_string_lossy().trim_end_matches(".rs").to_owned()
}

/// The code of a file without its comments and without its inline `#[cfg(test)]` module
/// (tests may reach anywhere, as `testing.rs` does).
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    text.lines().map(|line| line.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

/// The top-level modules a file's code names as `crate::name`, with `use crate::{a, b::c}`
/// groups read member by member.
fn named_modules(code: &str) -> Vec<String> {
    let mut named = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `fleet_guest::…`-like names that only end in "crate"
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut member = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        named.push(identifier(&member));
                        member.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    member.push(c);
                }
            }
            named.push(identifier(&member));
        } else {
            named.push(identifier(rest));
        }
    }
    named.retain(|name| !name.is_empty() && name != "self");
    named
}

fn identifier(text: &str) -> String {
    text.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

#[test]
fn host_src_imports_only_from_its_own_layer_or_below() {
    let root = root();
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let layers = layers(&architecture);
    assert!(layers.len() > 10, "the layers read from ARCHITECTURE.md: {layers:?}");
    let src = root.join("host/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under host/src");
        let module = module_of(relative);
        // The binary is the top floor; test-only files and the tests' scaffolding may
        // reach anything.
        let test_only = relative.iter().any(|part| part == "tests" || part == "tests.rs") || module == "testing";
        if module == "bin" || test_only {
            continue;
        }
        let Some(&layer) = layers.get(&module).or(if module == "lib" { layers.get("app") } else { None }) else {
            wrong.push(format!("{}: module `{module}` is in no layer of ARCHITECTURE.md", relative.display()));
            continue;
        };
        let code = code_of(&std::fs::read_to_string(file).expect("readable"));
        for named in named_modules(&code) {
            match layers.get(&named) {
                Some(&at) if at < layer => wrong.push(format!(
                    "{} (layer {layer}) uses crate::{named} (layer {at}): an import from a lower layer to a higher one",
                    relative.display()
                )),
                Some(_) => {}
                None if named == "testing" => {}
                None => wrong.push(format!("{}: crate::{named} is in no layer of ARCHITECTURE.md", relative.display())),
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_rust_file_starts_with_a_line_saying_what_it_owns() {
    let root = root();
    let mut files = Vec::new();
    for dir in ["host", "guest", "edge", "plugins", "test-programs", "fuzz", "tests"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 100, "{} files", files.len());
    let texts: Vec<(&PathBuf, String)> =
        files.iter().map(|file| (file, std::fs::read_to_string(file).expect("readable"))).collect();
    // A file pasted into a module by `include!` cannot hold an inner `//!` line: its
    // first line is a plain comment instead.
    let included: Vec<PathBuf> = texts
        .iter()
        .flat_map(|(file, text)| {
            let dir = file.parent().expect("a file's folder");
            text.split("include!(\"").skip(1).filter_map(|rest| Some(dir.join(rest.split_once('"')?.0)))
        })
        .collect();
    let unsaid: Vec<String> = texts
        .iter()
        .filter(|(file, text)| !text.starts_with(if included.contains(file) { "// " } else { "//! " }))
        .map(|(file, _)| file.strip_prefix(&root).unwrap_or(file).display().to_string())
        .collect();
    assert!(unsaid.is_empty(), "files that do not start with a `//!` line:\n{}", unsaid.join("\n"));
}

#[test]
fn the_readers_find_what_they_look_for() {
    let code = code_of(
        "use crate::api::ApiError;\nuse crate::{db::{self, Conn}, events};\n// crate::http in a comment\n\
         fn f() { crate::store::trail::write(); fleet_guest_crate::x(); }\n#[cfg(test)]\nmod tests {\n use crate::app;\n}",
    );
    assert_eq!(named_modules(&code), ["api", "db", "events", "store"]);
    let layers = layers(
        "# A\n\n## Layers of the host\n\nProse.\n\n1. **Top** (`bin/fleet/`).\n2. **Root** (`app.rs`): and `lib.rs`,\n   \
         and `demo.rs`.\n3. **Methods**: `fleet/`, `Planning`.\n\nAfter the list, `cache.rs` is prose.\n\n## Next\n",
    );
    let expected: BTreeMap<String, usize> =
        [("app", 2), ("lib", 2), ("demo", 2), ("fleet", 3)].map(|(name, layer)| (name.to_owned(), layer)).into();
    assert_eq!(layers, expected);
}
