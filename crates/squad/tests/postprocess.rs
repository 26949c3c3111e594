use crate::common::*;
use ndarray::Array2;
use qdq_squad::*;
use std::sync::Arc;

const LOW: f32 = -10.0;

fn small_config() -> FeatureConfig {
    FeatureConfig { max_seq_len: 40, doc_stride: 8, max_query_len: 16 }
}

/// Byte span of the first gold answer (answer_start is in characters).
fn gold_bytes(ex: &Example) -> (usize, usize) {
    let a = &ex.answers[0];
    let start = ex.context.char_indices().nth(a.answer_start).map(|c| c.0).unwrap();
    (start, start + a.text.len())
}

#[test]
fn stream_order_shapes_and_padding() {
    let d = load_squad(fixture("tiny-v1.1.json")).unwrap();
    let t = tokenizer();
    let batches: Vec<Batch> =
        FeatureStream::new(&d.examples, &t, small_config(), 3, Padding::Longest).unwrap().map(Result::unwrap).collect();
    let feats: Vec<&Feature> = batches.iter().flat_map(|b| &b.features).collect();
    assert!(feats.len() > d.examples.len(), "the long contexts must need several windows");
    for (i, f) in feats.iter().enumerate() {
        assert_eq!(f.id, i);
        assert!(f.len() <= 40);
    }
    assert!(feats.windows(2).all(|w| w[0].example_index <= w[1].example_index));
    assert!(feats.iter().any(|f| f.example_index == 0 && f.num_windows >= 3));
    for b in &batches {
        assert!(b.len() <= 3 && !b.is_empty());
        let longest = b.features.iter().map(Feature::len).max().unwrap();
        assert_eq!(b.input_ids.dim(), (b.len(), longest));
        for (r, f) in b.features.iter().enumerate() {
            assert_eq!(b.attention_mask.row(r).sum(), f.len() as i64);
            assert_eq!(b.input_ids[[r, 0]], i64::from(t.cls_id));
            if f.len() < longest {
                assert_eq!(b.input_ids[[r, longest - 1]], i64::from(t.pad_id));
            }
        }
    }
    let io = ModelIo { token_type_ids: None, ..ModelIo::default() };
    assert_eq!(batches[0].inputs(&io).len(), 2);
    let fixed: Vec<Batch> = FeatureStream::new(&d.examples, &t, small_config(), 4, Padding::Fixed(48))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(fixed.iter().all(|b| b.input_ids.ncols() == 48));
    assert!(FeatureStream::new(&d.examples, &t, small_config(), 4, Padding::Fixed(39)).is_err());
    assert!(FeatureStream::new(&d.examples, &t, small_config(), 0, Padding::Longest).is_err());
}

/// Logits peaking (+10) at the gold answer's first and last token wherever they are in context, -10 elsewhere,
/// padded to the batch width; the predicted text must be exactly the gold substring.
#[test]
fn synthetic_peaks_recover_exact_answers_across_windows() {
    let d = load_squad(fixture("tiny-v1.1.json")).unwrap();
    let t = tokenizer();
    let mut acc = PredictionAccumulator::new(&d.examples, None, PostProcessConfig::default()).unwrap();
    let mut preds = Vec::new();
    let mut crossed = 0;
    for b in FeatureStream::new(&d.examples, &t, small_config(), 5, Padding::Longest).unwrap() {
        let b = b.unwrap();
        let mut start = Array2::from_elem(b.input_ids.dim(), LOW);
        let mut end = start.clone();
        for (r, f) in b.features.iter().enumerate() {
            let (gs, ge) = gold_bytes(&d.examples[f.example_index]);
            for (c, off) in f.token_offsets.iter().enumerate() {
                if let Some((a, z)) = off {
                    if *a <= gs && gs < *z {
                        start[[r, c]] = 10.0;
                    }
                    if *a < ge && ge <= *z {
                        end[[r, c]] = 10.0;
                    }
                }
            }
            if f.window_index > 0 && start.row(r).iter().any(|&x| x > 0.0) {
                crossed += 1;
            }
        }
        acc.push_batch(&b, start.view(), end.view()).unwrap();
        preds.extend(acc.take_ready());
    }
    assert!(crossed > 0, "some answers must also appear in later windows");
    assert_eq!(preds.len(), d.examples.len());
    for (p, ex) in preds.iter().zip(&d.examples) {
        assert_eq!(p.id, ex.id);
        assert_eq!(p.text, ex.answers[0].text, "{}", ex.id);
        assert_eq!(p.score, 20.0);
        assert!(p.null_score.is_none());
    }
}

