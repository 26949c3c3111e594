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
    /// Model input and output names (for `Auto` / `Explicit` [`Self::io_names`], settled by [`Corpus::fit_model`]).
    pub io: ModelIo,
    /// How `io` was asked for.
    pub io_names: crate::IoNames,
    /// Pad each batch to its longest feature or to a fixed length.
    pub padding: Padding,
    /// The only batch size the model takes, when its inputs declare one (1: larger ones are refused by
    /// [`crate::DataSettings::config`]).
    pub fixed_batch: Option<usize>,
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

impl Score {
    /// Official SQuAD scoring of `predictions` on `gold` (v1.1, or v2.0 with empty answers for unanswerable
    /// questions).
    pub fn of(gold: &squad_metrics::Dataset, predictions: &HashMap<String, String>, v2: bool) -> Score {
        if v2 {
            let m = squad_metrics::evaluate_v2(gold, predictions, None, 1.0);
            let missing = gold.questions().filter(|q| !predictions.contains_key(&q.id)).count();
            Score { exact_match: m.exact, f1: m.f1, questions: m.total, missing_predictions: missing }
        } else {
            let m = squad_metrics::evaluate_v1(gold, predictions);
            Score { exact_match: m.exact_match, f1: m.f1, questions: m.total, missing_predictions: m.missing }
        }
    }
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
        Corpus::from_gold(path, if limit == 0 { gold } else { gold.first_n(limit) }, cfg, tokenizer)
    }

    /// Reads `path` and keeps its last `n` questions: questions held out from an evaluation of the first ones.
    pub fn load_last(path: &Path, cfg: &DataConfig, tokenizer: &Arc<SquadTokenizer>, n: usize) -> Result<Corpus> {
        let gold = squad::read_dataset(path)?;
        Corpus::from_gold(path, gold.last_n(n), cfg, tokenizer)
    }

    /// The same questions restricted to those whose id is in `ids` (an error when none is).
    pub fn restricted(&self, ids: &std::collections::HashSet<String>) -> Result<Corpus> {
        Corpus::from_gold(&self.path, self.gold.questions_where(|q| ids.contains(&q.id)), &self.cfg, &self.tokenizer)
    }

    fn from_gold(
        path: &Path,
        gold: squad_metrics::Dataset,
        cfg: &DataConfig,
        tokenizer: &Arc<SquadTokenizer>,
    ) -> Result<Corpus> {
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

    /// The ids of these questions.
    pub fn question_ids(&self) -> impl Iterator<Item = &str> {
        self.gold.questions().map(|q| q.id.as_str())
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

    /// Feature batches in feature order, of `batch` features; a model declaring a fixed batch gets batches of that
    /// size whatever `batch` asks, the last filled up to it ([`squad::Batch::fill_to`]; `DataSettings::config` says
    /// so once).
    pub fn batches(&self, batch: usize) -> Result<Batches<'_>> {
        let size = self.cfg.fixed_batch.unwrap_or(batch);
        let stream =
            FeatureStream::new(&self.data.examples, &self.tokenizer, self.cfg.features, size, self.cfg.padding)?;
        Ok(Batches { stream, fill: self.cfg.fixed_batch })
    }

    /// Turns logits into answers, in feature order.
    pub fn accumulator(&self) -> Result<PredictionAccumulator<'_>> {
        let pp = PostProcessConfig { version_2: self.is_v2(), ..PostProcessConfig::default() };
        Ok(PredictionAccumulator::new(&self.data.examples, Some(&self.tokenizer), pp)?)
    }

    /// Official SQuAD scoring (v1.1, or v2.0 with empty answers for unanswerable questions).
    pub fn score(&self, predictions: &HashMap<String, String>) -> Score {
        Score::of(&self.gold, predictions, self.is_v2())
    }

    /// Checks that `model` (loaded from `model_path`) takes the inputs and gives the outputs this data expects, and
    /// that the vocabulary fits its word embedding. A model without a segment-ids input (e.g. DistilBERT) is fed
    /// without one.
    pub fn fit_model(&mut self, model: &Model, model_path: &Path) -> Result<()> {
        match &self.cfg.io_names {
            crate::IoNames::Hf | crate::IoNames::Nvidia => {
                // Fixed names for the rest; position ids, which neither names, are found in the graph.
                let io = &mut self.cfg.io;
                let mut taken = vec![io.input_ids.as_str(), io.attention_mask.as_str()];
                taken.extend(io.token_type_ids.as_deref());
                io.position_ids = position_input(model, &taken);
            }
            named => {
                let io = detect_io(model, model_path, named)?;
                if io != self.cfg.io {
                    let outputs = if io.stacked_logits() {
                        format!("output: start and end logits stacked in `{}` [batch, seq, 2]", io.start_logits)
                    } else {
                        format!("outputs: start `{}`, end `{}`", io.start_logits, io.end_logits)
                    };
                    tracing::info!(
                        "model inputs: ids `{}`, mask `{}`, segment {}{}; {outputs} (--io-names to change)",
                        io.input_ids,
                        io.attention_mask,
                        io.token_type_ids.as_deref().map_or("none".to_owned(), |t| format!("`{t}`")),
                        io.position_ids
                            .as_deref()
                            .map_or(String::new(), |p| format!(", positions `{p}` (0, 1, 2, ...)")),
                    );
                }
                self.cfg.io = io;
                self.cfg.io_names = crate::IoNames::Explicit(crate::ExplicitIo {
                    ids: Some(self.cfg.io.input_ids.clone()),
                    mask: Some(self.cfg.io.attention_mask.clone()),
                    segment: Some(self.cfg.io.token_type_ids.clone().unwrap_or_default()),
                    start: Some(self.cfg.io.start_logits.clone()),
                    end: Some(self.cfg.io.end_logits.clone()),
                    logits: None,
                    position: Some(self.cfg.io.position_ids.clone().unwrap_or_default()),
                });
            }
        }
        fit_io(&mut self.cfg.io, model, model_path)?;
        check_positions(model, model_path, self.cfg.features.max_seq_len)?;
        check_vocab(model, model_path, &self.cfg.io.input_ids, &self.tokenizer, self.cfg.tokenizer_source())
    }
}

