use qdq_squad_metrics::*;
use std::collections::HashMap;

fn qa(id: &str, golds: &[&str]) -> Qa {
    Qa {
        id: id.into(),
        question: "q?".into(),
        answers: golds.iter().map(|t| Answer { text: (*t).into(), answer_start: 0 }).collect(),
        is_impossible: None,
        plausible_answers: None,
    }
}

fn dataset(qas: Vec<Qa>) -> Dataset {
    Dataset {
        version: "1.1".into(),
        data: vec![Article { title: "t".into(), paragraphs: vec![Paragraph { context: "c".into(), qas }] }],
    }
}

fn preds(p: &[(&str, &str)]) -> HashMap<String, String> {
    p.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
}

#[test]
fn normalisation_punctuation_articles_whitespace() {
    assert_eq!(normalize_answer("The  Denver Broncos!"), "denver broncos");
    // Articles are whole words only; "theatre" and "another" keep their letters.
    assert_eq!(normalize_answer("the theatre, another"), "theatre another");
    // Punctuation goes first, so "an." becomes the article "an" and is removed; "a-b" becomes "ab".
    assert_eq!(normalize_answer("an. a-b"), "ab");
    // "_" is punctuation too, so "the_end" becomes "theend".
    assert_eq!(normalize_answer("the_end"), "theend");
    // Unicode: lower-case of non-ASCII letters, non-ASCII punctuation kept, no-break space is whitespace.
    assert_eq!(normalize_answer("CAFÉ\u{a0}Naïve «A» «Ab»"), "café naïve « » «ab»");
    // Greek final sigma like Python's str.lower.
    assert_eq!(normalize_answer("ΟΔΟΣ"), "οδος");
    // Python's str.split also splits on the ASCII information separators.
    assert_eq!(normalize_answer("x\u{1f}y"), "x y");
    // A letter next to an article makes one word, so it stays.
    assert_eq!(normalize_answer("éthe thé a1"), "éthe thé a1");
    assert_eq!(normalize_answer("..."), "");
}

#[test]
fn f1_and_em_hand_computed() {
    // pred tokens [denver, broncos, team], gold [denver, broncos]: p=2/3, r=1, f1=0.8.
    assert!((f1_v1("the Denver Broncos team", "Denver Broncos") - 0.8).abs() < 1e-12);
    // Multiset overlap: pred [a? no: x x y], gold [x y y] -> common x1 y1 = 2, p=r=2/3.
    assert!((f1_v1("x x y", "x y y") - 2.0 / 3.0).abs() < 1e-12);
    assert_eq!(exact_match("The Broncos.", "broncos"), 1.0);
    assert_eq!(exact_match("Broncos team", "broncos"), 0.0);
    // Both empty: v1.1 gives 0, v2.0 gives 1.
    assert_eq!(f1_v1("the", ""), 0.0);
    assert_eq!(f1_v2("the", ""), 1.0);
    assert_eq!(f1_v2("x", ""), 0.0);
}

#[test]
fn v1_max_over_golds_and_missing() {
    let d = dataset(vec![qa("1", &["Paris", "the city of Paris"]), qa("2", &["blue whale"]), qa("3", &["x"])]);
    // q1: pred "city of Paris" -> EM 1 with gold 2 after normalisation ("city of paris").
    // q2: pred "whale" -> f1 with [blue, whale]: p=1, r=0.5 -> 2/3; EM 0. q3 missing.
    let m = evaluate_v1(&d, &preds(&[("1", "city of Paris"), ("2", "whale")]));
    assert_eq!(m.total, 3);
    assert_eq!(m.missing, 1);
    assert!((m.exact_match - 100.0 / 3.0).abs() < 1e-9);
    assert!((m.f1 - 100.0 * (1.0 + 2.0 / 3.0) / 3.0).abs() < 1e-9);
    let json = serde_json::to_value(&m).unwrap();
    assert_eq!(json.as_object().unwrap().len(), 2);
}

#[test]
fn first_n_keeps_file_order() {
    let mut d = dataset(vec![qa("1", &["a"]), qa("2", &["b"])]);
    d.data.push(Article {
        title: "u".into(),
        paragraphs: vec![Paragraph { context: "d".into(), qas: vec![qa("3", &["c"]), qa("4", &["d"])] }],
    });
    let f = d.first_n(3);
    let ids: Vec<_> = f.questions().map(|q| q.id.as_str()).collect();
    assert_eq!(ids, ["1", "2", "3"]);
    assert_eq!(d.first_n(2).data.len(), 1);
    assert_eq!(d.first_n(0).num_questions(), 0);
    assert_eq!(d.first_n(99), d);
}

