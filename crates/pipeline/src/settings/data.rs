//! How text becomes model inputs: tokenizer, window sizes, input and output names, padding; checked against the
//! model into a [`DataConfig`] before any work.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use squad::{FeatureConfig, Padding};

use crate::disk::parent_dir;
use crate::error::{Error, Result};
use crate::inputs::config::DataConfig;
use crate::inputs::folder::{FolderConfig, model_folder};
use crate::inputs::pooling::Pooling;
use crate::inputs::roles::IoNames;
use crate::inputs::shape::{DeclaredShape, symbolic_dims};

/// How text becomes model inputs.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "Model and data"))]
pub struct DataSettings {
    /// WordPiece vocabulary of the model
    ///
    /// Default: the model directory's tokenizer.json (as --token) or vocab.txt, else squad/vocab.txt.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub vocab: Option<PathBuf>,
    /// A Hugging Face tokenizer.json instead of --vocab
    ///
    /// The tokenizer saved with the model; its own lower-casing applies. Default: WordPiece built from --vocab.
    #[cfg_attr(feature = "cli", arg(long = "token", value_name = "FILE"))]
    pub tokenizer_json: Option<PathBuf>,
    /// The vocabulary is cased: do not lower-case text
    #[cfg_attr(feature = "cli", arg(long = "cased", action = clap::ArgAction::SetFalse, hide_short_help = true))]
    pub lowercase: bool,
    /// SQuAD version of the dataset: 1.1 or 2.0
    ///
    /// `--version 1.1|2.0` is the seed scripts' spelling of it; `--version` without a value prints qdq's version.
    #[cfg_attr(
        feature = "cli",
        arg(
            long = "squad-version",
            alias = "version",
            default_value = "1.1",
            value_name = "VERSION",
            value_parser = crate::settings::parsers::choice::<SquadVersion>(&["1.1", "2.0"]),
            hide_short_help = true
        )
    )]
    pub version: SquadVersion,
    /// Tokens per feature [default: the model's, else 384]
    ///
    /// The query, the context window and 3 special tokens. Default: the model's own when its inputs declare a fixed
    /// one (e.g. [batch, 256]; every batch is then padded to it), else 384, or fewer when the model's
    /// position-embedding table has fewer rows (a model trained on 128 positions gets 128).
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub seq_len: Option<usize>,
    /// Longest query in tokens [default: 64]
    ///
    /// Longer questions are truncated. Default: 64, or half the sequence length when that is shorter (32 for
    /// --seq-len 64).
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", hide_short_help = true))]
    pub query_len: Option<usize>,
    /// Tokens between window starts over a long context [default: 128]
    ///
    /// Default: 128, or half the window when the window (--seq-len - --query-len - 3) is not longer than 128, so
    /// windows still overlap.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", hide_short_help = true))]
    pub doc_stride: Option<usize>,
    /// Model input/output names: auto, hf, nvidia, or ROLE=NAME,...
    ///
    /// auto: found in the graph and printed. Token ids feed the word-embedding Gather, segment ids the small one (or
    /// a OneHot of depth <= 16, as TF exports look up token types), position ids (if an input) the position table;
    /// the mask is the other integer input; an input the logits do not depend on, such as a `unique_ids` copied to
    /// an output, is fed zeros. Outputs: named start / end, else the two parts of one Split (or Gather / Slice at 0
    /// and 1) of the QA head, else the only two outputs in order, else one [batch, seq, 2] output holding start and
    /// end on its last axis.
    /// hf: input_ids, attention_mask, token_type_ids -> start_logits, end_logits.
    /// nvidia: input_ids, input_mask, segment_ids -> output_start_logits, output_end_logits.
    /// Roles: `ids=input.1,mask=input.2,segment=input.3,start=out0,end=out1` (roles left out are found; `segment=`
    /// means none, likewise `position=`; start and end naming one output: stacked), `logits=` for a classifier.
    #[cfg_attr(feature = "cli", arg(long, default_value = "auto", value_name = "NAMES", hide_short_help = true))]
    pub io_names: IoNames,
    /// Use the tokenizer even when its vocabulary is much smaller than the model's word embedding
    ///
    /// A vocabulary under 90 % of the embedding's rows is usually another model's (every answer wrong, F1 near 0),
    /// so it is refused, naming both sizes; a vocabulary with ids past the table is refused even so.
    #[cfg_attr(feature = "cli", arg(long, hide_short_help = true))]
    pub force: bool,
    /// Pad every batch to --seq-len, not to its longest feature
    ///
    /// Static shapes, e.g. for TensorRT engines; implied when the model's inputs declare a fixed sequence length.
    #[cfg_attr(feature = "cli", arg(long))]
    pub pad_to_max: bool,
    /// How an embedding model's token states become one vector: mean, cls, max (a+b concatenates)
    ///
    /// For a model whose output is the token states (`last_hidden_state`, `token_embeddings`). Default: the
    /// model folder's 1_Pooling/config.json (sentence-transformers), else mean. Also mean-sqrt-len, weighted-mean,
    /// last-token.
    #[cfg_attr(feature = "cli", arg(long, value_name = "MODE", hide_short_help = true))]
    pub pooling: Option<Pooling>,
    /// Documents the --dataset queries retrieve among (JSONL: {"id", "text", "title"})
    ///
    /// With queries in JSONL naming their relevant documents ({"text": ..., "relevant": [ids]} or {id: grade}), an
    /// embedding model is scored on retrieval (MRR@10, nDCG@10, Recall@k), FP32 against INT8 query by query. A
    /// SQuAD --dataset needs none: each question retrieves its own paragraph among the file's.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", hide_short_help = true))]
    pub corpus: Option<PathBuf>,
}

