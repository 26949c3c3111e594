//! What a sentence-transformers model folder says about its model (the files sentence-transformers writes beside the
//! transformer): the modules in order (`modules.json`: Transformer -> Pooling -> [Dense] -> [Normalize]), the
//! pooling (`1_Pooling/config.json`) and the longest input (`sentence_bert_config.json`'s `max_seq_length`).
//! The folder is the model file's own, or its parent when the file sits in `onnx/` (the Hugging Face hub layout).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::disk::{parent_dir, read_bounded, read_text};
use crate::error::{Error, Result};
use crate::inputs::pooling::{PoolMode, Pooling};

/// The folder a model file belongs to: its directory, or that directory's parent for a file in `onnx/` (or `onnx/*/`)
/// whose parent holds the model's other files.
pub fn model_folder(model: &Path) -> PathBuf {
    let dir = parent_dir(model);
    let has_files = |d: &Path| {
        ["modules.json", "config.json", "tokenizer.json", "vocab.txt", "sentence_bert_config.json"]
            .iter()
            .any(|f| d.join(f).is_file())
    };
    for up in dir.ancestors().take(3).skip(1) {
        let under_onnx = dir.strip_prefix(up).is_ok_and(|rest| rest.starts_with("onnx"));
        if under_onnx && has_files(up) {
            return up.to_path_buf();
        }
    }
    dir.to_path_buf()
}

/// What the folder says, as far as it says it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FolderConfig {
    /// The folder read.
    pub folder: PathBuf,
    /// The pooling of the Pooling module, and the file it came from.
    pub pooling: Option<(Pooling, PathBuf)>,
    /// A Normalize module follows the pooling.
    pub normalize: bool,
    /// Modules after the transformer that qdq does not compute from token states (Dense, whose weights are not in
    /// an ONNX graph that stops at the token states, and any other but Pooling and Normalize), as `Dense (2_Dense)`.
    pub not_computed: Vec<String>,
    /// `max_seq_length` of sentence_bert_config.json.
    pub max_seq_length: Option<usize>,
    /// The classes config.json names (`id2label`, else `num_labels`), for a classifier's logits.
    pub labels: Option<usize>,
    /// The class of each label name config.json gives (`label2id`, else `id2label` read backwards): string labels
    /// in data files (GLUE's `entailment`) are mapped through it.
    pub label_ids: Option<std::collections::BTreeMap<String, i64>>,
}

/// The files of a model's folder [`FolderConfig::carry_to`] writes beside the models a run writes (the pooling
/// config too, where modules.json puts it).
pub(crate) const CARRIED: [&str; 9] = [
    "config.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "tokenizer.json",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
];

#[derive(Deserialize)]
struct Module {
    #[serde(default)]
    path: String,
    #[serde(rename = "type", default)]
    kind: String,
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
}

#[derive(Deserialize)]
struct SentenceBertConfig {
    /// Absent, null (no limit of its own: the model's), or a number of tokens.
    #[serde(default)]
    max_seq_length: serde_json::Value,
}

/// A JSON file of the folder, or `None` when there is none; an unreadable or malformed one is an error naming it.
fn json<T: serde::de::DeserializeOwned>(path: &Path, expected: &str) -> Result<Option<T>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = read_text(path, expected)?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::Input { path: path.to_path_buf(), reason: format!("{e} (expected {expected})") })
}

