//! Load/save round trips, graph editing and tensor conversions.

use crate::common::small_model;
use half::f16;
use ndarray::{ArrayD, IxDyn, arr2};
use qdq_onnx_ir::proto::TensorProto;
use qdq_onnx_ir::{
    DataType, Error, GraphExt, Model, NameSet, NodeExt, array_to_tensor, attr_graph, attr_int, attr_ints, get_attr_int,
    get_attr_ints, node, tensor_to_array, value_info,
};

#[test]
fn save_load_round_trip_preserves_proto_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let m = small_model();
    let p = dir.path().join("m.onnx");
    m.save(&p).unwrap();
    let back = Model::load(&p).unwrap();
    assert_eq!(back.proto, m.proto);
    assert_eq!(std::fs::read(&p).unwrap(), m.to_bytes().unwrap());
    assert_eq!(back.opset(""), Some(14));
    assert_eq!(back.opset("ai.onnx"), Some(14));
    assert_eq!(back.opset("com.microsoft"), None);
    // only the model file is left (temp file renamed away)
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn saving_over_the_loaded_file_replaces_it_whole() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.onnx");
    small_model().save(&p).unwrap();
    let mut m = Model::load(&p).unwrap();
    m.graph_mut().push_node(node("Neg", "neg", &["y"], &["z"]));
    m.save(&p).unwrap();
    assert_eq!(Model::load(&p).unwrap().graph().node.len(), 3);
}

#[test]
fn producers_consumers_initializers() {
    let m = small_model();
    let g = m.graph();
    assert_eq!(g.producer_of("s"), Some(0));
    assert_eq!(g.producer_of("y"), Some(1));
    assert_eq!(g.producer_of("x"), None);
    assert_eq!(g.consumers_of("w"), vec![(0, 1)]);
    assert_eq!(g.consumers_of("s"), vec![(1, 0)]);
    assert!(g.is_initializer("w"));
    assert!(!g.is_initializer("x"));
    assert_eq!(g.initializer("w").unwrap().dims, vec![2]);
}

#[test]
fn insert_and_rewire_keeps_graph_valid() {
    let mut m = small_model();
    let g = m.graph_mut();
    let t = g.fresh_name("s_neg");
    assert_eq!(t, "s_neg");
    g.insert_nodes(1, vec![node("Neg", "neg", &["s"], &[&t])]);
    g.rewire_input(2, 0, &t).unwrap();
    g.validate().unwrap();
    assert_eq!(g.consumers_of("s"), vec![(1, 0)]);
    assert_eq!(g.consumers_of("s_neg"), vec![(2, 0)]);
    assert!(matches!(g.rewire_input(2, 5, "x"), Err(Error::Graph { .. })));
    assert!(matches!(g.rewire_input(9, 0, "x"), Err(Error::Graph { .. })));
}

#[test]
fn fresh_names_avoid_every_kind_of_name() {
    let m = small_model();
    let g = m.graph();
    // node names, tensors, initializers, inputs, outputs are all taken
    for taken in ["add", "relu", "x", "w", "s", "y"] {
        assert_ne!(g.fresh_name(taken), taken);
    }
    assert_eq!(g.fresh_name("x"), "x_1");
    let mut names = NameSet::from_graph(g);
    let a = names.fresh("q");
    let b = names.fresh("q");
    let c = names.fresh("x");
    assert_eq!((a.as_str(), b.as_str(), c.as_str()), ("q", "q_1", "x_1"));
}

#[test]
fn add_output_is_idempotent() {
    let mut m = small_model();
    m.graph_mut().add_output("s", DataType::Float);
    m.graph_mut().add_output("s", DataType::Float);
    let outs: Vec<_> = m.graph().output.iter().map(|o| o.name().to_string()).collect();
    assert_eq!(outs, vec!["y", "s"]);
    m.graph().validate().unwrap();
}

#[test]
fn topological_order_of_shuffled_nodes() {
    let mut m = small_model();
    let g = m.graph_mut();
    g.push_node(node("Neg", "neg", &["y"], &["z"]));
    g.output.clear();
    g.node.reverse(); // neg, relu, add
    let order = g.topological_order().unwrap();
    assert_eq!(order, vec![2, 1, 0]);
    g.sort_nodes().unwrap();
    let ops: Vec<_> = g.node.iter().map(|n| n.op_type().to_string()).collect();
    assert_eq!(ops, vec!["Add", "Relu", "Neg"]);
}