/// The sequence length every feature gets when none is asked for and the model does not fix or limit one.
pub const DEFAULT_SEQ_LEN: usize = 384;
/// The longest query when none is asked for (at most half the sequence length).
pub const DEFAULT_QUERY_LEN: usize = 64;
/// The step between windows when none is asked for (at most half the window when the window is not longer).
pub const DEFAULT_DOC_STRIDE: usize = 128;

impl DataSettings {
    /// Whether `--squad-version 2.0` asks for SQuAD v2.0 scoring (unanswerable questions).
    pub fn version_2(&self) -> bool {
        self.version == SquadVersion::V2_0
    }

    /// The checked data configuration (window sizes validated) for the model at `model` (a file; see
    /// [`crate::model::resolve_model`]): without --vocab and --token, the tokenizer is the one beside the model
    /// (tokenizer.json, else vocab.txt), else squad/vocab.txt.
    pub fn config(&self, model: &Path) -> Result<DataConfig> {
        // Only the graph is read here; a file that cannot be read is reported by whatever loads it next.
        let (declared, positions, symbolic_dims) = match onnx_ir::Model::load_graph_only(model) {
            Ok(m) => (DeclaredShape::of(&m, model)?, model_io::roles::position_table(m.graph()), symbolic_dims(&m)),
            Err(_) => (DeclaredShape::default(), None, Vec::new()),
        };
        say_fixed_batch(model, declared.batch);
        let folder = FolderConfig::read(&model_folder(model))?;
        let seq_len = self.seq_len(model, declared, positions, folder.max_seq_length)?;
        // A sentence-transformers folder's length is a text's, not a SQuAD window's: its windows are not worth a line.
        let embedding_folder = folder.max_seq_length.is_some() && self.seq_len.is_none() && declared.seq_len.is_none();
        let features = self.windows(seq_len, !embedding_folder)?;
        features.validate()?;
        let (vocab, tokenizer_json) = self.tokenizer_files(model, &folder.folder);
        let defaulted = self.vocab.is_none() && self.tokenizer_json.is_none() && tokenizer_json.is_none();
        let no_tokenizer_in = (defaulted && !vocab.is_file()).then(|| folder.folder.clone());
        Ok(DataConfig {
            no_tokenizer_in,
            lowercase: self.lowercase && !cased_beside(&vocab, self.vocab.is_none()),
            vocab,
            tokenizer_json,
            force_vocab: self.force,
            version_2: self.version_2(),
            features,
            io: self.io_names.io(),
            io_names: self.io_names.clone(),
            padding: if self.pad_to_max || declared.seq_len.is_some() {
                Padding::Fixed(seq_len)
            } else {
                Padding::Longest
            },
            fixed_batch: declared.batch,
            symbolic_dims,
            pooling: self.pooling.clone(),
            folder,
            corpus: self.corpus.clone(),
        })
    }

