//! Ranks (numbers of axes) of a graph's tensors, and the one shape fact written from them: an op that preserves its
//! input's shape (`Softmax`) gets that shape declared on its input and output, in symbols the two share.
//!
//! Why: ONNX Runtime's CPU allocation planner runs a kernel that may work in place (`Softmax` may) in its input's
//! buffer only when it can prove input and output the same size, i.e. both carry a shape in the graph. An exported
//! BERT's shapes are lost at its attention `Reshape`s for ONNX's own inference, so the attention probabilities are
//! written to a second buffer of `batch · heads · sequence²` floats, the largest tensor of the model.

use std::collections::{HashMap, HashSet};

use crate::proto::{GraphProto, NodeProto, TensorProto, ValueInfoProto};
use crate::{DataType, constant_value, declared_dims, declared_elem_type, get_attr_int, get_attr_ints, value_info};

/// What is known of a tensor: its rank and, for a 1-D tensor, its length (a `Reshape`'s target rank is the length
/// of its shape input).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Known {
    rank: Option<usize>,
    len: Option<usize>,
}

/// The rank of every tensor of `g` (top level) that follows for certain from the graph's declared shapes (inputs,
/// outputs, `value_info`), its initializers and `Constant`s, and the semantics of common ops (element-wise and
/// broadcasting ops, MatMul forms, Transpose, Reshape and Expand by a shape whose length is known, Gather,
/// Unsqueeze / Squeeze / reductions with known axes, Shape, Concat, ...). A tensor whose rank depends on anything
/// else (an unknown op, axes computed at run time) is absent, and so is everything computed from it.
///
/// ```
/// use qdq_onnx_ir::{attr_ints, node, ranks, value_info, DataType, NodeExt, proto::GraphProto};
/// let g = GraphProto {
///     input: vec![value_info("x", DataType::Float, Some(&[Err("batch"), Err("seq"), Ok(384)]))],
///     node: vec![
///         node("Unsqueeze", "u", &["x"], &["x4"]).with_attr(attr_ints("axes", &[1])),
///         node("Transpose", "t", &["x4"], &["xt"]).with_attr(attr_ints("perm", &[0, 2, 1, 3])),
///         node("MatMul", "mm", &["xt", "xt"], &["s"]),
///         node("Softmax", "sm", &["s"], &["p"]),
///         node("Mystery", "m", &["p"], &["q"]),
///     ],
///     ..Default::default()
/// };
/// let r = ranks(&g);
/// assert_eq!((r["x4"], r["p"]), (4, 4));
/// assert!(!r.contains_key("q")); // an op it does not know
/// ```
pub fn ranks(g: &GraphProto) -> HashMap<String, usize> {
    let mut known: HashMap<String, Known> = HashMap::new();
    for v in g.input.iter().chain(&g.output).chain(&g.value_info) {
        if let Some(dims) = declared_dims(v) {
            known.insert(v.name().to_string(), Known { rank: Some(dims.len()), len: None });
        }
    }
    // Small integer constants by value: exporters compute shapes from them.
    let mut values: HashMap<String, Vec<i64>> = HashMap::new();
    for t in &g.initializer {
        known.insert(t.name().to_string(), of_constant(t));
        if let Some(v) = small_ints(t) {
            values.insert(t.name().to_string(), v);
        }
    }
    // Nodes are topologically sorted in a valid graph; a second sweep covers a graph that is not.
    for _ in 0..2 {
        for n in &g.node {
            infer(n, &mut known, &mut values);
        }
    }
    known.into_iter().filter_map(|(k, v)| Some((k, v.rank?))).collect()
}

/// The ops [`annotate_shape_preserving`] declares shapes for: their output has their input's shape, and ONNX
/// Runtime's CPU kernel may run in place.
pub const SHAPE_PRESERVING_IN_PLACE: [&str; 1] = ["Softmax"];

