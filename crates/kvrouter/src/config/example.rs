//! The annotated example configuration file (`config/router.example.toml`), rendered from the
//! option declaration (`options.rs`, `kv.rs`): every key with its help text and its declared
//! default, so the committed file cannot drift from the code (a unit test compares them;
//! `KVROUTER_WRITE_EXAMPLE_CONFIG=1 cargo test -p kvrouter --lib example` rewrites it;
//! `router --print-example-config` prints it).

use clap::{Arg, Args, Command, CommandFactory};
use toml::{Table, Value};

use super::{KvOptions, Options};

const HEADER: &str = "\
# kvrouter `router` configuration (pass with `--config router.toml`).
#
# Generated from the option declaration (crates/kvrouter/src/config/options.rs and kv.rs);
# print with `router --print-example-config`; regenerate this file with
# `KVROUTER_WRITE_EXAMPLE_CONFIG=1 cargo test -p kvrouter --lib example`.
# Every value below is the built-in default; commented keys have no default.
#
# Every key is optional and is also a command-line flag (`page_size` -> `--page-size`) and an
# environment variable (`KVROUTER_PAGE_SIZE`). Precedence: command line > environment > this
# file > built-in default. Unknown keys are rejected at start, and every invalid value fails
# with a message naming the key.
";

/// Options that exist only on the command line (not file keys).
const NOT_IN_FILE: &[&str] = &["config", "print_example_config", "help", "version"];

fn wrap(text: &str, out: &mut String) {
    for paragraph in text.lines() {
        let mut line = String::from("#");
        for word in paragraph.split_whitespace() {
            if line.len() > 1 && line.len() + 1 + word.len() > 95 {
                out.push_str(&line);
                out.push('\n');
                line = String::from("#");
            }
            line.push(' ');
            line.push_str(word);
        }
        out.push_str(&line);
        out.push('\n');
    }
}

fn render_args<'a>(args: impl Iterator<Item = &'a Arg>, defaults: &Table, out: &mut String) {
    for arg in args {
        let key = arg.get_id().as_str();
        if NOT_IN_FILE.contains(&key) {
            continue;
        }
        out.push('\n');
        if let Some(help) = arg.get_long_help().or(arg.get_help()) {
            wrap(&help.to_string(), out);
        }
        match defaults.get(key) {
            Some(Value::Array(a)) if a.is_empty() => out.push_str(&format!("# {key} = []\n")),
            Some(v) => out.push_str(&format!("{key} = {v}\n")),
            None => out.push_str(&format!("# {key} = \"...\"\n")),
        }
    }
}

/// The example configuration file, from the declaration.
pub fn example_config() -> String {
    let defaults = Table::try_from(Options::default()).unwrap_or_default();
    let kv_defaults = match defaults.get("kv") {
        Some(Value::Table(t)) => t.clone(),
        _ => Table::new(),
    };
    let kv_cmd = KvOptions::augment_args(Command::new("kv"));
    let is_kv = |a: &&Arg| kv_cmd.get_arguments().any(|k| k.get_id() == a.get_id());
    let cmd = Options::command();
    let mut out = String::from(HEADER);
    render_args(
        cmd.get_arguments().filter(|a| !is_kv(a)),
        &defaults,
        &mut out,
    );
    out.push_str(
        "\n# KV mode (--mode kv), see docs/kv-routing.md. Same names as the flags.\n[kv]\n",
    );
    render_args(kv_cmd.get_arguments(), &kv_defaults, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Cli, Config, FileConfig};

    const COMMITTED: &str = include_str!("../../../../config/router.example.toml");

    #[test]
    fn example_config_matches_the_declaration() {
        let rendered = example_config();
        if std::env::var_os("KVROUTER_WRITE_EXAMPLE_CONFIG").is_some() {
            let path = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../config/router.example.toml"
            );
            std::fs::write(path, &rendered).expect("write example config");
            return;
        }
        assert!(
            rendered == COMMITTED,
            "config/router.example.toml is stale (keys or defaults differ from the code); \
             regenerate with KVROUTER_WRITE_EXAMPLE_CONFIG=1 cargo test -p kvrouter --lib example"
        );
    }

    #[test]
    fn example_config_parses_to_the_defaults() {
        // Every key is known (unknown keys are rejected) and every value is the default.
        let file = FileConfig::parse(COMMITTED).expect("example config parses");
        let merged = file.under(&Cli::default()).expect("merge");
        assert_eq!(merged, Options::default());
        let c = Config::from_sources(Cli::default(), file).expect("valid");
        assert_eq!(format!("{c:?}"), format!("{:?}", Config::default()));
        // Commented keys are known options too.
        let uncommented: String = COMMITTED
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest)
                    if rest.split_once(" = ").is_some_and(|(k, _)| {
                        k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                    }) =>
                {
                    rest
                }
                _ => l,
            })
            .map(|l| format!("{l}\n"))
            .collect();
        FileConfig::parse(&uncommented).expect("commented keys are known options");
    }
}
