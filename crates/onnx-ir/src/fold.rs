//! Folding of what is constant by construction into initializers: exporters that do not fold constants write weights
//! as `Constant` nodes, or store them transposed (`[out, in]`) behind a `Transpose`, or in float16 behind a `Cast`,
//! or as int8 behind a `DequantizeLinear` (weight-only quantization).
//! Whoever looks for "a MatMul whose B is an initializer" then finds none; after [`fold_constants`] it finds them all.

use std::collections::{BTreeMap, HashMap, HashSet};

use ndarray::{ArrayD, IxDyn};

use crate::proto::tensor_proto::{DataLocation, DataType};
use crate::proto::{GraphProto, NodeProto, TensorProto};
use crate::tensor::{Element, array_to_tensor, tensor_shape, tensor_to_array};
use crate::{GraphExt, Result, get_attr_int, get_attr_ints};

/// The ops [`fold_constants`] evaluates when every input is constant.
pub const FOLDED_OPS: [&str; 6] = ["Constant", "Identity", "Transpose", "Cast", "Reshape", "DequantizeLinear"];

/// What [`fold_constants`] did: nodes folded per op type (empty: nothing to fold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Folded {
    pub by_op: BTreeMap<String, usize>,
}

impl Folded {
    /// Nodes folded in all.
    pub fn nodes(&self) -> usize {
        self.by_op.values().sum()
    }

    /// `"49 Transpose, 2 Constant"`, most first.
    pub fn describe(&self) -> String {
        let mut v: Vec<(&String, &usize)> = self.by_op.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        v.iter().map(|(op, n)| format!("{n} {op}")).collect::<Vec<_>>().join(", ")
    }
}

/// Replaces every node of [`FOLDED_OPS`] (default domain, one output) whose inputs are all initializers, in graph
/// order so chains fold too, by an initializer named as its output holding the value it computes: `Constant`
/// (`value`, `value_float(s)`, `value_int(s)`), `Identity` (of a constant not read inside a subgraph: its readers
/// read that constant instead, so a weight shared through Identity nodes stays one initializer), `Transpose` (any element type qdq reads: float, float16,
/// int64, int32, int8, uint8), `Cast` between float and float16 (and to the same type), `Reshape` by a constant
/// int64 shape, `DequantizeLinear` of int8 / uint8 by float32 scales (per tensor or per axis; not blocked). A node whose output is a graph output or is produced inside a subgraph's scope stays, as does one
/// this cannot evaluate (another element type, external data, a shape that does not fit): folding is an
/// optimisation, never an error. Initializers only the folded nodes read are dropped. Top-level graph only.
///
/// ```
/// use qdq_onnx_ir::{GraphExt, NodeExt, attr_ints, fold_constants, node, tensor_from_vec};
/// use qdq_onnx_ir::proto::GraphProto;
///
/// let mut g = GraphProto::default();
/// g.add_initializer(tensor_from_vec::<f32>("w_t", &[3, 2], vec![1., 2., 3., 4., 5., 6.]).unwrap());
/// g.node.push(node("Transpose", "t", &["w_t"], &["w"]).with_attr(attr_ints("perm", &[1, 0])));
/// g.node.push(node("MatMul", "mm", &["x", "w"], &["y"]));
/// let folded = fold_constants(&mut g).unwrap();
/// assert_eq!(folded.describe(), "1 Transpose");
/// assert_eq!(g.node.len(), 1); // the MatMul
/// let w = g.initializer("w").unwrap();
/// assert_eq!(w.dims, vec![2, 3]);
/// assert!(g.initializer("w_t").is_none()); // only the Transpose read it
/// ```
pub fn fold_constants(g: &mut GraphProto) -> Result<Folded> {
    let outputs: HashSet<String> = g.output.iter().map(|o| o.name().to_owned()).collect();
    let mut in_subgraphs: HashSet<&str> = HashSet::new();
    for sg in g.node.iter().flat_map(crate::graph::subgraphs) {
        crate::graph::collect_reads(sg, &mut in_subgraphs);
    }
    let mut made: HashMap<String, TensorProto> = HashMap::new();
    // An Identity of a constant names the same value: its readers read that constant instead, so a weight an
    // exporter shares this way (PyTorch's TorchScript exporter writes ALBERT's shared layers as Identity nodes of
    // one initializer) stays one initializer.
    let mut alias: HashMap<String, String> = HashMap::new();
    let mut fold = vec![false; g.node.len()];
    let mut folded = Folded::default();
    for (i, n) in g.node.iter().enumerate() {
        if !foldable(n, &outputs) {
            continue;
        }
        if n.op_type() == "Identity" && !in_subgraphs.contains(n.output[0].as_str()) {
            let source = n.input.first().map(|x| alias.get(x).unwrap_or(x).clone()).unwrap_or_default();
            if made.contains_key(&source) || g.initializer(&source).is_some() {
                fold[i] = true;
                *folded.by_op.entry("Identity".to_owned()).or_default() += 1;
                alias.insert(n.output[0].clone(), source);
                continue;
            }
        }
        let mut inputs = Vec::with_capacity(n.input.len());
        for name in &n.input {
            let name = alias.get(name).unwrap_or(name);
            match made.get(name).or_else(|| g.initializer(name)) {
                Some(t) if t.data_location() != DataLocation::External => inputs.push(Some(t)),
                _ if name.is_empty() => inputs.push(None),
                _ => break,
            }
        }
        if inputs.len() != n.input.len() {
            continue;
        }
        let Some(t) = evaluate(n, &inputs)? else { continue };
        fold[i] = true;
        *folded.by_op.entry(n.op_type().to_owned()).or_default() += 1;
        made.insert(n.output[0].clone(), t);
    }
    if made.is_empty() && alias.is_empty() {
        return Ok(folded);
    }
    replace_folded(g, &fold, made, &alias);
    Ok(folded)
}

