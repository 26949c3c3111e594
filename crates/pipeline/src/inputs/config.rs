//! How text becomes model inputs ([`DataConfig`]): the tokenizer, the feature windows, the model's input and output
//! names, padding and fixed shapes, and what the model's folder and the flags say of an embedding model's pooling and
//! retrieval corpus. Every task reads its data through it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use squad::{FeatureConfig, ModelIo, Padding};
use tokenizer::Tokenizer;

use crate::error::Result;
use crate::inputs::folder::FolderConfig;
use crate::inputs::pooling::Pooling;
use crate::inputs::roles::IoNames;
use crate::model::TokenizerFiles;

/// How text becomes model inputs.
#[derive(Debug, Clone)]
pub struct DataConfig {
    /// WordPiece vocabulary (vocab.txt).
    pub vocab: PathBuf,
    /// A Hugging Face tokenizer.json used instead of building WordPiece from `vocab` (the seeds' --token).
    pub tokenizer_json: Option<PathBuf>,
    /// No --vocab / --token given and no tokenizer found beside the model, in its folder or at the default
    /// squad/vocab.txt: the folder looked in, which the error of [`DataConfig::tokenizer`] names.
    pub no_tokenizer_in: Option<PathBuf>,
    /// Lower-case text before WordPiece (uncased models).
    pub lowercase: bool,
    /// A vocabulary much smaller than the word embedding is used, with a warning, not refused (`--force`).
    pub force_vocab: bool,
    /// Treat the data as SQuAD v2.0 (unanswerable questions) even if the file does not say so.
    pub version_2: bool,
    /// Sequence length, document stride, query length.
    pub features: FeatureConfig,
    /// Model input and output names (for `Auto` / `Explicit` [`Self::io_names`], settled by `Corpus::fit_model` and `TextInputs::for_model`).
    pub io: ModelIo,
    /// How `io` was asked for.
    pub io_names: IoNames,
    /// Pad each batch to its longest feature or to a fixed length.
    pub padding: Padding,
    /// The only batch size the model takes, when its inputs declare one (1: larger ones are refused by
    /// [`crate::settings::DataSettings::config`]).
    pub fixed_batch: Option<usize>,
    /// The symbolic batch and sequence dimensions of the model's token inputs, by input (see
    /// [`DataConfig::fix_shapes`]).
    pub symbolic_dims: Vec<[Option<String>; 2]>,
    /// `--pooling`: how an embedding model's token states become one vector per text, when asked for.
    pub pooling: Option<Pooling>,
    /// What the model's folder says of it (sentence-transformers' modules, pooling and length).
    pub folder: FolderConfig,
    /// `--corpus`: the documents labelled queries retrieve among (an embedding model's own retrieval data).
    pub corpus: Option<PathBuf>,
}

impl DataConfig {
    /// Loads the tokenizer: [`DataConfig::tokenizer_json`] when given, else WordPiece from [`DataConfig::vocab`].
    /// For an EP that runs static shapes only ([`runtime::Ep::needs_static_shapes`]: QNN), the model's symbolic batch
    /// and sequence dimensions fixed to `batch` x the sequence length in `session`, and every feature padded to that
    /// length; other EPs' sessions are left as they are. Said once.
    pub fn fix_shapes(&mut self, session: &mut runtime::SessionConfig, batch: usize) {
        if !session.ep.needs_static_shapes() {
            return;
        }
        let seq = self.features.max_seq_len;
        self.padding = Padding::Fixed(seq);
        // A short last batch is filled to `batch` rows (the fillers' outputs are not read).
        self.fixed_batch = self.fixed_batch.or(Some(batch));
        let sizes = [batch as i64, seq as i64];
        let mut overrides: Vec<(String, i64)> = Vec::new();
        for dims in &self.symbolic_dims {
            for (name, size) in dims.iter().zip(sizes) {
                if let Some(n) = name.as_ref().filter(|n| !overrides.iter().any(|(o, _)| o == *n)) {
                    overrides.push((n.clone(), size));
                }
            }
        }
        if !overrides.is_empty() {
            let names: Vec<String> = overrides.iter().map(|(n, v)| format!("{n}={v}")).collect();
            tracing::info!(
                "{} runs static shapes only: the model's inputs fixed to {batch}x{seq} ({}), every feature padded to {seq}",
                session.ep.ort_name(),
                names.join(", ")
            );
        }
        session.dim_overrides = overrides;
    }

    pub fn tokenizer(&self) -> Result<Arc<Tokenizer>> {
        if let Some(dir) = &self.no_tokenizer_in {
            return Err(crate::error::Error::Input {
                path: dir.clone(),
                reason: "no tokenizer: no tokenizer.json or vocab.txt here or beside the model, and no --vocab / \
                         --token given"
                    .into(),
            });
        }
        Ok(Arc::new(match &self.tokenizer_json {
            Some(json) => Tokenizer::from_tokenizer_json(json)?,
            None => Tokenizer::from_vocab(&self.vocab, self.lowercase)?,
        }))
    }

    /// The tokenizer's files, to carry beside the models a run writes ([`crate::model::carry_tokenizer`]).
    pub fn tokenizer_files(&self) -> TokenizerFiles<'_> {
        TokenizerFiles { tokenizer_json: self.tokenizer_json.as_deref(), vocab: &self.vocab, lowercase: self.lowercase }
    }

    /// The file the tokenizer comes from.
    pub fn tokenizer_source(&self) -> &Path {
        self.tokenizer_json.as_deref().unwrap_or(&self.vocab)
    }
}