/// One run's start and end logits, `[features, width]` each, from the outputs [`ModelIo::logit_outputs`] names (in
/// that order): borrowed from ONNX Runtime's buffers, or taken apart from one stacked `[features, width, 2]` output.
pub(crate) struct RunLogits<'a> {
    pub start: std::borrow::Cow<'a, [f32]>,
    pub end: std::borrow::Cow<'a, [f32]>,
    pub width: usize,
}

impl RunLogits<'_> {
    /// The logits copied out of the run's outputs, to outlive them.
    pub(crate) fn into_owned(self) -> RunLogits<'static> {
        RunLogits { start: self.start.into_owned().into(), end: self.end.into_owned().into(), width: self.width }
    }
}

/// Fixed dimensions a model declares for its token inputs (its `[batch, sequence]` integer inputs): exported with
/// static shapes, it runs nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeclaredShape {
    pub batch: Option<usize>,
    pub seq_len: Option<usize>,
}

impl DeclaredShape {
    /// What the graph inputs of `model` declare: a dimension any `[batch, sequence]` integer input fixes (the others
    /// leaving it dynamic). Names the inputs in an error when two fix it to different values.
    pub fn of(model: &onnx_ir::Model, path: &Path) -> Result<DeclaredShape> {
        let g = model.graph();
        let mut dims: Vec<(&str, [Option<i64>; 2])> = Vec::new();
        for v in g.input.iter().filter(|v| !onnx_ir::GraphExt::is_initializer(g, v.name())) {
            let integer = onnx_ir::declared_elem_type(v)
                .is_some_and(|e| [onnx_ir::DataType::Int64, onnx_ir::DataType::Int32].map(|d| d as i32).contains(&e));
            let Some(shape) = onnx_ir::declared_dims(v).filter(|s| s.len() == 2 && integer) else {
                continue;
            };
            let fixed = |i: usize| match shape[i] {
                Ok(v) if v > 0 => Some(v),
                _ => None,
            };
            dims.push((v.name(), [fixed(0), fixed(1)]));
        }
        let agreed = |axis: usize, what: &str| -> Result<Option<usize>> {
            let mut fixed: Vec<i64> = dims.iter().filter_map(|(_, d)| d[axis]).collect();
            fixed.sort_unstable();
            fixed.dedup();
            match fixed.as_slice() {
                [] => Ok(None),
                [d] => Ok(Some(*d as usize)),
                _ => Err(Error::Input {
                    path: path.to_path_buf(),
                    reason: format!(
                        "the token inputs declare different {what} dimensions: {}",
                        dims.iter()
                            .map(|(n, d)| format!("`{n}` {}", d[axis].map_or("dynamic".to_owned(), |v| v.to_string())))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }),
            }
        };
        Ok(DeclaredShape { batch: agreed(0, "batch")?, seq_len: agreed(1, "sequence")? })
    }
}

/// [`Corpus::batches`]: the feature stream's batches, each filled up to a model's fixed batch.
pub struct Batches<'a> {
    stream: FeatureStream<'a>,
    fill: Option<usize>,
}

