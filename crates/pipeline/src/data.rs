//! SQuAD text as model inputs: the data settings, the loaded questions (with their gold answers for scoring), and
//! the checks that the model, the vocabulary and the data fit together before any work starts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use onnx_ir::{GraphExt as _, Model};
use squad::{FeatureConfig, FeatureStream, ModelIo, Padding, PostProcessConfig, PredictionAccumulator, SquadTokenizer};

use crate::{Error, Result};

/// How SQuAD text becomes model inputs.
#[derive(Debug, Clone)]
pub struct DataConfig {
    /// WordPiece vocabulary (vocab.txt).
    pub vocab: PathBuf,
    /// A Hugging Face tokenizer.json used instead of building WordPiece from `vocab` (the seeds' --token).
    pub tokenizer_json: Option<PathBuf>,
    /// Lower-case text before WordPiece (uncased models).
    pub lowercase: bool,
    /// Treat the data as SQuAD v2.0 (unanswerable questions) even if the file does not say so.
    pub version_2: bool,
    /// Sequence length, document stride, query length.
    pub features: FeatureConfig,
    /// Model input and output names.
    pub io: ModelIo,
    /// Pad each batch to its longest feature or to a fixed length.
    pub padding: Padding,
}

impl DataConfig {
    /// Loads the tokenizer: [`DataConfig::tokenizer_json`] when given, else WordPiece from [`DataConfig::vocab`].
    pub fn tokenizer(&self) -> Result<Arc<SquadTokenizer>> {
        Ok(Arc::new(match &self.tokenizer_json {
            Some(json) => SquadTokenizer::from_tokenizer_json(json)?,
            None => SquadTokenizer::from_vocab(&self.vocab, self.lowercase)?,
        }))
    }

    /// The file the tokenizer comes from.
    pub fn tokenizer_source(&self) -> &Path {
        self.tokenizer_json.as_deref().unwrap_or(&self.vocab)
    }
}

/// EM/F1 of a set of predictions against the gold answers of a [`Corpus`]: the one score type, embedded in
/// [`crate::Evaluation`] and (flattened, so results.json keeps its keys) in [`crate::ModelResult`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Score {
    pub exact_match: f64,
    pub f1: f64,
    /// Questions scored.
    pub questions: usize,
    /// Questions without a prediction (scored 0).
    pub missing_predictions: usize,
}

/// The first `limit` questions of a SQuAD file, ready to be featurized in batches and scored.
#[derive(Debug)]
pub struct Corpus {
    path: PathBuf,
    gold: squad_metrics::Dataset,
    data: squad::SquadData,
    cfg: DataConfig,
    tokenizer: Arc<SquadTokenizer>,
}

impl Corpus {
    /// Reads `path` and keeps its first `limit` questions (0 = all). An empty selection is an error.
    pub fn load(path: &Path, cfg: &DataConfig, tokenizer: &Arc<SquadTokenizer>, limit: usize) -> Result<Corpus> {
        let gold = squad::read_dataset(path)?;
        let gold = if limit == 0 { gold } else { gold.first_n(limit) };
        let dup = gold.duplicate_ids();
        if !dup.is_empty() {
            tracing::warn!(
                "{}: {} question ids occur more than once (first: {}); predictions hold one answer per id",
                path.display(),
                dup.len(),
                dup[0]
            );
        }
        let data = squad::SquadData::from_dataset(gold.clone(), path)?;
        if data.examples.is_empty() {
            return Err(Error::Input { path: path.to_path_buf(), reason: "the file holds no questions".into() });
        }
        Ok(Corpus { path: path.to_path_buf(), gold, data, cfg: cfg.clone(), tokenizer: Arc::clone(tokenizer) })
    }

    /// The file the questions came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of questions.
    pub fn questions(&self) -> usize {
        self.data.examples.len()
    }

    /// Whether answers may be empty (SQuAD v2.0).
    pub fn is_v2(&self) -> bool {
        self.cfg.version_2 || self.data.is_v2()
    }

    /// The model input and output names in use (see [`Corpus::fit_model`]).
    pub fn io(&self) -> &ModelIo {
        &self.cfg.io
    }

