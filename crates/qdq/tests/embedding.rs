//! Int8 embedding tables (`embeddings = int8`, the `cpu` preset): the int8 table read by Gather, then its rows
//! dequantized (DequantizeLinear, or Cast + Mul in ONNX Runtime's CPU layout), computes exactly what
//! DequantizeLinear on the whole table, then Gather, does; tables read by anything but a Gather on axis 0 stay in
//! float.
use onnx_ir::{GraphExt, Model, NodeExt, attr_int, node};

use crate::common::*;

fn cpu_with_int8_embeddings(fp32: &Model) -> (Model, qdq::Plan) {
    quantized_with(fp32, unsmoothed("cpu"))
}

fn quantized_with(fp32: &Model, policy: qdq::Policy) -> (Model, qdq::Plan) {
    assert_ne!(policy.embeddings, qdq::Embeddings::Float);
    let tensors = qdq::tensors_to_calibrate(fp32, &policy).unwrap();
    qdq::quantize(fp32, &observed_ranges(fp32, &tensors), &policy).unwrap()
}

/// The same model with each table's row dequantization (a DequantizeLinear, or a Cast and a Mul by the scales)
/// replaced by a DequantizeLinear in front of its Gather: a float table dequantized whole.
fn dequantize_then_gather(q: &Model, plan: &qdq::Plan) -> Model {
    let mut m = q.clone();
    let g = m.graph_mut();
    let mut whole_tables = vec![];
    for (k, e) in plan.embeddings.iter().enumerate() {
        let table = format!("{}_quantized", e.table);
        let scale = format!("{}_scale", e.table);
        let zero = format!("{}_zero_point_whole", e.table);
        g.add_initializer(onnx_ir::tensor_from_vec::<i8>(&zero, &[e.scales.len()], vec![0; e.scales.len()]).unwrap());
        let deq = format!("{table}_dequantized");
        let whole = node("DequantizeLinear", &format!("whole_{k}"), &[&table, &scale, &zero], &[&deq]);
        whole_tables.push(whole.with_attr(attr_int("axis", 1)));
        for gather in g.node.iter_mut().filter(|n| n.op_type() == "Gather" && n.input[0] == table) {
            gather.input[0] = deq.clone();
        }
    }
    // Each Gather's output now holds float rows: the nodes that dequantized them go, their last output taken over.
    loop {
        let gathers: Vec<String> =
            g.node.iter().filter(|n| n.op_type() == "Gather").map(|n| n.output[0].clone()).collect();
        let Some(i) = g
            .node
            .iter()
            .position(|n| matches!(n.op_type(), "DequantizeLinear" | "Cast") && gathers.contains(&n.input[0]))
        else {
            break;
        };
        let first = g.node.remove(i);
        let last = match first.op_type() {
            "Cast" => {
                let j = g.node.iter().position(|n| n.op_type() == "Mul" && n.input[0] == first.output[0]).unwrap();
                g.node.remove(j)
            }
            _ => first.clone(),
        };
        g.node.iter_mut().find(|n| n.output[0] == first.input[0]).unwrap().output[0] = last.output[0].clone();
    }
    g.node.splice(0..0, whole_tables);
    m
}

#[test]
fn int8_embedding_equals_dequantize_then_gather() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let fp32 = tiny_bert(ln);
        // The CPU layout's rows through Cast + Mul, and the QDQ form's through DequantizeLinear: the same model.
        let mut qdq_form = unsmoothed("cpu");
        qdq_form.set("contrib_ops", "false").unwrap();
        let (plain, plain_plan) = quantized_with(&fp32, qdq_form);
        let ops = |m: &Model, op: &str| m.graph().node.iter().filter(|n| n.op_type() == op).count();
        assert!(plain_plan.embeddings.iter().all(|e| e.rows == qdq::RowDequantize::DequantizeLinear));
        let (q, plan) = cpu_with_int8_embeddings(&fp32);
        assert!(plan.embeddings.iter().all(|e| e.rows == qdq::RowDequantize::CastMul));
        assert_eq!(ops(&q, "Cast"), ops(&fp32, "Cast") + 2, "one Cast per Gather of a table");
        let outputs = ["start_logits", "end_logits"];
        assert_eq!(run(&plain, &outputs), run(&dequantize_then_gather(&plain, &plain_plan), &outputs), "{ln:?}");
        // Word and position embeddings (the tiny BERT has no token types).
        let tables: Vec<&str> = plan.embeddings.iter().map(|e| e.table.as_str()).collect();
        assert_eq!(tables.len(), 2, "{tables:?}");
        for e in &plan.embeddings {
            assert!(q.graph().initializer(&e.table).is_none(), "float {} still stored", e.table);
            assert_eq!(e.scales.len(), HIDDEN);
        }
        let ours = run(&q, &outputs);
        let reference = run(&dequantize_then_gather(&q, &plan), &outputs);
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

/// Issue 75: `embeddings = int8-table` (the `openvino` preset's) stores the same int8 table and scales, dequantized
/// whole by one DequantizeLinear (axis 1) before its Gathers, which read float rows: exactly the row-dequantized
/// model's outputs, with no node after any Gather.
#[test]
fn a_table_dequantized_whole_computes_what_its_rows_do() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let fp32 = tiny_bert(ln);
        let mut rows = unsmoothed("cpu");
        rows.set("contrib_ops", "false").unwrap();
        let mut whole = rows.clone();
        whole.set("embeddings", "int8-table").unwrap();
        let (by_rows, _) = quantized_with(&fp32, rows);
        let (q, plan) = quantized_with(&fp32, whole);
        assert!(!plan.embeddings.is_empty() && plan.embeddings.iter().all(|e| e.rows == qdq::RowDequantize::Table));
        let g = q.graph();
        for e in &plan.embeddings {
            let dq = g
                .node
                .iter()
                .filter(|n| n.op_type() == "DequantizeLinear" && n.input[0] == format!("{}_quantized", e.table));
            let dq: Vec<_> = dq.collect();
            assert_eq!(dq.len(), 1, "{}: one DequantizeLinear of the table", e.table);
            let gathers = g.node.iter().filter(|n| n.op_type() == "Gather" && n.input[0] == dq[0].output[0]).count();
            assert_eq!(gathers, e.gathers.len(), "{}", e.table);
        }
        let gathered: Vec<&String> = g.node.iter().filter(|n| n.op_type() == "Gather").map(|n| &n.output[0]).collect();
        assert!(!g.node.iter().any(|n| n.op_type() == "DequantizeLinear" && gathered.contains(&&n.input[0])));
        let outputs = ["start_logits", "end_logits"];
        assert_eq!(run(&q, &outputs), run(&by_rows, &outputs), "{ln:?}");
    }
}
