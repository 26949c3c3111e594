//! What a model contains in terms of Q/DQ (for `qdq inspect` and parity checks).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use onnx_ir::proto::{GraphProto, TensorProto};
use onnx_ir::{DataType, GraphExt, Model};

use crate::scale::QuantType;

/// Per op type: how many nodes there are and how many read only dequantized float inputs.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct OpCoverage {
    /// Nodes of this op type.
    pub nodes: usize,
    /// Nodes whose every float input is the output of a DequantizeLinear.
    pub covered: usize,
    /// Nodes that are integer kernels ([`is_integer_kernel`]): they read quantized tensors themselves.
    pub integer: usize,
}

/// True for an op that computes on quantized (integer) inputs itself: ONNX Runtime's `MatMulIntegerToFloat`,
/// `QAttention`, ..., and `QLinear*` ([`QUANTIZED_OPS`] but the quantizers).
pub fn is_integer_kernel(op: &str) -> bool {
    (QUANTIZED_OPS.contains(&op) && op != "QuantizeLinear" && op != "DynamicQuantizeLinear")
        || op.starts_with("QLinear")
}

/// A QuantizeLinear whose output is read by something other than a DequantizeLinear (an integer kernel such as
/// `MatMulIntegerToFloat` takes it as it is): the range it encodes is the kernel's input range.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QuantizerInfo {
    /// The quantized float tensor.
    pub tensor: String,
    pub quantize_node: String,
    pub scales: Vec<f32>,
    pub zero_points: Vec<i32>,
    pub unsigned: bool,
    /// The 8-bit type (the zero point's; int8 when it is absent): `int8`, `uint8`, `e4m3fn` or `e4m3fnuz`.
    #[serde(rename = "precision", serialize_with = "type_name")]
    pub qtype: QuantType,
    /// `(node name, input slot)` of every reader that is not a DequantizeLinear, sorted.
    pub consumers: Vec<(String, usize)>,
}

impl QuantizerInfo {
    /// The float range it represents (per-tensor, known scale), as [`PairInfo::range`].
    pub fn range(&self) -> Option<(f32, f32)> {
        range_of(&self.scales, &self.zero_points, self.qtype)
    }
}

/// One DequantizeLinear node and the tensor behind it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PairInfo {
    /// The quantized float tensor (input of the feeding QuantizeLinear), or the integer
    /// initializer read directly by the DQ.
    pub tensor: String,
    /// True if `tensor` is an initializer.
    pub is_initializer: bool,
    /// QuantizeLinear node name, if the DQ is fed by one.
    pub quantize_node: Option<String>,
    /// DequantizeLinear node name.
    pub dequantize_node: String,
    /// The DequantizeLinear node's output: the dequantized tensor the readers see.
    pub output: String,
    /// Scales (empty if the scale is not a float initializer).
    pub scales: Vec<f32>,
    /// Zero points (empty if absent or not an int8/uint8 initializer).
    pub zero_points: Vec<i32>,
    /// True if the zero point is uint8 (else int8, the default when it is absent, or float8).
    pub unsigned: bool,
    /// The 8-bit type (the zero point's; int8 when it is absent): `int8`, `uint8`, `e4m3fn` or `e4m3fnuz`.
    #[serde(rename = "precision", serialize_with = "type_name")]
    pub qtype: QuantType,
    /// `axis` attribute of the DQ, if set.
    pub axis: Option<i64>,
    /// `(node name, input slot)` of every reader of the DQ output, sorted.
    pub consumers: Vec<(String, usize)>,
}

/// A node of a [`crate::MATMUL_LIKE`] op type that reads a float input that is not the output of a DequantizeLinear (for
/// `MatMul`, `Gemm`, `FusedMatMul` and `Attention`: a float A or B).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FloatNode {
    pub node: String,
    pub op_type: String,
    /// Its float inputs that are not dequantized.
    pub float_inputs: Vec<String>,
}

impl fmt::Display for FloatNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}; float: {})", self.node, self.op_type, self.float_inputs.join(", "))
    }
}

/// Summary of Q/DQ in a model.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Coverage {
    /// Op type -> counts (QuantizeLinear / DequantizeLinear themselves excluded).
    pub by_op: BTreeMap<String, OpCoverage>,
    /// Every DQ node, sorted by tensor then consumers.
    pub pairs: Vec<PairInfo>,
    /// MatMul-like work left in float, in graph order.
    pub float_matmul_like: Vec<FloatNode>,
    /// Every QuantizeLinear read by an integer kernel (or anything but a DequantizeLinear), sorted by tensor.
    pub quantizers: Vec<QuantizerInfo>,
}

