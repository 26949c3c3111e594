//! What qdq knows about the op patterns of transformer graphs, in one place: which Adds are residual, what a
//! LayerNorm looks like (fused or decomposed) and where its γ / β are, which tensors are attention probabilities
//! read by `P·V`, and which MatMuls multiply an activation by a constant weight. Placement ([`crate::select`]),
//! parameters ([`crate::params`]) and smoothing ([`crate::smooth`]) ask these questions of a
//! [`GraphIndex`]; none of them matches op types itself.

use onnx_ir::proto::{GraphProto, NodeProto};
use onnx_ir::{DataType, GraphExt as _, GraphIndex, get_attr_int};

use crate::error::Result;
use crate::policy::Matchers;

/// An `Add` whose output feeds a LayerNorm (`ReduceMean` of the decomposed form, opset <= 16, or
/// `LayerNormalization`, opset >= 17): the residual Adds of a transformer. Other Adds (bias Adds, ...) are not.
pub(crate) fn is_residual_add(ix: &GraphIndex, n: &NodeProto) -> bool {
    n.op_type() == "Add"
        && n.output.first().is_some_and(|out| {
            ix.readers(out).iter().any(|&(r, _)| matches!(ix.node(r).op_type(), "ReduceMean" | "LayerNormalization"))
        })
}

/// The logits behind graph output `output` when it holds class probabilities: written (through exporters'
/// `Identity`) by a `Softmax` over its last axis (`axis` -1 or the declared rank's last; no `axis` on a rank-2 output,
/// the last axis under every opset's default). A classifier exported with its Softmax gives probabilities, whose
/// logarithms are these logits less one constant per input. `None` when the output is not such a Softmax's.
pub fn softmax_logits(g: &GraphProto, output: &str) -> Option<String> {
    let rank = g.output.iter().find(|o| o.name() == output).and_then(onnx_ir::declared_dims).map(|d| d.len() as i64);
    let mut t = output.to_owned();
    // A bound on the walk: exporters put one or two Identities there.
    for _ in 0..8 {
        let n = &g.node[g.producer_of(&t)?];
        match n.op_type() {
            "Identity" => t = n.input.first()?.clone(),
            "Softmax" => {
                let last = match (get_attr_int(n, "axis").ok().flatten(), rank) {
                    (Some(-1), _) | (None, Some(2)) => true,
                    (Some(a), Some(r)) => a == r - 1,
                    _ => false,
                };
                return last.then(|| n.input.first().cloned()).flatten();
            }
            _ => return None,
        }
    }
    None
}

/// True if `tensor` holds attention probabilities: a Softmax output, or one passed on with its values still in
/// [0, 1] by what exporters put between Softmax and `P·V`: `Identity`, `Dropout` (inference), a `Cast` to float, and
/// the "safe softmax" `Where(c, 0, P)` (PyTorch's export of `scaled_dot_product_attention`, the attention Hugging
/// Face models use by default, writes `Where(IsNaN(P), 0, P)` after every Softmax).
pub(crate) fn is_softmax_output(ix: &GraphIndex, tensor: &str) -> bool {
    let mut t = tensor;
    // A bound on the walk: exporters put one or two nodes there.
    for _ in 0..8 {
        let Some(n) = ix.producer_node(t) else { return false };
        t = match n.op_type() {
            "Softmax" => return true,
            "Identity" => &n.input[0],
            "Dropout" if n.output.first().is_some_and(|o| o == t) => &n.input[0],
            "Cast" if get_attr_int(n, "to").ok().flatten() == Some(DataType::Float as i64) => &n.input[0],
            "Where" if n.input.len() == 3 => match (is_zero(ix, &n.input[1]), is_zero(ix, &n.input[2])) {
                (true, false) => &n.input[2],
                (false, true) => &n.input[1],
                _ => return false,
            },
            _ => return false,
        };
    }
    false
}

/// True if `tensor` is a constant (initializer or `Constant` node) whose every value is 0.
fn is_zero(ix: &GraphIndex, tensor: &str) -> bool {
    constant_of(ix, tensor)
        .and_then(|t| onnx_ir::tensor_to_array::<f32>(&t).ok())
        .is_some_and(|a| !a.is_empty() && a.iter().all(|v| *v == 0.0))
}

