//! Selection: which nodes a policy quantizes and which of their tensors want a Q/DQ pair, before any range is
//! looked at.

use std::collections::{HashMap, HashSet};

use onnx_ir::proto::NodeProto;
use onnx_ir::{DataType, GraphIndex};

use crate::error::{Error, Result};
use crate::patterns;
use crate::policy::{Matchers, Policy, ResidualAdd, SoftmaxRange};
use crate::types::Skipped;

/// The selected nodes and the tensors they want quantized.
#[derive(Debug, Default)]
pub(crate) struct Selection {
    /// `(tensor, first selected node wanting it)` in first-seen order.
    pub tensors: Vec<(String, usize)>,
    /// Tensor -> selected nodes reading it (unique, node order).
    pub receivers: HashMap<String, Vec<usize>>,
    /// Tensors marked because they are outputs of quantized nodes.
    outputs: HashSet<String>,
    pub skipped: Vec<Skipped>,
}

impl Selection {
    /// The selected nodes reading `tensor`.
    pub fn receivers(&self, tensor: &str) -> &[usize] {
        self.receivers.get(tensor).map(Vec::as_slice).unwrap_or_default()
    }

    /// True when `tensor` is marked as the output of a quantized node: its pair feeds every reader.
    pub fn is_output(&self, tensor: &str) -> bool {
        self.outputs.contains(tensor)
    }

    /// Node `i` wants its inputs 0 and 1 quantized, and `output` (its own, or the bias Add's after it) when given.
    fn mark(&mut self, n: &NodeProto, i: usize, output: Option<&str>) {
        for inp in &n.input[..2] {
            let r = self.receivers.entry(inp.clone()).or_default();
            if r.is_empty() {
                self.tensors.push((inp.clone(), i));
            }
            if !r.contains(&i) {
                r.push(i);
            }
        }
        if let Some(out) = output
            && self.outputs.insert(out.to_owned())
            && !self.receivers.contains_key(out)
        {
            self.tensors.push((out.to_owned(), i));
        }
    }

    /// Moves the tensors that cannot or must not be quantized to `skipped`, with the reason.
    fn drop_unquantizable(&mut self, ix: &GraphIndex, m: &Matchers) {
        for (t, first) in std::mem::take(&mut self.tensors) {
            let elem = ix.elem_type(&t);
            let reason = if m.tensor_excluded(&t) {
                Some("excluded by exclude_tensors".to_string())
            } else if ix.producer_op(&t) == Some("DequantizeLinear") {
                Some("already the output of a DequantizeLinear".to_string())
            } else if elem.is_some_and(|e| e != DataType::Float as i32) {
                Some(format!("element type {} is not float32", onnx_ir::data_type_name(elem.unwrap_or_default())))
            } else {
                None
            };
            match reason {
                Some(reason) => self.skipped.push(Skipped { tensor: t, reason }),
                None => self.tensors.push((t, first)),
            }
        }
    }
}

/// `#i` for an unnamed node.
pub(crate) fn node_label(n: &NodeProto, i: usize) -> String {
    if n.name().is_empty() { format!("#{i}") } else { n.name().to_string() }
}

fn bad_node(n: &NodeProto, i: usize, reason: String) -> Error {
    Error::BadNode { node: node_label(n, i), op_type: n.op_type().to_string(), reason }
}

/// A selected node must be well-formed on defined tensors: `MatMul` and `Add` take 2 inputs, the other MatMul-like
/// ops at least their A and B ([`patterns::matmul_rule`]); each has one output (`Attention` may have more).
fn check_selected(ix: &GraphIndex, n: &NodeProto, i: usize) -> Result<()> {
    let binary = matches!(n.op_type(), "MatMul" | "Add");
    let inputs_ok = if binary { n.input.len() == 2 } else { n.input.len() >= 2 };
    let outputs_ok = n.output.len() == 1 || n.op_type() == "Attention" && !n.output.is_empty();
    if !inputs_ok || !outputs_ok || n.input[..2].iter().any(String::is_empty) {
        let want = if binary { "2 inputs" } else { "inputs A and B" };
        let found =
            format!("expected {want} and 1 output, found {} inputs and {} outputs", n.input.len(), n.output.len());
        return Err(bad_node(n, i, found));
    }
    match n.input.iter().filter(|inp| !inp.is_empty()).find(|inp| !ix.is_defined(inp)) {
        Some(inp) => {
            Err(bad_node(n, i, format!("input '{inp}' is neither an initializer, a graph input nor a node output")))
        }
        None => Ok(()),
    }
}

