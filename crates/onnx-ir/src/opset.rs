//! Raising a model's default-domain opset, rewriting the nodes whose form changed on the way.
//!
//! Per-channel `QuantizeLinear` / `DequantizeLinear` (their `axis`) need opset 13, and many BERT exports in use are
//! older: opset 11 or 12 from TensorRT-era PyTorch exports, 10 and 8 in the ONNX Model Zoo. Raising only the
//! version number leaves an invalid model (an opset-13 `Unsqueeze` reads its axes from an input, not an attribute:
//! ONNX Runtime refuses to load it). [`upgrade_default_opset`] rewrites each node into the form the new opset
//! defines for the same computation:
//!
//! | op | before | change |
//! |---|---|---|
//! | `Unsqueeze`, `Squeeze`, `ReduceSum` | 13 | `axes` attribute -> int64 input |
//! | `Split` | 13 | `split` attribute -> int64 input |
//! | `Softmax`, `LogSoftmax`, `Hardmax` | 13 | over the last axis: `axis` written out; otherwise (or rank unknown) `Flatten(axis)` -> op over the last axis -> `Reshape` back (the old meaning) |
//! | `Clip` | 11 | `min` / `max` attributes -> float inputs |
//! | `Pad` | 11 | `pads` / `value` attributes -> inputs |
//! | `Slice` | 10 | `starts` / `ends` / `axes` attributes -> int64 inputs |
//! | `TopK` | 10 | `k` attribute -> int64 input |
//! | `Dropout` | 12 | `ratio` attribute dropped (inference: the identity either way) |
//! | `BatchNormalization` | 9 | `spatial = 1` dropped |
//! | `Scatter` | (11) | renamed `ScatterElements` (same meaning) |
//! | `ReduceMean`, `ReduceMax`, `ReduceMin`, `ReduceProd`, `ReduceL1`, `ReduceL2`, `ReduceLogSum`, `ReduceLogSumExp`, `ReduceSumSquare` | 18 | `axes` attribute -> int64 input (when the target is 18 or later) |
//!
//! Ops whose meaning changed in a way not rewritten here (`Upsample`, `Resize` before 11, `Scan` before 9,
//! `BatchNormalization` with `spatial = 0`, float attributes of another element type) are an error naming the node,
//! before anything is changed. Between opset 13 and 21 only the reductions' `axes` moved (at 18); the rest added types,
//! optional inputs or attributes whose defaults keep the old meaning (`Cast`'s `saturate` touches float8 alone), except
//! `GridSample` and `DFT` (20) and `GroupNormalization` (21), which are an error naming the node when the target passes
//! their change; so the target may be 13 to 21 (19: float8 `QuantizeLinear` / `DequantizeLinear`, 21: 16-bit ones). Subgraphs (`If` / `Loop` / `Scan` bodies) are rewritten too; values the rewrite needs are
//! initializers of the graph holding the node.

use std::collections::{BTreeMap, HashMap};

use crate::build::{NodeExt, attr_int, get_attr, get_attr_float, get_attr_int, get_attr_ints, node};
use crate::error::{Error, Result};
use crate::graph::NameSet;
use crate::model::Model;
use crate::proto::{GraphProto, NodeProto, TensorProto, TypeProto, type_proto};
use crate::tensor::tensor_from_vec;
use crate::{DataType, GraphExt};

/// The opsets [`upgrade_default_opset`] can raise a model to.
pub const OPSET_TARGETS: std::ops::RangeInclusive<i64> = 13..=21;

/// The reductions whose `axes` became an input in opset 18 (`ReduceSum`'s did in 13).
const REDUCE_18: [&str; 9] = [
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
];
/// The oldest opset [`upgrade_default_opset`] starts from (6 and earlier broadcast by attribute).
pub const OLDEST_UPGRADABLE_OPSET: i64 = 7;

/// What [`upgrade_default_opset`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpsetUpgrade {
    /// The default domain's version before.
    pub from: i64,
    /// ... and after.
    pub to: i64,
    /// Op type -> nodes rewritten (nodes that needed no change are not counted).
    pub rewritten: BTreeMap<String, usize>,
}

