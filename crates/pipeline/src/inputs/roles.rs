//! Which model inputs and outputs the data feeds and reads: the names `--io-names` gives ([`IoNames`]), the rest
//! found in the graph by [`model_io::roles`], and the checks that the model, the data and the vocabulary fit together
//! (errors name the model file and say which flag changes what).

use std::path::Path;
use std::str::FromStr;

use model_io::roles::{InputRoles, NamedRoles, RoleError};
use onnx_ir::{GraphExt as _, Model};
use squad::ModelIo;
use tokenizer::Tokenizer;

use crate::error::{Error, Result};

/// Which names the model's inputs and outputs have.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum IoNames {
    /// Found in the graph ([`model_io::roles`]): token ids feed the largest embedding Gather, segment ids a small one (or
    /// ORT's fused EmbedLayerNormalization's slots), the mask is the remaining integer input; start / end logits by
    /// name, else the two parts of the head's Split, else the two outputs in order, else one output declared
    /// `[batch, seq, 2]` holding both.
    #[default]
    Auto,
    /// input_ids, attention_mask, token_type_ids -> start_logits, end_logits.
    Hf,
    /// input_ids, input_mask, segment_ids -> output_start_logits, output_end_logits.
    Nvidia,
    /// Named roles (`ids=...,mask=...,segment=...,start=...,end=...`); roles not named are found as with `Auto`, and
    /// `segment=` (empty) means the model takes no segment ids.
    Explicit(NamedRoles),
}

impl FromStr for IoNames {
    type Err = Error;

    fn from_str(s: &str) -> Result<IoNames> {
        match s.trim() {
            "auto" => Ok(IoNames::Auto),
            "hf" | "huggingface" => Ok(IoNames::Hf),
            "nvidia" | "bert-tf" => Ok(IoNames::Nvidia),
            other if other.contains('=') => {
                let mut e = NamedRoles::default();
                for pair in other.split(',') {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    let slot = match k.trim() {
                        "ids" => &mut e.ids,
                        "mask" => &mut e.mask,
                        "segment" => &mut e.segment,
                        "start" => &mut e.start,
                        "end" => &mut e.end,
                        "logits" => &mut e.logits,
                        "position" | "positions" => &mut e.position,
                        "embedding" | "embeddings" => &mut e.embedding,
                        k => {
                            return Err(Error::Usage(format!(
                                "--io-names: unknown role `{k}`; roles: ids, mask, segment, start, end, logits, \
                                 embedding, position"
                            )));
                        }
                    };
                    *slot = Some(v.trim().to_owned());
                }
                Ok(IoNames::Explicit(e))
            }
            other => Err(Error::Usage(format!(
                "--io-names `{other}` is not known: auto, hf, nvidia, or roles like ids=input.1,mask=input.2,segment=,\
                 start=s,end=e"
            ))),
        }
    }
}

impl IoNames {
    /// The fixed names of `Hf` / `Nvidia`; the others start from the Hugging Face names until the model is seen.
    pub fn io(&self) -> ModelIo {
        match self {
            IoNames::Nvidia => ModelIo::bert_tf(),
            _ => ModelIo::huggingface(),
        }
    }

    /// The roles named (none for the fixed sets, which are not looked up in the graph).
    pub(crate) fn named(&self) -> &NamedRoles {
        static NONE: std::sync::OnceLock<NamedRoles> = std::sync::OnceLock::new();
        match self {
            IoNames::Explicit(e) => e,
            _ => NONE.get_or_init(Default::default),
        }
    }
}

/// A role that cannot be told, as the error naming the model and the `--io-names` role that settles it.
pub(crate) fn role_error(model_path: &Path, e: RoleError) -> Error {
    let hint = match &e {
        RoleError::Input { .. } => "; name it with --io-names ids=...,mask=...,segment=...",
        RoleError::Logits { .. } => {
            "; name them with --io-names start=...,end=... (a model with class logits is evaluated against FP32 on \
             .npz / text / JSONL inputs instead)"
        }
        RoleError::ClassLogits { .. } => {
            "; name them with --io-names logits=... (a classifier), or name a sentence embedding with embedding=... \
             (its token states with --pooling mean|cls|max)"
        }
        RoleError::NoOutput { .. } => " (--io-names)",
    };
    Error::Input { path: model_path.to_path_buf(), reason: format!("{e}{hint}") }
}

/// The model's input roles only (any model, SQuAD or not), as [`detect_io`] finds them.
pub fn detect_inputs(model: &Model, model_path: &Path, names: &IoNames) -> Result<InputRoles> {
    model_io::roles::input_roles(model.graph(), names.named()).map_err(|e| role_error(model_path, e))
}

