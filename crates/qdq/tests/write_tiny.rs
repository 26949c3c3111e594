//! With `QDQ_WRITE_TINY=<dir>` set, writes onnx-ir's `tiny_bert` defaults there as `tiny_bert_*.onnx` (input for
//! `testdata/qdq/ort_reference.py`). Without it, checks that the test models validate and run.
use crate::common::*;
use onnx_ir::tiny_bert::{TinyBertConfig, build};

#[test]
fn tiny_models_validate_run_and_can_be_written() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let m = tiny_bert(ln);
        m.validate().unwrap();
        let out = run(&m, &["start_logits"]);
        assert_eq!(out[0].shape(), &[1, SEQ]);
        assert!(out[0].iter().all(|v| v.is_finite()));
        if let Some(dir) = std::env::var_os("QDQ_WRITE_TINY") {
            let hf = build(&TinyBertConfig { layer_norm: ln, ..Default::default() });
            hf.save(std::path::Path::new(&dir).join(format!("tiny_bert_{}.onnx", variant_name(ln)))).unwrap();
        }
    }
}