/// The value of a constant tensor: an initializer, or a `Constant` node's output.
fn constant_of(ix: &GraphIndex, tensor: &str) -> Option<onnx_ir::proto::TensorProto> {
    match ix.initializer(tensor) {
        Some(t) => Some(t.clone()),
        None => ix.producer_node(tensor).and_then(|n| onnx_ir::constant_value(n).ok().flatten()),
    }
}

/// True if exactly one node reads `tensor` and it is not a graph output: a rewrite of its value is seen by that node
/// only.
fn read_once(ix: &GraphIndex, tensor: &str) -> bool {
    ix.readers(tensor).len() == 1 && !ix.is_graph_output(tensor)
}

/// True if every node of `readers` is a MatMul reading `tensor` as its first input only (`P·V`): then quantizing
/// `tensor - c` can be corrected exactly after each MatMul.
pub(crate) fn read_only_as_matmul_a(ix: &GraphIndex, tensor: &str, readers: &[usize]) -> bool {
    !readers.is_empty()
        && readers.iter().all(|&r| {
            let n = ix.node(r);
            n.op_type() == "MatMul" && n.input[0] == tensor && n.input[1] != tensor
        })
}

/// Where a matrix-multiply op keeps its operands: every op here multiplies input 0 (A) by input 1 (B), and only
/// those two get pairs (a Gemm's C, an Attention's bias and mask stay as they are). This table is the one place
/// that knows the MatMul-like ops qdq quantizes (the `op_types` it accepts besides `Add`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MatMulRule {
    /// The axis of a constant 2-D B along which its output channels lie (per-channel scales); `None`: per-tensor.
    pub weight_axis: Option<usize>,
    /// The axis of a 2-D B contracted with A's last axis (0 for `[K, N]`, 1 for a transposed `[N, K]`): scaling A's
    /// channel `j` down and B's slice `j` along this axis up leaves the product unchanged (what smoothing does).
    /// `None` when A's last axis is not the contracted one (`transA`) or B is batched.
    pub contract_axis: Option<usize>,
}

/// The rule of node `n` if it is one of [`crate::MATMUL_OPS`]: plain `MatMul`; `Gemm` (`transA` / `transB`); ONNX Runtime's
/// `FusedMatMul` (also `transBatchA` / `transBatchB`); ONNX Runtime's fused `Attention`, whose input 1 is the packed
/// `[hidden, 3·hidden]` QKV weight.
pub(crate) fn matmul_rule(n: &NodeProto) -> Option<MatMulRule> {
    let flag = |name: &str| get_attr_int(n, name).ok().flatten().unwrap_or(0) != 0;
    let plain = MatMulRule { weight_axis: Some(1), contract_axis: Some(0) };
    match n.op_type() {
        "MatMul" | "Attention" => Some(plain),
        "Gemm" | "FusedMatMul" => {
            let batch = n.op_type() == "FusedMatMul" && (flag("transBatchA") || flag("transBatchB"));
            if batch {
                return Some(MatMulRule { weight_axis: None, contract_axis: None });
            }
            let (weight_axis, contract) = if flag("transB") { (0, 1) } else { (1, 0) };
            Some(MatMulRule { weight_axis: Some(weight_axis), contract_axis: (!flag("transA")).then_some(contract) })
        }
        _ => None,
    }
}

/// The axis of node `n`'s B (of rank `rank`) that its product contracts, for a MatMul-like op ([`matmul_rule`]);
/// `None` when B is batched in a way this does not follow (`FusedMatMul`'s `transBatchB`).
pub(crate) fn b_contracted_axis(n: &NodeProto, rank: usize) -> Option<usize> {
    let flag = |name: &str| get_attr_int(n, name).ok().flatten().unwrap_or(0) != 0;
    let (rows, cols) = (rank.saturating_sub(2), rank.saturating_sub(1));
    match n.op_type() {
        "MatMul" | "Attention" => Some(rows),
        "Gemm" => Some(if flag("transB") { 1 } else { 0 }),
        "FusedMatMul" if flag("transBatchB") => None,
        "FusedMatMul" => Some(if flag("transB") { cols } else { rows }),
        _ => None,
    }
}

