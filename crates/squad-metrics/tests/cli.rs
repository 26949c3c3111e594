use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/squad").join(name)
}

fn run(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_squad-eval")).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn v1_output_and_missing_warning() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let preds = dir.join("p.json");
    // 9 questions: 6 exact, "cafe-4" wrong, "whale-2" partly right, "note-1" missing.
    std::fs::write(
        &preds,
        r#"{"cafe-1": "1902", "cafe-2": "Jules Martin", "cafe-3": "the city museum", "cafe-4": "eleven",
            "paris-1": "Paris", "whale-1": "krill", "whale-2": "in 1966", "whale-3": "oceans of the world"}"#,
    )
    .unwrap();
    let ds = fixture("tiny-v1.1.json");
    let (code, out, err) = run(&[ds.as_os_str(), preds.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // "in 1966" vs "1966": EM 0, F1 2*(1/2*1)/(1/2+1) = 2/3.
    assert!((v["exact_match"].as_f64().unwrap() - 600.0 / 9.0).abs() < 1e-9, "{v}");
    assert!((v["f1"].as_f64().unwrap() - 100.0 * (6.0 + 2.0 / 3.0) / 9.0).abs() < 1e-9, "{v}");
    assert!(err.contains("1 of 9"), "{err}");
    let (code, out, _) = run(&[ds.as_os_str(), preds.as_os_str(), "--first".as_ref(), "2".as_ref()]);
    assert_eq!(code, 0);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["exact_match"], 100.0);
    std::fs::write(&preds, "[1, 2").unwrap();
    let (code, _, err) = run(&[ds.as_os_str(), preds.as_os_str()]);
    assert_eq!(code, 1);
    assert!(err.contains("p.json") && err.contains("predictions file"), "{err}");
    let (code, _, err) = run(&[ds.as_os_str()]);
    assert_eq!(code, 2);
    assert!(err.contains("usage"), "{err}");
}

#[test]
fn v2_output_keys() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let preds = dir.join("p.json");
    let na = dir.join("na.json");
    std::fs::write(&preds, r#"{"m-1": "nine in the morning", "m-2": "", "m-3": "free", "m-4": ""}"#).unwrap();
    std::fs::write(&na, r#"{"m-1": 0.1, "m-2": 0.9, "m-3": 0.3, "m-4": 0.8}"#).unwrap();
    let (code, out, err) =
        run(&[fixture("tiny-v2.0.json").as_os_str(), preds.as_os_str(), "--na-prob".as_ref(), na.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // m-1 right, m-2/m-4 correctly empty, m-3 wrong: 75.
    assert_eq!(v["exact"], 75.0);
    assert_eq!(v["HasAns_total"], 2);
    assert_eq!(v["NoAns_exact"], 100.0);
    // Sorted na: m-1 .1 (+1 -> 3, thresh .1), m-3 .3 (+0), m-4 .8 (0), m-2 .9 (0): best 3/4 at 0.1.
    assert_eq!(v["best_exact"], 75.0);
    assert_eq!(v["best_exact_thresh"], 0.1);
}

/// Issue 18, item 12: duplicate question ids are reported (by `Dataset::duplicate_ids` and a squad-eval warning).
#[test]
fn duplicate_question_ids_are_reported() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let ds = dir.join("dup.json");
    std::fs::write(
        &ds,
        r#"{"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "Paris is in France.", "qas": [
            {"id": "a", "question": "Where?", "answers": [{"text": "France", "answer_start": 12}]},
            {"id": "a", "question": "What?", "answers": [{"text": "Paris", "answer_start": 0}]},
            {"id": "b", "question": "Which?", "answers": [{"text": "Paris", "answer_start": 0}]}]}]}]}"#,
    )
    .unwrap();
    let dataset = qdq_squad_metrics::load_dataset(&ds).unwrap();
    assert_eq!(dataset.duplicate_ids(), ["a"]);
    let preds = dir.join("p.json");
    std::fs::write(&preds, r#"{"a": "France", "b": "Paris"}"#).unwrap();
    let (code, _, err) = run(&[ds.as_os_str(), preds.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("1 question ids occur more than once") && err.contains("first: a"), "{err}");
}