#[test]
fn validate_catches_undefined_duplicate_and_cycle() {
    let mut m = small_model();
    m.graph_mut().push_node(node("Neg", "bad", &["nowhere"], &["z"]));
    let e = m.graph().validate().unwrap_err().to_string();
    assert!(e.contains("nowhere") && e.contains("bad"), "{e}");

    let mut m = small_model();
    m.graph_mut().push_node(node("Neg", "dup", &["x"], &["s"]));
    let e = m.graph().validate().unwrap_err().to_string();
    assert!(e.contains("'s'") && e.contains("dup"), "{e}");

    let mut m = small_model();
    let g = m.graph_mut();
    g.push_node(node("Add", "c1", &["x", "c2out"], &["c1out"]));
    g.push_node(node("Neg", "c2", &["c1out"], &["c2out"]));
    let e = g.validate().unwrap_err().to_string();
    assert!(e.contains("cycle"), "{e}");
    assert!(g.topological_order().is_err());

    // omitted optional inputs are fine
    let mut m = small_model();
    m.graph_mut().push_node(node("Clip", "clip", &["y", "", ""], &["c"]));
    m.graph().validate().unwrap();
}

#[test]
fn remove_unused_initializers_drops_dead_data_and_value_infos() {
    let mut m = small_model();
    let g = m.graph_mut();
    g.add_initializer(array_to_tensor("dead", &ndarray::arr1(&[1i64]).into_dyn()));
    g.value_info.push(value_info("gone", DataType::Float, None));
    g.value_info.push(value_info("s", DataType::Float, None));
    g.remove_unused_initializers();
    let inits: Vec<_> = g.initializer.iter().map(|t| t.name().to_string()).collect();
    assert_eq!(inits, vec!["w"]);
    let vis: Vec<_> = g.value_info.iter().map(|t| t.name().to_string()).collect();
    assert_eq!(vis, vec!["s"]);

    // An initializer also listed as a graph input (keep_initializers_as_inputs): unread, both go; the real inputs,
    // read or not, stay.
    let inputs_before: Vec<String> = g.input.iter().map(|v| v.name().to_string()).collect();
    g.add_initializer(array_to_tensor("old_default", &ndarray::arr1(&[2.0f32]).into_dyn()));
    g.input.push(value_info("old_default", DataType::Float, None));
    g.input.push(value_info("unread_real_input", DataType::Float, None));
    g.remove_unused_initializers();
    let inputs: Vec<String> = g.input.iter().map(|v| v.name().to_string()).collect();
    assert_eq!(inputs, [inputs_before, vec!["unread_real_input".to_string()]].concat());
    assert!(g.initializer("old_default").is_none());
}

#[test]
fn remove_unread_nodes_keeps_what_is_read_or_not_selected() {
    let mut m = small_model();
    let g = m.graph_mut();
    let outputs: Vec<String> = g.output.iter().map(|o| o.name().to_owned()).collect();
    let first_out = g.node[0].output[0].clone();
    g.push_node(node("Identity", "unread", &[&first_out], &["nobody"]));
    g.push_node(node("Identity", "read", &[&first_out], &["read_out"]));
    g.push_node(node("Neg", "reader", &["read_out"], &["neg_out"]));
    g.push_node(node("Neg", "unread_neg", &[&first_out], &["nobody_either"]));
    let before = g.node.len();
    g.remove_unread_nodes(&|n| n.op_type() == "Identity");
    let names: Vec<&str> = g.node.iter().map(|n| n.name()).collect();
    assert_eq!(g.node.len(), before - 1, "{names:?}");
    assert!(!names.contains(&"unread") && names.contains(&"read") && names.contains(&"unread_neg"), "{names:?}");
    assert!(outputs.iter().all(|o| g.node.iter().any(|n| n.output.contains(o))), "graph outputs keep their producers");
}

