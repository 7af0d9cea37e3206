//! The `--config` TOML file: the same keys as the long flags (snake_case, KV options under
//! `[kv]`), all optional, checked against the declaration in `options.rs` (unknown keys are
//! rejected so a typo fails at start instead of being silently ignored). [`FileConfig::under`]
//! lays the file beneath the command line: it fills only what no flag or variable set.

use std::path::Path;

use toml::{Table, Value};

use super::{ConfigError, Options};
use crate::config::cli::Cli;

/// Contents of a configuration file, already checked against [`Options`].
#[derive(Debug, Clone, Default)]
pub struct FileConfig {
    table: Table,
}

/// A parse error, with the offending line of `text` when known (type errors do not name the key).
fn file_error(e: toml::de::Error, text: &str) -> ConfigError {
    let message = e.message().trim();
    let line = e
        .span()
        .and_then(|span| {
            let start = text.get(..span.start)?.rfind('\n').map_or(0, |i| i + 1);
            text.get(start..)?.lines().next()
        })
        .map(str::trim)
        .filter(|l| !l.is_empty() && !message.contains(*l));
    ConfigError {
        field: "config".into(),
        message: match line {
            Some(line) => format!("{message} (at `{line}`)"),
            None => message.to_string(),
        },
    }
}

impl FileConfig {
    /// Reads and parses `path`; errors name the file and the offending key.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            field: "config".into(),
            message: format!("cannot read {}: {e}", path.display()),
        })?;
        Self::parse(&text).map_err(|e| ConfigError {
            field: e.field,
            message: format!("{} (in {})", e.message, path.display()),
        })
    }

    /// Parses TOML text (unknown keys and mistyped values are errors naming the key).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let table: Table = toml::from_str(text).map_err(|e| file_error(e, text))?;
        // Checks keys and types against the declaration.
        let _: Options = toml::from_str(text).map_err(|e| file_error(e, text))?;
        Ok(FileConfig { table })
    }

    /// Whether the file sets top-level key `key`.
    pub fn has(&self, key: &str) -> bool {
        self.table.contains_key(key)
    }

    /// The merged options: `cli`'s explicit values, else this file's, else the defaults.
    pub fn under(&self, cli: &Cli) -> Result<Options, ConfigError> {
        let mut merged = Table::try_from(&cli.options).map_err(|e| ConfigError {
            field: "config".into(),
            message: e.to_string(),
        })?;
        overlay(&mut merged, &self.table, cli);
        let mut options: Options = Value::Table(merged)
            .try_into()
            .map_err(|e| file_error(e, ""))?;
        options.config = cli.options.config.clone();
        Ok(options)
    }
}

/// Copies `file` values into `base` where the command line/environment gave none; tables
/// (`[kv]`) are merged key by key (their keys are flag names too).
fn overlay(base: &mut Table, file: &Table, cli: &Cli) {
    for (key, value) in file {
        match (base.get_mut(key), value) {
            (Some(Value::Table(b)), Value::Table(f)) => overlay(b, f, cli),
            _ if cli.is_explicit(key) => {}
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}