impl FolderConfig {
    /// Reads the sentence-transformers files of `folder` (none of them is required), after checking every file a
    /// run carries from it ([`check_carried`]).
    pub fn read(folder: &Path) -> Result<FolderConfig> {
        // The files read below are parsed there, with what each should hold.
        let read_here = ["config.json", "modules.json", "sentence_bert_config.json"];
        for rel in CARRIED {
            check_carried(folder, &folder.join(rel), !read_here.contains(&rel))?;
        }
        let mut cfg = FolderConfig { folder: folder.to_path_buf(), ..Default::default() };
        if let Some(c) = json::<serde_json::Value>(&folder.join("config.json"), "a model's config.json")? {
            let named = c.get("id2label").and_then(|m| m.as_object()).map(serde_json::Map::len);
            cfg.labels = named.or_else(|| c.get("num_labels")?.as_u64().and_then(|n| usize::try_from(n).ok()));
            cfg.label_ids = label_ids(&c);
        }
        let modules_file = folder.join("modules.json");
        let modules: Vec<Module> =
            json(&modules_file, "sentence-transformers' list of modules: [{\"path\": ..., \"type\": ...}, ...]")?
                .unwrap_or_default();
        let kind = |m: &Module| m.kind.rsplit('.').next().unwrap_or_default().to_owned();
        // Without modules.json, the folder sentence-transformers gives its pooling module by convention.
        let pooling_dirs: Vec<PathBuf> = match modules.iter().filter(|m| kind(m) == "Pooling").collect::<Vec<_>>() {
            found if !found.is_empty() => found.iter().map(|m| folder.join(&m.path)).collect(),
            _ if modules.is_empty() => vec![folder.join("1_Pooling")],
            _ => vec![],
        };
        for dir in pooling_dirs {
            let file = dir.join("config.json");
            check_carried(folder, &file, false)?;
            let expected = "sentence-transformers' pooling config: {\"pooling_mode_mean_tokens\": true, ...}";
            if let Some(p) = json::<PoolingConfig>(&file, expected)? {
                cfg.pooling = Some((pooling_of(&p, &file)?, file));
            }
        }
        cfg.normalize = modules.iter().any(|m| kind(m) == "Normalize");
        // The transformer the ONNX graph holds is the module at the folder itself (path "").
        let in_graph = |m: &Module| kind(m) == "Transformer" || m.path.is_empty() || m.path == ".";
        cfg.not_computed = modules
            .iter()
            .filter(|m| !in_graph(m) && !matches!(kind(m).as_str(), "Pooling" | "Normalize"))
            .map(|m| format!("{} ({})", kind(m), m.path))
            .collect();
        cfg.max_seq_length = max_seq_length(folder)?;
        if let Some((p, _)) = &mut cfg.pooling {
            p.normalize = cfg.normalize;
        }
        Ok(cfg)
    }
}

impl FolderConfig {
    /// Writes the folder's sentence-transformers files (modules.json, sentence_bert_config.json,
    /// config_sentence_transformers.json and the pooling's config), the transformer's config.json and its tokenizer
    /// into `dir`, beside the models a run writes there, so that folder is read as this one (the same tokenizer,
    /// pooling and length) and loads where the source loads (sentence-transformers and optimum read config.json);
    /// files already there are left.
    pub fn carry_to(&self, dir: &Path) -> Result<()> {
        // The tokenizer too, where the folder holds it apart from the model (the hub layout's `onnx/`): a file of
        // that name already in `dir` (the run's own tokenizer) is left.
        let mut files: Vec<PathBuf> = CARRIED.iter().map(PathBuf::from).collect();
        if let Some((_, file)) = &self.pooling
            && let Ok(rel) = file.strip_prefix(&self.folder)
        {
            files.push(rel.to_path_buf());
        }
        for rel in files {
            let (from, to) = (self.folder.join(&rel), dir.join(&rel));
            if !from.is_file() || to.exists() || same_dir(&self.folder, dir) {
                continue;
            }
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| Error::Output { path: parent.to_path_buf(), reason: e.to_string() })?;
            }
            crate::disk::write_atomic(&to, &read_bounded(&from)?)?;
        }
        Ok(())
    }
}

/// Label name -> class from a config.json: `label2id`, else `id2label` read backwards (`None` without either, or
/// when they hold no usable entry).
fn label_ids(config: &serde_json::Value) -> Option<std::collections::BTreeMap<String, i64>> {
    let forward = config.get("label2id").and_then(|m| m.as_object()).map(|m| {
        m.iter()
            .filter_map(|(name, id)| Some((name.clone(), id.as_i64()?)))
            .collect::<std::collections::BTreeMap<_, _>>()
    });
    let backward = || {
        config.get("id2label").and_then(|m| m.as_object()).map(|m| {
            m.iter()
                .filter_map(|(id, name)| Some((name.as_str()?.to_owned(), id.parse::<i64>().ok()?)))
                .collect::<std::collections::BTreeMap<_, _>>()
        })
    };
    forward.filter(|m| !m.is_empty()).or_else(backward).filter(|m| !m.is_empty())
}

/// `max_seq_length` of the folder's sentence_bert_config.json: absent or null (said once) is none; a number must be
/// positive.
fn max_seq_length(folder: &Path) -> Result<Option<usize>> {
    let sbert = folder.join("sentence_bert_config.json");
    let expected = "sentence-transformers' {\"max_seq_length\": N, ...}";
    Ok(match json::<SentenceBertConfig>(&sbert, expected)?.map(|c| c.max_seq_length) {
        None => None,
        Some(serde_json::Value::Null) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::info!(
                    "{}: max_seq_length null (no limit of its own): the length comes from the model (--seq-len to \
                     choose)",
                    sbert.display()
                )
            });
            None
        }
        Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
            Some(n) if n > 0 => Some(n),
            _ => {
                return Err(Error::Input {
                    path: sbert,
                    reason: format!("max_seq_length {v}: expected a positive number of tokens (or null)"),
                });
            }
        },
    })
}