/// Whether `n` is a node folding may evaluate: a default-domain op of [`FOLDED_OPS`] with one named output that is
/// not a graph output (in `outputs`).
fn foldable(n: &NodeProto, outputs: &HashSet<String>) -> bool {
    (n.domain().is_empty() || n.domain() == "ai.onnx")
        && FOLDED_OPS.contains(&n.op_type())
        && n.output.len() == 1
        && !n.output[0].is_empty()
        && !outputs.contains(&n.output[0])
}

/// The nodes marked in `fold` taken out of `g`: the values they `made` become initializers, the readers of an
/// Identity's output read its source (`alias`), and initializers only they read are dropped.
fn replace_folded(
    g: &mut GraphProto,
    fold: &[bool],
    made: HashMap<String, TensorProto>,
    alias: &HashMap<String, String>,
) {
    let read_by_folded: HashSet<String> =
        g.node.iter().zip(fold).filter(|(_, f)| **f).flat_map(|(n, _)| n.input.iter().cloned()).collect();
    let mut k = 0;
    g.node.retain(|_| {
        k += 1;
        !fold[k - 1]
    });
    for n in &mut g.node {
        for x in &mut n.input {
            if let Some(source) = alias.get(x.as_str()) {
                x.clone_from(source);
            }
        }
    }
    g.value_info.retain(|v| !alias.contains_key(v.name()));
    // Sorted, so the model written does not depend on hash order.
    let mut made: Vec<(String, TensorProto)> = made.into_iter().collect();
    made.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, mut t) in made {
        t.name = Some(name);
        g.add_initializer(t);
    }
    g.drop_unread_initializers(&read_by_folded);
}