impl OpsetUpgrade {
    /// "2 Unsqueeze, 1 Split", or "no node changed form".
    pub fn describe(&self) -> String {
        if self.rewritten.is_empty() {
            return "no node changed form".into();
        }
        self.rewritten.iter().map(|(op, n)| format!("{n} {op}")).collect::<Vec<_>>().join(", ")
    }
}

/// Raises the default-domain opset of `model` to `to` (one of [`OPSET_TARGETS`]), rewriting every node whose form
/// changed (module docs). `None` when the model already imports `to` or later (nothing changes). Errors, before
/// any change, name the first node that cannot be carried over, or the model's opset when it predates
/// [`OLDEST_UPGRADABLE_OPSET`].
///
/// ```
/// use qdq_onnx_ir::proto::{GraphProto, ModelProto, OperatorSetIdProto};
/// use qdq_onnx_ir::{GraphExt, Model, NodeExt, attr_ints, get_attr, node, upgrade_default_opset};
///
/// let mut g = GraphProto::default();
/// g.node.push(node("Unsqueeze", "u", &["mask"], &["mask4"]).with_attr(attr_ints("axes", &[1, 2])));
/// let opset = OperatorSetIdProto { domain: Some(String::new()), version: Some(11) };
/// let mut model = Model::new(ModelProto { graph: Some(g), opset_import: vec![opset], ..Default::default() });
///
/// let done = upgrade_default_opset(&mut model, 13).unwrap().unwrap();
/// assert_eq!((done.from, done.to, done.describe().as_str()), (11, 13, "1 Unsqueeze"));
/// assert_eq!(model.opset(""), Some(13));
/// let u = &model.graph().node[0];
/// assert!(get_attr(u, "axes").is_none());
/// let axes = model.graph().initializer(&u.input[1]).unwrap();
/// assert_eq!(qdq_onnx_ir::tensor_to_array::<i64>(axes).unwrap().as_slice().unwrap(), [1, 2]);
/// ```
pub fn upgrade_default_opset(model: &mut Model, to: i64) -> Result<Option<OpsetUpgrade>> {
    if !OPSET_TARGETS.contains(&to) {
        return Err(Error::Graph {
            reason: format!(
                "cannot raise the opset to {to}: only {} to {} are supported",
                OPSET_TARGETS.start(),
                OPSET_TARGETS.end()
            ),
        });
    }
    let Some(from) = model.opset("") else {
        // No default-domain import: no default-domain node to carry over.
        model
            .proto
            .opset_import
            .push(crate::proto::OperatorSetIdProto { domain: Some(String::new()), version: Some(to) });
        return Ok(None);
    };
    if from >= to {
        return Ok(None);
    }
    if from < OLDEST_UPGRADABLE_OPSET {
        return Err(Error::Graph {
            reason: format!(
                "the model imports opset {from}, older than {OLDEST_UPGRADABLE_OPSET} (broadcasting by attribute): \
                 it cannot be raised to opset {to}, which per-channel Q/DQ needs; re-export it with opset {to} or later"
            ),
        });
    }
    check_graph(model.graph(), from, to)?;
    let mut names = NameSet::from_graph(model.graph());
    let mut rewritten = BTreeMap::new();
    rewrite_graph(model.graph_mut(), (from, to), &mut names, &mut rewritten)?;
    for o in model.proto.opset_import.iter_mut().filter(|o| o.domain().is_empty() || o.domain() == "ai.onnx") {
        o.version = Some(to);
    }
    Ok(Some(OpsetUpgrade { from, to, rewritten }))
}

fn is_default_domain(n: &NodeProto) -> bool {
    n.domain().is_empty() || n.domain() == "ai.onnx"
}

fn node_label(n: &NodeProto) -> String {
    if n.name().is_empty() {
        format!("{} -> {}", n.op_type(), n.output.first().map_or("?", String::as_str))
    } else {
        format!("{} ({})", n.name(), n.op_type())
    }
}

