//! A command's inputs and outputs checked against each other before any work: no output is one of the files the
//! command reads (by path after symlinks, or by identity: a hard link), no output directory is an input model's
//! folder (which would then load the run's model instead of its own) or holds an input under a name the run writes
//! there. Each refusal is one usage error naming both paths. Past the checks every input file is protected
//! ([`files::protect`]): a write that would still reach one fails before a byte is written.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::inputs::folder::model_folder;

/// The files a command writes into its output directory (`--out DIR`), by any command: an input of that name there
/// is refused up front. Files carried from a model's folder (config.json, the tokenizer) are never written over an
/// existing file, so they are not listed.
pub const RUN_DIR_FILES: [&str; 24] = [
    "model_qdq.onnx",
    "model_qdq.onnx.data",
    "model_smoothed.onnx",
    "model_rounded.onnx",
    "model_int8_optimized.onnx",
    "results.json",
    "report.md",
    "predictions_fp32.json",
    "predictions_int8.json",
    "calibration.json",
    "calibration.flatbuffers",
    "calibration.cache",
    "calib_state.json",
    "recipe.toml",
    "ranges_tuned.json",
    "tune.json",
    "tune.md",
    "debug.json",
    "debug.md",
    "sqnr.svg",
    "histograms.svg",
    "curve.svg",
    "texts.txt",
    files::INCOMPLETE,
];

/// Largest model file whose graph is read to find its external data files (a model that keeps its weights apart
/// is a small file; a large one holds them itself).
const EXTERNAL_DATA_SCAN_BYTES: u64 = 64 << 20;

/// What a command reads and writes, named by flag.
#[derive(Debug, Default)]
pub struct InOut {
    inputs: Vec<(String, PathBuf)>,
    /// The folders input models are read from, with the flag.
    model_folders: Vec<(String, PathBuf)>,
    files: Vec<(String, PathBuf)>,
    /// Output directories, and whether the command writes a model into them.
    dirs: Vec<(String, PathBuf, bool)>,
}

impl InOut {
    pub fn new() -> InOut {
        InOut::default()
    }

    /// A file or folder the command reads (`None`: the flag was not given).
    pub fn input(mut self, flag: &str, path: Option<&Path>) -> InOut {
        if let Some(p) = path {
            self.inputs.push((flag.to_owned(), p.to_path_buf()));
        }
        self
    }

    /// A model file the command reads (resolved from a folder by [`crate::model::resolve_model`]), with its
    /// external data files, and its folder with the files a run reads from it (tokenizer, configs).
    pub fn model(mut self, flag: &str, path: &Path) -> InOut {
        self.inputs.push((flag.to_owned(), path.to_path_buf()));
        let folder = model_folder(path);
        for dir in [crate::disk::parent_dir(path).to_path_buf(), folder.clone()] {
            for name in crate::inputs::folder::CARRIED {
                if dir.join(name).is_file() {
                    self.inputs.push((format!("the {name} of {flag}"), dir.join(name)));
                }
            }
        }
        let small = std::fs::metadata(path).is_ok_and(|m| m.len() <= EXTERNAL_DATA_SCAN_BYTES);
        if small && let Ok(m) = onnx_ir::Model::load_graph_only(path) {
            let what = format!("the external data of {flag}");
            self.inputs.extend(m.external_files().map(|f| (what.clone(), f.to_path_buf())));
        }
        self.model_folders.push((flag.to_owned(), folder));
        self
    }

    /// The tokenizer and the retrieval corpus `cfg` reads.
    pub fn data(self, cfg: &crate::inputs::config::DataConfig) -> InOut {
        let tokenizer = if cfg.tokenizer_json.is_some() { "--token" } else { "--vocab" };
        self.input(tokenizer, Some(cfg.tokenizer_source())).input("--corpus", cfg.corpus.as_deref())
    }

    /// A file the command writes.
    pub fn out_file(mut self, flag: &str, path: &Path) -> InOut {
        self.files.push((flag.to_owned(), path.to_path_buf()));
        self
    }