/// The value node `n` computes from constant `inputs` (`None` for an omitted optional input), or `None` when this
/// cannot evaluate it.
fn evaluate(n: &NodeProto, inputs: &[Option<&TensorProto>]) -> Result<Option<TensorProto>> {
    let first = inputs.first().copied().flatten();
    Ok(match (n.op_type(), first) {
        ("Constant", _) => constant_value(n)?,
        ("Identity", Some(t)) => Some(t.clone()),
        ("Transpose", Some(t)) => {
            let rank = t.dims.len();
            let perm: Vec<usize> = match get_attr_ints(n, "perm")? {
                Some(p) => p.iter().map(|&a| usize::try_from(a).unwrap_or(usize::MAX)).collect(),
                None => (0..rank).rev().collect(),
            };
            let mut seen = perm.clone();
            seen.sort_unstable();
            if seen != (0..rank).collect::<Vec<_>>() {
                return Ok(None);
            }
            transpose(t, &perm)?
        }
        ("Cast", Some(t)) => cast(t, get_attr_int(n, "to")?)?,
        ("DequantizeLinear", Some(t)) => match inputs.get(1).copied().flatten() {
            Some(scale) if get_attr_int(n, "block_size")?.unwrap_or(0) == 0 => {
                dequantize(t, scale, inputs.get(2).copied().flatten(), get_attr_int(n, "axis")?.unwrap_or(1))?
            }
            _ => None,
        },
        ("Reshape", Some(t)) => match inputs.get(1).copied().flatten() {
            Some(shape) if shape.data_type() == DataType::Int64 as i32 => {
                let allowzero = get_attr_int(n, "allowzero")?.unwrap_or(0) != 0;
                reshape(t, &tensor_to_array::<i64>(shape)?.into_raw_vec_and_offset().0, allowzero)?
            }
            _ => None,
        },
        _ => None,
    })
}

/// A `Constant` node's value, named as its output: `value` (a tensor, not external), `value_float(s)`, `value_int(s)`;
/// `None` for the other forms (and for a node that is not a `Constant`).
pub fn constant_value(n: &NodeProto) -> Result<Option<TensorProto>> {
    if n.op_type() != "Constant" {
        return Ok(None);
    }
    let Some(a) = n.attribute.first().filter(|_| n.attribute.len() == 1) else { return Ok(None) };
    let named = |t: TensorProto| Some(TensorProto { name: n.output.first().cloned(), ..t });
    Ok(match a.name() {
        "value" => a.t.as_ref().filter(|t| t.data_location() != DataLocation::External).cloned().and_then(named),
        "value_float" => named(scalar(a.f())),
        "value_int" => named(scalar(a.i())),
        "value_floats" => named(array_to_tensor("", &ndarray::Array1::from(a.floats.clone()).into_dyn())),
        "value_ints" => named(array_to_tensor("", &ndarray::Array1::from(a.ints.clone()).into_dyn())),
        _ => None,
    })
}

fn scalar<T: Element>(v: T) -> TensorProto {
    array_to_tensor("", &ArrayD::from_elem(IxDyn(&[]), v))
}

/// Calls `$f::<T>` with the element type of tensor `$t`, or gives `None` for a type [`Element`] does not cover.
macro_rules! by_type {
    ($t:expr, $f:ident ( $($arg:expr),* )) => {{
        let dt = $t.data_type();
        if dt == DataType::Float as i32 {
            Some($f::<f32>($($arg),*)?)
        } else if dt == DataType::Float16 as i32 {
            Some($f::<half::f16>($($arg),*)?)
        } else if dt == DataType::Int64 as i32 {
            Some($f::<i64>($($arg),*)?)
        } else if dt == DataType::Int32 as i32 {
            Some($f::<i32>($($arg),*)?)
        } else if dt == DataType::Int8 as i32 {
            Some($f::<i8>($($arg),*)?)
        } else if dt == DataType::Uint8 as i32 {
            Some($f::<u8>($($arg),*)?)
        } else {
            None
        }
    }};
}

