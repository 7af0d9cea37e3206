//! The workload presets of `workloads/presets.toml`, embedded at build time: one table that the
//! demo (`loadgen demo`) and the Python harnesses (scripts/compare, scripts/replicas,
//! scripts/faults: `kvcompare/presets.py`) read, so a workload's shape is written once.
//!
//! A preset is a loadgen subcommand and its flags in order; [`loadgen_config`] parses it with
//! loadgen's own command line, so the demo runs exactly what `loadgen WORKLOAD ARGS...` would.
//! The harness tables beside the presets (`[compare.*]`, `[pressure.*]`, ...) are the Python
//! harnesses'; of them this module reads `[demo.*]` only.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use clap::Parser;
use serde::Deserialize;

use crate::loadgen::cli::Cli;
use crate::loadgen::LoadgenConfig;

/// The file's text, as the binary was built with it.
pub const TABLE: &str = include_str!("../../../workloads/presets.toml");

/// The part of the file this crate reads (serde ignores the Python harnesses' tables).
#[derive(Debug, Clone, Deserialize)]
pub struct PresetTable {
    pub preset: BTreeMap<String, Preset>,
    pub demo: BTreeMap<String, DemoPreset>,
}

/// `[preset.NAME]`: a loadgen subcommand and its flags; `{key}` arguments are filled by the
/// caller, else from `defaults`.
#[derive(Debug, Clone, Deserialize)]
pub struct Preset {
    pub workload: String,
    pub args: Vec<String>,
    #[serde(default)]
    pub defaults: BTreeMap<String, String>,
}

/// `[demo.NAME]`: the demo's fleet, run settings and the two presets it runs (GRPO, then agent).
#[derive(Debug, Clone, Deserialize)]
pub struct DemoPreset {
    pub workers: usize,
    pub worker_kv_tokens: usize,
    pub speedup: f64,
    pub seed: u64,
    pub concurrency: u32,
    pub max_duration_secs: f64,
    pub grpo: String,
    pub agent: String,
}

/// The embedded table, parsed.
pub fn table() -> anyhow::Result<PresetTable> {
    toml::from_str(TABLE).context("workloads/presets.toml")
}

impl PresetTable {
    pub fn preset(&self, name: &str) -> anyhow::Result<&Preset> {
        self.preset
            .get(name)
            .with_context(|| format!("workloads/presets.toml has no [preset.{name}]"))
    }

    pub fn demo(&self, name: &str) -> anyhow::Result<&DemoPreset> {
        self.demo
            .get(name)
            .with_context(|| format!("workloads/presets.toml has no [demo.{name}]"))
    }

    /// Preset `name` as loadgen's argv after the program name: the subcommand, then its flags
    /// with each `{key}` filled from `values`, else from the preset's defaults.
    pub fn argv(&self, name: &str, values: &[(&str, &str)]) -> anyhow::Result<Vec<String>> {
        let p = self.preset(name)?;
        let mut out = vec![p.workload.clone()];
        for arg in &p.args {
            out.push(fill(name, arg, p, values)?);
        }
        Ok(out)
    }

    /// Preset `name` parsed by loadgen's command line (URL and the other common options at their
    /// defaults unless the preset sets them).
    pub fn loadgen_config(&self, name: &str) -> anyhow::Result<LoadgenConfig> {
        let argv = self.argv(name, &[])?;
        let cli = Cli::try_parse_from(std::iter::once("loadgen".to_string()).chain(argv))
            .with_context(|| format!("preset {name}: not a loadgen command line"))?;
        Ok(cli.config())
    }
}

/// `arg` with every `{key}` replaced.
fn fill(name: &str, arg: &str, p: &Preset, values: &[(&str, &str)]) -> anyhow::Result<String> {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        let Some(len) = rest[open..].find('}') else {
            bail!("preset {name}: unclosed `{{` in {arg:?}");
        };
        let key = &rest[open + 1..open + len];
        let value = values
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
            .or_else(|| p.defaults.get(key).map(String::as_str))
            .with_context(|| format!("preset {name}: no value for {{{key}}}"))?;
        out.push_str(&rest[..open]);
        out.push_str(value);
        rest = &rest[open + len + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::Workload;

    #[test]
    fn every_preset_is_a_loadgen_command_line() {
        let t = table().unwrap();
        assert!(t.preset.len() >= 10);
        let fill: Vec<(&str, &str)> = [
            ("trace", "t.jsonl"),
            ("max_requests", "40"),
            ("rate", "5"),
            ("requests", "60"),
            ("url", "http://127.0.0.1:1"),
            ("speedup", "4"),
            ("json", "s.json"),
            ("records", "r.jsonl"),
        ]
        .into();
        for name in t.preset.keys() {
            let argv = t.argv(name, &fill).unwrap();
            assert!(argv.iter().all(|a| !a.contains('{')), "{name}: {argv:?}");
            let cli = Cli::try_parse_from(std::iter::once("loadgen".to_string()).chain(argv));
            let cfg = cli.unwrap_or_else(|e| panic!("{name}: {e}")).config();
            assert!(cfg.validate().is_ok(), "{name}");
        }
    }

    #[test]
    fn placeholders_take_values_then_defaults_and_are_never_left_unfilled() {
        let t = table().unwrap();
        let argv = t.argv("pressure-agent", &[("sessions", "64")]).unwrap();
        assert_eq!(argv[..3], ["agent", "--sessions", "64"]);
        assert_eq!(argv.last().unwrap(), "64");
        let argv = t.argv("pressure-agent", &[]).unwrap();
        assert_eq!(argv[..3], ["agent", "--sessions", "128"]);
        let err = t.argv("trace-quick", &[]).unwrap_err().to_string();
        assert!(err.contains("{trace}"), "{err}");
        assert!(t.loadgen_config("no-such-preset").is_err());
    }

    #[test]
    fn the_demo_presets_parse_into_its_workloads() {
        let t = table().unwrap();
        let c = t.loadgen_config("grpo-demo").unwrap();
        assert!(matches!(c.workload, Workload::Grpo(_)));
        assert_eq!(c.max_new_tokens, Some(64));
        let c = t.loadgen_config("agent-tiny").unwrap();
        assert!(matches!(c.workload, Workload::Agent(_)));
        assert_eq!(c.max_new_tokens, Some(4));
    }
}