/// A MatMul-like op ([`matmul_rule`]) multiplying an activation's last axis by a constant 2-D float weight.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConstWeightMatMul<'g> {
    /// Input A, the activation.
    pub input: &'g str,
    /// The weight's length along `contract_axis` (the channels of `input` it contracts).
    pub rows: usize,
}

/// `doc_string` of the nodes of an outlier branch ([`crate::split_outliers`]): the float part of a split MatMul input.
pub(crate) const OUTLIER_BRANCH_MARK: &str = "qdq: outlier channels in float";

/// Whether `n` belongs to an outlier branch [`crate::split_outliers`] wrote (it stays in float whatever the policy).
pub fn is_outlier_branch(n: &NodeProto) -> bool {
    n.doc_string.as_deref() == Some(OUTLIER_BRANCH_MARK)
}

/// Node `i` as a constant-weight MatMul-like op that `m` selects: named, A not a constant and contracted along its
/// last axis, B a 2-D float initializer with more than one channel along its contracted axis.
pub(crate) fn const_weight_matmul<'g>(ix: &GraphIndex<'g>, i: usize, m: &Matchers) -> Option<ConstWeightMatMul<'g>> {
    let n = ix.node(i);
    let contract_axis = matmul_rule(n)?.contract_axis?;
    if n.input.len() < 2 || n.name().is_empty() || !m.node_selected(n.name()) || is_outlier_branch(n) {
        return None;
    }
    if n.op_type() == "MatMul" && n.input.len() != 2 {
        return None;
    }
    let (x, w) = (&n.input[0], &n.input[1]);
    if x == w || ix.is_initializer(x) {
        return None;
    }
    let w = ix.initializer(w)?;
    let rows = *w.dims.get(contract_axis)?;
    (w.data_type() == DataType::Float as i32 && w.dims.len() == 2 && rows > 1)
        .then_some(ConstWeightMatMul { input: x.as_str(), rows: rows as usize })
}

/// How a LayerNorm applies its γ / β.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LayerNormForm {
    /// One node with γ / β as adjacent inputs: `LayerNormalization` (opset 17; 1 and 2),
    /// ONNX Runtime's `SkipLayerNormalization` (2 and 3) and `EmbedLayerNormalization` (5 and 6).
    Fused,
    /// `Add(Mul(norm, γ), β)` at the end of a decomposed LayerNorm (opset <= 16 exports).
    Decomposed {
        /// The `Mul` node applying γ.
        mul: String,
    },
}

/// Where a LayerNorm output's γ / β live.
pub(crate) struct LayerNormParams {
    pub form: LayerNormForm,
    pub gamma: String,
    pub beta: Option<String>,
    /// Length of γ (the normalised, last axis).
    pub channels: usize,
}

/// The channels a LayerNorm whose last node is `n` normalises (fused or decomposed, over the last axis with constant
/// per-channel γ / β), if it is one: what `model_io::roles` asks to tell a model's token states.
pub fn layer_norm_channels(ix: &GraphIndex, n: &NodeProto) -> Option<usize> {
    layer_norm_params(ix, n).ok().flatten().map(|p| p.channels)
}

/// γ / β of the LayerNorm whose last node is `n`, if it is one normalising the last axis with constant
/// per-channel parameters.
pub(crate) fn layer_norm_params(ix: &GraphIndex, n: &NodeProto) -> Result<Option<LayerNormParams>> {
    match n.op_type() {
        "LayerNormalization" => fused_layer_norm(ix, n, 1),
        "SkipLayerNormalization" => fused_layer_norm(ix, n, 2),
        "EmbedLayerNormalization" => fused_layer_norm(ix, n, 5),
        "Add" if n.input.len() == 2 => Ok(decomposed_layer_norm(ix, n)),
        _ => Ok(None),
    }
}