    /// A directory the command writes its files into ([`RUN_DIR_FILES`]), a model among them: it must not be an input
    /// model's folder, which would then load that model.
    pub fn out_dir(mut self, flag: &str, path: &Path) -> InOut {
        self.dirs.push((flag.to_owned(), path.to_path_buf(), true));
        self
    }

    /// A directory the command writes reports into, no model (`qdq debug`): an input model's folder is fine.
    pub fn report_dir(mut self, flag: &str, path: &Path) -> InOut {
        self.dirs.push((flag.to_owned(), path.to_path_buf(), false));
        self
    }

    /// The checks (the first refusal is the error), then every input file protected for the rest of the run.
    pub fn check(self) -> Result<()> {
        let refuse = |out_flag: &str, out: &Path, in_flag: &str, input: &Path, why: &str| {
            Err(Error::Usage(format!(
                "{out_flag} {} {why} {in_flag} {}: qdq never writes over its inputs; give another {}",
                out.display(),
                input.display(),
                if why.contains("folder") { "directory" } else { "path" }
            )))
        };
        for (out_flag, out) in &self.files {
            for (in_flag, input) in &self.inputs {
                if files::same_file(out, input) {
                    return refuse(out_flag, out, in_flag, input, "is the file of");
                }
            }
        }
        for (out_flag, dir, model) in &self.dirs {
            for (in_flag, folder) in self.model_folders.iter().filter(|_| *model) {
                if files::same_file(dir, folder) {
                    return refuse(out_flag, dir, in_flag, folder, "is the model folder of");
                }
            }
            for name in RUN_DIR_FILES {
                for (in_flag, input) in &self.inputs {
                    if files::same_file(&dir.join(name), input) {
                        return refuse(out_flag, &dir.join(name), in_flag, input, "would be written over the file of");
                    }
                }
            }
        }
        for (flag, input) in &self.inputs {
            files::protect(input, flag);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(r: Result<()>) -> String {
        match r {
            Err(Error::Usage(m)) => m,
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn outputs_that_are_inputs_are_refused_naming_both() {
        let d = tempfile::tempdir().unwrap();
        let dev = d.path().join("dev.json");
        std::fs::write(&dev, "{}").unwrap();
        let linked = d.path().join("hard.json");
        std::fs::hard_link(&dev, &linked).unwrap();
        let m = usage(InOut::new().input("--dataset", Some(&dev)).out_file("--out", &linked).check());
        assert!(m.contains("--out") && m.contains("hard.json") && m.contains("--dataset") && m.contains("dev.json"));
        // A file of the name a run writes into its directory.
        let table = d.path().join("calibration.json");
        std::fs::write(&table, "{}").unwrap();
        let m = usage(InOut::new().input("--ranges", Some(&table)).out_dir("--out", d.path()).check());
        assert!(m.contains("--ranges") && m.contains("calibration.json"), "{m}");
        // Other names in the same directory are fine.
        InOut::new().input("--dataset", Some(&dev)).out_dir("--out", d.path()).check().unwrap();
        files::unprotect_all();
    }

    #[test]
    fn a_model_folder_is_not_an_output_directory() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("onnx")).unwrap();
        let model = d.path().join("onnx/model.onnx");
        std::fs::write(&model, "not read").unwrap();
        std::fs::write(d.path().join("config.json"), "{}").unwrap();
        let m = usage(InOut::new().model("--model", &model).out_dir("--out", d.path()).check());
        assert!(m.contains("model folder of --model"), "{m}");
        // Beside it, or below it, the folder still loads its own model.
        InOut::new().model("--model", &model).out_dir("--out", &d.path().join("int8")).check().unwrap();
        // Reports beside a model are fine.
        InOut::new().model("--qdq", &model).report_dir("--out", d.path()).check().unwrap();
        // The files read from its folder are inputs too.
        let m = usage(InOut::new().model("--model", &model).out_file("--out", &d.path().join("config.json")).check());
        assert!(m.contains("the config.json of --model"), "{m}");
        files::unprotect_all();
    }
}