impl Iterator for Batches<'_> {
    type Item = std::result::Result<squad::Batch, squad::Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut b = self.stream.next()?;
        if let (Ok(b), Some(rows)) = (&mut b, self.fill) {
            b.fill_to(rows);
        }
        Some(b)
    }
}

/// [`RunLogits`] of a run of `features` features of the model `model` (named in errors); rows past them (a
/// fixed-batch model's filler rows, [`squad::Batch::fill_to`]) are not read.
pub(crate) fn run_logits<'a>(
    outs: &[runtime::OutputRef<'a>],
    io: &ModelIo,
    features: usize,
    model: &str,
) -> Result<RunLogits<'a>> {
    let bad = |output: &str, reason: String| -> Error {
        runtime::Error::BadOutput { model: model.to_owned(), output: output.to_owned(), reason }.into()
    };
    if io.stacked_logits() {
        let o = &outs[0];
        if o.shape.len() != 3 || o.shape[0] < features || o.shape[2] != 2 {
            return Err(bad(
                &io.start_logits,
                format!(
                    "one output for both logits must be [batch {features}, sequence, 2] (start, end on the last axis), \
                     got {:?}",
                    o.shape
                ),
            ));
        }
        let used = &o.data[..features * o.shape[1] * 2];
        let start: Vec<f32> = used.iter().step_by(2).copied().collect();
        let end: Vec<f32> = used.iter().skip(1).step_by(2).copied().collect();
        return Ok(RunLogits { start: start.into(), end: end.into(), width: o.shape[1] });
    }
    let (start, end) = (&outs[0], &outs[1]);
    if start.shape.len() != 2 || start.shape != end.shape || start.shape[0] < features {
        return Err(bad(
            &io.start_logits,
            format!("expected [batch {features}, sequence] logits, got {:?} and {:?}", start.shape, end.shape),
        ));
    }
    let n = features * start.shape[1];
    let rows = |d: &std::borrow::Cow<'a, [f32]>| match d {
        std::borrow::Cow::Borrowed(b) => std::borrow::Cow::Borrowed(&b[..n]),
        std::borrow::Cow::Owned(v) => std::borrow::Cow::Owned(v[..n].to_vec()),
    };
    Ok(RunLogits { start: rows(&start.data), end: rows(&end.data), width: start.shape[1] })
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
    fed.extend(io.position_ids.as_deref());
    let missing: Vec<&str> = fed.iter().copied().filter(|n| !inputs.contains(n)).collect();
    // An input the logits do not depend on (a `unique_ids` copied to an output of its own) is fed zeros.
    let logits_read = g.ancestors_of(&io.logit_outputs());
    let zero: Vec<String> =
        inputs.iter().filter(|n| !fed.contains(n) && !logits_read.contains(**n)).map(|n| (*n).to_owned()).collect();
    if !zero.is_empty() && zero != io.zero_inputs {
        tracing::info!(
            "{}: the logits do not depend on input {}: fed zeros",
            model_path.display(),
            zero.iter().map(|z| format!("`{z}`")).collect::<Vec<_>>().join(", ")
        );
    }
    let unknown: Vec<&str> =
        inputs.iter().copied().filter(|n| !fed.contains(n) && !zero.iter().any(|z| z == n)).collect();
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
    io.zero_inputs = zero;
    Ok(())
}

