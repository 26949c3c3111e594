//! With `QDQ_WRITE_TINY=<dir>` set, writes the two tiny BERT variants there (input for
//! `testdata/qdq/ort_reference.py`), plus onnx-ir's `tiny_bert` defaults as `tiny_bert_*.onnx`.
//! Without it, checks the models validate and run.
use crate::common::*;
use onnx_ir::tiny_bert::{LayerNormKind, TinyBertConfig, build};

#[test]
fn tiny_models_validate_run_and_can_be_written() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let m = tiny_bert(ln);
        m.validate().unwrap();
        let out = run(&m, &["start_logits"]);
        assert_eq!(out[0].shape(), &[1, SEQ, 2]);
        assert!(out[0].iter().all(|v| v.is_finite()));
        if let Some(dir) = std::env::var_os("QDQ_WRITE_TINY") {
            m.save(std::path::Path::new(&dir).join(format!("tiny_{}.onnx", variant_name(ln)))).unwrap();
            let kind = if ln == Ln::Fused { LayerNormKind::Fused } else { LayerNormKind::Decomposed };
            let hf = build(&TinyBertConfig { layer_norm: kind, ..Default::default() });
            hf.save(std::path::Path::new(&dir).join(format!("tiny_bert_{}.onnx", variant_name(ln)))).unwrap();
        }
    }
}
