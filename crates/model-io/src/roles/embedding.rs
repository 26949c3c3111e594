//! Which output of a sentence-embedding model (sentence-transformers' MiniLM / mpnet / bge / e5 exports, Hugging Face
//! feature-extraction exports) holds the embedding: a `[batch, dim]` output pooled in the graph, or the
//! `[batch, seq, hidden]` token states that the caller pools as the model's folder says. Outputs that only copy an
//! input through (PyTorch exports list the ids and the mask again) play no role.

use std::collections::{HashMap, HashSet};

use onnx_ir::proto::GraphProto;
use onnx_ir::{GraphExt as _, GraphIndex};

use super::{NamedRoles, RoleError};

/// Where a model gives its sentence embedding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmbeddingOutput {
    /// `[batch, dim]`: pooled (and perhaps normalised) in the graph.
    Pooled(String),
    /// `[batch, seq, hidden]`: the token states, pooled by the caller.
    TokenStates(String),
}

impl EmbeddingOutput {
    /// The output's name.
    pub fn name(&self) -> &str {
        match self {
            EmbeddingOutput::Pooled(n) | EmbeddingOutput::TokenStates(n) => n,
        }
    }
}

/// The embedding output and why it was taken (said to the user).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundEmbedding {
    pub output: EmbeddingOutput,
    pub why: String,
}

/// Output names exporters give a pooled sentence embedding (compared lower-cased): sentence-transformers' and
/// optimum's `sentence_embedding`, and the plain names other exporters use.
const POOLED_NAMES: [&str; 6] =
    ["sentence_embedding", "sentence_embeddings", "embeddings", "embedding", "text_embeds", "sentence_embeds"];
/// Output names of token states (Hugging Face's feature extraction, sentence-transformers' token embeddings).
const STATE_NAMES: [&str; 4] = ["last_hidden_state", "token_embeddings", "hidden_states", "token_embedding"];
/// Ops that do matrix work on learned weights (float or integer): a tensor behind one of them is computed by the
/// encoder, and an output behind one after pooling is a head (a classifier, BERT's pooler), not an embedding.
const WEIGHTED_OPS: [&str; 15] = [
    "MatMul",
    "Gemm",
    "FusedMatMul",
    "Attention",
    "MultiHeadAttention",
    "GroupQueryAttention",
    "Conv",
    "MatMulInteger",
    "MatMulIntegerToFloat",
    "QAttention",
    "QGemm",
    "QLinearMatMul",
    "DynamicQuantizeMatMul",
    "EmbedLayerNormalization",
    "QEmbedLayerNormalization",
];
/// Ops that pass an input's value through unchanged (an output behind only these copies that input).
const COPY_OPS: [&str; 6] = ["Identity", "Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten"];

/// The outputs that only copy a graph input (or are one): PyTorch exports of sentence-transformers models list
/// `input_ids` and `attention_mask` again as outputs.
pub fn echo_outputs(g: &GraphProto) -> Vec<String> {
    let ix = GraphIndex::new(g);
    let inputs: HashSet<&str> = g.input.iter().map(|i| i.name()).filter(|n| !g.is_initializer(n)).collect();
    g.output
        .iter()
        .map(|o| o.name())
        .filter(|o| {
            let mut t = o.to_string();
            for _ in 0..8 {
                if inputs.contains(t.as_str()) {
                    return true;
                }
                match ix.producer_node(&t) {
                    Some(n) if COPY_OPS.contains(&n.op_type()) && !n.input.is_empty() => t = n.input[0].clone(),
                    _ => return false,
                }
            }
            false
        })
        .map(str::to_owned)
        .collect()
}

