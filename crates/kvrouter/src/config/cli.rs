//! The command line and `KVROUTER_*` environment as one source: [`Cli`] is the parsed
//! [`Options`] plus the names of the options given explicitly (flag or variable), so that the
//! `--config` file fills only the others. The options themselves are declared in `options.rs`.

use std::collections::BTreeSet;
use std::path::Path;

use clap::parser::ValueSource;
use clap::{ArgMatches, Command, CommandFactory, FromArgMatches, Parser};

use super::Options;

/// Parsed `router` flags and environment (`Cli::parse()`, `Cli::try_parse_from(args)`).
/// `Cli::default()` is "nothing given": every option at its declared default.
#[derive(Debug, Clone, Default)]
pub struct Cli {
    /// Flag/environment values, declared defaults elsewhere.
    pub options: Options,
    /// Option names (snake_case, as in the file) set by a flag or an environment variable.
    explicit: BTreeSet<String>,
    /// The accepted-and-ignored sgl-router flags given (compat.rs), in table order.
    pub ignored: Vec<&'static super::compat::Ignored>,
}

impl Cli {
    /// The `--config` file to read, if any.
    pub fn config_path(&self) -> Option<&Path> {
        self.options.config.as_deref()
    }

    /// Whether `name` (snake_case) was given on the command line or in the environment.
    pub fn is_explicit(&self, name: &str) -> bool {
        self.explicit.contains(name)
    }
}

fn explicit_ids(m: &ArgMatches) -> impl Iterator<Item = String> + '_ {
    m.ids()
        .filter(|id| {
            matches!(
                m.value_source(id.as_str()),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        })
        .map(|id| id.as_str().to_string())
}

impl CommandFactory for Cli {
    fn command() -> Command {
        super::compat::with_ignored(Options::command())
    }
    fn command_for_update() -> Command {
        super::compat::with_ignored(Options::command_for_update())
    }
}

impl FromArgMatches for Cli {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(Cli {
            options: Options::from_arg_matches(m)?,
            explicit: explicit_ids(m).collect(),
            ignored: super::compat::given(m),
        })
    }
    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.options.update_from_arg_matches(m)?;
        self.explicit.extend(explicit_ids(m));
        self.ignored.extend(super::compat::given(m));
        Ok(())
    }
}

impl Parser for Cli {}
