//! With `QDQ_WRITE_TINY=<dir>` set, writes onnx-ir's `tiny_bert` defaults there as `tiny_bert_*.onnx` (input for
//! `testdata/qdq/ort_reference.py`), and its other forms (`tiny_bert_gemm.onnx`, `tiny_bert_ort_fused.onnx`,
//! `tiny_bert_classifier.onnx`) to try the binary on. Without it, checks that the test models validate and run.
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
    use onnx_ir::tiny_bert::{GraphForm, Head};
    let others = [
        ("gemm", TinyBertConfig { form: GraphForm::Gemm, ..Default::default() }),
        ("ort_fused", TinyBertConfig { form: GraphForm::OrtFused, ..Default::default() }),
        ("classifier", TinyBertConfig { head: Head::Classifier { labels: 3 }, ..Default::default() }),
    ];
    for (name, cfg) in others {
        let m = build(&cfg);
        m.validate().unwrap();
        if let Some(dir) = std::env::var_os("QDQ_WRITE_TINY") {
            m.save(std::path::Path::new(&dir).join(format!("tiny_bert_{name}.onnx"))).unwrap();
        }
    }
}