fn v2_case() -> (Dataset, HashMap<String, String>, HashMap<String, f64>) {
    let mut d = dataset(vec![qa("h1", &["blue whale"]), qa("h2", &["red"]), qa("n1", &[]), qa("n2", &[])]);
    d.version = "v2.0".into();
    let p = preds(&[("h1", "whale"), ("h2", "red"), ("n1", ""), ("n2", "something")]);
    let na: HashMap<String, f64> =
        [("h1", 0.2), ("h2", 0.1), ("n1", 0.9), ("n2", 0.5)].iter().map(|(k, v)| ((*k).into(), *v)).collect();
    (d, p, na)
}

#[test]
fn v2_breakdown_and_threshold() {
    let (d, p, na) = v2_case();
    assert!(d.is_v2());
    // Raw: h1 EM0 F1 2/3; h2 1/1; n1 "" vs "" 1/1; n2 0/0.
    let m = evaluate_v2(&d, &p, None, 1.0);
    assert_eq!((m.total, m.has_ans_total, m.no_ans_total), (4, Some(2), Some(2)));
    assert!((m.exact - 50.0).abs() < 1e-9);
    assert!((m.f1 - 100.0 * (2.0 / 3.0 + 2.0) / 4.0).abs() < 1e-9);
    assert!((m.has_ans_exact.unwrap() - 50.0).abs() < 1e-9);
    assert!((m.no_ans_f1.unwrap() - 50.0).abs() < 1e-9);
    assert!(m.best_exact.is_none());
    // Threshold 0.4: n1 (0.9) and n2 (0.5) predicted no-answer -> both score 1; h1, h2 keep theirs.
    let m = evaluate_v2(&d, &p, Some(&na), 0.4);
    assert!((m.exact - 75.0).abs() < 1e-9);
    assert!((m.no_ans_exact.unwrap() - 100.0).abs() < 1e-9);
    // Best threshold, by hand. Sorted by na-prob: h2 0.1, h1 0.2, n2 0.5, n1 0.9; start at 2 (no-ans count).
    // exact: +1 (h2) = 3 @0.1, +0 (h1) = 3, -1 (n2 non-empty) = 2, +0 (n1 empty) = 2 -> best 3/4 at 0.1.
    // f1: +1 = 3 @0.1, +2/3 = 3.667 @0.2, -1, +0 -> best 3.667/4 at 0.2.
    assert!((m.best_exact.unwrap() - 75.0).abs() < 1e-9);
    assert_eq!(m.best_exact_thresh, Some(0.1));
    assert!((m.best_f1.unwrap() - 100.0 * (3.0 + 2.0 / 3.0) / 4.0).abs() < 1e-9);
    assert_eq!(m.best_f1_thresh, Some(0.2));
    let keys: Vec<String> = serde_json::to_value(&m).unwrap().as_object().unwrap().keys().cloned().collect();
    for k in [
        "exact",
        "f1",
        "total",
        "HasAns_exact",
        "HasAns_f1",
        "HasAns_total",
        "NoAns_exact",
        "NoAns_f1",
        "NoAns_total",
        "best_exact",
        "best_exact_thresh",
        "best_f1",
        "best_f1_thresh",
    ] {
        assert!(keys.contains(&k.to_string()), "{k}");
    }
}

#[test]
fn v2_best_thresh_stays_zero_when_nothing_helps() {
    let (d, mut p, na) = v2_case();
    p.insert("h2".into(), "wrong".into());
    p.insert("h1".into(), "wrong".into());
    // Every answerable is wrong: cumulative scores never exceed the start (2 no-ans) -> best 50 at 0.0.
    let m = evaluate_v2(&d, &p, Some(&na), 1.0);
    assert_eq!(m.best_exact, Some(50.0));
    assert_eq!(m.best_exact_thresh, Some(0.0));
}

#[test]
fn v2_missing_prediction_counts_zero() {
    let (d, mut p, _) = v2_case();
    p.remove("n1");
    let m = evaluate_v2(&d, &p, None, 1.0);
    assert_eq!(m.missing, 1);
    assert_eq!(m.total, 4);
    assert!((m.exact - 25.0).abs() < 1e-9);
}

#[test]
fn load_errors_name_the_file() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"data": [{"paragraphs": [{"context": 3}]}]}"#).unwrap();
    let e = load_dataset(&bad).unwrap_err().to_string();
    assert!(e.contains("bad.json") && e.contains("SQuAD dataset"), "{e}");
    let e = load_predictions(dir.join("nope.json")).unwrap_err().to_string();
    assert!(e.contains("nope.json") && e.contains("cannot read"), "{e}");
}