/// The sentence-embedding output of `g`, or `None` when it has none (a question-answering model, a classifier).
/// In order: the output named by `named.embedding`; an output named as exporters name a pooled embedding
/// ([`POOLED_NAMES`]); with `pooling_asked` (the caller pools, e.g. `--pooling`), the token states; the one output
/// pooled from the token states in the graph by ops without weights (mean, CLS, max pooling and normalisation:
/// a head with a `MatMul` / `Gemm` after the encoder, like BERT's pooler or a classifier, is not one); the token
/// states (an output so named, or a rank-3 output written by the last LayerNorm); BERT's `pooler_output`.
pub fn embedding_output(
    g: &GraphProto,
    named: &NamedRoles,
    pooling_asked: bool,
) -> Result<Option<FoundEmbedding>, RoleError> {
    let outputs: Vec<&str> = g.output.iter().map(|o| o.name()).collect();
    let echoes = echo_outputs(g);
    let candidates: Vec<&str> = outputs.iter().copied().filter(|o| !echoes.iter().any(|e| e == o)).collect();
    let ranks = output_ranks(g);
    let ix = GraphIndex::new(g);
    let found = |output: EmbeddingOutput, why: String| Ok(Some(FoundEmbedding { output, why }));
    let by_rank = |name: &str| match ranks.get(name) {
        Some(3) => EmbeddingOutput::TokenStates(name.to_owned()),
        _ => EmbeddingOutput::Pooled(name.to_owned()),
    };
    if let Some(name) = &named.embedding {
        if !outputs.contains(&name.as_str()) {
            let outputs = outputs.iter().map(|s| s.to_string()).collect();
            return Err(RoleError::NoOutput { name: name.clone(), outputs });
        }
        return found(by_rank(name), "named by --io-names embedding=".into());
    }
    let lower = |s: &str| s.to_ascii_lowercase();
    if let Some(o) = candidates.iter().find(|o| POOLED_NAMES.contains(&lower(o).as_str())) {
        return found(by_rank(o), format!("the output named `{o}`"));
    }
    let states: Vec<&str> = candidates
        .iter()
        .copied()
        .filter(|o| {
            let by_layer_norm = written_by_layer_norm(&ix, o).is_some();
            let rank3 = ranks.get(*o).map_or(by_layer_norm, |r| *r == 3);
            rank3 && (STATE_NAMES.contains(&lower(o).as_str()) || by_layer_norm)
        })
        .collect();
    if let (true, [one]) = (pooling_asked, states.as_slice()) {
        return found(EmbeddingOutput::TokenStates((*one).to_owned()), "token states, pooled as asked".into());
    }
    let pooled: Vec<(&str, String)> = candidates
        .iter()
        .copied()
        .filter(|o| ranks.get(*o) == Some(&2))
        .filter_map(|o| Some((o, pooled_from(&ix, &ranks, o)?)))
        .collect();
    if let [(o, from)] = pooled.as_slice() {
        return found(
            EmbeddingOutput::Pooled((*o).to_owned()),
            format!("`{o}` is pooled from the token states `{from}`"),
        );
    }
    if let [one] = states.as_slice() {
        return found(EmbeddingOutput::TokenStates((*one).to_owned()), format!("`{one}` holds the token states"));
    }
    if let Some(o) = candidates.iter().find(|o| lower(o) == "pooler_output") {
        return found(EmbeddingOutput::Pooled((*o).to_owned()), "BERT's pooler output ([CLS], dense, tanh)".into());
    }
    Ok(None)
}

/// Each tensor's rank where the graph declares or implies it ([`onnx_ir::ranks`]), declared output shapes first.
fn output_ranks(g: &GraphProto) -> HashMap<String, usize> {
    let mut ranks = onnx_ir::ranks(g);
    for o in &g.output {
        if let Some(dims) = onnx_ir::declared_dims(o) {
            ranks.insert(o.name().to_owned(), dims.len());
        }
    }
    ranks
}

/// The width of the LayerNorm writing `tensor` (its last node, perhaps behind copies: `Identity`, `Cast`, ...), if
/// one does.
fn written_by_layer_norm(ix: &GraphIndex, tensor: &str) -> Option<usize> {
    let mut n = ix.producer_node(tensor)?;
    for _ in 0..4 {
        if !COPY_OPS.contains(&n.op_type()) {
            break;
        }
        n = ix.producer_node(n.input.first()?)?;
    }
    qdq::layer_norm_channels(ix, n)
}

/// The token states `output` is pooled from: walking back from `output` through ops without weights, the one rank-3
/// tensor computed by the encoder ([`computed_by_encoder`]) and written by a LayerNorm (or listed as an output) that
/// it reaches; `None` when the walk meets a weighted op first (a head) or reaches no such tensor, or several.
fn pooled_from(ix: &GraphIndex, ranks: &HashMap<String, usize>, output: &str) -> Option<String> {
    let (mut stack, mut seen, mut states) = (vec![output.to_owned()], HashSet::new(), HashSet::new());
    while let Some(t) = stack.pop() {
        if !seen.insert(t.clone()) || seen.len() > 512 {
            continue;
        }
        // Token states: rank 3, or of a rank the graph does not tell (ONNX Runtime's fused ops, reshapes to shapes
        // computed at run time) when a LayerNorm writes them.
        let by_layer_norm = written_by_layer_norm(ix, &t).is_some();
        let rank3 = match ranks.get(&t) {
            Some(r) => *r == 3,
            None => by_layer_norm,
        };
        if t != output && rank3 && (by_layer_norm || ix.is_graph_output(&t)) && computed_by_encoder(ix, &t) {
            states.insert(t);
            continue;
        }
        let Some(n) = ix.producer_node(&t) else { continue };
        if WEIGHTED_OPS.contains(&n.op_type()) {
            return None;
        }
        // A Shape reads only its input's dimensions.
        if n.op_type() != "Shape" {
            stack.extend(n.input.iter().filter(|i| !i.is_empty()).cloned());
        }
    }
    let mut states: Vec<String> = states.into_iter().collect();
    (states.len() == 1).then(|| states.remove(0))
}

/// Whether `tensor`'s value comes through a weighted op (the encoder's): the attention mask broadcast to the states'
/// shape (through `Shape` of them) does not.
fn computed_by_encoder(ix: &GraphIndex, tensor: &str) -> bool {
    let (mut stack, mut seen) = (vec![tensor.to_owned()], HashSet::new());
    while let Some(t) = stack.pop() {
        if !seen.insert(t.clone()) || seen.len() > 4096 {
            continue;
        }
        let Some(n) = ix.producer_node(&t) else { continue };
        if WEIGHTED_OPS.contains(&n.op_type()) || qdq::layer_norm_channels(ix, n).is_some() {
            return true;
        }
        if n.op_type() != "Shape" {
            stack.extend(n.input.iter().filter(|i| !i.is_empty()).cloned());
        }
    }
    false
}