fn int_values(t: &TensorProto) -> Vec<i32> {
    match DataType::try_from(t.data_type()) {
        Ok(DataType::Int8) => onnx_ir::tensor_to_array::<i8>(t).map(|a| a.iter().map(|&v| i32::from(v)).collect()),
        Ok(DataType::Uint8) => onnx_ir::tensor_to_array::<u8>(t).map(|a| a.iter().map(|&v| i32::from(v)).collect()),
        Ok(DataType::Int16) => onnx_ir::tensor_to_array::<i16>(t).map(|a| a.iter().map(|&v| i32::from(v)).collect()),
        _ => Ok(vec![]),
    }
    .unwrap_or_default()
}

fn is_non_float_constant(g: &GraphProto, name: &str) -> bool {
    let declared = g.input.iter().find(|v| v.name() == name).and_then(onnx_ir::declared_elem_type);
    let elem = g.initializer(name).map(|t| t.data_type()).or(declared);
    elem.is_some_and(|e| e != DataType::Float as i32)
}

/// How many QuantizeLinear and DequantizeLinear nodes a model's main graph has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct QdqCounts {
    pub quantize: usize,
    pub dequantize: usize,
}

impl QdqCounts {
    /// Counts the nodes of `model`.
    pub fn of(model: &Model) -> QdqCounts {
        let count = |op: &str| model.graph().node.iter().filter(|n| n.op_type() == op).count();
        QdqCounts { quantize: count("QuantizeLinear"), dequantize: count("DequantizeLinear") }
    }
}

/// Ops that only a quantized model holds (`QLinear*` too): activation quantization, at run time or calibrated, and
/// integer kernels. `DequantizeLinear` alone is not among them (int8 weight storage in a float model).
pub const QUANTIZED_OPS: [&str; 9] = [
    "QuantizeLinear",
    "DynamicQuantizeLinear",
    "MatMulInteger",
    "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul",
    "ConvInteger",
    "QAttention",
    "QGemm",
    "QEmbedLayerNormalization",
];

/// How many nodes of each [`QUANTIZED_OPS`] type (or `QLinear*`) `model` holds: empty for a float model.
pub fn quantized_ops(model: &Model) -> BTreeMap<String, usize> {
    let mut held = BTreeMap::new();
    for n in &model.graph().node {
        if QUANTIZED_OPS.contains(&n.op_type()) || n.op_type().starts_with("QLinear") {
            *held.entry(n.op_type().to_owned()).or_default() += 1;
        }
    }
    held
}

/// Who produces and reads each tensor of a graph, for [`coverage`].
struct Index<'g> {
    producer_op: HashMap<&'g str, &'g str>,
    q_by_output: HashMap<&'g str, &'g onnx_ir::proto::NodeProto>,
    readers: HashMap<&'g str, Vec<(String, usize)>>,
    op_by_name: HashMap<&'g str, &'g str>,
}