/// One example "w0 w1 ... w9" in a single window: context tokens sit at feature positions 3..13 (query of 1).
fn single_window() -> (Vec<Example>, Feature) {
    let text = "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9";
    let ex = Example {
        id: "q".into(),
        question: "?".into(),
        context: Arc::from(text),
        context_index: 0,
        answers: vec![],
        is_impossible: false,
    };
    let cfg = FeatureConfig { max_seq_len: 20, doc_stride: 4, max_query_len: 64 };
    let f = build_features(&cfg, 1, 2, &[50], &word_tokens(text), 0, 0).remove(0);
    (vec![ex], f)
}

fn predict(examples: &[Example], f: &Feature, cfg: PostProcessConfig, peaks: &[(usize, f32, f32)]) -> Prediction {
    let mut s = vec![LOW; f.len()];
    let mut e = vec![LOW; f.len()];
    for &(pos, sv, ev) in peaks {
        s[pos] = s[pos].max(sv);
        e[pos] = e[pos].max(ev);
    }
    let mut acc = PredictionAccumulator::new(examples, None, cfg).unwrap();
    acc.push(f, &s, &e).unwrap().unwrap()
}

#[test]
fn nbest_filtering_rules() {
    let (ex, f) = single_window();
    let pos = |w: usize| w + 3; // feature position of word w
    let cfg = PostProcessConfig::default;
    // Best pair is end < start (start w5, end w2): skipped; next best w5..w6.
    let p = predict(&ex, &f, cfg(), &[(pos(5), 9.0, LOW), (pos(2), LOW, 9.0), (pos(6), LOW, 5.0)]);
    assert_eq!(p.text, "w5 w6");
    // Too long: w0..w4 is 5 tokens > 3.
    let short = PostProcessConfig { max_answer_len: 3, ..cfg() };
    let p = predict(&ex, &f, short, &[(pos(0), 9.0, LOW), (pos(4), LOW, 9.0), (pos(2), 5.0, LOW)]);
    assert_eq!(p.text, "w2 w3 w4");
    // Start on [CLS] / query / [SEP] positions is skipped.
    let p = predict(&ex, &f, cfg(), &[(0, 9.0, 9.0), (1, 9.0, LOW), (pos(7), 1.0, 1.0)]);
    assert_eq!(p.text, "w7");
    assert_eq!(p.score, 2.0);
    // Only the top n_best starts are considered: with n_best 1, the second start is never tried.
    let one = PostProcessConfig { n_best: 1, ..cfg() };
    let p = predict(&ex, &f, one, &[(pos(5), 9.0, LOW), (pos(1), 8.0, LOW), (pos(3), LOW, 9.0)]);
    assert_eq!(p.text, "", "top start w5 has no valid end among the top 1 (w3)");
    // Same text from two spans is listed once in the n-best.
    let keep = PostProcessConfig { keep_nbest: true, ..cfg() };
    let p = predict(&ex, &f, keep, &[(pos(1), 3.0, 3.0), (pos(2), 2.0, 2.0)]);
    let nb = p.nbest.unwrap();
    assert_eq!(nb[0].text, "w1");
    assert_eq!(nb.iter().filter(|n| n.text == "w1").count(), 1);
    let total: f64 = nb.iter().map(|n| n.probability).sum();
    assert!((total - 1.0).abs() < 1e-6);
}

