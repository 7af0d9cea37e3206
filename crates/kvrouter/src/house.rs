//! House rules of issue 27 checked on the sources: no function in this crate's `src/` (tests
//! included) is over [`MAX_FN_LINES`] lines, counted from the line with `fn name` to its
//! closing brace at the same indentation (the layout rustfmt gives); and no two top-level
//! modules import each other (`crate::x` paths in product code; `tests.rs` files and the
//! `#[cfg(test)] mod` blocks that end a file may import anything).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a function may be.
const MAX_FN_LINES: usize = 80;

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The name of the function declared on `line` (after its visibility and qualifiers).
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    loop {
        if let Some(r) = rest.strip_prefix("pub(") {
            rest = r.split_once(')')?.1.trim_start();
        } else if let Some(r) = rest.strip_prefix("extern ") {
            let r = r.trim_start();
            rest = match r.strip_prefix('"') {
                Some(abi) => abi.split_once('"')?.1.trim_start(),
                None => r,
            };
        } else if let Some(r) = ["pub ", "const ", "async ", "unsafe ", "default "]
            .iter()
            .find_map(|q| rest.strip_prefix(q))
        {
            rest = r.trim_start();
        } else {
            break;
        }
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// The length in lines of the function whose `fn` is on `lines[start]`, `None` for a
/// declaration without a body.
fn fn_lines(lines: &[&str], start: usize) -> Option<usize> {
    let indent = &lines[start][..lines[start].len() - lines[start].trim_start().len()];
    let open = (start..lines.len())
        .find(|&j| lines[j].contains('{') || lines[j].trim_end().ends_with(';'))?;
    if !lines[open].contains('{') {
        return None;
    }
    let line = lines[open].trim_end();
    if line.ends_with('}') && line.matches('{').count() == line.matches('}').count() {
        return Some(open - start + 1);
    }
    let close = (open + 1..lines.len())
        .find(|&k| {
            lines[k]
                .strip_prefix(indent)
                .is_some_and(|r| r.starts_with('}'))
        })
        .unwrap_or(lines.len() - 1);
    Some(close - start + 1)
}

/// `path:line fn name: N lines` for every function of `src` over the limit.
fn long_functions(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut long = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(name) = fn_name(line) else { continue };
            if let Some(n) = fn_lines(&lines, i).filter(|&n| n > MAX_FN_LINES) {
                let shown = file.strip_prefix(src).unwrap_or(&file).display();
                long.push(format!("src/{shown}:{} fn {name}: {n} lines", i + 1));
            }
        }
    }
    long
}

#[test]
fn no_function_over_80_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let long = long_functions(&src);
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (split them into stages or helpers):\n{}",
        long.join("\n")
    );
}

#[test]
fn counts_from_fn_to_its_closing_brace() {
    let text = "impl X {\n    pub(crate) async fn a(\n        x: u32,\n    ) -> u32 {\n        x\n    }\n    fn b();\n    fn c() { 1 }\n}\n";
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(fn_name(lines[1]), Some("a"));
    assert_eq!(fn_lines(&lines, 1), Some(5));
    assert_eq!(fn_lines(&lines, 6), None);
    assert_eq!(fn_lines(&lines, 7), Some(1));
    assert_eq!(fn_name("    let f = 1; // fn x"), None);
    assert_eq!(fn_name("pub extern \"C\" fn ffi() {}"), Some("ffi"));
}

/// The top-level module a file of `src` belongs to (`routing` for `src/routing/kv/book.rs`,
/// `tasks` for `src/tasks.rs`), `None` for the crate root and the binaries.
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "bin" | "house")).then(|| name.to_string())
}

/// The lines of `text` that are product code: up to a `#[cfg(test)]` followed by a `mod`.
fn product_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].trim() == "#[cfg(test)]"
                && lines.get(i + 1).is_some_and(|l| {
                    let l = l.trim_start();
                    l.starts_with("mod ") || l.starts_with("pub(crate) mod ")
                })
        })
        .unwrap_or(lines.len());
    lines[..end].to_vec()
}

/// The modules named as `crate::x` on `line` (outside a `//` comment).
fn crate_paths(line: &str) -> impl Iterator<Item = &str> {
    let code = line.split("//").next().unwrap_or("");
    code.match_indices("crate::").filter_map(move |(i, _)| {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            return None;
        }
        let rest = &code[i + "crate::".len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        (end > 0).then(|| &rest[..end])
    })
}

/// For each top-level module of `src`, the other top-level modules its product code names.
fn module_imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let tops: BTreeSet<String> = files.iter().filter_map(|f| top_module(src, f)).collect();
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(from) = top_module(src, &file) else {
            continue;
        };
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for line in product_lines(&text) {
            for to in crate_paths(line).filter(|t| *t != from && tops.contains(*t)) {
                imports
                    .entry(from.clone())
                    .or_default()
                    .insert(to.to_string());
            }
        }
    }
    imports
}

/// `a <-> b` for every pair of top-level modules that import each other.
fn import_loops(imports: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut loops = Vec::new();
    for (a, tos) in imports {
        for b in tos.iter().filter(|b| a < *b) {
            if imports.get(b).is_some_and(|back| back.contains(a)) {
                loops.push(format!("{a} <-> {b}"));
            }
        }
    }
    loops
}

#[test]
fn no_import_loop_between_top_level_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let loops = import_loops(&module_imports(&src));
    assert!(
        loops.is_empty(),
        "top-level modules importing each other (pick one direction, docs/architecture.md \
         \"Module map\"; move the shared type down or pass a trait):\n{}",
        loops.join("\n")
    );
}

#[test]
fn reads_crate_paths_of_product_code_only() {
    let line = "use crate::routing::Booking; let x = crate::metrics::f(); // crate::server";
    assert_eq!(
        crate_paths(line).collect::<Vec<_>>(),
        ["routing", "metrics"]
    );
    assert_eq!(crate_paths("use kvrouter_crate::x;").count(), 0);
    let text = "use crate::a;\n#[cfg(test)]\nmod tests {\n    use crate::b;\n}\n";
    assert_eq!(product_lines(text), ["use crate::a;"]);
    let mut imports = BTreeMap::new();
    imports.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    imports.insert(
        "b".to_string(),
        BTreeSet::from(["a".to_string(), "c".to_string()]),
    );
    assert_eq!(import_loops(&imports), ["a <-> b"]);
}