impl<'g> Index<'g> {
    fn of(g: &'g GraphProto) -> Index<'g> {
        let mut ix = Index {
            producer_op: HashMap::new(),
            q_by_output: HashMap::new(),
            readers: HashMap::new(),
            op_by_name: g.node.iter().map(|n| (n.name(), n.op_type())).collect(),
        };
        for n in &g.node {
            for o in &n.output {
                ix.producer_op.insert(o.as_str(), n.op_type());
                if n.op_type() == "QuantizeLinear" {
                    ix.q_by_output.insert(o.as_str(), n);
                }
            }
            for (slot, i) in n.input.iter().enumerate() {
                ix.readers.entry(i.as_str()).or_default().push((n.name().to_string(), slot));
            }
        }
        ix
    }
}

/// Counts Q/DQ coverage per op type and lists every DQ with its parameters.
pub fn coverage(model: &Model) -> Coverage {
    let g = model.graph();
    let ix = Index::of(g);
    let mut cov = Coverage::default();
    for n in &g.node {
        match n.op_type() {
            "DequantizeLinear" => cov.pairs.extend(pair_info(g, n, &ix.q_by_output, &ix.readers)),
            "QuantizeLinear" => cov.quantizers.extend(quantizer_info(g, n, &ix.op_by_name, &ix.readers)),
            _ => count_node(&mut cov, g, n, &ix.producer_op),
        }
    }
    cov.pairs.sort_by(|a, b| (&a.tensor, &a.consumers).cmp(&(&b.tensor, &b.consumers)));
    cov.quantizers.sort_by(|a, b| (&a.tensor, &a.consumers).cmp(&(&b.tensor, &b.consumers)));
    cov
}

/// Counts node `n` (not a Q or DQ) into `cov`: its op type's nodes, covered and integer counts, and its float
/// MatMul-like work.
fn count_node(cov: &mut Coverage, g: &GraphProto, n: &onnx_ir::proto::NodeProto, producer_op: &HashMap<&str, &str>) {
    let op = n.op_type();
    let e = cov.by_op.entry(op.to_string()).or_default();
    e.nodes += 1;
    e.integer += usize::from(is_integer_kernel(op));
    // Covered: it has float inputs, and every one is a DequantizeLinear output (a node reading only integer
    // tensors, such as Shape(input_ids), is not "behind DQ").
    let float_inputs: Vec<&String> = n.input.iter().filter(|i| !i.is_empty() && !is_non_float_constant(g, i)).collect();
    let plain: Vec<String> = float_inputs
        .iter()
        .filter(|i| producer_op.get(i.as_str()) != Some(&"DequantizeLinear"))
        .map(|i| i.to_string())
        .collect();
    if !float_inputs.is_empty() && plain.is_empty() {
        e.covered += 1;
    }
    // For the ops qdq quantizes, the matrix work is A·B: a Gemm's C or an Attention's bias left in float is not
    // float matrix work.
    let operands: Vec<String> = match crate::patterns::matmul_rule(n) {
        Some(_) => plain.into_iter().filter(|i| n.input.iter().take(2).any(|a| a == i)).collect(),
        None => plain,
    };
    if crate::types::MATMUL_LIKE.contains(&op) && !operands.is_empty() {
        cov.float_matmul_like.push(FloatNode {
            node: n.name().to_owned(),
            op_type: op.to_owned(),
            float_inputs: operands,
        });
    }
}

/// The QuantizeLinear `n` when something other than a DequantizeLinear reads its output.
fn quantizer_info(
    g: &GraphProto,
    n: &onnx_ir::proto::NodeProto,
    op_by_name: &HashMap<&str, &str>,
    readers: &HashMap<&str, Vec<(String, usize)>>,
) -> Option<QuantizerInfo> {
    let out = n.output.first()?;
    let op_of = |name: &str| op_by_name.get(name).copied();
    let mut consumers: Vec<(String, usize)> = readers
        .get(out.as_str())
        .into_iter()
        .flatten()
        .filter(|(r, _)| op_of(r) != Some("DequantizeLinear"))
        .cloned()
        .collect();
    if consumers.is_empty() {
        return None;
    }
    consumers.sort();
    let (scales, zero_points, qtype) = params(g, n);
    Some(QuantizerInfo {
        tensor: n.input.first()?.clone(),
        quantize_node: n.name().to_owned(),
        scales,
        zero_points,
        unsigned: qtype == QuantType::UInt8,
        qtype,
        consumers,
    })
}

/// A Q or DQ node's scales, zero points (when initializers; a float8 one's are 0) and their type.
fn params(g: &GraphProto, n: &onnx_ir::proto::NodeProto) -> (Vec<f32>, Vec<i32>, QuantType) {
    let init = |slot: usize| n.input.get(slot).and_then(|s| g.initializer(s));
    let scales = init(1)
        .and_then(|t| onnx_ir::tensor_to_array::<f32>(t).ok())
        .map(|a| a.iter().copied().collect())
        .unwrap_or_default();
    let qtype = init(2).and_then(|t| QuantType::from_onnx_code(t.data_type())).unwrap_or(QuantType::Int8);
    let zero_points = match init(2) {
        // The ranges read a float8 zero point as 0.0: what qdq and every exporter seen write.
        Some(t) if qtype.is_float8() => vec![0; onnx_ir::tensor_shape(t).map_or(0, |(_, n)| n as usize)],
        Some(t) => int_values(t),
        None => vec![],
    };
    (scales, zero_points, qtype)
}

/// The pair a DequantizeLinear node `n` ends: the tensor behind it, its parameters and readers.
fn pair_info(
    g: &GraphProto,
    n: &onnx_ir::proto::NodeProto,
    q_by_output: &HashMap<&str, &onnx_ir::proto::NodeProto>,
    readers: &HashMap<&str, Vec<(String, usize)>>,
) -> Option<PairInfo> {
    let dq_in = n.input.first()?;
    let q = q_by_output.get(dq_in.as_str());
    let tensor = q.and_then(|q| q.input.first()).unwrap_or(dq_in).clone();
    let (scales, zero_points, qtype) = params(g, n);
    let mut consumers: Vec<(String, usize)> =
        n.output.first().and_then(|o| readers.get(o.as_str())).cloned().unwrap_or_default();
    consumers.sort();
    Some(PairInfo {
        is_initializer: g.is_initializer(&tensor),
        tensor,
        quantize_node: q.map(|q| q.name().to_string()),
        dequantize_node: n.name().to_string(),
        output: n.output.first().cloned().unwrap_or_default(),
        scales,
        zero_points,
        unsigned: qtype == QuantType::UInt8,
        qtype,
        axis: onnx_ir::get_attr_int(n, "axis").ok().flatten(),
        consumers,
    })
}

impl fmt::Display for Coverage {
    /// Per-op coverage table, then one line per DQ (tensor, scale or channel count, zero point, axis, readers).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<24} {:>6} {:>10} {:>8}", "op type", "nodes", "behind DQ", "integer")?;
        for (op, c) in &self.by_op {
            writeln!(f, "{op:<24} {:>6} {:>10} {:>8}", c.nodes, c.covered, c.integer)?;
        }
        if !self.float_matmul_like.is_empty() {
            writeln!(
                f,
                "{} MatMul-like nodes read float inputs that are not dequantized:",
                self.float_matmul_like.len()
            )?;
            for n in &self.float_matmul_like {
                writeln!(f, "  {n}")?;
            }
        }
        writeln!(f, "{} DequantizeLinear nodes ({}):", self.pairs.len(), self.precisions())?;
        for p in &self.pairs {
            let (scale, zp, axis) = param_columns(&p.scales, &p.zero_points, p.axis);
            let readers: Vec<String> = p.consumers.iter().map(|(n, s)| format!("{n}[{s}]")).collect();
            let t = p.qtype.name();
            writeln!(f, "  {:<48} {t:<8} {scale:>12} zp {zp:>4} axis {axis:>2} -> {}", p.tensor, readers.join(" "))?;
        }
        if !self.quantizers.is_empty() {
            writeln!(f, "{} QuantizeLinear nodes read by integer kernels:", self.quantizers.len())?;
            for q in &self.quantizers {
                let (scale, zp, _) = param_columns(&q.scales, &q.zero_points, None::<i64>);
                let readers: Vec<String> = q.consumers.iter().map(|(n, s)| format!("{n}[{s}]")).collect();
                let t = q.qtype.name();
                writeln!(f, "  {:<48} {t:<8} {scale:>12} zp {zp:>4}         -> {}", q.tensor, readers.join(" "))?;
            }
        }
        Ok(())
    }
}