/// For every float `Softmax` of `g` (top level, not a graph input or output) whose shape is not fully declared on
/// both sides: declares its input and output with one shape, each axis what either side declares for it, else a
/// fresh symbol `qdq_<k>_<axis>` the two tensors share and nothing else uses. The one claim added is "the output has
/// the input's shape", true of the op. The rank is the declared one, else what [`ranks`] proves (a Softmax with
/// neither is left alone, and so is one whose two declarations disagree). Returns how many nodes were annotated.
///
/// ```
/// use qdq_onnx_ir::{annotate_shape_preserving, node, value_info, DataType, proto::GraphProto};
/// let mut g = GraphProto {
///     input: vec![value_info("s", DataType::Float, Some(&[Err("b"), Ok(12), Err("q"), Err("k")]))],
///     node: vec![node("Relu", "r", &["s"], &["t"]), node("Softmax", "sm", &["t"], &["p"])],
///     ..Default::default()
/// };
/// // An exporter's partial declaration (an axis with neither value nor symbol) is completed on both sides.
/// g.value_info.push(value_info("p", DataType::Float, Some(&[Err("b"), Ok(12), Err(""), Err("")])));
/// assert_eq!(annotate_shape_preserving(&mut g), 1);
/// let want = [Err("b"), Ok(12), Err("qdq_0_2"), Err("qdq_0_3")];
/// for t in ["t", "p"] {
///     assert_eq!(g.value_info.iter().find(|v| v.name() == t).unwrap(), &value_info(t, DataType::Float, Some(&want)));
/// }
/// assert_eq!(annotate_shape_preserving(&mut g), 0); // declared now
/// ```
pub fn annotate_shape_preserving(g: &mut GraphProto) -> usize {
    let rank = ranks(g);
    let io: HashSet<&str> = g.input.iter().chain(&g.output).map(|v| v.name()).collect();
    let mut declared: HashMap<String, ValueInfoProto> =
        g.value_info.iter().map(|v| (v.name().to_string(), v.clone())).collect();
    let mut used: HashSet<String> = g
        .input
        .iter()
        .chain(&g.output)
        .chain(&g.value_info)
        .filter_map(declared_dims)
        .flatten()
        .filter_map(|d| d.err())
        .collect();
    let (mut changed, mut annotated, mut next) = (Vec::<String>::new(), 0, 0);
    for n in g.node.iter().filter(|n| SHAPE_PRESERVING_IN_PLACE.contains(&n.op_type()) && n.domain().is_empty()) {
        let (Some(x), Some(y)) = (n.input.first(), n.output.first()) else { continue };
        if x == y || io.contains(x.as_str()) || io.contains(y.as_str()) {
            continue;
        }
        let (vx, vy) = (declared.get(x), declared.get(y));
        if [vx, vy].into_iter().flatten().any(|v| declared_elem_type(v) != Some(DataType::Float as i32)) {
            continue;
        }
        let (sx, sy) = (vx.and_then(declared_dims), vy.and_then(declared_dims));
        let Some(dims) = merged_dims(sx.as_deref(), sy.as_deref(), rank.get(x.as_str()).copied(), || {
            loop {
                let base = format!("qdq_{next}");
                next += 1;
                if !used.iter().any(|u| u.strip_prefix(&base).is_some_and(|rest| rest.starts_with('_'))) {
                    break base;
                }
            }
        }) else {
            continue;
        };
        if sx.as_ref() == Some(&dims) && sy.as_ref() == Some(&dims) {
            continue;
        }
        used.extend(dims.iter().filter_map(|d| d.clone().err()));
        let dims: Vec<Result<i64, &str>> =
            dims.iter().map(|d| d.as_ref().map(|v| *v).map_err(String::as_str)).collect();
        for t in [x, y] {
            declared.insert(t.clone(), value_info(t, DataType::Float, Some(&dims)));
            if !changed.contains(t) {
                changed.push(t.clone());
            }
        }
        annotated += 1;
    }
    g.value_info.retain(|v| !changed.iter().any(|c| c == v.name()));
    g.value_info.extend(changed.iter().map(|t| declared[t].clone()));
    annotated
}

/// One shape for both sides of a shape-preserving op: per axis what either declaration says (`Err("")` is an axis
/// declared unknown), else `fresh()`'s symbol with the axis appended; `None` when the two disagree or the rank is
/// unknown. `rank`: what [`ranks`] proved, used when neither side is declared.
fn merged_dims(
    sx: Option<&[Result<i64, String>]>,
    sy: Option<&[Result<i64, String>]>,
    rank: Option<usize>,
    mut fresh: impl FnMut() -> String,
) -> Option<Vec<Result<i64, String>>> {
    let r = match (sx, sy) {
        (Some(a), Some(b)) if a.len() != b.len() => return None,
        (Some(a), _) | (None, Some(a)) => a.len(),
        (None, None) => rank?,
    };
    let known =
        |d: Option<&[Result<i64, String>]>, i: usize| d.map(|d| d[i].clone()).filter(|v| v != &Err(String::new()));
    let mut base = None;
    let mut dims = Vec::with_capacity(r);
    for i in 0..r {
        dims.push(match (known(sx, i), known(sy, i)) {
            (Some(a), Some(b)) if a != b => return None,
            (Some(a), _) | (None, Some(a)) => a,
            (None, None) => Err(format!("{}_{i}", base.get_or_insert_with(&mut fresh))),
        });
    }
    Some(dims)
}

