//! Which graph inputs and outputs of a BERT play which role: token ids, attention mask, segment ids and position ids;
//! start and end logits (a question-answering head) or class logits. Found from what the graph does with each input
//! (the embedding Gather it indexes, the slot of ONNX Runtime's fused `EmbedLayerNormalization`, TF BERT's `OneHot`
//! lookups) and how the head's `[batch, seq, 2]` logits are taken apart, with names as the fallback; roles named by
//! the caller ([`NamedRoles`]) win. Like [`crate::patterns`], this is the one place that matches these op patterns.

mod embedding;

use onnx_ir::proto::{GraphProto, ValueInfoProto};
use onnx_ir::{GraphExt as _, GraphIndex};

pub use self::embedding::{EmbeddingOutput, FoundEmbedding, echo_outputs, embedding_output};

/// Roles the caller names (`--io-names ids=...,mask=...`); a role left `None` is found in the graph. `Some("")` for
/// `segment` or `position` says the model takes no such input.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NamedRoles {
    pub ids: Option<String>,
    pub mask: Option<String>,
    pub segment: Option<String>,
    pub start: Option<String>,
    pub end: Option<String>,
    /// Class logits (a model that is not a question-answering model).
    pub logits: Option<String>,
    pub position: Option<String>,
    /// A sentence embedding (`[batch, dim]`) or the token states to pool (`[batch, seq, hidden]`).
    pub embedding: Option<String>,
}

/// A BERT's input roles: token ids, attention mask and, if it takes them, segment ids and position ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRoles {
    pub ids: String,
    pub mask: String,
    pub segment: Option<String>,
    /// Position ids (fed 0, 1, 2, ... per row), when the model takes them as an input.
    pub position: Option<String>,
}

/// Why a role cannot be told: what the caller has to name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoleError {
    /// No single graph input plays `role` (`found`: the candidates, maybe none).
    #[error("cannot tell which input is the {role} among [{}] (found: {})", inputs.join(", "), found_list(found))]
    Input { role: &'static str, inputs: Vec<String>, found: Vec<String> },
    /// Start and end logits cannot be told apart among `outputs`.
    #[error("cannot tell the start and end logits among the outputs [{}]", outputs.join(", "))]
    Logits { outputs: Vec<String> },
    /// No single output holds class logits.
    #[error("cannot tell the class logits among the outputs [{}]", outputs.join(", "))]
    ClassLogits { outputs: Vec<String> },
    /// A named output the model does not have.
    #[error("the model has no output `{name}`; its outputs are [{}]", outputs.join(", "))]
    NoOutput { name: String, outputs: Vec<String> },
}

fn found_list(found: &[String]) -> String {
    if found.is_empty() { "none".to_owned() } else { found.join(", ") }
}

/// What the graph does with an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputRole {
    Ids,
    Segment,
    Mask,
    Position,
}

/// The graph inputs that are not initializers.
fn free_inputs(g: &GraphProto) -> Vec<&str> {
    g.input.iter().map(|v| v.name()).filter(|n| !g.is_initializer(n)).collect()
}

/// The input roles of `g`: named ones as given, the others from the graph ([`input_role`]), else by name.
pub fn input_roles(g: &GraphProto, named: &NamedRoles) -> Result<InputRoles, RoleError> {
    let inputs = free_inputs(g);
    let one = |given: &Option<String>, found: Vec<&str>, role: &'static str| -> Result<String, RoleError> {
        if let Some(g) = given {
            return Ok(g.clone());
        }
        match found.as_slice() {
            [one] => Ok((*one).to_owned()),
            _ => Err(RoleError::Input {
                role,
                inputs: inputs.iter().map(|s| s.to_string()).collect(),
                found: found.iter().map(|s| s.to_string()).collect(),
            }),
        }
    };
    let ids = one(&named.ids, pick(g, &inputs, InputRole::Ids, &["input_ids", "ids"]), "token ids")?;
    let segment = match &named.segment {
        Some(s) => Some(s.clone()).filter(|s| !s.is_empty()),
        None => {
            let found: Vec<&str> =
                pick(g, &inputs, InputRole::Segment, &["type", "segment"]).into_iter().filter(|s| *s != ids).collect();
            (!found.is_empty()).then(|| one(&None, found, "segment ids")).transpose()?
        }
    };
    let position = match &named.position {
        Some(p) => Some(p.clone()).filter(|p| !p.is_empty()),
        None => {
            let taken = [ids.as_str(), segment.as_deref().unwrap_or(""), named.mask.as_deref().unwrap_or("")];
            position_input(g, &taken)
        }
    };
    let rest: Vec<&str> = inputs
        .iter()
        .copied()
        .filter(|i| *i != ids && Some(*i) != segment.as_deref() && Some(*i) != position.as_deref())
        .collect();
    let mask_found =
        if rest.len() == 1 { rest.clone() } else { rest.iter().copied().filter(|i| i.contains("mask")).collect() };
    let mask = one(&named.mask, mask_found, "attention mask")?;
    Ok(InputRoles { ids, mask, segment, position })
}