#[test]
fn ancestors_follow_producers_and_subgraph_reads_only() {
    let mut m = small_model();
    let g = m.graph_mut();
    g.input.push(value_info("uid", DataType::Int64, None));
    g.input.push(value_info("flag", DataType::Bool, None));
    g.push_node(node("Identity", "pass", &["uid"], &["uid_out"]));
    let mut branch = qdq_onnx_ir::proto::GraphProto::default();
    branch.push_node(node("Neg", "neg", &["y"], &["z"]));
    branch.output.push(value_info("z", DataType::Float, None));
    let mut iff = node("If", "if", &["flag"], &["picked"]);
    iff.attribute.push(attr_graph("then_branch", branch.clone()));
    iff.attribute.push(attr_graph("else_branch", branch));
    g.push_node(iff);
    let sorted = |set: std::collections::HashSet<String>| {
        let mut v: Vec<String> = set.into_iter().collect();
        v.sort();
        v
    };
    assert_eq!(sorted(g.ancestors_of(&["y"])), ["s", "w", "x", "y"]);
    assert_eq!(sorted(g.ancestors_of(&["uid_out"])), ["uid", "uid_out"]);
    // The If reads `y` from inside its branches: y's ancestors count.
    assert_eq!(sorted(g.ancestors_of(&["picked"])), ["flag", "picked", "s", "w", "x", "y"]);
    assert!(g.ancestors_of(&[""]).is_empty());
}

#[test]
fn attributes_build_and_read() {
    let n = node("Softmax", "sm", &["a"], &["b"]).with_attr(attr_int("axis", -1)).with_attr(attr_ints("perm", &[0, 2]));
    assert_eq!(get_attr_int(&n, "axis").unwrap(), Some(-1));
    assert_eq!(get_attr_int(&n, "missing").unwrap(), None);
    assert_eq!(get_attr_ints(&n, "perm").unwrap(), Some(&[0i64, 2][..]));
    let e = get_attr_int(&n, "perm").unwrap_err();
    assert!(matches!(e, Error::Attribute { .. }));
    assert!(e.to_string().contains("sm") && e.to_string().contains("INTS"));
}

fn roundtrip<T: qdq_onnx_ir::Element + PartialEq + std::fmt::Debug>(a: ArrayD<T>) {
    let t = array_to_tensor("t", &a);
    assert_eq!(t.data_type(), T::DATA_TYPE as i32);
    assert_eq!(tensor_to_array::<T>(&t).unwrap(), a);
}

#[test]
fn tensor_round_trips_for_each_element_type() {
    roundtrip(arr2(&[[1.5f32, -2.0, 0.25], [3.0, 4.0, 5.0]]).into_dyn());
    roundtrip(arr2(&[[f16::from_f32(1.5), f16::from_f32(-0.5)]]).into_dyn());
    roundtrip(ndarray::arr1(&[i64::MIN, 0, i64::MAX]).into_dyn());
    roundtrip(ndarray::arr1(&[i32::MIN, 7]).into_dyn());
    roundtrip(ndarray::arr1(&[-128i8, 0, 127]).into_dyn());
    roundtrip(ndarray::arr1(&[0u8, 255]).into_dyn());
    roundtrip(ArrayD::<f32>::zeros(IxDyn(&[0, 3])));
    roundtrip(ArrayD::from_elem(IxDyn(&[]), 2.5f32));
}

#[test]
fn raw_data_is_little_endian_and_row_major() {
    // a transposed (column-major view) array must still be written in logical order
    let a = arr2(&[[1i32, 2], [3, 4]]).reversed_axes().into_dyn();
    let t = array_to_tensor("t", &a);
    let want: Vec<u8> = [1i32, 3, 2, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(t.raw_data.as_deref(), Some(&want[..]));
    assert_eq!(t.dims, vec![2, 2]);
}

#[test]
fn typed_fields_are_read() {
    let f = TensorProto {
        name: Some("f".into()),
        dims: vec![2],
        data_type: Some(DataType::Float as i32),
        float_data: vec![1.0, 2.0],
        ..Default::default()
    };
    assert_eq!(tensor_to_array::<f32>(&f).unwrap().as_slice().unwrap(), &[1.0, 2.0]);
    // float16 bit patterns and int8 values live in int32_data
    let h = TensorProto {
        name: Some("h".into()),
        dims: vec![2],
        data_type: Some(DataType::Float16 as i32),
        int32_data: vec![0x3C00, 0xC000], // 1.0, -2.0
        ..Default::default()
    };
    let hv = tensor_to_array::<f16>(&h).unwrap();
    assert_eq!(hv.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), vec![1.0, -2.0]);
    let i = TensorProto {
        name: Some("i".into()),
        dims: vec![3],
        data_type: Some(DataType::Int8 as i32),
        int32_data: vec![-5, 0, 100],
        ..Default::default()
    };
    assert_eq!(tensor_to_array::<i8>(&i).unwrap().as_slice().unwrap(), &[-5, 0, 100]);
}