/// The values of an int64 / int32 tensor of at most 16 elements.
fn small_ints(t: &TensorProto) -> Option<Vec<i64>> {
    if t.dims.iter().product::<i64>() > 16 {
        return None;
    }
    match t.data_type() {
        x if x == DataType::Int64 as i32 => crate::tensor_to_array::<i64>(t).ok().map(|a| a.iter().copied().collect()),
        x if x == DataType::Int32 as i32 => {
            crate::tensor_to_array::<i32>(t).ok().map(|a| a.iter().map(|&v| i64::from(v)).collect())
        }
        _ => None,
    }
}

fn of_constant(t: &TensorProto) -> Known {
    Known { rank: Some(t.dims.len()), len: (t.dims.len() == 1).then(|| t.dims[0].max(0) as usize) }
}

/// Ops whose first output has their first input's rank.
const SAME_RANK: &[&str] = &[
    "Identity",
    "Relu",
    "Erf",
    "Sqrt",
    "Exp",
    "Log",
    "Neg",
    "Abs",
    "Tanh",
    "Sigmoid",
    "Reciprocal",
    "Softmax",
    "LogSoftmax",
    "Cast",
    "CastLike",
    "Not",
    "IsNaN",
    "IsInf",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Gelu",
    "FastGelu",
    "BiasGelu",
    "QuantizeLinear",
    "DequantizeLinear",
    "DynamicQuantizeLinear",
    "LayerNormalization",
    "SkipLayerNormalization",
    "SimplifiedLayerNormalization",
    "Dropout",
    "Clip",
    "LeakyRelu",
    "HardSigmoid",
    "Softplus",
    "Slice",
    "Split",
    "Tile",
    "Pad",
    "CumSum",
    "Trilu",
    "Hardmax",
];

/// Broadcasting ops: their output has the largest rank of their inputs.
const BROADCAST: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "Where",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "BitShift",
];

/// A node's inputs as far as their ranks (and 1-D lengths) are known.
struct Inputs<'a> {
    n: &'a NodeProto,
    known: &'a HashMap<String, Known>,
}

impl Inputs<'_> {
    fn get(&self, i: usize) -> Known {
        self.n
            .input
            .get(i)
            .filter(|t| !t.is_empty())
            .and_then(|t| self.known.get(t.as_str()))
            .copied()
            .unwrap_or_default()
    }

    fn rank(&self, i: usize) -> Option<usize> {
        self.get(i).rank
    }

    /// Axes given as an attribute (older opsets) or as a constant input (newer): their count.
    fn axes_count(&self, input: usize) -> Option<usize> {
        match get_attr_ints(self.n, "axes") {
            Ok(Some(a)) => Some(a.len()),
            _ => self.get(input).len,
        }
    }

    fn count(&self) -> usize {
        self.n.input.len()
    }
}

/// A result of rank `r`, its length not known.
fn of_rank(r: Option<usize>) -> Known {
    Known { rank: r, len: None }
}

fn infer(n: &NodeProto, known: &mut HashMap<String, Known>, values: &mut HashMap<String, Vec<i64>>) {
    let op = n.op_type();
    let ins = Inputs { n, known };
    let first = adjusted(&ins, op, first_output(&ins, op, values));
    let (rank0, len0) = (ins.rank(0), ins.get(0).len);
    let Some(y) = n.output.first().filter(|y| !y.is_empty()) else { return };
    // The shape of a 1-D tensor of known length is a known constant.
    if op == "Shape"
        && first.len.is_some()
        && rank0 == Some(1)
        && let Some(l) = len0
    {
        values.insert(y.clone(), vec![l as i64]);
    }
    if first.rank.is_some() {
        let e = known.entry(y.clone()).or_default();
        if e.rank.is_none() {
            *e = first;
        } else if e.len.is_none() {
            e.len = first.len;
        }
    }
    // Split's outputs all have the input's rank.
    if op == "Split"
        && let Some(r) = rank0
    {
        for o in n.output.iter().skip(1).filter(|o| !o.is_empty()) {
            known.entry(o.clone()).or_insert(Known { rank: Some(r), len: None });
        }
    }
}