/// The margin is the gap between the answer's score and the best span with another text: what a model that moves the
/// logits a little has to overcome to flip the answer. A second span with the same text does not count.
#[test]
fn the_margin_is_the_gap_to_the_best_other_answer() {
    let (ex, f) = single_window();
    let pos = |w: usize| w + 3;
    let cfg = PostProcessConfig::default;
    // w1 scores 3 + 3; the best other text is w1..w2 (3 + 2) or w2 (2 + 2): the gap is 1.
    let p = predict(&ex, &f, cfg(), &[(pos(1), 3.0, 3.0), (pos(2), 2.0, 2.0)]);
    assert_eq!((p.text.as_str(), p.margin), ("w1", 1.0));
    // A closer runner-up, a smaller margin: w1..w4 (3 + 2.9) is nearer than w4 alone (2.9 + 2.9).
    let p = predict(&ex, &f, cfg(), &[(pos(1), 3.0, 3.0), (pos(4), 2.9, 2.9)]);
    assert!((p.margin - 0.1).abs() < 1e-5, "{}", p.margin);
    // One candidate span only (every other logit far below and out of the n-best): nothing to flip to.
    let one = PostProcessConfig { n_best: 1, ..cfg() };
    let p = predict(&ex, &f, one, &[(pos(1), 3.0, 3.0)]);
    assert_eq!(p.margin, f32::INFINITY);
    // v2.0: the null answer is the other choice when it is nearer than any span.
    let v2 = PostProcessConfig { version_2: true, ..cfg() };
    let p = predict(&ex, &f, v2, &[(0, 2.9, 2.9), (pos(1), 3.0, 3.0), (pos(4), 1.0, 1.0)]);
    assert_eq!(p.text, "w1");
    assert!((p.margin - 0.2).abs() < 1e-5, "{}", p.margin);
}

#[test]
fn start_must_have_max_context() {
    // Two windows over 6 words (max 4 doc tokens, stride 2): windows 0..4 and 2..6. Word 3 has max context in
    // window 1 (min(1,2)+.04 beats min(3,0)+.04), so a peak on word 3 in window 0 is ignored there.
    let text = "w0 w1 w2 w3 w4 w5";
    let ex = vec![Example {
        id: "q".into(),
        question: "?".into(),
        context: Arc::from(text),
        context_index: 0,
        answers: vec![],
        is_impossible: false,
    }];
    let cfg = FeatureConfig { max_seq_len: 8, doc_stride: 2, max_query_len: 64 };
    let f = build_features(&cfg, 1, 2, &[50], &word_tokens(text), 0, 0);
    assert_eq!(f.len(), 2);
    let mut acc = PredictionAccumulator::new(&ex, None, PostProcessConfig::default()).unwrap();
    // Window 0: words 0..4 at positions 3..7; strong start at word 3 (pos 6) would give "w3" scoring 20 - 10 = 10
    // if it were allowed. Window 1: words 2..6; weak start at word 3 (pos 4) and end at word 4 (pos 5): score 2.
    let mut s0 = vec![LOW; f[0].len()];
    let e0 = s0.clone();
    s0[6] = 20.0;
    assert!(acc.push(&f[0], &s0, &e0).unwrap().is_none());
    let mut s1 = vec![LOW; f[1].len()];
    let mut e1 = s1.clone();
    s1[4] = 1.0;
    e1[5] = 1.0;
    let p = acc.push(&f[1], &s1, &e1).unwrap().unwrap();
    assert_eq!(p.text, "w3 w4");
}

