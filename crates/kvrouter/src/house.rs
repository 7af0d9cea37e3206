//! House rule of issue 27 checked on the sources: no function in this crate's `src/` (tests
//! included) is over [`MAX_FN_LINES`] lines, counted from the line with `fn name` to its
//! closing brace at the same indentation (the layout rustfmt gives).

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
