//! Int8 embedding tables (`embeddings = int8`, the `cpu` preset): the int8 table read by Gather, then
//! DequantizeLinear on the gathered rows, computes exactly what DequantizeLinear on the whole table, then Gather,
//! does; tables read by anything but a Gather on axis 0 stay in float.
use onnx_ir::{GraphExt, Model, NodeExt, attr_int, node};

use crate::common::*;

fn cpu_with_int8_embeddings(fp32: &Model) -> (Model, qdq::Plan) {
    let policy = unsmoothed("cpu");
    assert_eq!(policy.embeddings, qdq::Embeddings::Int8);
    let tensors = qdq::tensors_to_calibrate(fp32, &policy).unwrap();
    qdq::quantize(fp32, &observed_ranges(fp32, &tensors), &policy).unwrap()
}

/// The same model with each table's DequantizeLinear moved in front of its Gather: a float table dequantized whole.
fn dequantize_then_gather(q: &Model) -> Model {
    let mut m = q.clone();
    let g = m.graph_mut();
    let dqs: Vec<usize> = (0..g.node.len())
        .filter(|&i| g.node[i].op_type() == "DequantizeLinear" && g.node[i].name().ends_with("Gather_DequantizeLinear"))
        .collect();
    assert!(!dqs.is_empty());
    let mut whole_tables = vec![];
    for &i in dqs.iter().rev() {
        let dq = g.node.remove(i);
        let gather = g.node.iter_mut().find(|n| n.output[0] == dq.input[0]).unwrap();
        let table = gather.input[0].clone();
        let deq = format!("{table}_dequantized_{i}");
        gather.input[0] = deq.clone();
        gather.output[0] = dq.output[0].clone();
        let whole = node("DequantizeLinear", &format!("whole_{i}"), &[&table, &dq.input[1], &dq.input[2]], &[&deq]);
        whole_tables.push(whole.with_attr(attr_int("axis", 1)));
    }
    g.node.splice(0..0, whole_tables);
    m
}

#[test]
fn int8_embedding_equals_dequantize_then_gather() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let fp32 = tiny_bert(ln);
        let (q, plan) = cpu_with_int8_embeddings(&fp32);
        // Word and position embeddings (the tiny BERT has no token types).
        let tables: Vec<&str> = plan.embeddings.iter().map(|e| e.table.as_str()).collect();
        assert_eq!(tables.len(), 2, "{tables:?}");
        for e in &plan.embeddings {
            assert!(q.graph().initializer(&e.table).is_none(), "float {} still stored", e.table);
            assert_eq!(e.scales.len(), HIDDEN);
        }
        let outputs = ["start_logits", "end_logits"];
        let ours = run(&q, &outputs);
        let reference = run(&dequantize_then_gather(&q), &outputs);
        assert_eq!(ours, reference, "{ln:?}");
        // And close to FP32 (7-bit weights, uint8 activations, int8 tables on a random tiny model).
        let float = run(&fp32, &outputs);
        for (a, b) in ours.iter().zip(&float) {
            let err = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            assert!(err <= 0.1 * scale, "{ln:?}: max error {err} vs max |logit| {scale}");
        }
        // One byte per table value instead of four.
        for e in &plan.embeddings {
            let float = fp32.graph().initializer(&e.table).unwrap();
            let int8 = q.graph().initializer(&format!("{}_quantized", e.table)).unwrap();
            assert_eq!(int8.data_type(), onnx_ir::DataType::Int8 as i32);
            assert_eq!((int8.dims.clone(), int8.raw_data().len() * 4), (float.dims.clone(), float.raw_data().len()));
        }
    }
}

#[test]
fn tables_with_other_readers_or_excluded_stay_float() {
    let fp32 = tiny_bert(Ln::Fused);
    let words = "bert.embeddings.word_embeddings.weight";
    // A second reader that is not a Gather: the table stays float.
    let mut m = fp32.clone();
    let g = m.graph_mut();
    g.node.push(node("Identity", "also_reads_table", &[words], &["table_copy"]));
    g.add_output("table_copy", onnx_ir::DataType::Float);
    let (_, plan) = cpu_with_int8_embeddings(&m);
    assert!(plan.embeddings.iter().all(|e| e.table != words), "{:?}", plan.embeddings);
    assert!(!plan.embeddings.is_empty());
    // Excluded by tensor name, or the option off.
    let mut policy = unsmoothed("cpu");
    policy.set("exclude_tensors", words).unwrap();
    let tensors = qdq::tensors_to_calibrate(&fp32, &policy).unwrap();
    let (_, plan) = qdq::quantize(&fp32, &observed_ranges(&fp32, &tensors), &policy).unwrap();
    assert!(plan.embeddings.iter().all(|e| e.table != words));
    policy.set("embeddings", "float").unwrap();
    let (q, plan) = qdq::quantize(&fp32, &observed_ranges(&fp32, &tensors), &policy).unwrap();
    assert!(plan.embeddings.is_empty());
    assert!(q.graph().initializer(words).is_some());
}
