//! Classifiers through the binary: `qdq eval --baseline` measures a quantized classifier against its FP32 model on
//! any text, as `qdq e2e` does (issue 70).

use onnx_ir::tiny_bert::{Head, TinyBertConfig, build};
use serde_json::Value;

use crate::common::*;

const TEXTS: [&str; 5] = [
    "the cat sat on the mat",
    "which river flows through the city\tthe river is long",
    "a denver broncos game",
    "normans came from normandy in france",
    "what is the name of the stadium\tit is called levi",
];

#[test]
fn eval_compares_a_classifier_with_its_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let fp32 = dir.path().join("classifier.onnx");
    build(&TinyBertConfig { max_positions: 64, head: Head::Classifier { labels: 3 }, ..Default::default() })
        .save(&fp32)
        .unwrap();
    let texts = dir.path().join("texts.txt");
    std::fs::write(&texts, TEXTS.join("\n")).unwrap();
    let vocab = testdata("squad/vocab.txt");
    let (m, t, v) = (fp32.to_str().unwrap(), texts.to_str().unwrap(), vocab.to_str().unwrap());
    let out = dir.path().join("run");
    let o = out.to_str().unwrap();
    let e2e = qdq(&["e2e", "--model", m, "--dataset", t, "--calibration-data", t, "--vocab", v, "-o", o, "--json"]);
    assert!(e2e.status.success(), "{}", stderr(&e2e));
    let e2e: Value = serde_json::from_slice(&e2e.stdout).unwrap();
    assert_eq!(e2e["task"], "classification");
    let int8 = out.join("model_qdq.onnx");
    let q = int8.to_str().unwrap();
    let eval = qdq(&["eval", "--model", q, "--baseline", m, "--dataset", t, "--vocab", v, "--json"]);
    assert!(eval.status.success(), "{}", stderr(&eval));
    let eval: Value = serde_json::from_slice(&eval.stdout).unwrap();
    assert_eq!((eval["schema"].as_str(), eval["task"].as_str()), (Some("qdq.eval/1"), Some("classification")));
    let (a, b) = (&eval["vs_baseline"]["agreement"], &e2e["result"]["agreement"]);
    assert_eq!((a["inputs"].as_u64(), a["classes"].as_u64()), (Some(5), Some(3)), "{a}");
    // The same two models on the same inputs: e2e's comparison.
    assert_eq!(a["top1"], b["top1"], "{a} {b}");
    let (ka, kb) = (a["mean_kl"].as_f64().unwrap(), b["mean_kl"].as_f64().unwrap());
    assert!(ka > 0.0 && (ka - kb).abs() <= 1e-6 * kb.max(1e-12), "{ka} {kb}");
    let shown = qdq(&["eval", "--model", q, "--baseline", m, "--dataset", t, "--vocab", v]);
    let table = String::from_utf8_lossy(&shown.stdout);
    assert!(table.contains("top-1 = FP32") && table.contains("| model "), "{table}");
    // Without a baseline there is nothing to compare a classifier with: one error that says what to give.
    let alone = qdq(&["eval", "--model", q, "--dataset", t, "--vocab", v]);
    assert!(one_error(&alone).contains("--baseline"), "{}", stderr(&alone));

    // Issue 75: on OpenVINO for an AMX CPU (named; this one may be another), both at bf16 too, the float AMX users
    // run: rows of their own against FP32's logits at f32. Skipped where the plugin serves no device here.
    let ov = ["--ep", "openvino", "--ov-cpu", "amx", "--json"];
    let eval = qdq(&[&["eval", "--model", q, "--baseline", m, "--dataset", t, "--vocab", v][..], &ov].concat());
    if !eval.status.success() && stderr(&eval).contains("registered but offers no CPU device") {
        eprintln!("OpenVINO part skipped on this machine: {}", one_error(&eval));
        return;
    }
    assert!(eval.status.success(), "{}", stderr(&eval));
    let eval: Value = serde_json::from_slice(&eval.stdout).unwrap();
    let d = &eval["vs_baseline"]["default_float"];
    assert_eq!(d["precision"], "bf16", "{d}");
    for side in ["fp32", "int8"] {
        assert_eq!(
            (d[side]["ep_precision"].as_str(), d[side]["agreement"]["inputs"].as_u64()),
            (Some("bf16"), Some(5))
        );
    }
    let shown = qdq(&[
        "eval",
        "--model",
        q,
        "--baseline",
        m,
        "--dataset",
        t,
        "--vocab",
        v,
        "--ep",
        "openvino",
        "--ov-cpu",
        "amx",
    ]);
    let table = String::from_utf8_lossy(&shown.stdout);
    assert!(table.contains("| openvino bf16 |") && table.contains("The rows at bf16 (AMX)"), "{table}");
}
