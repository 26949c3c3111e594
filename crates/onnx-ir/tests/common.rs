//! Shared test helpers: a small hand-built model.

use qdq_onnx_ir::proto::{ModelProto, OperatorSetIdProto};
use qdq_onnx_ir::{DataType, GraphExt, Model, array_to_tensor, node, value_info};

/// y = Relu(x + w) with x: float [2], w initializer [1.0, -2.0].
pub fn small_model() -> Model {
    let mut m = Model::new(ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(14) }],
        graph: Some(Default::default()),
        ..Default::default()
    });
    let g = m.graph_mut();
    g.name = Some("g".into());
    g.input.push(value_info("x", DataType::Float, Some(&[Ok(2)])));
    g.add_initializer(array_to_tensor("w", &ndarray::arr1(&[1.0f32, -2.0]).into_dyn()));
    g.push_node(node("Add", "add", &["x", "w"], &["s"]));
    g.push_node(node("Relu", "relu", &["s"], &["y"]));
    g.output.push(value_info("y", DataType::Float, Some(&[Ok(2)])));
    m
}
