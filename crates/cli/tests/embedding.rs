//! Sentence-embedding models (issue 61) through the binary, as a user runs them: model folders as
//! sentence-transformers and the Hugging Face hub lay them out, found without flags; retrieval on a SQuAD file,
//! fidelity on any text; token states pooled as the folder says; `qdq eval --baseline` measuring the same.

use std::path::{Path, PathBuf};

use onnx_ir::tiny_bert::{Head, TinyBertConfig, build};
use serde_json::Value;

use crate::common::*;

/// A model folder: `model` saved at `rel`, the test vocabulary at the folder's top, and the other files given.
fn folder(head: Head, rel: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("model");
    let cfg = TinyBertConfig { max_positions: 64, type_vocab: 0, head, ..Default::default() };
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    build(&cfg).save(&path).unwrap();
    std::fs::copy(testdata("squad/vocab.txt"), root.join("vocab.txt")).unwrap();
    for (file, text) in files {
        let p = root.join(file);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    (dir, root)
}

const MODULES: &str = r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
 {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]"#;
const MEAN: &str = r#"{"word_embedding_dimension": 32, "pooling_mode_mean_tokens": true}"#;
const CLS: &str = r#"{"word_embedding_dimension": 32, "pooling_mode_cls_token": true}"#;
const LENGTH: &str = r#"{"max_seq_length": 24, "do_lower_case": false}"#;

/// `qdq e2e` on `model` with the tiny SQuAD file as data and calibration: its `--json` document.
fn e2e(model: &Path, out: &Path, extra: &[&str]) -> Value {
    let squad = testdata("squad/tiny-v1.1.json");
    let (m, s, o) = (model.to_str().unwrap(), squad.to_str().unwrap(), out.to_str().unwrap());
    let mut args = vec!["e2e", "--model", m, "--dataset", s, "--calibration-data", s, "--cal-num", "4", "-o", o];
    args.extend(extra);
    args.push("--json");
    let run = qdq(&args);
    assert!(run.status.success(), "{}", stderr(&run));
    serde_json::from_slice(&run.stdout).unwrap()
}

fn retrieval(r: &Value, side: &str) -> Vec<f64> {
    let s = &r["result"][side]["retrieval"];
    ["mrr_at_10", "ndcg_at_10", "recall_at_1", "recall_at_5", "recall_at_10"]
        .iter()
        .map(|k| s[k].as_f64().unwrap())
        .collect()
}

/// The done-when of issue 61 in small: a sentence-transformers folder (the pooled output under a generated name, the
/// ids and mask copied to outputs, no token_type_ids) runs with no flag but the data; the SQuAD file is a retrieval
/// task, its questions and paragraphs calibrate, the folder's max_seq_length cuts the texts, and the table, the
/// fidelity and the speed at one text and a batch are printed and in results.json.
#[test]
fn a_sentence_transformers_folder_needs_no_flags() {
    let files = [("modules.json", MODULES), ("1_Pooling/config.json", MEAN), ("sentence_bert_config.json", LENGTH)];
    let (dir, model) = folder(Head::MeanPooled { torch_names: true }, "model.onnx", &files);
    let r = e2e(&model, &dir.path().join("out"), &[]);
    assert_eq!(r["task"], "embedding");
    assert_eq!(r["result"]["task"], "embedding", "{r}");
    let e = &r["result"];
    assert_eq!((e["output"].as_str(), e["token_states"].as_bool()), (Some("17"), Some(false)), "{e}");
    assert_eq!(e["seq_len"], 24, "max_seq_length of sentence_bert_config.json");
    // 9 questions retrieve among 4 paragraphs; every text embedded by both.
    assert_eq!((e["retrieval"]["queries"].as_u64(), e["retrieval"]["documents"].as_u64()), (Some(9), Some(4)));
    assert_eq!(e["fidelity"]["texts"], 13);
    assert_eq!(e["fidelity"]["neighbours"]["among"], "documents");
    let cos = e["fidelity"]["mean_cosine"].as_f64().unwrap();
    assert!(cos > 0.9 && cos <= 1.0, "{cos}");
    assert!(retrieval(&r, "fp32").iter().all(|s| (0.0..=100.0).contains(s)));
    // Calibration: the first 4 questions and the one paragraph they ask about; an embedding model's ranges by the
    // percentile method unless another is asked for (a SQuAD model's: mse).
    assert_eq!(r["calibration"]["questions"], 5);
    assert_eq!(r["calibration"]["method"], "percentile", "{:#}", r["calibration"]);
    let asked = e2e(&model, &dir.path().join("out_mse"), &["--calibrate-method", "mse", "--no-eval"]);
    assert_eq!(asked["calibration"]["method"], "mse", "{:#}", asked["calibration"]);
    // --percentile alone reaches the embedding model's own percentile method (it was refused as an option of a method
    // the run did not compute, before the task was known).
    let p = e2e(&model, &dir.path().join("out_p"), &["--percentile", "99.9", "--symmetric", "--no-eval"]);
    assert_eq!(p["calibration"]["method"], "percentile", "{:#}", p["calibration"]);
    let methods = &p["provenance"]["settings"]["calibration"]["methods"];
    assert_eq!(
        (methods[0]["options"]["percentile"].as_f64(), methods[0]["options"]["symmetric"].as_bool()),
        (Some(99.9), Some(true)),
        "{methods}"
    );
    // `qdq calibrate` settles the method for the task as e2e does.
    let (squad, cal) = (testdata("squad/tiny-v1.1.json"), dir.path().join("cal"));
    let args = ["calibrate", "--model", model.to_str().unwrap(), "--calibration-data", squad.to_str().unwrap()];
    let run = qdq(&[&args[..], &["--cal-num", "4", "-o", cal.to_str().unwrap()]].concat());
    assert!(run.status.success(), "{}", stderr(&run));
    let table: Value = serde_json::from_slice(&std::fs::read(cal.join("calibration.json")).unwrap()).unwrap();
    assert_eq!(table["method"], "percentile");
    let speed: Vec<(u64, u64)> = e["speed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["batch"].as_u64().unwrap(), s["seq_len"].as_u64().unwrap()))
        .collect();
    assert_eq!(speed, [(1, 24), (32, 24)]);
    let report = std::fs::read_to_string(dir.path().join("out/report.md")).unwrap();
    for line in [
        "| MRR@10 |",
        "Retrieval: each of 9 queries ranks 4 documents",
        "Fidelity: cosine",
        "Neighbours: the nearest document",
    ] {
        assert!(report.contains(line), "{line} not in:\n{report}");
    }
    assert_markdown_tables(&report);
    assert!(report.contains("(task: embedding)") && report.contains("texts"), "{report}");
}

/// Token states pooled outside the graph: the Hugging Face hub layout (the model in `onnx/`, the tokenizer and the
/// sentence-transformers files above it), feature-extraction outputs (`last_hidden_state` and BERT's pooler). With
/// the folder's mean pooling, FP32 retrieves exactly as the same weights pooled in the graph; with its CLS pooling,
/// otherwise. The pooling and the file it came from are said.
#[test]
fn token_states_are_pooled_as_the_folder_says() {
    let mean = [("modules.json", MODULES), ("1_Pooling/config.json", MEAN), ("sentence_bert_config.json", LENGTH)];
    let (dir, hub) = folder(Head::Hidden { pooler: true }, "onnx/model.onnx", &mean);
    let states = e2e(&hub, &dir.path().join("states"), &[]);
    let e = &states["result"];
    assert_eq!((e["output"].as_str(), e["token_states"].as_bool()), (Some("last_hidden_state"), Some(true)), "{e}");
    assert_eq!(e["pooling"], "mean");
    assert!(e["pooling_from"].as_str().unwrap().ends_with("1_Pooling/config.json"), "{e}");
    let (pdir, pooled) = folder(Head::MeanPooled { torch_names: false }, "model.onnx", &mean);
    let in_graph = e2e(&pooled, &pdir.path().join("pooled"), &[]);
    assert_eq!(in_graph["result"]["output"], "sentence_embedding");
    assert_eq!(retrieval(&states, "fp32"), retrieval(&in_graph, "fp32"), "mean pooling outside the graph = inside");
    // The folder's CLS pooling, and --pooling over it.
    let cls = [("modules.json", MODULES), ("1_Pooling/config.json", CLS), ("sentence_bert_config.json", LENGTH)];
    let (cdir, hub_cls) = folder(Head::Hidden { pooler: true }, "onnx/model.onnx", &cls);
    let first = e2e(&hub_cls, &cdir.path().join("cls"), &[]);
    assert_eq!(first["result"]["pooling"], "cls");
    assert_ne!(retrieval(&first, "fp32"), retrieval(&states, "fp32"));
    let asked = e2e(&hub_cls, &cdir.path().join("asked"), &["--pooling", "mean"]);
    assert_eq!(asked["result"]["pooling_from"], "--pooling");
    assert_eq!(retrieval(&asked, "fp32"), retrieval(&states, "fp32"));
    // A model `qdq quantize` writes elsewhere takes the folder's tokenizer and pooling along: `qdq eval` reads it as
    // the original (the hub layout's tokenizer sits above `onnx/`).
    std::fs::create_dir(cdir.path().join("elsewhere")).unwrap();
    let q = cdir.path().join("elsewhere/q.onnx");
    let quantize =
        qdq(&["quantize", "--model", hub_cls.to_str().unwrap(), "--mode", "dynamic", "-o", q.to_str().unwrap()]);
    assert!(quantize.status.success(), "{}", stderr(&quantize));
    let squad = testdata("squad/tiny-v1.1.json");
    let eval = qdq(&["eval", "--model", q.to_str().unwrap(), "--dataset", squad.to_str().unwrap(), "--json"]);
    assert!(eval.status.success(), "{}", stderr(&eval));
    assert!(stderr(&eval).contains("cls pooling (from"), "{}", stderr(&eval));
}

/// `qdq eval` on an embedding model: alone, its retrieval scores; with `--baseline`, the comparison e2e made.
#[test]
fn eval_measures_an_embedding_model_against_its_baseline() {
    let files = [("modules.json", MODULES), ("1_Pooling/config.json", MEAN), ("sentence_bert_config.json", LENGTH)];
    let (dir, model) = folder(Head::MeanPooled { torch_names: true }, "model.onnx", &files);
    let r = e2e(&model, &dir.path().join("out"), &[]);
    let squad = testdata("squad/tiny-v1.1.json");
    let q = dir.path().join("out/model_qdq.onnx");
    // The run's folder carries the tokenizer and the sentence-transformers files: the same pooling and length.
    assert!(dir.path().join("out/1_Pooling/config.json").is_file() && dir.path().join("out/vocab.txt").is_file());
    let args = |baseline: bool| {
        let mut a = vec!["eval", "--model", q.to_str().unwrap(), "--dataset", squad.to_str().unwrap(), "--json"];
        if baseline {
            a.extend(["--baseline", model.to_str().unwrap()]);
        }
        a
    };
    let alone = qdq(&args(false));
    assert!(alone.status.success(), "{}", stderr(&alone));
    let alone: Value = serde_json::from_slice(&alone.stdout).unwrap();
    assert_eq!(alone["task"], "embedding");
    let int8: Vec<f64> = retrieval(&r, "int8");
    let ev = &alone["evaluation"]["retrieval"];
    assert_eq!(ev["ndcg_at_10"].as_f64().unwrap(), int8[1], "{alone}");
    let against = qdq(&args(true));
    assert!(against.status.success(), "{}", stderr(&against));
    let against: Value = serde_json::from_slice(&against.stdout).unwrap();
    let (a, b) = (&against["vs_baseline"]["fidelity"], &r["result"]["fidelity"]);
    assert_eq!(a["mean_cosine"], b["mean_cosine"], "the same models, texts and measures as e2e");
    assert_eq!(against["vs_baseline"]["retrieval"]["difference"], r["result"]["retrieval"]["difference"]);
}

/// Text lines (no labels): fidelity and neighbours among the texts; JSONL queries with a corpus: retrieval by id.
#[test]
fn any_text_measures_fidelity_and_labelled_data_measures_retrieval() {
    let files = [("modules.json", MODULES), ("1_Pooling/config.json", MEAN)];
    let (dir, model) = folder(Head::MeanPooled { torch_names: false }, "model.onnx", &files);
    let texts = dir.path().join("texts.txt");
    std::fs::write(&texts, "the cat sat\nthe café opened in paris\nwho owned the notebook\na river\nthe city\n")
        .unwrap();
    let t = texts.to_str().unwrap();
    let run = |dataset: &str, out: &str, extra: &[&str]| {
        let o = dir.path().join(out);
        let m = model.to_str().unwrap();
        let mut args =
            vec!["e2e", "--model", m, "--dataset", dataset, "--calibration-data", t, "-o", o.to_str().unwrap()];
        args.extend(extra);
        args.push("--json");
        qdq(&args)
    };
    let plain = run(t, "plain", &[]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let plain: Value = serde_json::from_slice(&plain.stdout).unwrap();
    let e = &plain["result"];
    assert!(e["retrieval"].is_null(), "{e}");
    assert_eq!(
        (e["fidelity"]["texts"].as_u64(), e["fidelity"]["neighbours"]["among"].as_str()),
        (Some(5), Some("texts"))
    );
    let (queries, corpus) = (dir.path().join("queries.jsonl"), dir.path().join("corpus.jsonl"));
    std::fs::write(
        &corpus,
        "{\"id\": \"d1\", \"text\": \"the café opened\"}\n{\"id\": \"d2\", \"text\": \"a river\"}\n",
    )
    .unwrap();
    std::fs::write(
        &queries,
        "{\"text\": \"when did it open\", \"relevant\": [\"d1\"]}\n{\"text\": \"water\", \"relevant\": [\"d2\"]}\n",
    )
    .unwrap();
    let c = corpus.to_str().unwrap();
    let labelled = run(queries.to_str().unwrap(), "labelled", &["--corpus", c]);
    assert!(labelled.status.success(), "{}", stderr(&labelled));
    let labelled: Value = serde_json::from_slice(&labelled.stdout).unwrap();
    let r = &labelled["result"]["retrieval"];
    assert_eq!((r["queries"].as_u64(), r["documents"].as_u64()), (Some(2), Some(2)), "{labelled}");
    assert!(labelled["result"]["corpus"].as_str().unwrap().ends_with("corpus.jsonl"));
    std::fs::write(&queries, "{\"text\": \"x\", \"relevant\": [\"d9\"]}\n").unwrap();
    let e = one_error(&run(queries.to_str().unwrap(), "bad", &["--corpus", c]));
    assert!(e.contains("queries.jsonl: line 1: relevant document `d9` is not in the corpus"), "{e}");
}

/// What cannot be told is one error naming every role that settles it, `embedding=` among them; a Dense module the
/// graph does not hold is refused rather than silently left out.
#[test]
fn what_cannot_be_told_is_named() {
    // Three outputs copying one classifier's logits: neither start / end, class logits nor an embedding.
    let (dir, model) = folder(Head::Classifier { labels: 3 }, "model.onnx", &[]);
    let mut m = onnx_ir::Model::load(model.join("model.onnx")).unwrap();
    let g = m.graph_mut();
    let logits = g.output[0].clone();
    for name in ["a", "b", "c"] {
        g.node.push(onnx_ir::node("Identity", &format!("copy_{name}"), &["logits"], &[name]));
        g.output.push(onnx_ir::proto::ValueInfoProto { name: Some(name.into()), ..logits.clone() });
    }
    g.output.remove(0);
    m.save(model.join("model.onnx")).unwrap();
    let squad = testdata("squad/tiny-v1.1.json");
    let s = squad.to_str().unwrap();
    let out = dir.path().join("o");
    let args = ["e2e", "--model", model.to_str().unwrap(), "--dataset", s, "-o", out.to_str().unwrap()];
    let e = one_error(&qdq(&args));
    assert!(e.contains("cannot tell the class logits among the outputs [a, b, c]") && e.contains("embedding="), "{e}");
    let dense = r#"[{"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]"#;
    let (ddir, hub) = folder(
        Head::Hidden { pooler: false },
        "onnx/model.onnx",
        &[("modules.json", dense), ("1_Pooling/config.json", MEAN)],
    );
    let out = ddir.path().join("o");
    let args = ["e2e", "--model", hub.to_str().unwrap(), "--dataset", s, "-o", out.to_str().unwrap()];
    let e = one_error(&qdq(&args));
    assert!(e.contains("Dense (2_Dense)") && e.contains("modules.json") && e.contains("sentence_embedding"), "{e}");
}

/// `qdq debug` on an embedding model measures the embedding: on the held-out texts (the last questions of a SQuAD file
/// with their paragraphs) the cosine to FP32's is the one e2e reports on the same texts, the FP32 model against itself
/// is exact, and each node's sensitivity is the cosine distance it recovers. Token states are pooled as the folder
/// says.
#[test]
fn debug_measures_an_embedding_model_by_its_cosine_to_fp32() {
    let mean = [("modules.json", MODULES), ("1_Pooling/config.json", MEAN), ("sentence_bert_config.json", LENGTH)];
    let (dir, hub) = folder(Head::Hidden { pooler: true }, "onnx/model.onnx", &mean);
    let r = e2e(&hub, &dir.path().join("out"), &[]);
    let squad = testdata("squad/tiny-v1.1.json");
    let qdq_model = dir.path().join("out/model_qdq.onnx");
    let (m, s, q) = (hub.to_str().unwrap(), squad.to_str().unwrap(), qdq_model.to_str().unwrap());
    // Every question of the file with its paragraph: the 13 texts e2e embedded.
    let args = ["debug", "--model", m, "--qdq", q, "--dataset", s, "--held-out", "9", "--sensitivity", "--json"];
    let run = qdq(&args);
    assert!(run.status.success(), "{}", stderr(&run));
    let d: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!((d["texts"].as_u64(), d.get("logits")), (Some(13), None), "{d}");
    let (cos, min) =
        (d["embeddings"]["mean_cosine"].as_f64().unwrap(), d["embeddings"]["min_cosine"].as_f64().unwrap());
    let e2e_cos = r["result"]["fidelity"]["mean_cosine"].as_f64().unwrap();
    assert!((cos - e2e_cos).abs() < 1e-4, "debug {cos} against e2e {e2e_cos}");
    assert!(min <= cos && cos < 1.0, "{d}");
    assert!(!d["tensors"].as_array().unwrap().is_empty());
    let nodes = d["sensitivity"].as_array().unwrap();
    assert!(!nodes.is_empty());
    let losses: Vec<f64> = nodes.iter().map(|n| 1.0 - n["embeddings"]["mean_cosine"].as_f64().unwrap()).collect();
    assert!(losses.windows(2).all(|w| w[0] <= w[1]), "most recovering first: {losses:?}");
    let recovered = nodes[0]["recovered"].as_f64().unwrap();
    assert!((recovered - (1.0 - losses[0] / (1.0 - cos))).abs() < 1e-6, "{recovered}");
    // The text says what was measured.
    let text = String::from_utf8(qdq(&args[..args.len() - 1]).stdout).unwrap();
    for line in ["embeddings vs FP32:", "the last 9 questions of", "1 - cos |", "| min cos |"] {
        assert!(text.contains(line), "{line} not in:\n{text}");
    }
    // FP32 against itself: the same embeddings (to rounding).
    let same: Value =
        serde_json::from_slice(&qdq(&["debug", "--model", m, "--qdq", m, "--dataset", s, "--json"]).stdout).unwrap();
    for k in ["mean_cosine", "min_cosine"] {
        assert!(same["embeddings"][k].as_f64().unwrap() > 1.0 - 1e-12, "{same}");
    }
    // --confirm scores SQuAD F1: refused, naming what scores retrieval.
    let confirm = ["debug", "--model", m, "--qdq", q, "--dataset", s, "--sensitivity", "--confirm", "2"];
    let e = one_error(&qdq(&confirm));
    assert!(e.contains("--confirm scores SQuAD F1") && e.contains("qdq eval --baseline"), "{e}");
}

/// `qdq tune` on an embedding model scores candidates by nDCG@10 on a SQuAD file's retrieval task (FP32's the score
/// e2e reports), ranks its nodes by the embeddings' cosine distance, and names the scores by the metric in tune.json;
/// on texts without labels, by the cosine to FP32's (x100).
#[test]
fn tune_scores_an_embedding_model_in_ndcg_points() {
    let mean = [("modules.json", MODULES), ("1_Pooling/config.json", MEAN), ("sentence_bert_config.json", LENGTH)];
    let (dir, model) = folder(Head::MeanPooled { torch_names: true }, "model.onnx", &mean);
    let r = e2e(&model, &dir.path().join("e2e"), &[]);
    let squad = testdata("squad/tiny-v1.1.json");
    let (m, s) = (model.to_str().unwrap(), squad.to_str().unwrap());
    let tune = |data: &str, out: &Path, budget: &str| -> Value {
        let o = out.to_str().unwrap();
        let args = [
            "tune",
            "--model",
            m,
            "--dataset",
            data,
            "--calibration-data",
            s,
            "--cal-num",
            "4",
            "--samples",
            "0",
            "--held-out",
            "3",
            "--budget",
            budget,
            "--max-float",
            "2",
            "-o",
            o,
            "--json",
        ];
        let run = qdq(&args);
        assert!(run.status.success(), "{}", stderr(&run));
        serde_json::from_slice(&run.stdout).unwrap()
    };
    // A negative budget walks the float ladder: the whole curve.
    let out = dir.path().join("tuned");
    let t = tune(s, &out, "-1");
    assert_eq!((t["metric"]["name"].as_str(), t["metric"]["unit"].as_str()), (Some("nDCG@10"), Some("queries")));
    assert_eq!(t["questions"], 9);
    assert_eq!(t["fp32_score"].as_f64().unwrap(), retrieval(&r, "fp32")[1], "FP32's nDCG@10 as e2e scores it");
    let curve = t["curve"].as_array().unwrap();
    assert!(curve.len() >= 2 && !t["ranking"].as_array().unwrap().is_empty(), "{t}");
    for c in curve {
        for key in ["score", "delta", "delta_interval", "same_top1", "held_out_distance"] {
            assert!(c.get(key).is_some(), "{key}: {c}");
        }
        assert!(c.get("f1").is_none() && c.get("exact_match").is_none(), "{c}");
        let d = c["held_out_distance"].as_f64().unwrap();
        assert!((0.0..0.1).contains(&d), "{c}");
    }
    // The chosen model scores what tune says when `qdq eval` scores it.
    let chosen = &curve[t["chosen"].as_u64().unwrap() as usize];
    let q = out.join("model_qdq.onnx");
    let ev = qdq(&["eval", "--model", q.to_str().unwrap(), "--dataset", s, "--json"]);
    assert!(ev.status.success(), "{}", stderr(&ev));
    let ev: Value = serde_json::from_slice(&ev.stdout).unwrap();
    let scored = ev["evaluation"]["retrieval"]["ndcg_at_10"].as_f64().unwrap();
    assert!((scored - chosen["score"].as_f64().unwrap()).abs() < 1e-9, "eval {scored}, tune {chosen}");
    let md = std::fs::read_to_string(out.join("tune.md")).unwrap();
    for part in ["nDCG@10 |", "dnDCG@10 [95 %]", "top-1 = FP32 [95 %]", "held-out 1 - cos", "queries"] {
        assert!(md.contains(part), "{part} not in:\n{md}");
    }
    assert_markdown_tables(&md);
    assert!(std::fs::read_to_string(out.join("curve.svg")).unwrap().contains("dnDCG@10"));
    // Texts without labels: each text's cosine to FP32's, FP32 scoring 100.
    let texts = dir.path().join("texts.txt");
    std::fs::write(&texts, "a cat sat on the mat\nthe dog barked\nrain fell all day\nwho wrote it?\n").unwrap();
    let t = tune(texts.to_str().unwrap(), &dir.path().join("texts"), "1");
    assert_eq!((t["metric"]["name"].as_str(), t["metric"]["unit"].as_str()), (Some("cos x100"), Some("texts")));
    assert!((t["fp32_score"].as_f64().unwrap() - 100.0).abs() < 1e-9, "{t}");
    let chosen = &t["curve"][t["chosen"].as_u64().unwrap() as usize];
    let score = chosen["score"].as_f64().unwrap();
    assert!(score > 99.0 && score <= 100.0 + 1e-9 && t["within_budget"] == true, "{t}");
}

/// Issue 69: quantizing a folder in the hub layout (the model in `onnx/`, config.json and the sentence-transformers
/// files above it) writes a folder that loads as its source does: config.json (whose `model_type` transformers'
/// loaders need), the tokenizer files, modules.json and the pooling beside model_qdq.onnx, and the run says how to load
/// it. A folder without config.json gets none, and the run says what is missing.
#[test]
fn a_quantized_folder_loads_where_its_source_does() {
    const CONFIG: &str = r#"{"model_type": "bert", "hidden_size": 32, "architectures": ["BertModel"]}"#;
    let files = [
        ("config.json", CONFIG),
        ("special_tokens_map.json", r#"{"cls_token": "[CLS]", "sep_token": "[SEP]"}"#),
        ("modules.json", MODULES),
        ("1_Pooling/config.json", MEAN),
        ("sentence_bert_config.json", LENGTH),
    ];
    let (dir, model) = folder(Head::Hidden { pooler: false }, "onnx/model.onnx", &files);
    let out = dir.path().join("out");
    let (m, s, o) = (model.to_str().unwrap(), testdata("squad/tiny-v1.1.json"), out.to_str().unwrap());
    let s = s.to_str().unwrap();
    let run = qdq(&["e2e", "--model", m, "--dataset", s, "--calibration-data", s, "--cal-num", "4", "-o", o]);
    assert!(run.status.success(), "{}", stderr(&run));
    for (file, text) in files {
        assert_eq!(std::fs::read_to_string(out.join(file)).unwrap(), text, "{file}");
    }
    assert!(out.join("vocab.txt").is_file() && out.join("model_qdq.onnx").is_file());
    let said = String::from_utf8_lossy(&run.stdout);
    let line = format!(
        "Load it with sentence-transformers: SentenceTransformer(\"{o}\", backend=\"onnx\", model_kwargs={{\"file_name\": \
         \"model_qdq.onnx\"}})"
    );
    assert!(said.contains(&line), "{said}");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("## Loading the quantized model") && report.contains("SentenceTransformer("), "{report}");
    let results: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["loader"], serde_json::json!({"library": "sentence-transformers"}), "{results}");

    // Without config.json: no loader line.
    let (dir, model) = folder(Head::Hidden { pooler: false }, "onnx/model.onnx", &files[2..]);
    let out = dir.path().join("out");
    let (m, o) = (model.to_str().unwrap(), out.to_str().unwrap());
    let run = qdq(&["e2e", "--model", m, "--dataset", s, "--calibration-data", s, "--cal-num", "4", "-o", o]);
    assert!(run.status.success(), "{}", stderr(&run));
    let said = String::from_utf8_lossy(&run.stdout);
    assert!(!out.join("config.json").exists() && !said.contains("Load it with sentence-transformers"), "{said}");
    assert!(
        said.contains("Not loadable by sentence-transformers or optimum as it is: the source folder has no"),
        "{said}"
    );
}

/// Issue 75: on OpenVINO for an AMX CPU (named; this one may be another), both models are embedded again at bf16, the
/// float AMX users run, and set against FP32's embeddings at f32 in the table's rows, the notes and results.json;
/// `--no-default-float` leaves that out. Skipped where OpenVINO's plugin serves no device for this CPU.
#[test]
fn the_float_users_run_is_a_compared_model() {
    let files = [("modules.json", MODULES), ("1_Pooling/config.json", MEAN), ("sentence_bert_config.json", LENGTH)];
    let (dir, model) = folder(Head::MeanPooled { torch_names: true }, "model.onnx", &files);
    let squad = testdata("squad/tiny-v1.1.json");
    let (m, s, o) = (model.to_str().unwrap(), squad.to_str().unwrap(), dir.path().join("ov"));
    let args = ["e2e", "--model", m, "--dataset", s, "--calibration-data", s, "--cal-num", "4", "-o"];
    let run = qdq(&[&args[..], &[o.to_str().unwrap(), "--ep", "openvino", "--ov-cpu", "amx", "--json"]].concat());
    if !run.status.success() && stderr(&run).contains("registered but offers no CPU device") {
        eprintln!("skipped on this machine: {}", one_error(&run));
        return;
    }
    assert!(run.status.success(), "{}", stderr(&run));
    let r: Value = serde_json::from_slice(&run.stdout).unwrap();
    let d = &r["result"]["default_float"];
    assert_eq!(d["precision"], "bf16", "{d}");
    for side in ["fp32", "int8"] {
        assert_eq!(d[side]["ep_precision"], "bf16", "{d}");
        let cos = d[side]["fidelity"]["mean_cosine"].as_f64().unwrap();
        assert!(cos > 0.9 && cos <= 1.0 + 1e-6, "{side}: {cos}");
        assert!(d[side]["retrieval"]["difference"]["ndcg_at_10"]["delta"].is_number(), "{d}");
    }
    // bf16 FP32 stays closer to FP32 than... nothing is claimed on a tiny model; only that both are measured.
    assert!(d["fp32_speedup"].as_array().is_some_and(|a| !a.is_empty()), "{d}");
    let report = std::fs::read_to_string(o.join("report.md")).unwrap();
    assert!(
        report.contains("| openvino bf16 |") && report.contains("At bf16 (AMX), openvino's own default"),
        "{report}"
    );
    assert_markdown_tables(&report);
    let o2 = dir.path().join("ov2");
    let run = qdq(
        &[&args[..], &[o2.to_str().unwrap(), "--ep", "openvino", "--ov-cpu", "amx", "--no-default-float"]].concat()
    );
    assert!(run.status.success(), "{}", stderr(&run));
    let r: Value = serde_json::from_slice(&std::fs::read(o2.join("results.json")).unwrap()).unwrap();
    assert!(r["result"].get("default_float").is_none(), "{}", r["result"]);
}