/// Whether a selected node's inputs are quantized under `policy`: Adds only when residual (and the policy
/// quantizes those), MatMul-like ops with a variable B only unless `matmul_const_b_only` and when they contract at
/// least `variable_min_depth` elements, and not one reading attention probabilities (`P·V`) under `softmax_range =
/// float`.
fn wants_inputs(ix: &GraphIndex, n: &NodeProto, policy: &Policy) -> bool {
    match n.op_type() {
        "Add" => patterns::is_residual_add(ix, n) && policy.residual_add == ResidualAdd::Quantize,
        _ if patterns::matmul_rule(n).is_some() => {
            let float_probabilities = policy.softmax_range == SoftmaxRange::Float
                && n.input[..2].iter().any(|t| patterns::is_softmax_output(ix, t));
            let constant_b = ix.is_initializer(&n.input[1]);
            // A MatMul of two variables contracting fewer elements than `variable_min_depth` stays float (one whose
            // depth the graph does not tell is quantized as the rest of the policy says).
            let deep_enough = constant_b
                || policy.variable_min_depth == 0
                || patterns::contracted_depth(ix, n).is_none_or(|d| d >= i64::from(policy.variable_min_depth));
            (!policy.matmul_const_b_only || constant_b) && !float_probabilities && deep_enough
        }
        _ => true,
    }
}

/// The output a selected node has quantized: its own under `quantize_outputs`; under `quantize_fc_outputs`, a
/// constant-weight MatMul's, taken after the bias `Add` that alone reads it (the other operand an initializer).
fn quantized_output<'a>(ix: &'a GraphIndex, n: &'a NodeProto, policy: &Policy) -> Option<&'a str> {
    let own = n.output.first().map(String::as_str);
    if policy.quantize_outputs {
        return own;
    }
    let fully_connected = patterns::matmul_rule(n).is_some() && ix.is_initializer(&n.input[1]);
    if !policy.quantize_fc_outputs || !fully_connected {
        return None;
    }
    let out = own?;
    match ix.readers(out) {
        [(reader, _)] => {
            let add = ix.node(*reader);
            let bias = add.op_type() == "Add" && add.input.iter().any(|t| t != out && ix.is_initializer(t));
            if bias && !ix.is_graph_output(out) { add.output.first().map(String::as_str) } else { own }
        }
        _ => own,
    }
}

/// Every node name or glob of `include_nodes` / `exclude_nodes` must match a node, and every one of
/// `exclude_tensors` a tensor: a mistyped one would otherwise be ignored without a word. Uses the policy's compiled
/// sets (`m`), whose pattern indices follow the lists.
pub(crate) fn check_node_patterns(ix: &GraphIndex, policy: &Policy, m: &Matchers) -> Result<()> {
    let nodes: Vec<&str> = ix.graph().node.iter().map(|n| n.name()).filter(|n| !n.is_empty()).collect();
    let tensors: Vec<&str> =
        ix.graph().node.iter().flat_map(|n| n.input.iter().chain(&n.output)).map(String::as_str).collect();
    let lists = [
        ("include_nodes", &policy.include_nodes, &m.include, "node", &nodes),
        ("exclude_nodes", &policy.exclude_nodes, &m.exclude, "node", &nodes),
        ("exclude_tensors", &policy.exclude_tensors, &m.tensors, "tensor", &tensors),
    ];
    for (key, patterns, set, what, names) in lists {
        let Some(set) = set else { continue };
        let mut hit = vec![false; patterns.len()];
        for name in names.iter() {
            for i in set.matches(name) {
                hit[i] = true;
            }
        }
        if let Some(i) = hit.iter().position(|h| !h) {
            let pattern = patterns[i].clone();
            let hint = if what == "tensor"
                && ["_shifted", "_QuantizeLinear", "_DequantizeLinear"].iter().any(|s| pattern.contains(s))
            {
                "; a name from a QDQ model (`<t>_shifted`, `<t>_QuantizeLinear_Output`, ...) stands for the float tensor `<t>`".to_owned()
            } else {
                String::new()
            };
            let example = names.first().copied().unwrap_or_default().to_owned();
            return Err(Error::UnmatchedPattern { key, pattern, what, example, hint });
        }
    }
    Ok(())
}

/// Selects the nodes of the policy's op types that its include/exclude lists pass, and the tensors they want.
pub(crate) fn select(ix: &GraphIndex, policy: &Policy) -> Result<Selection> {
    let m = policy.matchers()?;
    check_node_patterns(ix, policy, &m)?;
    let quantized = |n: &NodeProto| policy.op_types.iter().any(|o| o == n.op_type());
    if !ix.graph().node.iter().any(quantized) {
        return Err(Error::NothingToQuantize { op_types: policy.op_types.join("/") });
    }
    let mut sel = Selection::default();
    for (i, n) in ix.graph().node.iter().enumerate() {
        // An outlier branch (`outlier_channels`) is the float part of a split MatMul input: never quantized.
        if !quantized(n) || !m.node_selected(n.name()) || patterns::is_outlier_branch(n) {
            continue;
        }
        check_selected(ix, n, i)?;
        if wants_inputs(ix, n, policy) {
            sel.mark(n, i, quantized_output(ix, n, policy));
        }
    }
    sel.drop_unquantizable(ix, &m);
    Ok(sel)
}