    /// Feature batches in feature order.
    pub fn batches(&self, batch: usize) -> Result<FeatureStream<'_>> {
        Ok(FeatureStream::new(&self.data.examples, &self.tokenizer, self.cfg.features, batch, self.cfg.padding)?)
    }

    /// Turns logits into answers, in feature order.
    pub fn accumulator(&self) -> Result<PredictionAccumulator<'_>> {
        let pp = PostProcessConfig { version_2: self.is_v2(), ..PostProcessConfig::default() };
        Ok(PredictionAccumulator::new(&self.data.examples, Some(&self.tokenizer), pp)?)
    }

    /// Official SQuAD scoring (v1.1, or v2.0 with empty answers for unanswerable questions).
    pub fn score(&self, predictions: &HashMap<String, String>) -> Score {
        if self.is_v2() {
            let m = squad_metrics::evaluate_v2(&self.gold, predictions, None, 1.0);
            let missing = self.gold.questions().filter(|q| !predictions.contains_key(&q.id)).count();
            Score { exact_match: m.exact, f1: m.f1, questions: m.total, missing_predictions: missing }
        } else {
            let m = squad_metrics::evaluate_v1(&self.gold, predictions);
            Score { exact_match: m.exact_match, f1: m.f1, questions: m.total, missing_predictions: m.missing }
        }
    }

    /// Checks that `model` (loaded from `model_path`) takes the inputs and gives the outputs this data expects, and
    /// that the vocabulary fits its word embedding. A model without a segment-ids input (e.g. DistilBERT) is fed
    /// without one.
    pub fn fit_model(&mut self, model: &Model, model_path: &Path) -> Result<()> {
        fit_io(&mut self.cfg.io, model, model_path)?;
        check_vocab(model, model_path, &self.cfg.io.input_ids, &self.tokenizer, self.cfg.tokenizer_source())
    }
}

fn fit_io(io: &mut ModelIo, model: &Model, model_path: &Path) -> Result<()> {
    let g = model.graph();
    let inputs: Vec<&str> = g.input.iter().map(|v| v.name()).filter(|n| !g.is_initializer(n)).collect();
    let outputs: Vec<&str> = g.output.iter().map(|v| v.name()).collect();
    let bad = |reason: String| Error::Input { path: model_path.to_path_buf(), reason };
    if let Some(tt) = &io.token_type_ids
        && !inputs.contains(&tt.as_str())
    {
        tracing::info!("{} has no `{tt}` input; segment ids are not fed", model_path.display());
        io.token_type_ids = None;
    }
    let mut fed = vec![io.input_ids.as_str(), io.attention_mask.as_str()];
    fed.extend(io.token_type_ids.as_deref());
    let missing: Vec<&str> = fed.iter().copied().filter(|n| !inputs.contains(n)).collect();
    let unknown: Vec<&str> = inputs.iter().copied().filter(|n| !fed.contains(n)).collect();
    if !missing.is_empty() || !unknown.is_empty() {
        return Err(bad(format!(
            "the model's inputs are [{}] but the data provides [{}] (see --io-names: hf = input_ids, attention_mask, \
             token_type_ids; nvidia = input_ids, input_mask, segment_ids)",
            inputs.join(", "),
            fed.join(", ")
        )));
    }
    for o in [&io.start_logits, &io.end_logits] {
        if !outputs.contains(&o.as_str()) {
            return Err(bad(format!(
                "the model has no output `{o}`; its outputs are [{}] (see --io-names)",
                outputs.join(", ")
            )));
        }
    }
    Ok(())
}

/// The rows of the embedding table `input_ids` is gathered from, with the table's name.
fn embedding_rows(model: &Model, input_ids: &str) -> Option<(String, i64)> {
    let g = model.graph();
    g.node.iter().filter(|n| n.op_type() == "Gather" && n.input.get(1).map(String::as_str) == Some(input_ids)).find_map(
        |n| {
            let table = n.input.first()?;
            let rows = *g.initializer(table)?.dims.first()?;
            Some((table.clone(), rows))
        },
    )
}

fn check_vocab(model: &Model, model_path: &Path, input_ids: &str, tok: &SquadTokenizer, vocab: &Path) -> Result<()> {
    let Some((table, rows)) = embedding_rows(model, input_ids) else {
        tracing::debug!("no Gather of {input_ids} on an initializer found; vocabulary size not checked");
        return Ok(());
    };
    let size = tok.vocab_size() as i64;
    if i64::from(tok.max_token_id()) >= rows {
        return Err(Error::Input {
            path: vocab.to_path_buf(),
            reason: format!(
                "the vocabulary has {size} tokens but the model {} embeds only {rows} (initializer `{table}`): \
                 this vocab.txt does not belong to this model",
                model_path.display()
            ),
        });
    }
    if size * 10 < rows * 9 {
        tracing::warn!(
            "the vocabulary {} has {size} tokens but the model's word embedding `{table}` has {rows} rows; \
             is it the model's vocab.txt?",
            vocab.display()
        );
    }
    Ok(())
}