#[test]
fn tensor_conversion_errors_name_the_tensor() {
    let t = array_to_tensor("weights", &ndarray::arr1(&[1i64, 2]).into_dyn());
    let e = tensor_to_array::<f32>(&t).unwrap_err().to_string();
    assert!(e.contains("weights") && e.contains("FLOAT") && e.contains("INT64"), "{e}");
    let mut t = array_to_tensor("short", &ndarray::arr1(&[1.0f32, 2.0]).into_dyn());
    t.dims = vec![3];
    let e = tensor_to_array::<f32>(&t).unwrap_err().to_string();
    assert!(e.contains("short") && e.contains("8 bytes"), "{e}");
    let mut t = array_to_tensor("neg", &ndarray::arr1(&[1.0f32]).into_dyn());
    t.dims = vec![-1];
    assert!(tensor_to_array::<f32>(&t).unwrap_err().to_string().contains("negative"));
}

#[test]
fn float_values_are_read_in_place_and_raw_tensors_are_checked() {
    let a = arr2(&[[1.5f32, -2.0, 3.25], [0.0, 7.0, -0.5]]).into_dyn();
    let raw = qdq_onnx_ir::array_to_tensor("w", &a);
    let typed = TensorProto { raw_data: None, float_data: a.iter().copied().collect(), ..raw.clone() };
    for t in [&raw, &typed] {
        let (shape, values) = qdq_onnx_ir::f32_values(t).unwrap();
        assert_eq!((shape, values.len()), (vec![2, 3], 6));
        assert_eq!(qdq_onnx_ir::f32_values(t).unwrap().1.collect::<Vec<_>>(), a.iter().copied().collect::<Vec<_>>());
    }
    let short = TensorProto { raw_data: Some(vec![0; 20]), ..raw.clone() };
    assert!(qdq_onnx_ir::f32_values(&short).unwrap_err().to_string().contains("raw_data has 20 bytes"));
    let ints = qdq_onnx_ir::tensor_from_raw("q", &[2, 3], DataType::Int8, vec![1, 2, 3, 4, 5, 255]).unwrap();
    assert_eq!(tensor_to_array::<i8>(&ints).unwrap().as_slice().unwrap(), &[1, 2, 3, 4, 5, -1]);
    assert!(qdq_onnx_ir::f32_values(&ints).unwrap_err().to_string().contains("expected data type FLOAT"));
    let e = qdq_onnx_ir::tensor_from_raw("q", &[2, 3], DataType::Float, vec![0; 6]).unwrap_err().to_string();
    assert!(e.contains("6 bytes do not hold shape [2, 3] of FLOAT"), "{e}");
}

#[test]
fn name_nodes_gives_unnamed_and_repeated_nodes_names_of_their_own() {
    let mut m = small_model();
    let g = m.graph_mut();
    g.push_node(node("Neg", "", &["y"], &["n1"]));
    g.push_node(node("Neg", "", &["n1"], &["n2"]));
    // A name a fresh one would be built as, and a name used twice.
    g.push_node(node("Abs", "Neg_3", &["n2"], &["n3"]));
    g.push_node(node("Abs", "Neg_3", &["n3"], &["n4"]));
    let first = g.node[0].name().to_owned();
    let named = g.name_nodes();
    let names: Vec<&str> = g.node.iter().map(|n| n.name()).collect();
    assert_eq!(named, 3, "{names:?}");
    assert_eq!(names[0], first, "a unique name stays");
    assert!(names.iter().all(|n| !n.is_empty()), "{names:?}");
    let unique: std::collections::HashSet<&&str> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    // The first holder of a repeated name keeps it; no new name is a tensor's.
    assert_eq!(names.iter().filter(|n| **n == "Neg_3").count(), 1, "{names:?}");
    let tensors: Vec<&String> = g.node.iter().flat_map(|n| n.input.iter().chain(&n.output)).collect();
    assert!(names.iter().all(|n| !tensors.iter().any(|t| t == n)), "{names:?}");
    assert_eq!(g.name_nodes(), 0, "named twice: nothing left to name");
}