/// A node whose form changed between the model's opset and `to`, which the pairs asked for need.
fn cannot_reach(n: &NodeProto, to: i64, why: &str) -> Error {
    let reason = format!("node '{}': {why}; the Q/DQ pairs asked for need opset {to}", node_label(n));
    Error::Graph { reason }
}

fn cannot(n: &NodeProto, from: i64, why: &str) -> Error {
    Error::Graph {
        reason: format!(
            "node '{}': {why}; the model imports opset {from} and per-channel Q/DQ needs opset 13: re-export the model \
             with opset 13 or later",
            node_label(n)
        ),
    }
}

/// Finds a node [`rewrite_graph`] cannot carry over, before anything is edited.
fn check_graph(g: &GraphProto, from: i64, to: i64) -> Result<()> {
    let declared = declared_types(g);
    for n in g.node.iter().filter(|n| is_default_domain(n)) {
        match n.op_type() {
            "GridSample" | "DFT" if from < 20 && to >= 20 => {
                return Err(cannot_reach(n, to, "its mode names (GridSample) or axis (DFT) changed form in opset 20"));
            }
            "GroupNormalization" if from < 21 && to >= 21 => {
                return Err(cannot_reach(n, to, "GroupNormalization's scale and bias became per channel in opset 21"));
            }
            "Upsample" => return Err(cannot(n, from, "Upsample was removed in opset 10 (Resize replaced it)")),
            "Resize" if from < 11 => {
                return Err(cannot(n, from, "Resize changed its inputs and coordinates in opset 11"));
            }
            "Scan" if from < 9 => return Err(cannot(n, from, "Scan lost its batch axis in opset 9")),
            "BatchNormalization" if from < 9 && get_attr_int(n, "spatial")?.is_some_and(|s| s != 1) => {
                return Err(cannot(n, from, "BatchNormalization with spatial = 0 has no form in opset 9 or later"));
            }
            "Clip" if from < 11 => float_input(n, &declared, from)?,
            "Pad" if from < 11 => float_input(n, &declared, from)?,
            _ => {}
        }
        for sg in crate::graph::subgraphs(n) {
            check_graph(sg, from, to)?;
        }
    }
    Ok(())
}

/// `Clip` / `Pad` attributes are float; as inputs they take the data's type, so the data must be float.
fn float_input(n: &NodeProto, declared: &HashMap<&str, &TypeProto>, from: i64) -> Result<()> {
    let elem = n.input.first().and_then(|i| declared.get(i.as_str())).and_then(|t| match &t.value {
        Some(type_proto::Value::TensorType(tt)) => tt.elem_type,
        _ => None,
    });
    match elem {
        Some(e) if e != DataType::Float as i32 => {
            Err(cannot(n, from, "its float attributes would become inputs of the data's type, which is not float32"))
        }
        _ => Ok(()),
    }
}