/// The model's input and output roles (module docs of [`crate::IoNames::Auto`]); named roles of `Explicit` win.
pub fn detect_io(model: &Model, model_path: &Path, names: &crate::IoNames) -> Result<ModelIo> {
    let inputs = detect_inputs(model, model_path, names)?;
    let bad = |reason: String| Error::Input { path: model_path.to_path_buf(), reason };
    let (start, end) = output_roles(model.graph(), explicit(names)).map_err(bad)?;
    Ok(ModelIo {
        input_ids: inputs.ids,
        attention_mask: inputs.mask,
        token_type_ids: inputs.segment,
        position_ids: inputs.position,
        start_logits: start,
        end_logits: end,
        zero_inputs: Vec::new(),
    })
}

fn explicit(names: &crate::IoNames) -> &crate::ExplicitIo {
    static NONE: std::sync::OnceLock<crate::ExplicitIo> = std::sync::OnceLock::new();
    match names {
        crate::IoNames::Explicit(e) => e,
        _ => NONE.get_or_init(Default::default),
    }
}

/// A BERT's input roles: token ids, attention mask and (if it takes them) segment ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRoles {
    pub ids: String,
    pub mask: String,
    pub segment: Option<String>,
    /// Position ids, when the model takes them as an input.
    pub position: Option<String>,
}

/// The model's input roles only (any model, SQuAD or not), as [`detect_io`] finds them.
pub fn detect_inputs(model: &Model, model_path: &Path, names: &crate::IoNames) -> Result<InputRoles> {
    let given = explicit(names);
    let g = model.graph();
    let bad = |reason: String| Error::Input { path: model_path.to_path_buf(), reason };
    let inputs: Vec<&str> = g.input.iter().map(|v| v.name()).filter(|n| !g.is_initializer(n)).collect();
    let role = |input: &str| input_role(model, input);
    let pick = |want: Role, hint: &[&str]| -> Vec<&str> {
        let by_graph: Vec<&str> = inputs.iter().copied().filter(|i| role(i) == Some(want)).collect();
        if by_graph.len() == 1 {
            return by_graph;
        }
        // A name equal to the first hint (`input_ids`) wins over names that merely contain one (`token_type_ids`).
        let lower = |s: &str| s.to_ascii_lowercase();
        if let Some(exact) = inputs.iter().copied().find(|i| hint.first().is_some_and(|h| lower(i) == *h)) {
            return vec![exact];
        }
        inputs.iter().copied().filter(|i| role(i).is_none() && hint.iter().any(|h| lower(i).contains(h))).collect()
    };
    let one = |given: &Option<String>, found: Vec<&str>, what: &str| -> Result<String> {
        if let Some(g) = given {
            return Ok(g.clone());
        }
        match found.as_slice() {
            [one] => Ok((*one).to_owned()),
            _ => Err(bad(format!(
                "cannot tell which input is the {what} among [{}] (found: {}); name it with --io-names ids=...,mask=...,\
                 segment=...",
                inputs.join(", "),
                if found.is_empty() { "none".to_owned() } else { found.join(", ") }
            ))),
        }
    };
    let ids = one(&given.ids, pick(Role::Ids, &["input_ids", "ids"]), "token ids")?;
    let segment = match &given.segment {
        Some(s) if s.is_empty() => None,
        Some(s) => Some(s.clone()),
        None => {
            let found: Vec<&str> =
                pick(Role::Segment, &["type", "segment"]).into_iter().filter(|s| *s != ids).collect();
            (!found.is_empty()).then(|| one(&None, found, "segment ids")).transpose()?
        }
    };
    // Position ids (an export that takes them as an input): what gathers from the position table, else the one input
    // so named; fed 0, 1, 2, ... per row.
    let position = match &given.position {
        Some(p) if p.is_empty() => None,
        Some(p) => Some(p.clone()),
        None => position_input(
            model,
            &[ids.as_str(), segment.as_deref().unwrap_or(""), given.mask.as_deref().unwrap_or("")],
        ),
    };
    let rest: Vec<&str> = inputs
        .iter()
        .copied()
        .filter(|i| *i != ids && Some(*i) != segment.as_deref() && Some(*i) != position.as_deref())
        .collect();
    let mask_found =
        if rest.len() == 1 { rest.clone() } else { rest.iter().copied().filter(|i| i.contains("mask")).collect() };
    let mask = one(&given.mask, mask_found, "attention mask")?;
    Ok(InputRoles { ids, mask, segment, position })
}