/// γ / β of a one-node LayerNorm. The ONNX Runtime forms normalise the last axis, and their other outputs (mask
/// index, the un-normalised sum) do not go through γ / β; a `LayerNormalization`'s mean / inverse-std outputs would
/// no longer match a rescaled γ, so one that exposes them is not a site.
fn fused_layer_norm(ix: &GraphIndex, n: &NodeProto, gamma_slot: usize) -> Result<Option<LayerNormParams>> {
    // Only normalisation over the last axis has per-channel γ / β along the axis MatMul contracts.
    let onnx = n.op_type() == "LayerNormalization";
    let axis = if onnx { get_attr_int(n, "axis")?.unwrap_or(-1) } else { -1 };
    let Some(gamma) = n.input.get(gamma_slot).filter(|s| !s.is_empty()) else { return Ok(None) };
    let Some(c) = vector_init(ix, gamma) else { return Ok(None) };
    let beta = n.input.get(gamma_slot + 1).filter(|s| !s.is_empty()).cloned();
    if axis != -1 || onnx && n.output.len() > 1 && n.output[1..].iter().any(|o| !o.is_empty()) {
        return Ok(None);
    }
    if beta.as_deref().is_some_and(|b| vector_init(ix, b) != Some(c)) {
        return Ok(None);
    }
    Ok(Some(LayerNormParams { form: LayerNormForm::Fused, gamma: gamma.clone(), beta, channels: c }))
}

/// `Add(Mul(norm, γ), β)` with γ, β constant vectors of the same length, the Mul read only by this Add and `norm`
/// the output of a `Div` ((x - mean) / std): a plain scaled tensor is not a LayerNorm.
fn decomposed_layer_norm(ix: &GraphIndex, n: &NodeProto) -> Option<LayerNormParams> {
    let (mul_out, beta) = if ix.is_initializer(&n.input[1]) {
        (&n.input[0], &n.input[1])
    } else if ix.is_initializer(&n.input[0]) {
        (&n.input[1], &n.input[0])
    } else {
        return None;
    };
    let mul = ix.producer_node(mul_out)?;
    if mul.op_type() != "Mul" || mul.input.len() != 2 {
        return None;
    }
    if !read_once(ix, mul_out) {
        return None;
    }
    let gamma = mul.input.iter().find(|i| ix.is_initializer(i))?;
    let other = mul.input.iter().find(|i| *i != gamma);
    if other.and_then(|o| ix.producer_op(o)).is_none_or(|op| op != "Div") {
        return None;
    }
    let (c, cb) = (vector_init(ix, gamma)?, vector_init(ix, beta)?);
    if c != cb {
        return None;
    }
    let form = LayerNormForm::Decomposed { mul: mul.name().to_string() };
    Some(LayerNormParams { form, gamma: gamma.clone(), beta: Some(beta.clone()), channels: c })
}

/// The length of a float initializer of shape `[len]` or `[1, .., 1, len]` with `len > 1`.
fn vector_init(ix: &GraphIndex, name: &str) -> Option<usize> {
    let t = ix.initializer(name)?;
    if t.data_type() != DataType::Float as i32 {
        return None;
    }
    let last = *t.dims.last()?;
    (last > 1 && t.dims[..t.dims.len() - 1].iter().all(|&d| d == 1)).then_some(last as usize)
}

/// Where an attention context comes from when the division smoothing applies to it can be made by its value
/// projection instead: `x = Reshape(Transpose(MatMul(P, Transpose(Reshape(V, [.., heads, head_size])))))` with
/// `V = MatMul(h, W) (+ b)`, `W` a `[in, heads·head_size]` float initializer and `b` a vector. Along that path channel
/// `j` of `V` (head `j / head_size`, lane `j % head_size`) stays channel `j` of `x` and is only multiplied by
/// attention probabilities and summed, so dividing `W`'s column `j` and `b_j` by `s_j` divides `x`'s channel `j` by
/// it, exactly. Checked: both Reshapes' target ends in (or, for the merge, reads back) `heads, head_size` with
/// `heads · head_size` = `channels` (= `W`'s columns), the head-size axis stays last through both Transposes, the head
/// axis is a batch axis of `P·V` and ends right before the head-size axis, and every tensor on the path has exactly
/// one reader (nothing else sees the divided values). `ranks`: [`onnx_ir::ranks`] of the graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ValueProjection {
    /// The value projection `MatMul` node.
    pub matmul: String,
    /// Its bias `Add` node and the bias initializer, if any.
    pub bias: Option<(String, String)>,
    /// The merging `Reshape` node writing `x`.
    pub merge: String,
}