/// Declared types of the graph's inputs, outputs and value_infos by name.
fn declared_types(g: &GraphProto) -> HashMap<&str, &TypeProto> {
    g.input.iter().chain(&g.output).chain(&g.value_info).filter_map(|v| Some((v.name(), v.r#type.as_ref()?))).collect()
}

struct Rewriter<'a> {
    names: &'a mut NameSet,
    from: i64,
    to: i64,
    /// Initializers to add to the graph being rewritten.
    made: Vec<TensorProto>,
    /// Nodes to insert before node i (by index in the original order).
    before: HashMap<usize, Vec<NodeProto>>,
    /// Nodes to insert after node i.
    after: HashMap<usize, Vec<NodeProto>>,
}

impl Rewriter<'_> {
    fn constant<T: crate::tensor::Element>(&mut self, base: &str, shape: &[usize], values: Vec<T>) -> Result<String> {
        let name = self.names.fresh(base);
        self.made.push(tensor_from_vec(&name, shape, values)?);
        Ok(name)
    }

    /// Moves int attribute list `attr` of `n` to input `slot` (earlier empty slots filled with ""); true if it was
    /// there.
    fn ints_to_input(&mut self, n: &mut NodeProto, attr: &str, slot: usize) -> Result<bool> {
        let Some(values) = get_attr_ints(n, attr)?.map(<[i64]>::to_vec) else { return Ok(false) };
        remove_attr(n, attr);
        let name = self.constant(&value_name(n, attr), &[values.len()], values)?;
        set_input(n, slot, name);
        Ok(true)
    }

    fn float_to_input(&mut self, n: &mut NodeProto, attr: &str, slot: usize, default: f32) -> Result<bool> {
        let value = get_attr_float(n, attr)?;
        remove_attr(n, attr);
        match value {
            Some(v) if v != default => {
                let name = self.constant::<f32>(&value_name(n, attr), &[], vec![v])?;
                set_input(n, slot, name);
                Ok(true)
            }
            v => Ok(v.is_some()),
        }
    }
}

/// The base name of the value an attribute of `n` becomes.
fn value_name(n: &NodeProto, attr: &str) -> String {
    format!("{}_{attr}", if n.name().is_empty() { n.op_type() } else { n.name() })
}

fn remove_attr(n: &mut NodeProto, attr: &str) {
    n.attribute.retain(|a| a.name() != attr);
}

fn set_input(n: &mut NodeProto, slot: usize, name: String) {
    while n.input.len() < slot {
        n.input.push(String::new());
    }
    if n.input.len() == slot {
        n.input.push(name);
    } else {
        n.input[slot] = name;
    }
}

fn rewrite_graph(
    g: &mut GraphProto,
    (from, to): (i64, i64),
    names: &mut NameSet,
    rewritten: &mut BTreeMap<String, usize>,
) -> Result<()> {
    // Softmax-like nodes whose axis is known to be the input's last.
    let over_last: std::collections::HashSet<usize> = {
        let ranks = crate::ranks(g);
        g.node
            .iter()
            .enumerate()
            .filter(|(_, n)| matches!(n.op_type(), "Softmax" | "LogSoftmax" | "Hardmax"))
            .filter(|(_, n)| {
                let a = get_attr_int(n, "axis").ok().flatten().unwrap_or(1);
                n.input
                    .first()
                    .and_then(|x| ranks.get(x.as_str()).map(|&r| r as i64))
                    .is_some_and(|rank| (if a < 0 { a + rank } else { a }) == rank - 1)
            })
            .map(|(i, _)| i)
            .collect()
    };
    let mut r = Rewriter { names, from, to, made: Vec::new(), before: HashMap::new(), after: HashMap::new() };
    let mut nodes = std::mem::take(&mut g.node);
    for (i, n) in nodes.iter_mut().enumerate() {
        for a in n.attribute.iter_mut() {
            for sg in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                rewrite_graph(sg, (from, to), r.names, rewritten)?;
            }
        }
        if !is_default_domain(n) {
            continue;
        }
        let changed = rewrite_node(&mut r, i, n, over_last.contains(&i))?;
        if changed {
            *rewritten.entry(n.op_type().to_owned()).or_default() += 1;
        }
    }
    let mut out = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.into_iter().enumerate() {
        out.extend(r.before.remove(&i).unwrap_or_default());
        out.push(n);
        out.extend(r.after.remove(&i).unwrap_or_default());
    }
    g.node = out;
    for t in r.made {
        g.add_initializer(t);
    }
    Ok(())
}

