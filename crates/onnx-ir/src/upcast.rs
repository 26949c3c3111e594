//! A graph that computes in float16 made to compute in float32: what calibration and Q/DQ placement work on.
//!
//! A BERT converted to float16 (ONNX Runtime's `convert_float_to_float16`, onnxconverter-common, Optimum's fp16
//! export) stores its weights as float16 initializers, casts the float mask (or its inputs) to float16 and, kept with
//! float32 inputs and outputs, casts back at the end. Every float16 value is exactly a float32 value, so the same
//! graph in float32 computes what the float16 one approximates: initializers and `Constant` / `ConstantOfShape`
//! values are widened, `Cast` (and any `to` / `dtype` attribute) to float16 casts to float32 instead, and declared
//! types (inputs, outputs, value_info) follow. Only the top-level graph is rewritten; subgraphs of `If` / `Loop` are
//! left as they are.

use crate::error::Result;
use crate::fold::cast;
use crate::proto::tensor_proto::DataType;
use crate::proto::{GraphProto, TensorProto, ValueInfoProto, attribute_proto::AttributeType, type_proto};

/// What [`upcast_float16`] changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Upcast {
    /// float16 initializers (and Constant / ConstantOfShape values) widened to float32.
    pub tensors: usize,
    /// Nodes whose `to` / `dtype` attribute named float16.
    pub casts: usize,
    /// Graph inputs, outputs and value_infos declared float16.
    pub declared: usize,
}

impl Upcast {
    /// Whether the graph held anything float16.
    pub fn changed(&self) -> bool {
        self.tensors + self.casts + self.declared > 0
    }
}

/// Rewrites `g` to compute in float32 where it computed in float16 (module docs). Sparse initializers and external
/// float16 tensors that were not loaded are errors from the tensor conversion, naming the tensor.
pub fn upcast_float16(g: &mut GraphProto) -> Result<Upcast> {
    let f16 = DataType::Float16 as i32;
    let f32_ = DataType::Float as i32;
    let mut done = Upcast::default();
    let widen = |t: &mut TensorProto, done: &mut Upcast| -> Result<()> {
        if t.data_type() == f16
            && let Some(wide) = cast(t, Some(i64::from(f32_)))?
        {
            *t = TensorProto { doc_string: t.doc_string.take(), ..wide };
            done.tensors += 1;
        }
        Ok(())
    };
    for t in &mut g.initializer {
        widen(t, &mut done)?;
    }
    for n in &mut g.node {
        let op = n.op_type().to_owned();
        for a in &mut n.attribute {
            match a.r#type() {
                AttributeType::Tensor if matches!(op.as_str(), "Constant" | "ConstantOfShape") => {
                    if let Some(t) = a.t.as_mut() {
                        widen(t, &mut done)?;
                    }
                }
                AttributeType::Int if matches!(a.name(), "to" | "dtype") && a.i == Some(i64::from(f16)) => {
                    a.i = Some(i64::from(f32_));
                    done.casts += 1;
                }
                _ => {}
            }
        }
    }
    let declared = |v: &mut ValueInfoProto, done: &mut Upcast| {
        if let Some(type_proto::Value::TensorType(t)) = v.r#type.as_mut().and_then(|t| t.value.as_mut())
            && t.elem_type == Some(f16)
        {
            t.elem_type = Some(f32_);
            done.declared += 1;
        }
    };
    for v in g.input.iter_mut().chain(g.output.iter_mut()).chain(g.value_info.iter_mut()) {
        declared(v, &mut done);
    }
    // A Cast of float32 to float32 (what the float16 round trips became) copies; it stays, so that names and graph
    // outputs are as they were (ONNX Runtime removes it).
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{NodeExt as _, attr_int, attr_tensor, node};
    use crate::graph::value_info;
    use crate::tensor::{array_to_tensor, tensor_to_array};
    use ndarray::{ArrayD, IxDyn};

    #[test]
    fn every_float16_value_and_type_becomes_float32_and_nothing_else_changes() {
        let mut g = GraphProto::default();
        let w: Vec<half::f16> = [0.1f32, -2.5, 65504.0, 1e-7].iter().map(|&v| half::f16::from_f32(v)).collect();
        g.initializer.push(array_to_tensor("w", &ArrayD::from_shape_vec(IxDyn(&[2, 2]), w.clone()).unwrap()));
        g.initializer.push(array_to_tensor("ids", &ArrayD::from_elem(IxDyn(&[2]), 3i64)));
        let c = array_to_tensor("", &ArrayD::from_elem(IxDyn(&[]), half::f16::from_f32(-10000.0)));
        g.node.push(node("Constant", "c", &[], &["neg"]).with_attr(attr_tensor("value", c)));
        g.node.push(node("Cast", "to16", &["x"], &["x16"]).with_attr(attr_int("to", DataType::Float16 as i64)));
        g.node.push(node("MatMul", "mm", &["x16", "w"], &["y16"]));
        g.node.push(node("Cast", "to32", &["y16"], &["y"]).with_attr(attr_int("to", DataType::Float as i64)));
        g.node.push(node("Cast", "mask", &["m"], &["m64"]).with_attr(attr_int("to", DataType::Int64 as i64)));
        g.input.push(value_info("x", DataType::Float, None));
        g.value_info.push(value_info("x16", DataType::Float16, None));
        g.output.push(value_info("y", DataType::Float, None));
        g.output.push(value_info("y16", DataType::Float16, None));
        let done = upcast_float16(&mut g).unwrap();
        assert_eq!(done, Upcast { tensors: 2, casts: 1, declared: 2 });
        let wide = tensor_to_array::<f32>(&g.initializer[0]).unwrap();
        assert_eq!(wide.iter().copied().collect::<Vec<_>>(), w.iter().map(|v| v.to_f32()).collect::<Vec<_>>());
        assert_eq!(g.initializer[1].data_type(), DataType::Int64 as i32, "integers stay");
        assert_eq!(g.node[1].attribute[0].i, Some(DataType::Float as i64));
        assert_eq!(g.node[4].attribute[0].i, Some(DataType::Int64 as i64), "a Cast to another type stays");
        let c = g.node[0].attribute[0].t.as_ref().unwrap();
        assert_eq!(tensor_to_array::<f32>(c).unwrap().iter().copied().collect::<Vec<_>>(), [-10000.0]);
        assert_eq!(g.node.len(), 5, "no node added or removed");
        assert!(!upcast_float16(&mut g).unwrap().changed(), "a float32 graph is left alone");
    }
}