/// The input that takes position ids, among the graph inputs other than `taken`: the one gathering from the position
/// table (or ORT's EmbedLayerNormalization's position slot), else the only one so named.
fn position_input(model: &Model, taken: &[&str]) -> Option<String> {
    let g = model.graph();
    let free: Vec<&str> =
        g.input.iter().map(|v| v.name()).filter(|n| !g.is_initializer(n) && !taken.contains(n)).collect();
    let by_graph: Vec<&str> = free.iter().copied().filter(|i| input_role(model, i) == Some(Role::Position)).collect();
    let by_name: Vec<&str> = free.iter().copied().filter(|i| i.to_ascii_lowercase().contains("position")).collect();
    match (by_graph.as_slice(), by_name.as_slice()) {
        ([one], _) | ([], [one]) => Some((*one).to_owned()),
        _ => None,
    }
}

/// True if the model has start / end logits as [`detect_io`] finds them (a SQuAD model) and no `logits` role was
/// named.
pub fn is_squad_model(model: &Model, names: &crate::IoNames) -> bool {
    explicit(names).logits.is_none() && output_roles(model.graph(), explicit(names)).is_ok()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Ids,
    Segment,
    Mask,
    Position,
}

/// What the graph does with an input: the index of a Gather on an embedding table (the largest table: token ids; one
/// of at most 16 rows: segment ids; likewise the depth of a `OneHot` times the table, TF BERT's token-type lookup), or a
/// slot of ORT's fused EmbedLayerNormalization or its quantized form (0 ids, 1 segment, 7 mask), looked for through
/// value-preserving `Cast` / `Identity` nodes (ORT's optimizer casts the inputs to int32) and reshapes (TF BERT
/// flattens the ids first).
fn input_role(model: &Model, input: &str) -> Option<Role> {
    tensor_role(model.graph(), input, 6)
}