fn transpose(t: &TensorProto, perm: &[usize]) -> Result<Option<TensorProto>> {
    fn go<T: Element>(t: &TensorProto, perm: &[usize]) -> Result<TensorProto> {
        let a = tensor_to_array::<T>(t)?.permuted_axes(IxDyn(perm));
        Ok(array_to_tensor(t.name(), &a.as_standard_layout().into_owned()))
    }
    Ok(by_type!(t, go(t, perm)))
}

/// `Cast` to `to`: float <-> float16 and to the same type; `None` otherwise.
pub(crate) fn cast(t: &TensorProto, to: Option<i64>) -> Result<Option<TensorProto>> {
    let (from, to) = (t.data_type(), to.and_then(|v| i32::try_from(v).ok()));
    let (f32_t, f16_t) = (DataType::Float as i32, DataType::Float16 as i32);
    Ok(match to {
        Some(to) if to == from => Some(t.clone()),
        Some(to) if from == f16_t && to == f32_t => {
            Some(array_to_tensor(t.name(), &tensor_to_array::<half::f16>(t)?.mapv(half::f16::to_f32)))
        }
        Some(to) if from == f32_t && to == f16_t => {
            Some(array_to_tensor(t.name(), &tensor_to_array::<f32>(t)?.mapv(half::f16::from_f32)))
        }
        _ => None,
    })
}

/// `DequantizeLinear` of an int8 / uint8 `x` by a float32 `scale` and optional `zero_point` (the same type as `x`),
/// per tensor (scalar scale) or per slice along `axis` (1-D scale): `(x - zero_point) * scale`, float32. `None` for
/// other types or shapes that do not fit.
fn dequantize(
    x: &TensorProto,
    scale: &TensorProto,
    zp: Option<&TensorProto>,
    axis: i64,
) -> Result<Option<TensorProto>> {
    fn widen<T: Element + Into<f32>>(t: &TensorProto) -> Result<ArrayD<f32>> {
        Ok(tensor_to_array::<T>(t)?.mapv(Into::into))
    }
    let (i8_t, u8_t) = (DataType::Int8 as i32, DataType::Uint8 as i32);
    let read = |t: &TensorProto| -> Result<Option<ArrayD<f32>>> {
        Ok(match t.data_type() {
            d if d == i8_t => Some(widen::<i8>(t)?),
            d if d == u8_t => Some(widen::<u8>(t)?),
            _ => None,
        })
    };
    if scale.data_type() != DataType::Float as i32 || zp.is_some_and(|z| z.data_type() != x.data_type()) {
        return Ok(None);
    }
    let Some(values) = read(x)? else { return Ok(None) };
    let scale = tensor_to_array::<f32>(scale)?;
    let zp = match zp {
        Some(z) => match read(z)? {
            Some(z) if z.shape() == scale.shape() => z,
            _ => return Ok(None),
        },
        None => ArrayD::zeros(scale.raw_dim()),
    };
    let out = match scale.ndim() {
        0 => {
            let (s, z) = (scale.iter().next().copied().unwrap_or(1.0), zp.iter().next().copied().unwrap_or(0.0));
            values.mapv(|v| (v - z) * s)
        }
        1 => {
            let rank = values.ndim() as i64;
            let axis = if axis < 0 { axis + rank } else { axis };
            let Some(axis) = usize::try_from(axis).ok().filter(|&a| a < values.ndim()) else { return Ok(None) };
            if values.shape()[axis] != scale.len() {
                return Ok(None);
            }
            let mut out = values;
            for (k, mut lane) in out.axis_iter_mut(ndarray::Axis(axis)).enumerate() {
                let (s, z) = (scale[[k]], zp[[k]]);
                lane.mapv_inplace(|v| (v - z) * s);
            }
            out
        }
        _ => return Ok(None),
    };
    Ok(Some(array_to_tensor(x.name(), &out)))
}