    /// The sequence length: --seq-len, which must agree with a length the model fixes; else the model's own; else
    /// the `max_seq_length` its folder gives (sentence-transformers); else [`DEFAULT_SEQ_LEN`], or the rows of a
    /// shorter position table.
    fn seq_len(
        &self,
        model: &Path,
        declared: DeclaredShape,
        positions: Option<(String, i64)>,
        folder_max: Option<usize>,
    ) -> Result<usize> {
        match (self.seq_len, declared.seq_len) {
            (Some(asked), Some(fixed)) if asked != fixed => Err(Error::Input {
                path: model.to_path_buf(),
                reason: format!(
                    "the model takes sequences of exactly {fixed} tokens (its token inputs are declared [.., {fixed}]) \
                     but --seq-len is {asked}: leave --seq-len out or give {fixed}"
                ),
            }),
            (_, Some(fixed)) => {
                tracing::info!(
                    "{}: token inputs declared [{}, {fixed}]: features of {fixed} tokens, every batch padded to {fixed}",
                    model.display(),
                    declared.batch.map_or("batch".to_owned(), |b| b.to_string())
                );
                Ok(fixed)
            }
            (Some(asked), None) => Ok(asked),
            (None, None) if let Some(max) = folder_max.filter(|m| *m > 0) => {
                if let Some((table, rows)) = positions.filter(|(_, rows)| (*rows as usize) < max) {
                    return Err(Error::Input {
                        path: model_folder(model).join("sentence_bert_config.json"),
                        reason: format!(
                            "max_seq_length {max}, but the model {} embeds {rows} positions (initializer `{table}`): \
                             give a max_seq_length of at most {rows} (or --seq-len)",
                            model.display()
                        ),
                    });
                }
                tracing::info!(
                    "{}: max_seq_length {max} (sentence_bert_config.json): texts of at most {max} tokens (--seq-len)",
                    model_folder(model).display()
                );
                Ok(max)
            }
            (None, None) => Ok(match positions {
                Some((table, rows)) if rows > 0 && (rows as usize) < DEFAULT_SEQ_LEN => {
                    tracing::info!(
                        "{}: the model embeds {rows} positions (`{table}`): features of {rows} tokens (--seq-len)",
                        model.display()
                    );
                    rows as usize
                }
                _ => DEFAULT_SEQ_LEN,
            }),
        }
    }

    /// The vocabulary and tokenizer.json to read: as given, else found beside the model or in its folder (the
    /// parent of `onnx/`), said once.
    fn tokenizer_files(&self, model: &Path, folder: &Path) -> (PathBuf, Option<PathBuf>) {
        let dirs = [parent_dir(model), folder];
        let beside = |file: &str| dirs.iter().map(|d| d.join(file)).find(|p| p.is_file());
        let found = match (&self.vocab, &self.tokenizer_json) {
            (v, Some(t)) => (v.clone().unwrap_or_default(), Some(t.clone())),
            (Some(v), None) => (v.clone(), None),
            (None, None) => match (beside("tokenizer.json"), beside("vocab.txt")) {
                (Some(json), _) => (PathBuf::new(), Some(json)),
                (None, Some(vocab)) => (vocab, None),
                (None, None) => (PathBuf::from("squad/vocab.txt"), None),
            },
        };
        if found.0 != self.vocab.clone().unwrap_or_default() || found.1 != self.tokenizer_json {
            let file = found.1.as_ref().unwrap_or(&found.0);
            tracing::info!("tokenizer: {} (no --vocab / --token given)", file.display());
        }
        found
    }