fn tensor_role(g: &onnx_ir::proto::GraphProto, input: &str, depth: usize) -> Option<Role> {
    for n in g.node.iter().filter(|n| n.input.iter().any(|i| i == input)) {
        let slot = n.input.iter().position(|i| i == input)?;
        match (n.op_type(), slot) {
            // Value-preserving, or reshaping only: TF BERT flattens the ids before its lookups.
            ("Cast" | "Identity" | "Reshape" | "Unsqueeze" | "Squeeze" | "Flatten", 0) if depth > 0 => {
                if let Some(role) = n.output.first().and_then(|o| tensor_role(g, o, depth - 1)) {
                    return Some(role);
                }
            }
            ("EmbedLayerNormalization" | "QEmbedLayerNormalization", 0) => return Some(Role::Ids),
            ("EmbedLayerNormalization" | "QEmbedLayerNormalization", 1) => return Some(Role::Segment),
            ("EmbedLayerNormalization" | "QEmbedLayerNormalization", 7) => return Some(Role::Mask),
            ("EmbedLayerNormalization" | "QEmbedLayerNormalization", 8) => return Some(Role::Position),
            // TF BERT's token-type lookup (and the word lookup with `use_one_hot_embeddings`): a one-hot row times the
            // table, the depth its rows.
            ("OneHot", 0) => {
                let rows = n.input.get(1).and_then(|d| int_scalar(g, d))?;
                return Some(if rows <= 16 { Role::Segment } else { Role::Ids });
            }
            ("Gather", 1) => {
                let table = n.input.first()?;
                let rows = *g.initializer(table)?.dims.first()?;
                return Some(match rows {
                    _ if table.to_ascii_lowercase().contains("position") => Role::Position,
                    ..=16 => Role::Segment,
                    _ => Role::Ids,
                });
            }
            _ => {}
        }
    }
    None
}

/// An integer initializer or `Constant` holding one value (a scalar or `[1]`): a OneHot depth, a Gather / Slice index.
fn int_scalar(g: &onnx_ir::proto::GraphProto, name: &str) -> Option<i64> {
    let made;
    let t = match g.initializer(name) {
        Some(t) => t,
        None => {
            let n = g.node.iter().find(|n| n.output.first().is_some_and(|o| o == name))?;
            made = onnx_ir::constant_value(n).ok()??;
            &made
        }
    };
    let one = |v: Vec<i64>| (v.len() == 1).then(|| v[0]);
    match onnx_ir::DataType::try_from(t.data_type()).ok()? {
        onnx_ir::DataType::Int64 => one(onnx_ir::tensor_to_array::<i64>(t).ok()?.iter().copied().collect()),
        onnx_ir::DataType::Int32 => {
            one(onnx_ir::tensor_to_array::<i32>(t).ok()?.iter().map(|&v| i64::from(v)).collect())
        }
        _ => None,
    }
}

/// Start and end logits: named outputs, else outputs whose names say start / end, else the only two in order.
fn output_roles(
    g: &onnx_ir::proto::GraphProto,
    given: &crate::ExplicitIo,
) -> std::result::Result<(String, String), String> {
    let outputs: Vec<&str> = g.output.iter().map(|v| v.name()).collect();
    let named = |word: &str| -> Vec<&str> {
        outputs.iter().copied().filter(|o| o.to_ascii_lowercase().contains(word)).collect()
    };
    let (s, e) = (named("start"), named("end"));
    let found = match (s.as_slice(), e.as_slice(), g.output.as_slice()) {
        ([s], [e], _) if s != e => Some((s.to_string(), e.to_string())),
        _ if let Some(pair) = split_pair(g) => Some(pair),
        (_, _, [a, b]) => Some((a.name().to_owned(), b.name().to_owned())),
        // One output declared [batch, seq, 2]: both logits, start then end on the last axis (ModelIo::end_logits).
        (_, _, [o]) if stacked_shape(o) => Some((o.name().to_owned(), o.name().to_owned())),
        _ => None,
    };
    match (&given.start, &given.end, found) {
        (Some(s), Some(e), _) => Ok((s.clone(), e.clone())),
        (s, e, Some((fs, fe))) => Ok((s.clone().unwrap_or(fs), e.clone().unwrap_or(fe))),
        _ => Err(format!(
            "cannot tell the start and end logits among the outputs [{}]; name them with --io-names start=...,end=... \
             (a model with class logits is evaluated against FP32 on .npz / text / JSONL inputs instead)",
            outputs.join(", ")
        )),
    }
}