/// The node that computes `x` behind shape-only ops (`Reshape`, `Transpose`, `Flatten`, `Squeeze`, `Unsqueeze`; at
/// most 8 of them): `x`'s producer itself when that is not one. `None` for a graph input or initializer.
pub(crate) fn behind_shape_ops<'g>(ix: &'g GraphIndex, x: &str) -> Option<&'g NodeProto> {
    let mut n = ix.producer_node(x)?;
    for _ in 0..8 {
        match n.op_type() {
            "Reshape" | "Transpose" | "Flatten" | "Squeeze" | "Unsqueeze" if !n.input.is_empty() => {
                n = ix.producer_node(&n.input[0])?;
            }
            _ => return Some(n),
        }
    }
    None
}

/// Whether `n` computes an attention's output (its context): a `MatMul` of two computed tensors (`P·V`) or one of ONNX
/// Runtime's fused attention ops. Structure only: where its smoothing division can go is [`value_projection`]'s
/// question.
pub(crate) fn is_attention_output(ix: &GraphIndex, n: &NodeProto) -> bool {
    match n.op_type() {
        "MatMul" => {
            n.input.len() == 2 && n.input.iter().all(|i| !ix.is_initializer(i) && ix.producer_node(i).is_some())
        }
        "Attention" | "MultiHeadAttention" | "QAttention" | "GroupQueryAttention" => true,
        _ => false,
    }
}

pub(crate) fn value_projection(
    ix: &GraphIndex,
    x: &str,
    channels: usize,
    ranks: &std::collections::HashMap<String, usize>,
) -> Option<ValueProjection> {
    let perm = |n: &NodeProto| get_attr_int_list(n, "perm");
    // Input counts checked with the op types: a malformed node is no match, never an index out of bounds.
    let node = |t: &str, op: &str, inputs: usize| {
        ix.producer_node(t).filter(|n| n.op_type() == op && n.input.len() == inputs && !n.output.is_empty())
    };
    let merge = node(x, "Reshape", 2)?;
    let t2 = node(&merge.input[0], "Transpose", 1)?;
    let pv = node(&t2.input[0], "MatMul", 2)?;
    let t1 = node(&pv.input[1], "Transpose", 1).filter(|_| pv.input[0] != pv.input[1])?;
    let split = node(&t1.input[0], "Reshape", 2)?;
    let [heads, head_size] = shape_suffix(ix, &split.input[1])?;
    // A head count left to Reshape (-1, as PyTorch's dynamo exporter writes it) is taken from the split output's
    // declared shape, when the exporter declared it.
    let heads = if heads > 0 { heads } else { declared_axis(ix, &split.output[0], 2)? };
    // (Shapes come from the file: a product past i64 is no match, never an overflow.)
    if heads <= 0
        || head_size <= 0
        || heads.checked_mul(head_size).and_then(|c| usize::try_from(c).ok()) != Some(channels)
    {
        return None;
    }
    let path = [&merge.input[0], &t2.input[0], &pv.input[1], &t1.input[0], &split.input[0]];
    if !path.iter().all(|t| read_once(ix, t)) {
        return None;
    }
    let (p1, p2) = (perm(t1)?, perm(t2)?);
    let rc = *ranks.get(t2.input[0].as_str())?;
    if ranks.get(t1.input[0].as_str()) != Some(&p1.len()) || !heads_line_up(&p1, &p2, rc) {
        return None;
    }
    let (matmul, bias) = projection(ix, &split.input[0], channels)?;
    if merge.name().is_empty() || pv.name().is_empty() {
        return None;
    }
    Some(ValueProjection { matmul, bias, merge: merge.name().to_string() })
}

