//! LoRA adapters the mock accepts (`--enable-lora`, `--lora-paths`) and their ids as
//! SGLang derives them: `LoRARef.deterministic_id(name, path)` =
//! `uuid5(NAMESPACE_URL, f"{name}\0{path}").hex` (`lora/lora_registry.py`), parsed as
//! `arg_groups/lora_hook.py` parses `--lora-paths` (`NAME=PATH`, or `PATH` named by
//! itself). The mock has no weights: an adapter only namespaces the cache.

use crate::mock::config::MockArgs;

/// One adapter: public name and `lora_id` (32 hex digits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adapter {
    pub name: String,
    pub id: String,
}

/// The adapters of a server.
#[derive(Debug, Clone, Default)]
pub struct Adapters {
    pub enabled: bool,
    pub list: Vec<Adapter>,
}

/// `LoRARef.deterministic_id`.
pub fn deterministic_id(name: &str, path: &str) -> String {
    uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_URL,
        format!("{name}\0{path}").as_bytes(),
    )
    .simple()
    .to_string()
}

impl Adapters {
    /// Parses `--lora-paths`; LoRA is enabled by `--enable-lora` or any adapter.
    pub fn from_args(args: &MockArgs) -> Result<Adapters, String> {
        let mut list = Vec::new();
        for entry in &args.lora_paths {
            let (name, path) = entry
                .split_once('=')
                .unwrap_or((entry.as_str(), entry.as_str()));
            if name.is_empty() {
                return Err(format!("--lora-paths: empty adapter name in {entry:?}"));
            }
            list.push(Adapter {
                name: name.to_string(),
                id: deterministic_id(name, path),
            });
        }
        Ok(Adapters {
            enabled: args.enable_lora || !list.is_empty(),
            list,
        })
    }

    /// The adapter a request names, or SGLang's error text
    /// (`TokenizerManager._validate_and_resolve_lora`).
    pub fn resolve(&self, lora_path: &str) -> Result<&Adapter, String> {
        if !self.enabled {
            return Err(format!(
                "LoRA adapter '{lora_path}' was requested, but LoRA is not enabled. Please launch the server with --enable-lora flag and preload adapters using --lora-paths or /load_lora_adapter endpoint."
            ));
        }
        self.list.iter().find(|a| a.name == lora_path).ok_or_else(|| {
            let names: Vec<&str> = self.list.iter().map(|a| a.name.as_str()).collect();
            format!(
                "Got LoRA adapter that has never been loaded: {lora_path}\nAll loaded adapters: {names:?}."
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_sglang_uuid5() {
        // python3: uuid.uuid5(uuid.NAMESPACE_URL, "adapterA\0/p/a").hex
        assert_eq!(
            deterministic_id("adapterA", "/p/a"),
            "f5cbc328b3745e08b9f65e43b0bc0d6b"
        );
    }
}