/// The inputs of `inputs` that play `want`: the one the graph says, else one named exactly `hint[0]`, else those
/// (of no role in the graph) whose names contain a hint.
fn pick<'a>(g: &GraphProto, inputs: &[&'a str], want: InputRole, hint: &[&str]) -> Vec<&'a str> {
    let by_graph: Vec<&str> = inputs.iter().copied().filter(|i| input_role(g, i) == Some(want)).collect();
    if by_graph.len() == 1 {
        return by_graph;
    }
    // A name equal to the first hint (`input_ids`) wins over names that merely contain one (`token_type_ids`).
    let lower = |s: &str| s.to_ascii_lowercase();
    if let Some(exact) = inputs.iter().copied().find(|i| hint.first().is_some_and(|h| lower(i) == *h)) {
        return vec![exact];
    }
    inputs.iter().copied().filter(|i| input_role(g, i).is_none() && hint.iter().any(|h| lower(i).contains(h))).collect()
}

/// The input that takes position ids, among the graph inputs other than `taken`: the one gathering from the position
/// table (or ORT's EmbedLayerNormalization's position slot), else the only one so named.
pub fn position_input(g: &GraphProto, taken: &[&str]) -> Option<String> {
    let free: Vec<&str> = free_inputs(g).into_iter().filter(|n| !taken.contains(n)).collect();
    let by_graph: Vec<&str> = free.iter().copied().filter(|i| input_role(g, i) == Some(InputRole::Position)).collect();
    let by_name: Vec<&str> = free.iter().copied().filter(|i| i.to_ascii_lowercase().contains("position")).collect();
    match (by_graph.as_slice(), by_name.as_slice()) {
        ([one], _) | ([], [one]) => Some((*one).to_owned()),
        _ => None,
    }
}

/// What the graph does with `input`: the index of a Gather on an embedding table (the largest table: token ids; one
/// of at most 16 rows: segment ids; a table named for positions: position ids; likewise the depth of a `OneHot` times
/// the table, TF BERT's token-type lookup), or a slot of ORT's fused EmbedLayerNormalization or its quantized form (0
/// ids, 1 segment, 7 mask, 8 positions), looked for through value-preserving `Cast` / `Identity` nodes (ORT's
/// optimizer casts the inputs to int32) and reshapes (TF BERT flattens the ids first).
pub fn input_role(g: &GraphProto, input: &str) -> Option<InputRole> {
    tensor_role(g, input, 6)
}

fn tensor_role(g: &GraphProto, input: &str, depth: usize) -> Option<InputRole> {
    for n in g.node.iter().filter(|n| n.input.iter().any(|i| i == input)) {
        let slot = n.input.iter().position(|i| i == input)?;
        match (n.op_type(), slot) {
            ("Cast" | "Identity" | "Reshape" | "Unsqueeze" | "Squeeze" | "Flatten", 0) if depth > 0 => {
                if let Some(role) = n.output.first().and_then(|o| tensor_role(g, o, depth - 1)) {
                    return Some(role);
                }
            }
            ("EmbedLayerNormalization" | "QEmbedLayerNormalization", 0) => return Some(InputRole::Ids),
            ("EmbedLayerNormalization" | "QEmbedLayerNormalization", 1) => return Some(InputRole::Segment),
            ("EmbedLayerNormalization" | "QEmbedLayerNormalization", 7) => return Some(InputRole::Mask),
            ("EmbedLayerNormalization" | "QEmbedLayerNormalization", 8) => return Some(InputRole::Position),
            // TF BERT's token-type lookup (and the word lookup with `use_one_hot_embeddings`): a one-hot row times the
            // table, the depth its rows.
            ("OneHot", 0) => {
                let rows = n.input.get(1).and_then(|d| int_scalar(g, d))?;
                return Some(if rows <= 16 { InputRole::Segment } else { InputRole::Ids });
            }
            ("Gather", 1) => {
                let table = n.input.first()?;
                let rows = *g.initializer(table)?.dims.first()?;
                return Some(match rows {
                    _ if table.to_ascii_lowercase().contains("position") => InputRole::Position,
                    ..=16 => InputRole::Segment,
                    _ => InputRole::Ids,
                });
            }
            _ => {}
        }
    }
    None
}