/// Two outputs that are parts 0 and 1 of one tensor (start, end): a QA head's `[batch, seq, 2]` logits taken apart
/// by a two-way `Split`, or by `Gather` / `Slice` at index 0 and 1 of one axis, then reshaped (Squeeze, Reshape,
/// Identity, ...), as Hugging Face exports and tf2onnx's `unstack` (ONNX Model Zoo BERT-Squad: outputs `unstack:1`,
/// `unstack:0`, `unique_ids:0`, end listed first) write it, whatever the outputs are named or listed.
fn split_pair(g: &onnx_ir::proto::GraphProto) -> Option<(String, String)> {
    let index = onnx_ir::GraphIndex::new(g);
    let scalar = |name: &str| int_scalar(g, name);
    // (source tensor, part) of a graph output, through ops that only reshape or rename.
    let part = |output: &str| -> Option<(String, i64)> {
        let mut t = output.to_owned();
        for _ in 0..8 {
            let n = index.producer_node(&t)?;
            match n.op_type() {
                "Identity" | "Squeeze" | "Unsqueeze" | "Reshape" | "Flatten" | "Cast" => t = n.input.first()?.clone(),
                "Split" if n.output.len() == 2 => {
                    return Some((n.input.first()?.clone(), n.output.iter().position(|o| *o == t)? as i64));
                }
                "Gather" => return Some((n.input.first()?.clone(), scalar(n.input.get(1)?)?)),
                "Slice" => {
                    let (start, end) = (scalar(n.input.get(1)?)?, scalar(n.input.get(2)?)?);
                    return (end == start + 1).then(|| n.input.first().map(|s| (s.clone(), start))).flatten();
                }
                _ => return None,
            }
        }
        None
    };
    let parts: Vec<(&str, (String, i64))> = g.output.iter().filter_map(|o| Some((o.name(), part(o.name())?))).collect();
    let mut pairs = parts.iter().filter(|(_, (_, k))| *k == 0).filter_map(|(start, (source, _))| {
        let ends: Vec<&str> =
            parts.iter().filter(|(_, (s, k))| s == source && *k == 1).map(|(name, _)| *name).collect();
        match ends.as_slice() {
            [end] => Some(((*start).to_owned(), (*end).to_owned())),
            _ => None,
        }
    });
    let first = pairs.next()?;
    pairs.next().is_none().then_some(first)
}

/// A declared rank-3 shape whose last dimension is 2: start and end logits stacked, as a QA head exported without its
/// split gives them (`[batch, seq, 2]`; a classifier's two class logits are rank 2).
fn stacked_shape(v: &onnx_ir::proto::ValueInfoProto) -> bool {
    onnx_ir::declared_dims(v).is_some_and(|dims| dims.len() == 3 && dims[2] == Ok(2))
}

/// The position-embedding table and its rows: the table of ORT's EmbedLayerNormalization (input 3), else the one float
/// 2-D table a Gather reads with indices that are not a graph input (preferring a name with "position").
pub(crate) fn position_rows(model: &Model) -> Option<(String, i64)> {
    let g = model.graph();
    let rows = |t: &str| g.initializer(t).filter(|t| t.dims.len() == 2).map(|t| (t.name().to_owned(), t.dims[0]));
    if let Some(n) = g.node.iter().find(|n| n.op_type() == "EmbedLayerNormalization") {
        return rows(n.input.get(3)?);
    }
    let is_input = |t: &str| g.input.iter().any(|i| i.name() == t);
    let tables: Vec<(String, i64)> = g
        .node
        .iter()
        .filter(|n| n.op_type() == "Gather" && n.input.len() == 2 && !is_input(&n.input[1]))
        .filter_map(|n| rows(&n.input[0]))
        .collect();
    match tables.iter().find(|(t, _)| t.contains("position")) {
        Some(t) => Some(t.clone()),
        None if tables.len() == 1 => tables.first().cloned(),
        None => None,
    }
}

