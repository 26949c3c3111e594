//! `ort-compatible` against listings produced by ONNX Runtime 1.31.1's own QDQ quantizer
//! (testdata/qdq/ort_reference.py, seed-001 options) from the same ranges.
use crate::common::*;

fn reference(file: &str) -> RefListing {
    serde_json::from_slice(&std::fs::read(testdata(file)).unwrap()).unwrap()
}

fn check(model: &onnx_ir::Model, ranges: &qdq::Ranges, listing: &str) {
    let policy = qdq::Policy::preset("ort-compatible").unwrap();
    let (q, plan) = qdq::quantize(model, ranges, &policy).unwrap();
    let r = reference(listing);
    let diffs = compare_with_reference(&q, &r);
    assert!(diffs.is_empty(), "{listing}: {} differences:\n{}\nplan:\n{plan}", diffs.len(), diffs.join("\n"));
    assert_eq!(q.opset(""), Some(r.opset));
}

/// The model the reference listings were made from (a 1,000-row word embedding).
fn onnx_ir_tiny(kind: onnx_ir::tiny_bert::LayerNormKind) -> onnx_ir::Model {
    let cfg = onnx_ir::tiny_bert::TinyBertConfig { layer_norm: kind, vocab_size: 1000, ..Default::default() };
    onnx_ir::tiny_bert::build(&cfg)
}

#[test]
fn onnx_ir_tiny_bert_decomposed_matches_ort() {
    let ranges = load_ranges(&testdata("ranges_tiny_bert_decomposed.json"));
    let m = onnx_ir_tiny(onnx_ir::tiny_bert::LayerNormKind::Decomposed);
    check(&m, &ranges, "ort_reference_tiny_bert_decomposed.json");
}

#[test]
fn onnx_ir_tiny_bert_fused_matches_ort() {
    let ranges = load_ranges(&testdata("ranges_tiny_bert_fused.json"));
    check(&onnx_ir_tiny(onnx_ir::tiny_bert::LayerNormKind::Fused), &ranges, "ort_reference_tiny_bert_fused.json");
}

/// `QDQ_REAL_MODEL=/path/to/minilm-l6-squad/model.onnx cargo test -p qdq --test parity real`
#[test]
fn real_model_matches_ort_when_given() {
    let Some(path) = std::env::var_os("QDQ_REAL_MODEL") else {
        eprintln!("QDQ_REAL_MODEL not set; skipping the real-model parity check");
        return;
    };
    let model = onnx_ir::Model::load(path).unwrap();
    let ranges = load_ranges(&testdata("ranges_minilm.json"));
    check(&model, &ranges, "ort_reference_minilm.json");
}