/// The model's input and output roles (see [`IoNames::Auto`]); named roles of `Explicit` win.
pub fn detect_io(model: &Model, model_path: &Path, names: &IoNames) -> Result<ModelIo> {
    let inputs = detect_inputs(model, model_path, names)?;
    let (start, end) =
        model_io::roles::logit_roles(model.graph(), names.named()).map_err(|e| role_error(model_path, e))?;
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

/// The class-logits output of a model that is not a SQuAD model ([`model_io::roles::class_logits`]).
pub fn class_logits(model: &Model, names: &IoNames, model_path: &Path) -> Result<String> {
    model_io::roles::class_logits(model.graph(), names.named()).map_err(|e| match e {
        RoleError::NoOutput { name, outputs } => Error::Input {
            path: model_path.to_path_buf(),
            reason: format!("--io-names logits={name}: the model's outputs are [{}]", outputs.join(", ")),
        },
        e => role_error(model_path, e),
    })
}

/// True if the model has start / end logits as [`detect_io`] finds them (a SQuAD model) and no `logits` role was
/// named.
pub fn is_squad_model(model: &Model, names: &IoNames) -> bool {
    names.named().logits.is_none() && model_io::roles::logit_roles(model.graph(), names.named()).is_ok()
}

/// The roles of `model` for a SQuAD corpus asked for as `names`: the fixed sets as they are (position ids, which
/// neither names, found in the graph), the others detected and said once; `Explicit` afterwards, so the roles are
/// not looked up again.
pub(crate) fn settle(io: &mut ModelIo, names: &mut IoNames, model: &Model, model_path: &Path) -> Result<()> {
    if let IoNames::Hf | IoNames::Nvidia = names {
        let mut taken = vec![io.input_ids.as_str(), io.attention_mask.as_str()];
        taken.extend(io.token_type_ids.as_deref());
        io.position_ids = model_io::roles::position_input(model.graph(), &taken);
        return Ok(());
    }
    let found = detect_io(model, model_path, names)?;
    if found != *io {
        let outputs = if found.stacked_logits() {
            format!("output: start and end logits stacked in `{}` [batch, seq, 2]", found.start_logits)
        } else {
            format!("outputs: start `{}`, end `{}`", found.start_logits, found.end_logits)
        };
        tracing::info!(
            "model inputs: ids `{}`, mask `{}`, segment {}{}; {outputs} (--io-names to change)",
            found.input_ids,
            found.attention_mask,
            found.token_type_ids.as_deref().map_or("none".to_owned(), |t| format!("`{t}`")),
            found.position_ids.as_deref().map_or(String::new(), |p| format!(", positions `{p}` (0, 1, 2, ...)")),
        );
    }
    *io = found;
    *names = IoNames::Explicit(NamedRoles {
        ids: Some(io.input_ids.clone()),
        mask: Some(io.attention_mask.clone()),
        segment: Some(io.token_type_ids.clone().unwrap_or_default()),
        start: Some(io.start_logits.clone()),
        end: Some(io.end_logits.clone()),
        logits: None,
        position: Some(io.position_ids.clone().unwrap_or_default()),
        embedding: None,
    });
    Ok(())
}

/// Checks that `model` takes what `io` feeds and gives what it reads: a segment input it lacks is not fed, an input
/// the logits do not depend on (a `unique_ids` copied to an output of its own) is fed zeros, anything else missing
/// is an error listing both sides.
pub(crate) fn fit_io(io: &mut ModelIo, model: &Model, model_path: &Path) -> Result<()> {
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

/// A model embeds a fixed number of positions: a longer --seq-len would fail at the first inference with a broadcast
/// error from ONNX Runtime, so it is checked here.
pub(crate) fn check_positions(model: &Model, model_path: &Path, seq_len: usize) -> Result<()> {
    let Some((table, rows)) = model_io::roles::position_table(model.graph()) else {
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

/// Ids that every BERT WordPiece vocabulary (uncased, cased, multilingual, DistilBERT) gives its special tokens.
const BERT_ANCHORS: [(u32, &str); 5] = [(0, "[PAD]"), (100, "[UNK]"), (101, "[CLS]"), (102, "[SEP]"), (103, "[MASK]")];

/// The BERT special tokens that are not at their usual ids (empty for a vocabulary under 1,000 tokens: test and toy
/// vocabularies are laid out freely; and for one that names its specials as RoBERTa and MPNet do, `<s>` ...).
fn anchor_mismatches(tok: &Tokenizer) -> Vec<String> {
    if tok.vocab_size() < 1000 || tok.id_to_token(tok.cls_id).as_deref() != Some("[CLS]") {
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
fn check_anchors(tok: &Tokenizer, vocab: &Path) {
    let off = anchor_mismatches(tok);
    if off.is_empty() {
        tracing::debug!("{}: [PAD] [UNK] [CLS] [SEP] [MASK] at BERT's ids 0, 100-103", vocab.display());
    } else {
        // Once per run: every corpus of the run is checked with the same vocabulary.
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!(
                "{}: special tokens not where BERT vocabularies have them ({}); if this is not the model's own \
                 vocabulary, every answer will be wrong",
                vocab.display(),
                off.join("; ")
            )
        });
    }
}

/// The tokenizer model `transformers` builds for a `tokenizer_class` (tokenizer_config.json), for the classes of
/// encoder models; `None` for one not listed. The longer names first: `XLMRobertaTokenizer` is not RoBERTa's BPE.
fn kind_of_class(class: &str) -> Option<&'static str> {
    const KINDS: [(&str, &str); 16] = [
        ("XLMRoberta", "Unigram"),
        ("DebertaV2", "Unigram"),
        ("Camembert", "Unigram"),
        ("Albert", "Unigram"),
        ("XLNet", "Unigram"),
        ("T5", "Unigram"),
        ("Roberta", "BPE"),
        ("Deberta", "BPE"),
        ("Longformer", "BPE"),
        ("Bart", "BPE"),
        ("GPT2", "BPE"),
        ("MPNet", "WordPiece"),
        ("Electra", "WordPiece"),
        ("Funnel", "WordPiece"),
        ("LayoutLM", "WordPiece"),
        ("Bert", "WordPiece"),
    ];
    KINDS.iter().find(|(prefix, _)| class.starts_with(prefix)).map(|(_, kind)| *kind)
}

/// The tokenizer against what the model's folder declares (`tokenizer_class` of its tokenizer_config.json): a
/// tokenizer of another kind (a BPE tokenizer.json beside a BERT model) is an error naming both files.
pub(crate) fn check_tokenizer_kind(tok: &Tokenizer, tok_path: &Path, folder: &Path) -> Result<()> {
    let config = folder.join("tokenizer_config.json");
    let Some(class) = config
        .is_file()
        .then(|| crate::disk::read_text(&config, "JSON").ok())
        .flatten()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("tokenizer_class")?.as_str().map(str::to_owned))
    else {
        return Ok(());
    };
    match kind_of_class(&class) {
        Some(kind) if kind != tok.model_kind() => Err(Error::Input {
            path: tok_path.to_path_buf(),
            reason: format!(
                "a {} tokenizer, but {} declares {class}, a {kind} tokenizer: this tokenizer is not the model's",
                tok.model_kind(),
                config.display()
            ),
        }),
        _ => Ok(()),
    }
}

/// A tokenizer's vocabulary as [`check_vocab`] checks it.
pub(crate) struct Vocabulary<'a> {
    pub tok: &'a Tokenizer,
    /// The file it came from (vocab.txt or tokenizer.json).
    pub path: &'a Path,
    /// `--force`: a much smaller vocabulary is used, with a warning.
    pub force: bool,
}

/// The vocabulary against the word embedding `input_ids` indexes: an error when it holds ids past the table, or
/// (unless forced) when it has under 90 % of the table's rows; a warning when its special tokens are not where
/// BERT's are.
pub(crate) fn check_vocab(model: &Model, model_path: &Path, input_ids: &str, vocab: &Vocabulary) -> Result<()> {
    check_anchors(vocab.tok, vocab.path);
    let Some((table, rows)) = model_io::roles::word_embedding(model.graph(), input_ids) else {
        tracing::debug!("no Gather of {input_ids} on an initializer found; vocabulary size not checked");
        return Ok(());
    };
    // The ids it can give, 0 to its largest (a vocabulary padded with repeated lines to the table's size spans it).
    let size = i64::from(vocab.tok.max_token_id()) + 1;
    let sizes = format!(
        "the vocabulary has {size} token ids but the model {} embeds {rows} (initializer `{table}`)",
        model_path.display()
    );
    if size > rows {
        return Err(Error::Input {
            path: vocab.path.to_path_buf(),
            reason: format!("{sizes}: ids past its table; this vocabulary does not belong to this model"),
        });
    }
    if size * 10 < rows * 9 {
        let why = format!("{sizes}: most likely another model's vocabulary, which gives every answer wrong");
        if !vocab.force {
            return Err(Error::Input {
                path: vocab.path.to_path_buf(),
                reason: format!("{why}; --force uses it anyway"),
            });
        }
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| tracing::warn!("{}: {why} (used, as --force asks)", vocab.path.display()));
    }
    Ok(())
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
            Tokenizer::from_vocab(&p, true).unwrap()
        };
        assert!(anchor_mismatches(&write("bert.txt", &tokens)).is_empty());
        tokens.swap(101, 500);
        let off = anchor_mismatches(&write("shuffled.txt", &tokens));
        assert_eq!(off.len(), 1, "{off:?}");
        assert!(off[0].contains("[CLS] expected at 101"), "{off:?}");
    }
}