/// Rewrites one default-domain node in place (module docs' table); true if it changed.
fn rewrite_node(r: &mut Rewriter<'_>, i: usize, n: &mut NodeProto, over_last: bool) -> Result<bool> {
    let (from, to) = (r.from, r.to);
    Ok(match n.op_type() {
        "Unsqueeze" | "Squeeze" | "ReduceSum" if from < 13 => r.ints_to_input(n, "axes", 1)?,
        op if from < 18 && to >= 18 && REDUCE_18.contains(&op) => r.ints_to_input(n, "axes", 1)?,
        "Split" if from < 13 => r.ints_to_input(n, "split", 1)?,
        "Softmax" | "LogSoftmax" | "Hardmax" if from < 13 => softmax(r, i, n, over_last)?,
        "Clip" if from < 11 => {
            let min = r.float_to_input(n, "min", 1, f32::MIN)?;
            let max = get_attr(n, "max").is_some();
            if max {
                r.float_to_input(n, "max", 2, f32::MAX)?;
            }
            min || max
        }
        "Pad" if from < 11 => {
            let pads = r.ints_to_input(n, "pads", 1)?;
            let value = r.float_to_input(n, "value", 2, 0.0)?;
            pads || value
        }
        "Slice" if from < 10 => {
            let starts = r.ints_to_input(n, "starts", 1)?;
            let ends = r.ints_to_input(n, "ends", 2)?;
            let axes = r.ints_to_input(n, "axes", 3)?;
            starts || ends || axes
        }
        "TopK" if from < 10 => match get_attr_int(n, "k")? {
            Some(k) => {
                remove_attr(n, "k");
                let name = r.constant(&value_name(n, "k"), &[1], vec![k])?;
                set_input(n, 1, name);
                true
            }
            None => false,
        },
        "Dropout" if from < 12 => {
            let had = get_attr(n, "ratio").is_some() || get_attr(n, "is_test").is_some();
            remove_attr(n, "ratio");
            remove_attr(n, "is_test");
            had
        }
        "BatchNormalization" if from < 9 => {
            let had = get_attr(n, "spatial").is_some();
            remove_attr(n, "spatial");
            had
        }
        "Scatter" => {
            n.op_type = Some("ScatterElements".into());
            true
        }
        _ => false,
    })
}

