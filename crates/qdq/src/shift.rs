//! The shifted Softmax pair ([`SoftmaxRange::Shifted`](crate::SoftmaxRange::Shifted)): attention probabilities
//! `P` are quantized as `P - c` over `[-c, 1 - c]`, using all symmetric int8 levels, and each `P·V` MatMul reading
//! the pair gets `c · Σ_k V[k, :]` added back in float, so its output is exactly `DQ(Q(P - c))·V + c·1·V`.

use onnx_ir::proto::{GraphProto, NodeProto};
use onnx_ir::{GraphExt, GraphIndex, NameSet, NodeExt, attr_int, node};

use crate::error::{Error, Result};
use crate::patterns;
use crate::policy::Policy;
use crate::types::Consumer;

/// The offset `c` subtracted from Softmax outputs.
pub(crate) const SOFTMAX_SHIFT: f32 = 0.5;

/// The range of Softmax output `t` and its shift: shifted when every quantized reader is a MatMul reading it as A
/// (then the correction is exact), else the plain `[0, 1]`. Symmetric activations only: uint8 already uses all
/// its levels on `[0, 1]`.
pub(crate) fn softmax_range(
    ix: &GraphIndex,
    t: &str,
    receivers: &[usize],
    policy: &Policy,
) -> Result<((f32, f32), Option<f32>)> {
    let as_matmul_a = patterns::read_only_as_matmul_a(ix, t, receivers);
    if !policy.activations.spec().symmetric {
        return Err(Error::BadOptionValue {
            key: "softmax_range".into(),
            value: "shifted".into(),
            expected: "full or calibrated with asymmetric activations (shifting only helps symmetric ones)".into(),
        });
    }
    Ok(if as_matmul_a { ((-SOFTMAX_SHIFT, 1.0 - SOFTMAX_SHIFT), Some(SOFTMAX_SHIFT)) } else { ((0.0, 1.0), None) })
}

/// The `Sub` that shifts `name` by the constant `shift` before its QuantizeLinear; returns the shifted tensor.
pub(crate) fn shift_node(
    g: &mut GraphProto,
    names: &mut NameSet,
    name: &str,
    sfx: &str,
    shift: f32,
    nodes: &mut Vec<NodeProto>,
) -> Result<(String, String)> {
    let cname = names.fresh(&format!("{name}_shift"));
    g.add_initializer(onnx_ir::tensor_from_vec::<f32>(&cname, &[], vec![shift])?);
    let shifted = names.fresh(&format!("{name}_shifted{sfx}"));
    let sub = names.fresh(&format!("{name}_Shift{sfx}"));
    nodes.push(node("Sub", &sub, &[name, &cname], &[&shifted]));
    Ok((shifted, cname))
}

/// For every MatMul `A·B` of `shifts` reading a shifted pair (with its shift constant's name): the MatMul writes a
/// new tensor and `ReduceSum(B, axis -2) · c` is added back under the original output name, so every reader is
/// unchanged. The nodes go to `inserts` (insert before index, nodes).
pub(crate) fn correct(
    g: &mut GraphProto,
    names: &mut NameSet,
    shifts: Vec<(Vec<Consumer>, String)>,
    inserts: &mut Vec<(usize, Vec<NodeProto>)>,
) -> Result<()> {
    let axes = names.fresh("softmax_shift_reduce_axes");
    g.add_initializer(onnx_ir::tensor_from_vec::<i64>(&axes, &[1], vec![-2])?);
    for (pair, c) in shifts {
        for consumer in pair {
            let mm = &g.node[consumer.node];
            let (b, out) = (mm.input[1].clone(), mm.output[0].clone());
            let product = names.fresh(&format!("{out}_shifted"));
            let sum = names.fresh(&format!("{out}_shift_sum"));
            let scaled = names.fresh(&format!("{out}_shift_correction"));
            let base = &consumer.node_name;
            let nodes = vec![
                node("ReduceSum", &names.fresh(&format!("{base}_ShiftSum")), &[&b, &axes], &[&sum])
                    .with_attr(attr_int("keepdims", 1)),
                node("Mul", &names.fresh(&format!("{base}_ShiftScale")), &[&sum, &c], &[&scaled]),
                node("Add", &names.fresh(&format!("{base}_ShiftCorrect")), &[&product, &scaled], &[&out]),
            ];
            g.node[consumer.node].output[0] = product;
            inserts.push((consumer.node + 1, nodes));
        }
    }
    Ok(())
}