/// The first output of `op` on `ins` by the op's rank rule (a constant's small integer values recorded in
/// `values`).
fn first_output(ins: &Inputs<'_>, op: &str, values: &mut HashMap<String, Vec<i64>>) -> Known {
    match op {
        "Constant" => match constant_value(ins.n) {
            Ok(Some(t)) => {
                if let (Some(v), Some(y)) = (small_ints(&t), ins.n.output.first()) {
                    values.insert(y.clone(), v);
                }
                of_constant(&t)
            }
            _ => Known::default(),
        },
        _ if SAME_RANK.contains(&op) => {
            let x = ins.get(0);
            Known { rank: x.rank, len: if matches!(op, "Identity" | "Cast" | "CastLike") { x.len } else { None } }
        }
        _ if BROADCAST.contains(&op) => broadcast(ins),
        "MatMul"
        | "MatMulInteger"
        | "MatMulIntegerToFloat"
        | "FusedMatMul"
        | "QLinearMatMul"
        | "DynamicQuantizeMatMul" => {
            let b = if op == "QLinearMatMul" { 3 } else { 1 };
            of_rank(match (ins.rank(0), ins.rank(b)) {
                (Some(1), Some(1)) => Some(0),
                (Some(1), Some(rb)) => Some(rb - 1),
                (Some(ra), Some(1)) => Some(ra - 1),
                (Some(ra), Some(rb)) => Some(ra.max(rb)),
                _ => None,
            })
        }
        "Gemm" | "Flatten" | "NonZero" => of_rank(Some(2)),
        "Transpose" => of_rank(match get_attr_ints(ins.n, "perm") {
            Ok(Some(p)) => Some(p.len()),
            _ => ins.rank(0),
        }),
        "Reshape" | "ConstantOfShape" => reshaped(ins, op, values),
        "Expand" => of_rank(ins.rank(0).zip(ins.get(1).len).map(|(a, b)| a.max(b))),
        "Unsqueeze" => of_rank(ins.rank(0).zip(ins.axes_count(1)).map(|(r, a)| r + a)),
        "Squeeze" => of_rank(ins.rank(0).zip(ins.axes_count(1)).and_then(|(r, a)| r.checked_sub(a))),
        "Gather" => of_rank(ins.rank(0).zip(ins.rank(1)).and_then(|(d, i)| (d + i).checked_sub(1))),
        _ => shapes_and_reductions(ins, op),
    }
}

/// An elementwise op's result: the largest input rank; a 1-D result is as long as its 1-D inputs (scalars
/// broadcast without changing it).
fn broadcast(ins: &Inputs<'_>) -> Known {
    let rs: Option<Vec<usize>> = (0..ins.count()).map(|i| ins.rank(i)).collect();
    let r = rs.and_then(|rs| rs.into_iter().max());
    let vectors: Vec<Known> = (0..ins.count()).map(|i| ins.get(i)).filter(|k| k.rank == Some(1)).collect();
    let len = if r == Some(1) && vectors.iter().all(|k| k.len.is_some()) {
        vectors.iter().filter_map(|k| k.len).max()
    } else {
        None
    };
    Known { rank: r, len }
}

/// Reshape's and ConstantOfShape's result: the target shape's length; a 1-D result's length from a constant target,
/// or (Reshape to `[-1]`) the 1-D input's own.
fn reshaped(ins: &Inputs<'_>, op: &str, values: &HashMap<String, Vec<i64>>) -> Known {
    let shape = if op == "Reshape" { 1 } else { 0 };
    let r = ins.get(shape).len;
    let len = match (r, ins.n.input.get(shape).and_then(|s| values.get(s.as_str())).map(Vec::as_slice)) {
        (Some(1), Some(&[v])) if v > 0 || (op == "ConstantOfShape" && v == 0) => Some(v as usize),
        (Some(1), Some(&[-1])) if op == "Reshape" && ins.rank(0) == Some(1) => ins.get(0).len,
        _ => None,
    };
    Known { rank: r, len }
}