impl Coverage {
    /// How many pairs of each 8-bit type: `49 int8, 12 e4m3fn`; `none` without pairs.
    pub fn precisions(&self) -> String {
        let mut n: BTreeMap<&str, usize> = BTreeMap::new();
        for p in &self.pairs {
            *n.entry(p.qtype.name()).or_default() += 1;
        }
        if n.is_empty() {
            return "none".to_owned();
        }
        n.iter().map(|(t, c)| format!("{c} {t}")).collect::<Vec<_>>().join(", ")
    }
}

impl PairInfo {
    /// The float range the pair can represent, `[(qmin - zp) * scale, (qmax - zp) * scale]`, for a per-tensor pair
    /// with a known scale.
    pub fn range(&self) -> Option<(f32, f32)> {
        range_of(&self.scales, &self.zero_points, self.qtype)
    }
}

/// `[(qmin - zp) * scale, (qmax - zp) * scale]` of per-tensor parameters.
fn range_of(scales: &[f32], zero_points: &[i32], qtype: QuantType) -> Option<(f32, f32)> {
    let [scale] = scales[..] else { return None };
    let zp = zero_points.first().copied().unwrap_or(0);
    let (qmin, qmax) = match qtype {
        QuantType::UInt8 => (0, 255),
        QuantType::Int8 => (-128, 127),
        QuantType::Int16 => (-32768, 32767),
        // The largest finite value either side (zero point 0.0).
        float8 => float8.range(true, false),
    };
    Some(((qmin - zp) as f32 * scale, (qmax - zp) as f32 * scale))
}

fn type_name<S: serde::Serializer>(t: &QuantType, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(t.name())
}

/// Display columns shared by the plan and coverage tables: scale (or channel count), zero point, axis.
pub(crate) fn param_columns(
    scales: &[f32],
    zero_points: &[i32],
    axis: Option<impl ToString>,
) -> (String, String, String) {
    let scale = match scales {
        [s] => format!("{s:.6e}"),
        s => format!("{} chans", s.len()),
    };
    let zp = match zero_points {
        [z] => z.to_string(),
        _ => "-".into(),
    };
    (scale, zp, axis.map_or("-".into(), |a| a.to_string()))
}
