//! A recipe: the model, its range table and the whole placement policy, as `qdq tune` chose them. `qdq quantize
//! --recipe` replays it: the policy is written out option by option, so a recipe makes the same model whatever later
//! versions make of the presets.

use std::path::{Path, PathBuf};

use qdq::Policy;
use serde::{Deserialize, Serialize};

use crate::disk::read_text;
use crate::error::{Error, Result};

/// What a recipe holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// The model quantized (the smoothed model when the policy smooths).
    pub model: PathBuf,
    /// Its range table.
    pub ranges: PathBuf,
    pub policy: Policy,
}

impl Recipe {
    /// Reads the recipe at `path`; an error names the file and the key that is wrong.
    pub fn read(path: &Path) -> Result<Recipe> {
        let bad = |reason: String| Error::Input { path: path.to_path_buf(), reason };
        let text = read_text(path, "a recipe of qdq tune (TOML)")?;
        toml::from_str(&text).map_err(|e| bad(format!("not a recipe of qdq tune: {}", e.message())))
    }

    /// The recipe as TOML, after `comment` (lines starting with `# `).
    pub fn to_toml(&self, comment: &str) -> Result<String> {
        let toml = toml::to_string(self).map_err(|e| Error::Internal(format!("cannot write the recipe: {e}")))?;
        let comment: String = comment.lines().map(|l| format!("# {l}\n")).collect();
        Ok(format!("{comment}{toml}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recipe reads back as written, for every preset and a changed policy; a wrong key is named.
    #[test]
    fn a_recipe_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recipe.toml");
        for name in qdq::PRESETS {
            let mut policy = Policy::preset(name).unwrap();
            policy.exclude_nodes.push("/qa_outputs/MatMul".into());
            policy.smooth = None;
            let recipe = Recipe { model: "/m/model.onnx".into(), ranges: "/m/calibration.json".into(), policy };
            let text = recipe.to_toml("qdq tune's choice.\nReplay: qdq quantize --recipe recipe.toml").unwrap();
            assert!(text.starts_with("# qdq tune's choice.\n# Replay:"), "{text}");
            std::fs::write(&path, &text).unwrap();
            assert_eq!(Recipe::read(&path).unwrap(), recipe, "{text}");
        }
        std::fs::write(&path, "model = \"m\"\nranges = \"r\"\n[policy]\npreset = \"cpu\"\n").unwrap();
        let e = Recipe::read(&path).unwrap_err().to_string();
        assert!(e.contains("recipe.toml") && e.contains("missing field"), "{e}");
    }
}