#[test]
fn v2_null_handling() {
    let (ex, f) = single_window();
    let mut s = vec![LOW; f.len()];
    let mut e = s.clone();
    s[0] = 0.5;
    e[0] = 0.5; // null score 1.0
    s[5] = 1.5;
    e[5] = 1.5; // best span "w2", score 3.0
    let run = |threshold: f32| {
        let cfg = PostProcessConfig { version_2: true, null_threshold: threshold, ..Default::default() };
        let mut acc = PredictionAccumulator::new(&ex, None, cfg).unwrap();
        acc.push(&f, &s, &e).unwrap().unwrap()
    };
    let p = run(0.0); // 1 - 3 = -2 is not > 0: answer
    assert_eq!((p.text.as_str(), p.score, p.null_score), ("w2", 3.0, Some(1.0)));
    let p = run(-2.5); // -2 > -2.5: no answer
    assert_eq!(p.text, "");
}

#[test]
fn v2_null_score_is_min_over_windows() {
    let text = "w0 w1 w2 w3 w4 w5";
    let ex = vec![Example {
        id: "q".into(),
        question: "?".into(),
        context: Arc::from(text),
        context_index: 0,
        answers: vec![],
        is_impossible: false,
    }];
    let cfg = FeatureConfig { max_seq_len: 8, doc_stride: 2, max_query_len: 64 };
    let f = build_features(&cfg, 1, 2, &[50], &word_tokens(text), 0, 0);
    let pc = PostProcessConfig { version_2: true, ..Default::default() };
    let mut acc = PredictionAccumulator::new(&ex, None, pc).unwrap();
    let mut s = vec![0.0; 8];
    s[0] = 5.0;
    acc.push(&f[0], &s, &[0.0; 8]).unwrap();
    s[0] = 2.0;
    let p = acc.push(&f[1], &s, &[0.0; 8]).unwrap().unwrap();
    assert_eq!(p.null_score, Some(2.0));
    // Every span scores 0 here, so 2 - 0 > 0: no answer.
    assert_eq!(p.text, "");
}

#[test]
fn accumulator_rejects_bad_input() {
    let (ex, f) = single_window();
    let mut acc = PredictionAccumulator::new(&ex, None, PostProcessConfig::default()).unwrap();
    let e = acc.push(&f, &[0.0; 3], &[0.0; 3]).unwrap_err().to_string();
    assert!(e.contains("feature 0") && e.contains("3 start"), "{e}");
    let mut later = f.clone();
    later.id = 5;
    assert!(acc.push(&later, &[0.0; 20], &[0.0; 20]).unwrap_err().to_string().contains("in order"));
    let final_text = PostProcessConfig { answer_text: AnswerText::FinalText, ..Default::default() };
    assert!(PredictionAccumulator::new(&ex, None, final_text).is_err());
}

#[test]
fn final_text_maps_back_to_whitespace_words() {
    let d = load_squad(fixture("tiny-v1.1.json")).unwrap();
    let t = tokenizer();
    let ex = &d.examples[8..9]; // "Naïve Café: a short note."
    let mut ex = ex.to_vec();
    ex[0].context = Arc::from("(Naïve Café): a short note.");
    let f = build_features(
        &FeatureConfig::default(),
        t.cls_id,
        t.sep_id,
        &[50],
        &t.tokenize(&ex[0].context, "c").unwrap(),
        0,
        0,
    )
    .remove(0);
    // Tokens: [CLS] q [SEP] ( naive cafe ) : ...; choose "naive".."cafe" (positions 4 and 5).
    let mut s = vec![LOW; f.len()];
    let mut e = s.clone();
    s[4] = 5.0;
    e[5] = 5.0;
    for (mode, want) in [(AnswerText::Offsets, "Naïve Café"), (AnswerText::FinalText, "Naïve Café")] {
        let cfg = PostProcessConfig { answer_text: mode, ..Default::default() };
        let mut acc = PredictionAccumulator::new(&ex, Some(&t), cfg).unwrap();
        assert_eq!(acc.push(&f, &s, &e).unwrap().unwrap().text, want);
    }
    // Ending on ")" differs: offsets give the exact span, get_final_text too (it aligns character by character).
    e[6] = 9.0;
    let cfg = PostProcessConfig { answer_text: AnswerText::FinalText, ..Default::default() };
    let mut acc = PredictionAccumulator::new(&ex, Some(&t), cfg).unwrap();
    assert_eq!(acc.push(&f, &s, &e).unwrap().unwrap().text, "Naïve Café)");
}