/// The split output has rank `p1.len()` with (heads, head_size) last; after `p1` the head-size axis must stay last and
/// the head axis sit among P·V's batch axes; P·V's output (rank `rc`, aligned from the right) goes through `p2`, which
/// must put the head axis right before the head-size axis, last, for the merge to read channel `h·head_size + d`.
fn heads_line_up(p1: &[usize], p2: &[usize], rc: usize) -> bool {
    let r1 = p1.len();
    if r1 < 3 || p1[r1 - 1] != r1 - 1 || p2.len() != rc || rc < r1 {
        return false;
    }
    let Some(h1) = p1.iter().position(|&a| a == r1 - 2) else { return false };
    h1 + 2 < r1 && p2[rc - 1] == rc - 1 && p2[rc - 2] == rc - r1 + h1
}

/// `v = MatMul(h, W) + b` (or without `b`) with `W` a float `[in, channels]` initializer read by that MatMul only (a
/// weight is not copied) and `b` a `[channels]` one, and the MatMul's output read only by the Add: the MatMul's name
/// and the Add's name and bias.
fn projection(ix: &GraphIndex, v: &str, channels: usize) -> Option<(String, Option<(String, String)>)> {
    let mut v = v;
    let mut bias = None;
    let producer = ix.producer_node(v)?;
    if producer.op_type() == "Add" && producer.input.len() == 2 && !producer.name().is_empty() {
        let slot = producer.input.iter().position(|i| vector_init(ix, i) == Some(channels))?;
        // A bias other nodes also read (exporters merge equal initializers) is divided in a copy of its own.
        let b = &producer.input[slot];
        if ix.initializer(b)?.dims.len() != 1 {
            return None;
        }
        bias = Some((producer.name().to_string(), b.clone()));
        v = &producer.input[1 - slot];
        if !read_once(ix, v) {
            return None;
        }
    }
    let mm = ix.producer_node(v).filter(|n| n.op_type() == "MatMul" && n.input.len() == 2 && !n.name().is_empty())?;
    let w = ix.initializer(&mm.input[1])?;
    let plain = w.data_type() == DataType::Float as i32 && w.dims.len() == 2 && w.dims[1] as usize == channels;
    (plain && ix.readers(&mm.input[1]).len() == 1 && !ix.is_initializer(&mm.input[0]))
        .then(|| (mm.name().to_string(), bias))
}

/// Where ONNX Runtime's fused `Attention` (com.microsoft) writes an attention context `x`, the division smoothing applies
/// to it can be made by the V part of its packed weight instead, as [`value_projection`] does for the unfused graph:
/// context channel `j` is V's channel `j`, only multiplied by attention probabilities and summed. Checked: `x` is the
/// node's only output, it reads no `past` (cached values would not be divided) nor anything after the mask, its weight
/// is a float `[in, q + k + v]` initializer it alone reads with `v` = `channels` (`qkv_hidden_sizes`, else three equal
/// parts) and its bias, if any, a float `[q + k + v]` initializer. Returns the node's name and V's first column, `q + k`.
pub(crate) fn packed_attention_value(ix: &GraphIndex, x: &str, channels: usize) -> Option<(String, usize)> {
    let n = ix.producer_node(x)?;
    let fused = n.op_type() == "Attention" && n.domain() == "com.microsoft" && !n.name().is_empty();
    let only_output = n.output.first().is_some_and(|o| o == x) && n.output.iter().skip(1).all(String::is_empty);
    let no_past = n.input.iter().skip(4).all(String::is_empty);
    if !(fused && only_output && no_past && n.input.len() >= 2) {
        return None;
    }
    let w = ix.initializer(&n.input[1])?;
    let total = match get_attr_int_list(n, "qkv_hidden_sizes") {
        // (From the file: a sum past usize is no match, never an overflow.)
        Some(sizes) if sizes.len() == 3 && sizes[2] == channels => {
            sizes.iter().try_fold(0usize, |a, &s| a.checked_add(s))?
        }
        Some(_) => return None,
        None => 3 * channels,
    };
    let float = |t: &onnx_ir::proto::TensorProto| t.data_type() == DataType::Float as i32;
    let weight_ok = float(w) && w.dims.len() == 2 && w.dims[1] as usize == total && ix.readers(&n.input[1]).len() == 1;
    let bias_ok = match n.input.get(2).filter(|b| !b.is_empty()) {
        Some(b) => ix.initializer(b).is_some_and(|t| float(t) && t.dims.len() == 1 && t.dims[0] as usize == total),
        None => true,
    };
    (weight_ok && bias_ok).then(|| (n.name().to_string(), total - channels))
}