/// A model embeds a fixed number of positions: a longer --seq-len would fail at the first inference with a broadcast
/// error from ONNX Runtime, so it is checked here.
fn check_positions(model: &Model, model_path: &Path, seq_len: usize) -> Result<()> {
    let Some((table, rows)) = position_rows(model) else {
        tracing::debug!("no position-embedding table found; --seq-len not checked against it");
        return Ok(());
    };
    if (seq_len as i64) > rows {
        return Err(Error::Input {
            path: model_path.to_path_buf(),
            reason: format!(
                "the model embeds at most {rows} positions (initializer `{table}`) but --seq-len is {seq_len}: use \
                 --seq-len {rows} or less"
            ),
        });
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

/// Ids that every BERT WordPiece vocabulary (uncased, cased, multilingual, DistilBERT) gives its special tokens.
const BERT_ANCHORS: [(u32, &str); 5] = [(0, "[PAD]"), (100, "[UNK]"), (101, "[CLS]"), (102, "[SEP]"), (103, "[MASK]")];

/// The BERT special tokens that are not at their usual ids (empty for a vocabulary under 1,000 tokens: test and toy
/// vocabularies are laid out freely).
fn anchor_mismatches(tok: &SquadTokenizer) -> Vec<String> {
    if tok.vocab_size() < 1000 {
        return vec![];
    }
    BERT_ANCHORS
        .iter()
        .filter(|(id, token)| tok.id_to_token(*id).as_deref() != Some(*token))
        .map(|(id, token)| format!("{token} expected at {id}, found {:?}", tok.id_to_token(*id).unwrap_or_default()))
        .collect()
}

/// A vocabulary of the right size can still be the wrong one (EM falls to a tenth): warns when the special tokens
/// are not at the ids BERT vocabularies give them, naming what was checked.
fn check_anchors(tok: &SquadTokenizer, vocab: &Path) {
    let off = anchor_mismatches(tok);
    if off.is_empty() {
        tracing::debug!("{}: [PAD] [UNK] [CLS] [SEP] [MASK] at BERT's ids 0, 100-103", vocab.display());
    } else {
        tracing::warn!(
            "{}: special tokens not where BERT vocabularies have them ({}); if this is not the model's own \
             vocabulary, every answer will be wrong",
            vocab.display(),
            off.join("; ")
        );
    }
}

fn check_vocab(model: &Model, model_path: &Path, input_ids: &str, tok: &SquadTokenizer, vocab: &Path) -> Result<()> {
    check_anchors(tok, vocab);
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

/// Questions whose last window is in `batch`.
pub(crate) fn questions_done(batch: &squad::Batch) -> u64 {
    batch.features.iter().filter(|f| f.window_index + 1 == f.num_windows).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 18, item 10: a vocabulary laid out as BERT's passes; the same tokens in another order (same size) are
    /// named.
    #[test]
    fn bert_special_tokens_are_checked_at_their_ids() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let mut tokens: Vec<String> = (0..1200).map(|i| format!("[unused{i}]")).collect();
        for (id, t) in BERT_ANCHORS {
            tokens[id as usize] = t.to_owned();
        }
        let write = |name: &str, tokens: &[String]| {
            let p = dir.join(name);
            std::fs::write(&p, tokens.join("\n")).unwrap();
            SquadTokenizer::from_vocab(&p, true).unwrap()
        };
        assert!(anchor_mismatches(&write("bert.txt", &tokens)).is_empty());
        tokens.swap(101, 500);
        let off = anchor_mismatches(&write("shuffled.txt", &tokens));
        assert_eq!(off.len(), 1, "{off:?}");
        assert!(off[0].contains("[CLS] expected at 101"), "{off:?}");
    }
}