/// Shape, Size, Range, Concat and the Reduce ops; nothing known of any other op.
fn shapes_and_reductions(ins: &Inputs<'_>, op: &str) -> Known {
    match op {
        "Shape" => {
            let full = ins.rank(0);
            let ranged = get_attr_int(ins.n, "start").ok().flatten().is_some()
                || get_attr_int(ins.n, "end").ok().flatten().is_some();
            Known { rank: Some(1), len: if ranged { None } else { full } }
        }
        "Size" => of_rank(Some(0)),
        "Range" => of_rank(Some(1)),
        "Concat" => {
            let r = (0..ins.count()).find_map(|i| ins.rank(i));
            let len = if r == Some(1) { (0..ins.count()).map(|i| ins.get(i).len).sum::<Option<usize>>() } else { None };
            Known { rank: r, len }
        }
        _ if op.starts_with("Reduce") => {
            let keep = get_attr_int(ins.n, "keepdims").ok().flatten().unwrap_or(1) != 0;
            of_rank(if keep {
                ins.rank(0)
            } else {
                ins.rank(0).zip(ins.axes_count(1)).and_then(|(r, a)| r.checked_sub(a))
            })
        }
        _ => Known::default(),
    }
}

/// `first` with what the op's rule leaves out: Unsqueeze of a scalar by one axis is a 1-D tensor of length 1 (an
/// exporter's way of building a shape), and Gather from a 1-D tensor is as long as its indices.
fn adjusted(ins: &Inputs<'_>, op: &str, first: Known) -> Known {
    match (op, first) {
        ("Unsqueeze", Known { rank: Some(1), .. }) if ins.rank(0) == Some(0) => Known { rank: Some(1), len: Some(1) },
        ("Gather", Known { rank: Some(1), .. }) if ins.rank(0) == Some(1) => {
            Known { rank: Some(1), len: ins.get(1).len }
        }
        _ => first,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NodeExt, attr_int, attr_ints, node, tensor_from_vec};

    fn graph(nodes: Vec<NodeProto>) -> GraphProto {
        GraphProto {
            input: vec![
                value_info("ids", DataType::Int64, Some(&[Err("batch"), Err("seq")])),
                value_info("h", DataType::Float, Some(&[Err("batch"), Err("seq"), Ok(8)])),
            ],
            initializer: vec![tensor_from_vec::<i64>("heads", &[2], vec![2, 4]).unwrap()],
            node: nodes,
            ..Default::default()
        }
    }

    #[test]
    fn a_shape_built_from_shape_gather_unsqueeze_concat_gives_the_reshape_its_rank() {
        // The older Hugging Face export: new_shape = x.size()[:-1] + (heads, head_size), all computed in the graph.
        let g = graph(vec![
            node("Shape", "s", &["h"], &["shape"]),
            node("Constant", "c0", &[], &["zero"])
                .with_attr(crate::attr_tensor("value", tensor_from_vec::<i64>("", &[], vec![0]).unwrap())),
            node("Gather", "g0", &["shape", "zero"], &["b"]).with_attr(attr_int("axis", 0)),
            node("Unsqueeze", "u0", &["b"], &["b1"]).with_attr(attr_ints("axes", &[0])),
            node("Gather", "g1", &["shape", "zero"], &["s"]),
            node("Unsqueeze", "u1", &["s"], &["s1"]).with_attr(attr_ints("axes", &[0])),
            node("Concat", "cat", &["b1", "s1", "heads"], &["new_shape"]).with_attr(attr_int("axis", 0)),
            node("Reshape", "r", &["h", "new_shape"], &["split"]),
            node("Transpose", "t", &["split"], &["q"]).with_attr(attr_ints("perm", &[0, 2, 1, 3])),
            node("MatMul", "qk", &["q", "q"], &["scores"]),
            node("Softmax", "sm", &["scores"], &["p"]),
        ]);
        let r = ranks(&g);
        assert_eq!((r["shape"], r["b"], r["b1"], r["new_shape"]), (1, 0, 1, 1));
        assert_eq!((r["split"], r["q"], r["scores"], r["p"]), (4, 4, 4, 4));
    }

    #[test]
    fn an_expand_by_a_shape_computed_from_constants_has_a_known_rank() {
        // PyTorch's legacy export of the SDPA attention mask: Expand(mask, Where(Equal(shape, -1·ones), ...)), with
        // the shape a Reshape to [-1] of a Concat and the ones a ConstantOfShape of that shape's Shape.
        let mut g = graph(vec![
            node("Shape", "s", &["h"], &["sh"]),
            node("Reshape", "r", &["sh", "minus1"], &["r1"]),
            node("Shape", "s1", &["r1"], &["shr"]),
            node("ConstantOfShape", "c", &["shr"], &["ones"]),
            node("Mul", "m", &["ones", "neg"], &["m1"]),
            node("Equal", "eq", &["r1", "m1"], &["cond"]),
            node("Where", "w", &["cond", "m1", "r1"], &["target"]),
            node("Expand", "e", &["h", "target"], &["big"]),
        ]);
        g.initializer.push(tensor_from_vec::<i64>("minus1", &[1], vec![-1]).unwrap());
        g.initializer.push(tensor_from_vec::<i64>("neg", &[], vec![-1]).unwrap());
        let r = ranks(&g);
        assert_eq!((r["r1"], r["ones"], r["target"], r["big"]), (1, 1, 1, 3));
    }

    #[test]
    fn what_depends_on_unknown_axes_or_ops_stays_unknown() {
        let g = graph(vec![
            node("Squeeze", "sq", &["h"], &["a"]), // axes absent: which dims are 1 is not known
            node("Reshape", "r", &["h", "runtime_shape"], &["b"]),
            node("Add", "add", &["b", "h"], &["c"]),
            node("ReduceMean", "rm", &["h"], &["d"]).with_attr(attr_int("keepdims", 0)),
            node("ReduceMean", "rk", &["h"], &["e"]),
            node("Gather", "emb", &["h", "ids"], &["f"]),
        ]);
        let r = ranks(&g);
        for t in ["a", "b", "c", "d"] {
            assert!(!r.contains_key(t), "{t}");
        }
        assert_eq!((r["e"], r["f"]), (3, 4));
    }

    #[test]
    fn a_declared_side_is_copied_and_types_other_than_float_are_left() {
        let mut g = graph(vec![
            node("MatMul", "mm", &["h", "h"], &["s"]),
            node("Softmax", "sm", &["s"], &["p"]),
            node("Cast", "c", &["h"], &["h16"]).with_attr(attr_int("to", DataType::Float16 as i64)),
            node("Softmax", "sm16", &["h16"], &["p16"]),
        ]);
        g.value_info.push(value_info("p", DataType::Float, Some(&[Err("b"), Err("s"), Ok(7)])));
        g.value_info.push(value_info("p16", DataType::Float16, None));
        assert_eq!(annotate_shape_preserving(&mut g), 1);
        let s = g.value_info.iter().find(|v| v.name() == "s").unwrap();
        assert_eq!(s, &value_info("s", DataType::Float, Some(&[Err("b"), Err("s"), Ok(7)])));
        assert!(!g.value_info.iter().any(|v| v.name() == "h16"));
    }

    #[test]
    fn fresh_symbols_avoid_the_graphs_own_and_each_other() {
        let mut g = graph(vec![
            node("Relu", "r", &["h"], &["hr"]),
            node("Softmax", "a", &["hr"], &["pa"]),
            node("MatMul", "mm", &["pa", "pa"], &["s"]),
            node("Softmax", "b", &["s"], &["pb"]),
            node("Softmax", "out", &["pb"], &["y"]),
        ]);
        // A graph output keeps its declaration: the last Softmax is left alone.
        g.output.push(value_info("y", DataType::Float, None));
        // a gets qdq_0_*; b would get qdq_1_*, but the graph uses qdq_1_2.
        g.input.push(value_info("other", DataType::Float, Some(&[Err("qdq_1_2")])));
        assert_eq!(annotate_shape_preserving(&mut g), 2);
        let dims_of = |t: &str| declared_dims(g.value_info.iter().find(|v| v.name() == t).unwrap()).unwrap();
        let fresh = |k: usize| -> Vec<Result<i64, String>> { (0..3).map(|i| Err(format!("qdq_{k}_{i}"))).collect() };
        assert_eq!((dims_of("hr"), dims_of("pa")), (fresh(0), fresh(0)));
        assert_eq!((dims_of("s"), dims_of("pb")), (fresh(2), fresh(2)));
        assert_eq!(g.value_info.len(), 4);
    }
}