/// A file of `folder` a run carries into its outputs, checked before any work: a symbolic link must stay inside the
/// folder (one to a file elsewhere would copy that file's content into the outputs), or be a Hugging Face cache
/// snapshot's link to its own `blobs/`; with `parse`, a `.json` file must be JSON. A file that is not there is fine.
fn check_carried(folder: &Path, file: &Path, parse: bool) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(file) else { return Ok(()) };
    if meta.file_type().is_symlink() {
        let inside = match (file.canonicalize(), folder.canonicalize()) {
            (Ok(target), Ok(folder)) => {
                (target.starts_with(&folder) || hub_blob(&folder, &target)).then_some(()).ok_or(target)
            }
            (Err(_), _) | (_, Err(_)) => Err(PathBuf::from("nothing (a broken link)")),
        };
        if let Err(target) = inside {
            return Err(Error::Input {
                path: file.to_path_buf(),
                reason: format!(
                    "a symbolic link to {}, outside the model's folder {}: qdq copies a folder's own files into its \
                     outputs; put the file itself there",
                    target.display(),
                    folder.display()
                ),
            });
        }
    }
    if parse && file.extension().is_some_and(|e| e == "json") {
        json::<serde::de::IgnoredAny>(file, "JSON")?;
    }
    Ok(())
}

/// Whether `target` is a blob of the Hugging Face cache `folder` is a snapshot of (`models--x/snapshots/REV` links
/// each file to `models--x/blobs/HASH`).
fn hub_blob(folder: &Path, target: &Path) -> bool {
    let repo = folder.ancestors().find(|a| a.file_name().is_some_and(|n| n == "snapshots")).and_then(Path::parent);
    repo.is_some_and(|r| target.parent() == Some(&r.join("blobs")))
}

/// The Python library (and class) that serves a task's models from a folder: each task room says its own
/// (`TaskRoom::loader`), results.json keeps it (`loader`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "library", rename_all = "kebab-case")]
pub enum Loader {
    /// `SentenceTransformer(DIR, backend="onnx", ...)`.
    SentenceTransformers,
    /// optimum's ORTModel `class` (`ORTModelForQuestionAnswering`, ...).
    Optimum { class: String },
}

/// How a folder holding `model_file` beside the files [`FolderConfig::carry_to`] writes is loaded by `loader`, one
/// sentence each; without a config.json there (transformers' loaders need its `model_type`), for sentence-transformers
/// what is missing.
pub fn loaders(dir: &Path, model_file: &str, loader: Option<&Loader>) -> Vec<String> {
    let Some(loader) = loader else { return vec![] };
    if !dir.join("config.json").is_file() {
        return match loader {
            Loader::SentenceTransformers => vec![
                "Not loadable by sentence-transformers or optimum as it is: the source folder has no config.json, which \
                 they read first (the model's `model_type`); with one added here, SentenceTransformer(DIR, \
                 backend=\"onnx\", model_kwargs={\"file_name\": \"model_qdq.onnx\"}) loads it"
                    .to_owned(),
            ],
            Loader::Optimum { .. } => vec![],
        };
    }
    let d = dir.display().to_string().replace('"', "\\\"");
    vec![match loader {
        Loader::SentenceTransformers => format!(
            "Load it with sentence-transformers: SentenceTransformer(\"{d}\", backend=\"onnx\", \
             model_kwargs={{\"file_name\": \"{model_file}\"}})"
        ),
        Loader::Optimum { class } => format!(
            "Load it with optimum: from optimum.onnxruntime import {class}; {class}.from_pretrained(\"{d}\", \
             file_name=\"{model_file}\")"
        ),
    }]
}

/// [`FolderConfig::carry_to`] for the folder of the model read (`from`), into the directory of the model written.
pub fn carry_folder(from: &Path, to: &Path) -> Result<()> {
    FolderConfig::read(&model_folder(from))?.carry_to(parent_dir(to))
}