/// How many elements a MatMul of two variables contracts over (attention's head size in `Q·Kᵀ`), where the graph tells:
/// the last axis of A as `value_info` declares it, else followed back from A through Transposes (and scalings,
/// pairs) to the Reshape that split the heads (`[.., heads, head_size]`). `None` when it cannot be told.
pub(crate) fn contracted_depth(ix: &GraphIndex, n: &NodeProto) -> Option<i64> {
    let a = n.input.first()?;
    if let Some(d) = declared_axis(ix, a, 1).filter(|&d| d > 0) {
        return Some(d);
    }
    // The axis followed, counted from the end (1: the last).
    let (mut t, mut from_end) = (a.as_str(), 1usize);
    for _ in 0..8 {
        let p = ix.producer_node(t)?;
        match p.op_type() {
            "Transpose" => {
                let perm = get_attr_int_list(p, "perm")?;
                let axis = perm.len().checked_sub(from_end)?;
                from_end = perm.len().checked_sub(*perm.get(axis)?)?;
                t = p.input.first()?;
            }
            "Reshape" => {
                let [heads, size] = shape_suffix(ix, p.input.get(1)?)?;
                let d = match from_end {
                    1 => size,
                    2 => heads,
                    _ => return None,
                };
                return (d > 0).then_some(d);
            }
            // A scaling by a constant, a pair: the same axes.
            "Mul" | "Div" | "QuantizeLinear" | "DequantizeLinear" => {
                t = p.input.iter().find(|i| constant_of(ix, i).is_none())?;
            }
            _ => return None,
        }
    }
    None
}

/// The value the graph's `value_info` declares for axis `rank - from_end` of `tensor`, if it declares one.
fn declared_axis(ix: &GraphIndex, tensor: &str, from_end: usize) -> Option<i64> {
    let v = ix.graph().value_info.iter().find(|v| v.name() == tensor)?;
    let dims = onnx_ir::declared_dims(v)?;
    dims.len().checked_sub(from_end).and_then(|i| dims[i].clone().ok())
}

/// A `perm`-like attribute as axes.
fn get_attr_int_list(n: &NodeProto, name: &str) -> Option<Vec<usize>> {
    onnx_ir::get_attr_ints(n, name).ok().flatten()?.iter().map(|&a| usize::try_from(a).ok()).collect()
}

/// The last two values of a Reshape's target shape when they are constants: the shape itself a constant, or a
/// `Concat` (as exporters build `x.size()[:-1] + (heads, head_size)`) whose trailing pieces are.
fn shape_suffix(ix: &GraphIndex, shape: &str) -> Option<[i64; 2]> {
    let constant = |t: &str| -> Option<Vec<i64>> {
        let value = constant_of(ix, t)?;
        (value.data_type() == DataType::Int64 as i32 && value.dims.len() <= 1)
            .then(|| onnx_ir::tensor_to_array::<i64>(&value).ok())
            .flatten()
            .map(|a| a.iter().copied().collect())
    };
    let mut tail: Vec<i64> = match constant(shape) {
        Some(v) => v,
        None => {
            let cat = ix.producer_node(shape).filter(|n| n.op_type() == "Concat")?;
            let mut tail = Vec::new();
            for piece in cat.input.iter().rev() {
                let mut v = constant(piece)?;
                v.extend(tail);
                tail = v;
                if tail.len() >= 2 {
                    break;
                }
            }
            tail
        }
    };
    let n = tail.len();
    if n < 2 {
        return None;
    }
    let last = tail.split_off(n - 2);
    Some([last[0], last[1]])
}