/// Before opset 13 `Softmax(axis = a)` (default 1) works on the input flattened to 2-D at `a`; from 13 on it works
/// on axis `a` alone (default -1). Over the last axis the two agree; otherwise the old meaning is spelled out.
/// `over_last`: the graph shows the axis is the input's last.
fn softmax(r: &mut Rewriter<'_>, i: usize, n: &mut NodeProto, over_last: bool) -> Result<bool> {
    let axis = get_attr_int(n, "axis")?;
    let a = axis.unwrap_or(1);
    if a == -1 {
        return Ok(false);
    }
    if over_last {
        if axis.is_some() {
            return Ok(false);
        }
        n.attribute.push(attr_int("axis", a));
        return Ok(true);
    }
    let (x, y) = (n.input[0].clone(), n.output[0].clone());
    let base = if n.name().is_empty() { n.op_type().to_owned() } else { n.name().to_owned() };
    let (shape, flat, out) =
        (r.names.fresh(&format!("{y}_shape")), r.names.fresh(&format!("{y}_flat")), r.names.fresh(&format!("{y}_2d")));
    r.before.insert(
        i,
        vec![
            node("Shape", &r.names.fresh(&format!("{base}_shape")), &[&x], &[&shape]),
            node("Flatten", &r.names.fresh(&format!("{base}_flatten")), &[&x], &[&flat]).with_attr(attr_int("axis", a)),
        ],
    );
    r.after.insert(i, vec![node("Reshape", &r.names.fresh(&format!("{base}_reshape")), &[&out, &shape], &[&y])]);
    n.input[0] = flat;
    n.output[0] = out;
    remove_attr(n, "axis");
    n.attribute.push(attr_int("axis", -1));
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{attr_float, attr_graph, attr_ints};
    use crate::proto::{ModelProto, OperatorSetIdProto};
    use crate::value_info;

    fn model(nodes: Vec<NodeProto>, inputs: &[&str], opset: i64) -> Model {
        let g = GraphProto {
            input: inputs.iter().map(|i| value_info(i, DataType::Float, None)).collect(),
            node: nodes,
            ..Default::default()
        };
        let opset = OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) };
        Model::new(ModelProto { graph: Some(g), opset_import: vec![opset], ..Default::default() })
    }

    fn ints(m: &Model, n: &NodeProto, slot: usize) -> Vec<i64> {
        crate::tensor_to_array::<i64>(m.graph().initializer(&n.input[slot]).unwrap()).unwrap().iter().copied().collect()
    }

    fn float(m: &Model, n: &NodeProto, slot: usize) -> f32 {
        crate::tensor_to_array::<f32>(m.graph().initializer(&n.input[slot]).unwrap()).unwrap().iter().copied().sum()
    }

    #[test]
    fn every_changed_form_is_written_as_opset_13_reads_it() {
        let mut m = model(
            vec![
                node("Squeeze", "sq", &["x"], &["a"]).with_attr(attr_ints("axes", &[0])),
                node("ReduceSum", "rs", &["a"], &["b"]).with_attr(attr_ints("axes", &[-1])),
                node("Split", "sp", &["b"], &["c", "c2"]).with_attr(attr_ints("split", &[2, 3])),
                node("Clip", "cl", &["c"], &["d"]).with_attr(attr_float("max", 6.0)),
                node("Pad", "pd", &["d"], &["e"])
                    .with_attr(attr_ints("pads", &[0, 1, 0, 1]))
                    .with_attr(attr_float("value", 0.5)),
                node("Slice", "sl", &["e"], &["f"])
                    .with_attr(attr_ints("starts", &[1]))
                    .with_attr(attr_ints("ends", &[3])),
                node("TopK", "tk", &["f"], &["g", "gi"]).with_attr(attr_int("k", 2)),
                node("Dropout", "dr", &["g"], &["h"]).with_attr(attr_float("ratio", 0.1)),
                node("Scatter", "sc", &["h", "gi", "g"], &["i"]),
                node("ReduceSum", "all", &["i"], &["j"]),
            ],
            &["x"],
            8,
        );
        let done = upgrade_default_opset(&mut m, 13).unwrap().unwrap();
        assert_eq!((done.from, done.to), (8, 13));
        assert_eq!(
            done.describe(),
            "1 Clip, 1 Dropout, 1 Pad, 1 ReduceSum, 1 ScatterElements, 1 Slice, 1 Split, 1 Squeeze, 1 TopK"
        );
        assert_eq!(m.opset(""), Some(13));
        let n = &m.graph().node;
        assert!(n.iter().all(|n| n.attribute.is_empty()), "every moved attribute is gone: {n:?}");
        assert_eq!(ints(&m, &n[0], 1), [0]);
        assert_eq!(ints(&m, &n[1], 1), [-1]);
        assert_eq!(ints(&m, &n[2], 1), [2, 3]);
        assert_eq!((n[3].input[1].as_str(), float(&m, &n[3], 2)), ("", 6.0), "no min: an empty slot before max");
        assert_eq!((ints(&m, &n[4], 1), float(&m, &n[4], 2)), (vec![0, 1, 0, 1], 0.5));
        assert_eq!((ints(&m, &n[5], 1), ints(&m, &n[5], 2), n[5].input.len()), (vec![1], vec![3], 3));
        assert_eq!(ints(&m, &n[6], 1), [2]);
        assert_eq!((n[7].input.len(), n[8].op_type()), (1, "ScatterElements"));
        assert_eq!(n[9].input.len(), 1, "ReduceSum over every axis stays so");
        m.graph().validate().unwrap();
    }

    /// Opset 18 moved the reductions' `axes` to an input: carried over only when the target reaches 18, from 13 as
    /// from older opsets (where `ReduceSum`'s moves at 13 with the others staying attributes until 18).
    #[test]
    fn reductions_take_their_axes_as_an_input_from_opset_18() {
        let nodes = || {
            vec![
                node("ReduceMean", "mean", &["x"], &["m"]).with_attr(attr_ints("axes", &[-1])),
                node("ReduceMax", "max", &["x"], &["mx"]).with_attr(attr_ints("axes", &[0, 1])),
                node("ReduceSum", "sum", &["x"], &["s"]).with_attr(attr_ints("axes", &[-1])),
                node("ReduceMean", "all", &["x"], &["a"]),
            ]
        };
        let mut m = model(nodes(), &["x"], 13);
        assert!(upgrade_default_opset(&mut m, 17).unwrap().unwrap().rewritten.is_empty(), "17 keeps the attributes");
        let mut m = model(nodes(), &["x"], 13);
        let done = upgrade_default_opset(&mut m, 19).unwrap().unwrap();
        assert_eq!((done.describe().as_str(), m.opset("")), ("1 ReduceMax, 1 ReduceMean", Some(19)));
        let n = &m.graph().node;
        assert_eq!((ints(&m, &n[0], 1), ints(&m, &n[1], 1)), (vec![-1], vec![0, 1]));
        assert_eq!(get_attr_ints(&n[2], "axes").unwrap(), Some(&[-1][..]), "ReduceSum at 13 has its input form");
        assert_eq!(n[3].input.len(), 1, "a reduction over every axis stays so");
        let mut old = model(nodes(), &["x"], 11);
        assert_eq!(
            upgrade_default_opset(&mut old, 18).unwrap().unwrap().describe(),
            "1 ReduceMax, 1 ReduceMean, 1 ReduceSum"
        );
        m.graph().validate().unwrap();
    }

    #[test]
    fn softmax_over_the_last_axis_keeps_its_node_and_any_other_axis_keeps_its_old_meaning() {
        let scores = |axis: Option<i64>| {
            let mut s = node("Softmax", "sm", &["s"], &["p"]);
            if let Some(a) = axis {
                s = s.with_attr(attr_int("axis", a));
            }
            vec![
                node("Transpose", "qt", &["q"], &["q_t"]).with_attr(attr_ints("perm", &[0, 2, 1, 3])),
                node("Transpose", "kt", &["k"], &["k_t"]).with_attr(attr_ints("perm", &[0, 2, 3, 1])),
                node("MatMul", "qk", &["q_t", "k_t"], &["qk"]),
                node("Add", "masked", &["qk", "mask"], &["s"]),
                s,
                node("MatMul", "pv", &["p", "v"], &["ctx"]),
            ]
        };
        // axis 3 of the rank-4 scores (the rank follows from the Transposes' perm through MatMul and Add).
        let mut m = model(scores(Some(3)), &["q", "k", "v", "mask"], 11);
        let mask = value_info("mask", DataType::Float, Some(&[Err("batch"), Ok(1), Ok(1), Err("seq")]));
        m.graph_mut().input[3] = mask.clone();
        let done = upgrade_default_opset(&mut m, 13).unwrap().unwrap();
        assert_eq!(done.describe(), "no node changed form");
        assert_eq!(m.graph().node, scores(Some(3)));
        // The old default (axis 1) over a rank-4 input: softmax over the flattened trailing axes, spelled out.
        let mut m = model(scores(None), &["q", "k", "v", "mask"], 12);
        m.graph_mut().input[3] = mask;
        assert_eq!(upgrade_default_opset(&mut m, 13).unwrap().unwrap().describe(), "1 Softmax");
        let ops: Vec<&str> = m.graph().node.iter().map(|n| n.op_type()).collect();
        assert_eq!(
            ops,
            ["Transpose", "Transpose", "MatMul", "Add", "Shape", "Flatten", "Softmax", "Reshape", "MatMul"]
        );
        let n = &m.graph().node[1..];
        assert_eq!(get_attr_int(&n[4], "axis").unwrap(), Some(1));
        assert_eq!(get_attr_int(&n[5], "axis").unwrap(), Some(-1));
        assert_eq!((n[6].output[0].as_str(), n[6].input[1].as_str()), ("p", n[3].output[0].as_str()));
        assert_eq!(n[3].input[0], "s");
        m.graph().validate().unwrap();
        // Rank 2 declared, no axis: the old default is the last axis; written out, as 13's default is -1 anyway.
        let mut m = model(vec![node("Softmax", "sm", &["x"], &["y"])], &[], 10);
        m.graph_mut().input.push(value_info("x", DataType::Float, Some(&[Ok(2), Ok(5)])));
        assert_eq!(upgrade_default_opset(&mut m, 13).unwrap().unwrap().describe(), "1 Softmax");
        assert_eq!(m.graph().node.len(), 1);
        assert_eq!(get_attr_int(&m.graph().node[0], "axis").unwrap(), Some(1));
    }

    #[test]
    fn subgraph_nodes_are_rewritten_with_their_values_in_their_own_graph() {
        let mut branch = GraphProto::default();
        branch.node.push(node("Unsqueeze", "inner", &["x"], &["y"]).with_attr(attr_ints("axes", &[0])));
        branch.output.push(value_info("y", DataType::Float, None));
        let iff = node("If", "if", &["cond"], &["out"])
            .with_attr(attr_graph("then_branch", branch.clone()))
            .with_attr(attr_graph("else_branch", branch));
        let mut m = model(vec![iff], &["x", "cond"], 11);
        assert_eq!(upgrade_default_opset(&mut m, 13).unwrap().unwrap().describe(), "2 Unsqueeze");
        let branches: Vec<&GraphProto> = crate::graph::subgraphs(&m.graph().node[0]).collect();
        for b in &branches {
            let u = &b.node[0];
            let axes = crate::tensor_to_array::<i64>(b.initializer(&u.input[1]).unwrap()).unwrap();
            assert_eq!(axes.as_slice().unwrap(), [0]);
        }
        assert_ne!(branches[0].node[0].input[1], branches[1].node[0].input[1], "names are unique in the model");
        m.graph().validate().unwrap();
    }

    #[test]
    fn what_cannot_be_carried_over_is_an_error_before_any_change() {
        let upsample = node("Upsample", "up", &["x", "scales"], &["y"]);
        let squeeze = node("Squeeze", "sq", &["y"], &["z"]).with_attr(attr_ints("axes", &[0]));
        let mut m = model(vec![squeeze.clone(), upsample], &["x", "scales"], 9);
        let before = m.clone();
        let e = upgrade_default_opset(&mut m, 13).unwrap_err().to_string();
        assert!(e.contains("'up (Upsample)'") && e.contains("opset 9"), "{e}");
        assert_eq!(m.proto, before.proto, "nothing changed");
        let mut ancient = model(vec![squeeze.clone()], &["x"], 6);
        let e = upgrade_default_opset(&mut ancient, 13).unwrap_err().to_string();
        assert!(e.contains("opset 6"), "{e}");
        let mut bf16_clip = model(vec![node("Clip", "c", &["h"], &["o"]).with_attr(attr_float("max", 1.0))], &[], 10);
        bf16_clip.graph_mut().input.push(value_info("h", DataType::Float16, None));
        assert!(upgrade_default_opset(&mut bf16_clip, 13).unwrap_err().to_string().contains("'c (Clip)'"));
        let mut current = model(vec![squeeze], &["x"], 13);
        let before = current.clone();
        assert_eq!(upgrade_default_opset(&mut current, 13).unwrap(), None);
        assert_eq!(current.proto, before.proto);
        assert!(upgrade_default_opset(&mut current, 22).unwrap_err().to_string().contains("13 to 21"));
        // Opset 21 (16-bit pairs): GroupNormalization's scale and bias changed meaning, so it is refused, naming it;
        // opset 19 (float8 pairs) still takes it as it is.
        let group_norm =
            node("GroupNormalization", "gn", &["x", "s", "b"], &["y"]).with_attr(attr_int("num_groups", 2));
        let mut m = model(vec![group_norm], &["x", "s", "b"], 18);
        let e = upgrade_default_opset(&mut m, 21).unwrap_err().to_string();
        assert!(e.contains("'gn (GroupNormalization)'") && e.contains("opset 21"), "{e}");
        assert_eq!(upgrade_default_opset(&mut m, 19).unwrap().unwrap().to, 19);
    }
}