/// Whether two paths name one directory.
fn same_dir(a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// The modes a pooling config turns on, in the order sentence-transformers concatenates them.
fn pooling_of(p: &PoolingConfig, file: &Path) -> Result<Pooling> {
    let modes: Vec<PoolMode> = [
        (p.pooling_mode_cls_token, PoolMode::Cls),
        (p.pooling_mode_max_tokens, PoolMode::Max),
        (p.pooling_mode_mean_tokens, PoolMode::Mean),
        (p.pooling_mode_mean_sqrt_len_tokens, PoolMode::MeanSqrtLen),
        (p.pooling_mode_weightedmean_tokens, PoolMode::WeightedMean),
        (p.pooling_mode_lasttoken, PoolMode::LastToken),
    ]
    .into_iter()
    .filter_map(|(on, m)| on.then_some(m))
    .collect();
    if modes.is_empty() {
        return Err(Error::Input {
            path: file.to_path_buf(),
            reason: "turns on no pooling mode (pooling_mode_mean_tokens, pooling_mode_cls_token, ...)".into(),
        });
    }
    Ok(Pooling { modes, normalize: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, file: &str, text: &str) {
        let p = dir.join(file);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// With a config.json the loaders' lines name the class and the folder; without one, sentence-transformers' says
    /// what is missing and optimum's none; a task no library serves gets none.
    #[test]
    fn the_loaders_follow_the_task_and_need_a_config() {
        let d = tempfile::tempdir().unwrap();
        let optimum = |class: &str| Some(Loader::Optimum { class: class.to_owned() });
        let (qa, st) = (optimum("ORTModelForQuestionAnswering"), Some(Loader::SentenceTransformers));
        assert!(loaders(d.path(), "model_qdq.onnx", qa.as_ref()).is_empty());
        assert!(loaders(d.path(), "model_qdq.onnx", st.as_ref())[0].contains("has no config.json"));
        write(d.path(), "config.json", r#"{"model_type": "bert"}"#);
        let lines = loaders(d.path(), "model_qdq.onnx", qa.as_ref());
        assert!(
            lines[0].contains("ORTModelForQuestionAnswering.from_pretrained(") && lines[0].contains("model_qdq.onnx")
        );
        let lines = loaders(d.path(), "m.onnx", optimum("ORTModelForSequenceClassification").as_ref());
        assert!(lines[0].contains("ORTModelForSequenceClassification") && lines[0].contains("m.onnx"));
        let lines = loaders(d.path(), "model_qdq.onnx", st.as_ref());
        assert!(lines[0].starts_with("Load it with sentence-transformers: SentenceTransformer(\""), "{lines:?}");
        assert!(loaders(d.path(), "model_qdq.onnx", None).is_empty());
    }

    #[test]
    fn a_sentence_transformers_folder_says_pooling_normalisation_and_length() {
        let d = tempfile::tempdir().unwrap();
        let modules = r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]"#;
        write(d.path(), "modules.json", modules);
        write(
            d.path(),
            "1_Pooling/config.json",
            r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#,
        );
        write(d.path(), "sentence_bert_config.json", r#"{"max_seq_length": 256, "do_lower_case": false}"#);
        let cfg = FolderConfig::read(d.path()).unwrap();
        let (pooling, file) = cfg.pooling.unwrap();
        assert_eq!(pooling, Pooling { modes: vec![PoolMode::Cls], normalize: true });
        assert_eq!(file, d.path().join("1_Pooling/config.json"));
        assert_eq!(cfg.max_seq_length, Some(256));
        assert!(cfg.not_computed.is_empty());
    }

    #[test]
    fn dense_modules_and_bad_files_are_named() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "modules.json",
            r#"[{"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]"#,
        );
        write(d.path(), "1_Pooling/config.json", r#"{"pooling_mode_mean_tokens": true}"#);
        assert_eq!(FolderConfig::read(d.path()).unwrap().not_computed, ["Dense (2_Dense)"]);
        write(d.path(), "1_Pooling/config.json", r#"{"pooling_mode_mean_tokens": false}"#);
        let e = FolderConfig::read(d.path()).unwrap_err().to_string();
        assert!(e.contains("1_Pooling/config.json") && e.contains("no pooling mode"), "{e}");
        write(d.path(), "modules.json", "[{");
        let e = FolderConfig::read(d.path()).unwrap_err().to_string();
        assert!(e.contains("modules.json") && e.contains("expected sentence-transformers' list of modules"), "{e}");
    }

    #[test]
    fn a_model_in_onnx_belongs_to_the_folder_above() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "onnx/model.onnx", "");
        write(d.path(), "tokenizer.json", "{}");
        assert_eq!(model_folder(&d.path().join("onnx/model.onnx")), d.path());
        // A folder of its own keeps its model; so does an `onnx/` whose parent holds nothing of the model's.
        let e = tempfile::tempdir().unwrap();
        write(e.path(), "onnx/model.onnx", "");
        assert_eq!(model_folder(&e.path().join("onnx/model.onnx")), e.path().join("onnx"));
        assert_eq!(model_folder(&d.path().join("tokenizer.json")), d.path());
    }
}