/// An integer initializer or `Constant` holding one value (a scalar or `[1]`): a OneHot depth, a Gather / Slice index.
fn int_scalar(g: &GraphProto, name: &str) -> Option<i64> {
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

/// Start and end logits: named ones as given; else outputs whose names say start / end, else the two parts of one
/// tensor ([`logit_parts`]), else the only two outputs in order, else one output declared `[batch, seq, 2]` holding
/// both (start and end are then the same name).
pub fn logit_roles(g: &GraphProto, named: &NamedRoles) -> Result<(String, String), RoleError> {
    let outputs: Vec<&str> = g.output.iter().map(|v| v.name()).collect();
    let named_for = |word: &str| -> Vec<&str> {
        outputs.iter().copied().filter(|o| o.to_ascii_lowercase().contains(word)).collect()
    };
    let (s, e) = (named_for("start"), named_for("end"));
    let found = match (s.as_slice(), e.as_slice(), g.output.as_slice()) {
        ([s], [e], _) if s != e => Some((s.to_string(), e.to_string())),
        _ if let Some(pair) = logit_parts(g) => Some(pair),
        (_, _, [a, b]) if !embedding_like(g) => Some((a.name().to_owned(), b.name().to_owned())),
        (_, _, [o]) if stacked_logits(o) => Some((o.name().to_owned(), o.name().to_owned())),
        _ => None,
    };
    match (&named.start, &named.end, found) {
        (Some(s), Some(e), _) => Ok((s.clone(), e.clone())),
        (s, e, Some((fs, fe))) => Ok((s.clone().unwrap_or(fs), e.clone().unwrap_or(fe))),
        _ => Err(RoleError::Logits { outputs: outputs.iter().map(|s| s.to_string()).collect() }),
    }
}

/// Whether `g` gives a sentence embedding or token states ([`embedding_output`]): its two outputs are then not start
/// and end logits (a Hugging Face feature-extraction export has `last_hidden_state` and `pooler_output`).
fn embedding_like(g: &GraphProto) -> bool {
    embedding_output(g, &NamedRoles::default(), false).is_ok_and(|e| e.is_some())
}

/// The class-logits output: the named one, else the only output, else the only one whose name contains `logits`
/// (outputs that only copy an input through, [`echo_outputs`], left out of both).
pub fn class_logits(g: &GraphProto, named: &NamedRoles) -> Result<String, RoleError> {
    let outputs: Vec<&str> = g.output.iter().map(|o| o.name()).collect();
    let all = || outputs.iter().map(|s| s.to_string()).collect();
    if let Some(l) = &named.logits {
        return match outputs.contains(&l.as_str()) {
            true => Ok(l.clone()),
            false => Err(RoleError::NoOutput { name: l.clone(), outputs: all() }),
        };
    }
    let echoes = echo_outputs(g);
    let computed: Vec<&str> = outputs.iter().copied().filter(|o| !echoes.iter().any(|e| e == o)).collect();
    let with_name: Vec<&str> = computed.iter().copied().filter(|o| o.to_ascii_lowercase().contains("logits")).collect();
    match (computed.as_slice(), with_name.as_slice()) {
        ([one], _) | (_, [one]) => Ok((*one).to_owned()),
        _ => Err(RoleError::ClassLogits { outputs: all() }),
    }
}

/// Whether class output `output` holds probabilities: a Softmax over its last axis writes it
/// ([`qdq::softmax_logits`]), as in a classifier exported with its Softmax. Their logarithms are the logits less one
/// constant per input.
pub fn class_probabilities(g: &GraphProto, output: &str) -> bool {
    qdq::softmax_logits(g, output).is_some()
}

/// A probability of such an output ([`class_probabilities`]) read as a logit: its logarithm (0 as the smallest
/// positive float's, so that a class the model rules out stays finite).
pub fn probability_logit(p: f32) -> f32 {
    p.max(f32::MIN_POSITIVE).ln()
}

/// Two outputs that are parts 0 and 1 of one tensor (start, end): a QA head's `[batch, seq, 2]` logits taken apart
/// by a two-way `Split`, or by `Gather` / `Slice` at index 0 and 1 of one axis, then reshaped (Squeeze, Reshape,
/// Identity, ...), as Hugging Face exports and tf2onnx's `unstack` (ONNX Model Zoo BERT-Squad: outputs `unstack:1`,
/// `unstack:0`, `unique_ids:0`, end listed first) write it, whatever the outputs are named or listed.
pub fn logit_parts(g: &GraphProto) -> Option<(String, String)> {
    let index = GraphIndex::new(g);
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
pub fn stacked_logits(v: &ValueInfoProto) -> bool {
    onnx_ir::declared_dims(v).is_some_and(|dims| dims.len() == 3 && dims[2] == Ok(2))
}

/// The position-embedding table and its rows: the table of ORT's EmbedLayerNormalization (input 3), else the one float
/// 2-D table a Gather reads with indices that are not a graph input (preferring a name with "position").
pub fn position_table(g: &GraphProto) -> Option<(String, i64)> {
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

/// The word-embedding table `input_ids` is gathered from, and its rows.
pub fn word_embedding(g: &GraphProto, input_ids: &str) -> Option<(String, i64)> {
    g.node.iter().filter(|n| n.op_type() == "Gather" && n.input.get(1).map(String::as_str) == Some(input_ids)).find_map(
        |n| {
            let table = n.input.first()?;
            let rows = *g.initializer(table)?.dims.first()?;
            Some((table.clone(), rows))
        },
    )
}