    /// The window settings for features of `seq_len` tokens: --query-len and --doc-stride as given (checked to fit, the
    /// error naming the flags), else their defaults scaled down for a short sequence (logged when they are).
    fn windows(&self, seq_len: usize, say: bool) -> Result<FeatureConfig> {
        // [CLS], [SEP], [SEP] and at least one query and one context token.
        if seq_len < 5 {
            return Err(Error::Usage(format!(
                "--seq-len {seq_len} is too short: a feature holds [CLS], the query, [SEP], the context and [SEP] (at \
                 least 5 tokens)"
            )));
        }
        let query_len = match self.query_len {
            Some(0) => return Err(Error::Usage("--query-len must be at least 1".into())),
            Some(q) if seq_len < q + 4 => {
                return Err(Error::Usage(format!(
                    "--seq-len {seq_len} leaves no room for --query-len {q}: a feature holds [CLS], the query, [SEP], at \
                     least one context token and [SEP]; give --query-len {} or less, or a longer --seq-len",
                    seq_len - 4
                )));
            }
            Some(q) => q,
            None => {
                let q = DEFAULT_QUERY_LEN.min(seq_len / 2).min(seq_len - 4);
                if q < DEFAULT_QUERY_LEN && say {
                    tracing::info!("--seq-len {seq_len}: queries of at most {q} tokens (--query-len; default 64)");
                }
                q
            }
        };
        let window = seq_len - query_len - 3;
        let doc_stride = match self.doc_stride {
            Some(0) => return Err(Error::Usage("--doc-stride must be at least 1".into())),
            Some(s) => s,
            None if window <= DEFAULT_DOC_STRIDE => {
                let s = (window / 2).max(1);
                if say {
                    tracing::info!(
                        "windows of {window} context tokens: a step of {s} tokens between them (--doc-stride; default \
                         128), so they overlap"
                    );
                }
                s
            }
            None => DEFAULT_DOC_STRIDE,
        };
        Ok(FeatureConfig { max_seq_len: seq_len, doc_stride, max_query_len: query_len })
    }
}

/// True when `vocab` was found beside the model (not given) and a tokenizer_config.json beside it says
/// `"do_lower_case": false` (a cased model's folder, or qdq's output of a `--cased` run).
fn cased_beside(vocab: &Path, found: bool) -> bool {
    let config = parent_dir(vocab).join("tokenizer_config.json");
    if !found || !config.is_file() {
        return false;
    }
    let said = crate::disk::read_bounded(&config)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("do_lower_case").and_then(serde_json::Value::as_bool));
    if said == Some(false) {
        tracing::info!("{}: do_lower_case false: text is not lower-cased (as --cased)", config.display());
    }
    said == Some(false)
}

/// Says once that the model runs a fixed batch, and what happens to a short last batch.
fn say_fixed_batch(model: &Path, batch: Option<usize>) {
    let Some(b) = batch else { return };
    tracing::info!(
        "{}: token inputs declared with a batch of exactly {b}: every run takes {b} feature{} whatever --batch says{}",
        model.display(),
        if b == 1 { "" } else { "s" },
        if b == 1 { "" } else { ", a short last batch filled up with copies of its first feature (not scored)" }
    );
}

/// SQuAD format version (`--squad-version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SquadVersion {
    #[default]
    V1_1,
    /// Unanswerable questions (empty answers) are allowed.
    V2_0,
}

impl FromStr for SquadVersion {
    type Err = Error;

    fn from_str(s: &str) -> Result<SquadVersion> {
        match s.trim().trim_start_matches('v') {
            "1.1" | "1" => Ok(SquadVersion::V1_1),
            "2.0" | "2" => Ok(SquadVersion::V2_0),
            other => Err(Error::Usage(format!("SQuAD version `{other}` is not supported; use 1.1 or 2.0"))),
        }
    }
}

impl std::fmt::Display for SquadVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SquadVersion::V1_1 => "1.1",
            SquadVersion::V2_0 => "2.0",
        })
    }
}