#[test]
fn writes_prediction_files_atomically_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let p = |id: &str, text: &str, score: f32, null: Option<f32>| Prediction {
        id: id.into(),
        text: text.into(),
        score,
        nbest: Some(vec![NbestEntry { text: text.into(), probability: 1.0, start_logit: 1.0, end_logit: 2.0 }]),
        null_score: null,
        margin: f32::INFINITY,
    };
    let preds = vec![p("z", "b", 3.0, Some(1.0)), p("a", "", 1.0, Some(4.0))];
    write_predictions(dir.path(), &preds).unwrap();
    let text = std::fs::read_to_string(dir.path().join("predictions.json")).unwrap();
    assert!(text.find("\"z\"").unwrap() < text.find("\"a\"").unwrap(), "file order kept");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v, serde_json::json!({"z": "b", "a": ""}));
    let odds: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("null_odds.json")).unwrap()).unwrap();
    assert_eq!(odds, serde_json::json!({"z": -2.0, "a": 3.0}));
    assert!(dir.path().join("nbest_predictions.json").exists());
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 3, "no temporary files left: {names:?}");
    // A v1.1 run without n-best or null scores writes predictions.json only.
    let dir2 = tempfile::tempdir().unwrap();
    let plain =
        vec![Prediction { id: "x".into(), text: "t".into(), score: 0.0, nbest: None, null_score: None, margin: 0.0 }];
    write_predictions(dir2.path(), &plain).unwrap();
    assert_eq!(std::fs::read_dir(dir2.path()).unwrap().count(), 1);
    assert!(write_predictions(dir.path().join("no/such/dir"), &plain).is_err());
}

/// v2.0 fixture end to end: unanswerable questions get a high `[CLS]` score, answerable ones peak on the gold span;
/// the predictions then score 100 with the official v2.0 rules.
#[test]
fn v2_fixture_end_to_end_scores_perfectly() {
    let d = load_squad(fixture("tiny-v2.0.json")).unwrap();
    let t = tokenizer();
    let cfg = PostProcessConfig { version_2: true, ..Default::default() };
    let mut acc = PredictionAccumulator::new(&d.examples, None, cfg).unwrap();
    let mut preds = Vec::new();
    let small = FeatureConfig { max_seq_len: 24, doc_stride: 4, max_query_len: 12 };
    for b in FeatureStream::new(&d.examples, &t, small, 2, Padding::Fixed(30)).unwrap() {
        let b = b.unwrap();
        let mut start = Array2::from_elem(b.input_ids.dim(), LOW);
        let mut end = start.clone();
        for (r, f) in b.features.iter().enumerate() {
            let ex = &d.examples[f.example_index];
            if ex.is_impossible {
                start[[r, 0]] = 10.0;
                end[[r, 0]] = 10.0;
                continue;
            }
            let (gs, ge) = gold_bytes(ex);
            for (c, off) in f.token_offsets.iter().enumerate() {
                if let Some((a, z)) = off {
                    if *a <= gs && gs < *z {
                        start[[r, c]] = 10.0;
                    }
                    if *a < ge && ge <= *z {
                        end[[r, c]] = 10.0;
                    }
                }
            }
        }
        acc.push_batch(&b, start.view(), end.view()).unwrap();
        preds.extend(acc.take_ready());
    }
    let texts: Vec<&str> = preds.iter().map(|p| p.text.as_str()).collect();
    assert_eq!(texts, ["nine in the morning", "", "on Sundays", ""]);
    let map = preds.iter().map(|p| (p.id.clone(), p.text.clone())).collect();
    let dataset = squad_metrics::load_dataset(fixture("tiny-v2.0.json")).unwrap();
    let m = squad_metrics::evaluate_v2(&dataset, &map, None, 1.0);
    assert_eq!((m.exact, m.f1, m.missing), (100.0, 100.0, 0));
}