/// `Reshape` of `t` to `shape` (ONNX's rules: 0 copies the input's dimension unless `allowzero`, one -1 is inferred);
/// `None` when the shape does not fit the element count.
fn reshape(t: &TensorProto, shape: &[i64], allowzero: bool) -> Result<Option<TensorProto>> {
    let (dims, count) = tensor_shape(t)?;
    let mut out: Vec<i64> = Vec::with_capacity(shape.len());
    let mut infer = None;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            0 if !allowzero => match dims.get(i) {
                Some(&k) => out.push(k as i64),
                None => return Ok(None),
            },
            -1 if infer.is_none() => {
                infer = Some(i);
                out.push(1);
            }
            d if d >= 0 => out.push(d),
            _ => return Ok(None),
        }
    }
    let known = out.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
    if let Some(i) = infer {
        match known {
            Some(k) if k > 0 && count % k == 0 => out[i] = (count / k) as i64,
            _ => return Ok(None),
        }
    } else if known != Some(count) {
        return Ok(None);
    }
    Ok(Some(TensorProto { dims: out, ..t.clone() }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NodeExt, attr_int, attr_ints, attr_tensor, node, tensor_from_vec};

    fn values(t: &TensorProto) -> Vec<f32> {
        tensor_to_array::<f32>(t).unwrap().into_raw_vec_and_offset().0
    }

    #[test]
    fn a_chain_of_constant_ops_folds_to_what_it_computes() {
        let mut g = GraphProto::default();
        // Constant [2, 3] (float16) -> Cast to float -> Transpose -> Reshape to [-1] -> Identity: 1 initializer.
        let c = array_to_tensor(
            "",
            &ArrayD::from_shape_vec(IxDyn(&[2, 3]), (1..=6).map(|v| half::f16::from_f32(v as f32)).collect()).unwrap(),
        );
        g.node.push(node("Constant", "c", &[], &["c"]).with_attr(attr_tensor("value", c)));
        g.node.push(node("Cast", "cast", &["c"], &["c32"]).with_attr(attr_int("to", DataType::Float as i64)));
        g.node.push(node("Transpose", "t", &["c32"], &["ct"]));
        g.add_initializer(tensor_from_vec::<i64>("shape", &[1], vec![-1]).unwrap());
        g.node.push(node("Reshape", "r", &["ct", "shape"], &["flat"]));
        g.node.push(node("Identity", "i", &["flat"], &["w"]));
        g.node.push(node("Mul", "use", &["x", "w"], &["y"]));
        let f = fold_constants(&mut g).unwrap();
        assert_eq!(f.nodes(), 5, "{f:?}");
        assert_eq!(g.node.len(), 1);
        // The Identity names the Reshape's value: the Mul reads that.
        assert_eq!(g.node[0].input, ["x", "flat"]);
        let w = g.initializer("flat").unwrap();
        assert_eq!(w.dims, vec![6]);
        assert_eq!(values(w), vec![1., 4., 2., 5., 3., 6.]);
        // The intermediate tensors were read only by folded nodes: gone; the shape tensor too.
        let names: Vec<&str> = g.initializer.iter().map(|t| t.name()).collect();
        assert_eq!(names, vec!["flat"]);
    }

    #[test]
    fn a_weight_shared_through_identity_nodes_stays_one_initializer() {
        // PyTorch's TorchScript exporter writes a parameter read by several layers (ALBERT) once, and Identity nodes
        // of it for the other readers.
        let mut g = GraphProto::default();
        g.add_initializer(tensor_from_vec::<f32>("w", &[2, 3], vec![1., 2., 3., 4., 5., 6.]).unwrap());
        let mut external = tensor_from_vec::<f32>("big", &[2, 3], vec![0.; 6]).unwrap();
        external.raw_data = None;
        external.data_location = Some(DataLocation::External as i32);
        g.add_initializer(external);
        g.node.push(node("MatMul", "a", &["x", "w"], &["ya"]));
        g.node.push(node("Identity", "i1", &["w"], &["w1"]));
        g.node.push(node("MatMul", "b", &["x", "w1"], &["yb"]));
        g.node.push(node("Identity", "i2", &["w1"], &["w2"]));
        g.node.push(node("Transpose", "t", &["w2"], &["w2t"]));
        g.node.push(node("MatMul", "c", &["x", "w2"], &["yc"]));
        g.node.push(node("Gemm", "d", &["x", "w2t"], &["yd"]));
        // An Identity of an initializer kept outside (external data) is a name for it all the same.
        g.node.push(node("Identity", "ie", &["big"], &["big1"]));
        g.node.push(node("MatMul", "e", &["x", "big1"], &["ye"]));
        g.value_info.push(crate::value_info("w1", DataType::Float, None));
        // Read inside a subgraph: stays as it is.
        g.node.push(node("Identity", "is", &["w"], &["ws"]));
        let branch = GraphProto {
            node: vec![node("MatMul", "in_branch", &["x", "ws"], &["yb_then"])],
            output: vec![crate::value_info("yb_then", DataType::Float, None)],
            ..Default::default()
        };
        g.node.push(node("If", "if", &["cond"], &["yif"]).with_attr(crate::attr_graph("then_branch", branch)));
        let f = fold_constants(&mut g).unwrap();
        assert_eq!(f.describe(), "4 Identity, 1 Transpose", "{f:?}");
        let read = |n: &str| g.node.iter().find(|x| x.name() == n).unwrap().input[1].clone();
        assert_eq!([read("a"), read("b"), read("c"), read("e")], ["w", "w", "w", "big"]);
        assert_eq!(values(g.initializer(&read("d")).unwrap()), vec![1., 4., 2., 5., 3., 6.]);
        let mut names: Vec<&str> = g.initializer.iter().map(|t| t.name()).collect();
        names.sort_unstable();
        assert_eq!(names, ["big", "w", "w2t", "ws"]);
        assert!(g.value_info.is_empty(), "no value_info for a name nothing produces");
    }

    #[test]
    fn int8_weights_behind_dequantize_linear_fold_per_tensor_and_per_axis() {
        let mut g = GraphProto::default();
        g.add_initializer(tensor_from_vec::<i8>("q", &[2, 3], vec![-128, 0, 127, 10, -10, 1]).unwrap());
        g.add_initializer(tensor_from_vec::<u8>("qu", &[2, 3], vec![0, 128, 255, 130, 126, 129]).unwrap());
        g.add_initializer(tensor_from_vec::<f32>("s", &[], vec![0.5]).unwrap());
        g.add_initializer(tensor_from_vec::<f32>("s3", &[3], vec![1.0, 0.5, 0.25]).unwrap());
        g.add_initializer(tensor_from_vec::<u8>("z3", &[3], vec![128, 128, 127]).unwrap());
        g.node.push(node("DequantizeLinear", "dq", &["q", "s"], &["w"]));
        g.node.push(node("DequantizeLinear", "dq_axis", &["qu", "s3", "z3"], &["wu"]));
        g.node.push(node("DequantizeLinear", "dq_blocked", &["q", "s3"], &["wb"]).with_attr(attr_int("block_size", 2)));
        g.node.push(node("MatMul", "mm", &["x", "w"], &["y"]));
        g.node.push(node("MatMul", "mm_u", &["x", "wu"], &["yu"]));
        g.node.push(node("MatMul", "mm_b", &["x", "wb"], &["yb"]));
        let folded = fold_constants(&mut g).unwrap();
        assert_eq!(folded.by_op.get("DequantizeLinear"), Some(&2), "{folded:?}");
        assert_eq!(values(g.initializer("w").unwrap()), [-64.0, 0.0, 63.5, 5.0, -5.0, 0.5]);
        assert_eq!(values(g.initializer("wu").unwrap()), [-128.0, 0.0, 32.0, 2.0, -1.0, 0.5]);
        assert!(g.initializer("wb").is_none(), "a blocked DequantizeLinear stays");
        assert!(g.initializer("qu").is_none() && g.initializer("q").is_some(), "q is still read by the blocked one");
    }

    #[test]
    fn what_is_not_constant_or_not_evaluable_stays() {
        let mut g = GraphProto::default();
        g.add_initializer(tensor_from_vec::<f32>("w", &[2, 2], vec![1., 2., 3., 4.]).unwrap());
        // Reads a graph input: not constant.
        g.node.push(node("Transpose", "tx", &["x"], &["xt"]));
        // A graph output: stays a node.
        g.node.push(node("Identity", "out", &["w"], &["wo"]));
        g.output.push(crate::value_info("wo", DataType::Float, None));
        // A shape that does not fit 4 values, and a bad perm.
        g.add_initializer(tensor_from_vec::<i64>("s3", &[1], vec![3]).unwrap());
        g.node.push(node("Reshape", "r", &["w", "s3"], &["wr"]));
        g.node.push(node("Transpose", "tp", &["w"], &["wp"]).with_attr(attr_ints("perm", &[0, 0])));
        // A Cast folding does not cover (float to int8) and another domain's op.
        g.node.push(node("Cast", "ci", &["w"], &["wi"]).with_attr(attr_int("to", DataType::Int8 as i64)));
        g.node.push(node("Identity", "ms", &["w"], &["wm"]).with_domain("com.microsoft"));
        let before = g.clone();
        let f = fold_constants(&mut g).unwrap();
        assert_eq!(f, Folded::default());
        assert_eq!(g, before);
    }

    #[test]
    fn an_initializer_other_nodes_still_read_stays() {
        let mut g = GraphProto::default();
        g.add_initializer(tensor_from_vec::<f32>("w", &[2, 3], vec![1., 2., 3., 4., 5., 6.]).unwrap());
        g.node.push(node("Transpose", "t", &["w"], &["wt"]));
        g.node.push(node("MatMul", "a", &["x", "wt"], &["y"]));
        g.node.push(node("Gemm", "b", &["x", "w"], &["z"]));
        fold_constants(&mut g).unwrap();
        assert_eq!(values(g.initializer("wt").unwrap()), vec![1., 4., 2., 5., 3., 6.]);
        assert!(g.initializer("w").is_some());
    }

    #[test]
    fn an_initializer_listed_as_an_input_goes_with_its_input() {
        let mut g = GraphProto::default();
        g.add_initializer(tensor_from_vec::<f32>("w", &[2, 3], vec![1., 2., 3., 4., 5., 6.]).unwrap());
        g.input.push(crate::value_info("x", DataType::Float, None));
        g.input.push(crate::value_info("w", DataType::Float, None));
        g.node.push(node("Transpose", "t", &["w"], &["wt"]));
        g.node.push(node("MatMul", "a", &["x", "wt"], &["y"]));
        fold_constants(&mut g).unwrap();
        assert!(g.initializer("w").is_none());
        assert_eq!(g.input.iter().map(|v| v.name()).collect::<Vec<_>>(), ["x"]);
    }

    #[test]
    fn constant_attribute_forms() {
        let mut g = GraphProto::default();
        g.node.push(node("Constant", "a", &[], &["a"]).with_attr(crate::attr_floats("value_floats", &[1.5, 2.5])));
        g.node.push(node("Constant", "b", &[], &["b"]).with_attr(attr_int("value_int", 7)));
        g.node.push(node("Add", "use", &["a", "b"], &["y"]));
        assert_eq!(fold_constants(&mut g).unwrap().describe(), "2 Constant");
        assert_eq!(values(g.initializer("a").unwrap()), vec![1.5, 2.5]);
        let b = g.initializer("b").unwrap();
        assert!(b.dims.is_empty());
        assert_eq!(tensor_to_array::<i64>(b).unwrap().into_raw_vec_and_offset().0, vec![7]);
    }
}
