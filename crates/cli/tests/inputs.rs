//! Issue 78 at the binary: no command writes over one of its inputs, and every file a user brings is read as written
//! (a byte-order mark, CRLF line ends) or refused with one error naming it, every input left byte-identical.

use std::path::{Path, PathBuf};

use onnx_ir::tiny_bert::{Head, TinyBertConfig, build};
use serde_json::Value;

use crate::common::*;

/// Every file under `dir` with its bytes, to show a refused run left them as they were.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = vec![];
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                files.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    files.sort();
    files
}

/// The one error of a run refused as a usage error (exit 2).
fn usage_error(o: &std::process::Output) -> String {
    let e = one_error(o);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(o));
    e
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn no_command_writes_over_its_inputs() {
    let f = tiny();
    let vocab = testdata("squad/vocab.txt");
    let dev = f.dir.path().join("dev.json");
    std::fs::copy(testdata("squad/tiny-v1.1.json"), &dev).unwrap();
    let before = snapshot(f.dir.path());
    // 1. eval's predictions over its dataset, by name and by a hard link.
    let linked = f.dir.path().join("linked.json");
    std::fs::hard_link(&dev, &linked).unwrap();
    let before_link = snapshot(f.dir.path());
    for out in [&dev, &linked] {
        let args = ["eval", "--model", s(&f.model), "--vocab", s(&vocab), "--dataset", s(&dev), "--samples", "2"];
        let e = usage_error(&qdq(&[&args[..], &["--out", s(out)]].concat()));
        assert!(e.contains("--out") && e.contains("--dataset") && e.contains("dev.json"), "{e}");
    }
    assert_eq!(snapshot(f.dir.path()), before_link);
    std::fs::remove_file(&linked).unwrap();
    assert_eq!(snapshot(f.dir.path()), before);
    // 2. quantize over its model (the refusal comes before the ranges are read).
    let ranges = f.dir.path().join("calibration.json");
    std::fs::write(&ranges, "{}").unwrap();
    let args = ["quantize", "--model", s(&f.model), "--ranges", s(&ranges), "--out", s(&f.model)];
    let e = usage_error(&qdq(&args));
    assert!(e.contains("--out") && e.contains("--model") && e.contains("tiny.onnx"), "{e}");
    // ... and over its ranges.
    let args = ["quantize", "--model", s(&f.model), "--ranges", s(&ranges), "--out", s(&ranges)];
    assert!(usage_error(&qdq(&args)).contains("--ranges"));
    let before = snapshot(f.dir.path());

    // 3. e2e into the model's own folder: refused; the folder still loads its model.
    let folder = f.dir.path().join("folder");
    std::fs::create_dir_all(folder.join("onnx")).unwrap();
    std::fs::copy(&f.model, folder.join("onnx/model.onnx")).unwrap();
    std::fs::copy(&vocab, folder.join("vocab.txt")).unwrap();
    let folder_before = snapshot(&folder);
    let args = ["e2e", "--model", s(&folder), "--dataset", s(&dev), "--out", s(&folder), "--no-eval"];
    let e = usage_error(&qdq(&[&args[..], &TINY_SHAPE].concat()));
    assert!(e.contains("model folder of --model"), "{e}");
    assert_eq!(snapshot(&folder), folder_before);
    // A folder with a model at both places is refused naming both, not read as the first.
    std::fs::copy(&f.model, folder.join("model.onnx")).unwrap();
    let args = ["eval", "--model", s(&folder), "--dataset", s(&dev), "--samples", "1"];
    let e = one_error(&qdq(&[&args[..], &TINY_SHAPE].concat()));
    assert!(e.contains("model.onnx") && e.contains("onnx/model.onnx") && e.contains("give --model"), "{e}");
    std::fs::remove_dir_all(&folder).unwrap();
    assert_eq!(snapshot(f.dir.path()), before);
}

/// A classifier (3 classes) and its vocabulary in a fresh directory.
fn classifier() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("classifier.onnx");
    build(&TinyBertConfig { max_positions: 64, head: Head::Classifier { labels: 3 }, ..Default::default() })
        .save(&model)
        .unwrap();
    let vocab = dir.path().join("vocab.txt");
    std::fs::copy(testdata("squad/vocab.txt"), &vocab).unwrap();
    (dir, model, vocab)
}

const ROWS: [&str; 4] = [
    "the cat sat on the mat\tit was a mat\t1",
    "which river flows\tthe river is long\t0",
    "a denver broncos game\tit was a game\t2",
    "normans came from normandy\tin france\t1",
];

/// `qdq eval --model m --baseline m` on `data`: the --json document, or the failed run.
fn eval_classifier(model: &Path, vocab: &Path, data: &Path) -> std::process::Output {
    qdq(&["eval", "--model", s(model), "--baseline", s(model), "--dataset", s(data), "--vocab", s(vocab), "--json"])
}

#[test]
fn text_files_are_read_as_written_and_labels_checked() {
    let (dir, model, vocab) = classifier();
    let header = "sentence1\tsentence2\tlabel";
    // 4. With a byte-order mark, CRLF line ends, or both: the header is a header, every row labelled.
    for (name, bom, end) in
        [("plain", "", "\n"), ("bom", "\u{feff}", "\n"), ("crlf", "", "\r\n"), ("both", "\u{feff}", "\r\n")]
    {
        let data = dir.path().join(format!("{name}.tsv"));
        std::fs::write(&data, format!("{bom}{header}{end}{}{end}", ROWS.join(end))).unwrap();
        let o = eval_classifier(&model, &vocab, &data);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let c = &v["vs_baseline"];
        assert_eq!(c["agreement"]["inputs"].as_u64(), Some(4), "{name}: {c}");
        assert!(c["fp32"]["accuracy"].is_number(), "{name}: labels read: {c}");
        // Issue 77: the paired difference (one model against itself: 0, no spread) and each class's count.
        let d = &c["accuracy_difference"];
        assert_eq!((d["delta"].as_f64(), d["low"].as_f64(), d["questions"].as_u64()), (Some(0.0), Some(0.0), Some(4)));
        let classes: Vec<u64> =
            c["per_class"].as_array().unwrap().iter().map(|k| k["inputs"].as_u64().unwrap()).collect();
        assert_eq!(classes, [1, 2, 1], "{c}");
        let top1 = &c["agreement"]["top1_interval"];
        assert!(top1[0].as_f64().unwrap() < 1.0 && top1[1].as_f64() == Some(1.0), "{c}");
    }
    // 5. A label that is not one of the model's 3 classes: one error naming its line and the classes, nothing scored.
    for bad in ["3", "-1"] {
        let data = dir.path().join("bad.tsv");
        let rows = [ROWS[0], ROWS[1], &ROWS[2].replace("\t2", &format!("\t{bad}")), ROWS[3]];
        std::fs::write(&data, format!("{header}\n{}\n", rows.join("\n"))).unwrap();
        let e = one_error(&eval_classifier(&model, &vocab, &data));
        assert!(e.contains("bad.tsv") && e.contains("line 4") && e.contains(&format!("label {bad}")), "{e}");
        assert!(e.contains("3 classes"), "{e}");
    }
    // 10. A byte that is not UTF-8, named by its line and column.
    let data = dir.path().join("binary.tsv");
    let mut bytes = format!("{header}\n{}\nab", ROWS[0]).into_bytes();
    bytes.extend([0xFF, b'\n']);
    std::fs::write(&data, bytes).unwrap();
    let e = one_error(&eval_classifier(&model, &vocab, &data));
    assert!(e.contains("binary.tsv") && e.contains("line 3, column 3") && e.contains("0xFF"), "{e}");
    // A JSONL file with a byte-order mark.
    let data = dir.path().join("rows.jsonl");
    std::fs::write(&data, "\u{feff}{\"text\": \"the cat sat\", \"label\": 1}\n{\"text\": \"a game\", \"label\": 0}\n")
        .unwrap();
    let o = eval_classifier(&model, &vocab, &data);
    assert!(o.status.success(), "{}", stderr(&o));
    // clap's refusals say `qdq: error:` as every other error does.
    let e = usage_error(&qdq(&["eval", "--model", s(&model), "--dataset", s(&data), "--out", ""]));
    assert!(e.contains("--out"), "{e}");
}

/// Issue 77: GLUE's QNLI as GLUE writes it (`index question sentence label`, labels by name) beside a model whose
/// config.json names its classes: read whole, the names mapped; a name the model lacks is one error naming it and
/// the classes.
#[test]
fn glue_files_are_read_with_their_label_names() {
    let (dir, model, vocab) = classifier();
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"id2label": {"0": "entailment", "1": "neutral", "2": "contradiction"},
            "label2id": {"entailment": 0, "neutral": 1, "contradiction": 2}}"#,
    )
    .unwrap();
    let data = dir.path().join("dev.tsv");
    let rows = ["0\twhich river\tthe river is long\tentailment", "1\ta game\tit was a game\tcontradiction"];
    std::fs::write(&data, format!("index\tquestion\tsentence\tlabel\n{}\n", rows.join("\n"))).unwrap();
    let o = eval_classifier(&model, &vocab, &data);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["vs_baseline"]["agreement"]["inputs"].as_u64(), Some(2), "{v}");
    assert!(v["vs_baseline"]["fp32"]["accuracy"].is_number(), "{v}");
    // Each class by its name (its number beside it), in the JSON and the table.
    let names: Vec<&str> =
        v["vs_baseline"]["per_class"].as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["entailment", "contradiction"], "{v}");
    let table =
        qdq(&["eval", "--model", s(&model), "--baseline", s(&model), "--dataset", s(&data), "--vocab", s(&vocab)]);
    let said = String::from_utf8_lossy(&table.stdout);
    assert!(said.contains("entailment (0): 1 inputs") && said.contains("contradiction (2): 1 inputs"), "{said}");
    // Another tool's model file alone in a directory: the baseline's folder gives the tokenizer and the label names.
    let peer_dir = tempfile::tempdir().unwrap();
    let peer = peer_dir.path().join("peer.onnx");
    std::fs::copy(&model, &peer).unwrap();
    let o = qdq(&["eval", "--model", s(&peer), "--baseline", s(&model), "--dataset", s(&data), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(
        &data,
        format!("index\tquestion\tsentence\tlabel\n{}\t\n2\ta\tb\tnot_entailment\n", rows.join("\n")),
    )
    .unwrap();
    let e = one_error(&eval_classifier(&model, &vocab, &data));
    assert!(e.contains("`not_entailment` (line 4)") && e.contains("contradiction=2"), "{e}");
}

/// Issue 77: the layouts GLUE's tasks come in beside headed TSVs: CoLA's headerless rows (source, label, mark,
/// sentence) and JSONL as Hugging Face `datasets` writes a GLUE split (GLUE's column names as keys, `idx`): each row's
/// text, pair and label read, the per-class counts showing it; a headerless row of four cells that is not CoLA's is
/// one error naming its line.
#[test]
fn colas_rows_and_datasets_jsonl_are_read_whole() {
    let (dir, model, vocab) = classifier();
    let classes = |v: &Value| -> Vec<(i64, u64)> {
        let per_class = v["vs_baseline"]["per_class"].as_array().unwrap_or_else(|| panic!("no per_class: {v}"));
        per_class.iter().map(|k| (k["class"].as_i64().unwrap(), k["inputs"].as_u64().unwrap())).collect()
    };
    let cola = dir.path().join("in_domain_dev.tsv");
    std::fs::write(&cola, "gj04\t1\t\tthe cat sat on the mat\ngj04\t0\t*\tthe mat sat cat\nbc01\t1\t\ta game\n")
        .unwrap();
    let o = eval_classifier(&model, &vocab, &cola);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(classes(&v), [(0, 1), (1, 2)], "{v}");
    let jsonl = dir.path().join("validation.jsonl");
    let lines = [
        r#"{"question1": "which river flows", "question2": "the river is long", "label": 0, "idx": 0}"#,
        r#"{"question1": "a denver broncos game", "question2": "it was a game", "label": 2, "idx": 1}"#,
        r#"{"question1": "normans came from", "question2": "in france", "label": 2, "idx": 2}"#,
    ];
    std::fs::write(&jsonl, lines.join("\n")).unwrap();
    let o = eval_classifier(&model, &vocab, &jsonl);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(classes(&v), [(0, 1), (2, 2)], "{v}");
    // A test split as datasets writes it (label -1 on every row): said so, nothing scored.
    let test = dir.path().join("test.jsonl");
    std::fs::write(
        &test,
        lines.map(|l| l.replace("\"label\": 0", "\"label\": -1").replace("\"label\": 2", "\"label\": -1")).join("\n"),
    )
    .unwrap();
    let e = one_error(&eval_classifier(&model, &vocab, &test));
    assert!(e.contains("test.jsonl") && e.contains("label -1") && e.contains("every label is -1"), "{e}");
    let odd = dir.path().join("odd.tsv");
    std::fs::write(&odd, "a\tb\tc\td\n").unwrap();
    let e = one_error(&eval_classifier(&model, &vocab, &odd));
    assert!(e.contains("odd.tsv") && e.contains("line 1") && e.contains("4 tab-separated cells"), "{e}");
}

/// Issue 77: a regression head (one output, STS-B's similarity) by its correlations, with scores as labels; the same
/// scores given to a 3-class classifier are refused as labels.
#[test]
fn a_regression_head_is_measured_by_correlation() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("sts.onnx");
    build(&TinyBertConfig { max_positions: 64, head: Head::Classifier { labels: 1 }, ..Default::default() })
        .save(&model)
        .unwrap();
    let vocab = testdata("squad/vocab.txt");
    let data = dir.path().join("sts.tsv");
    let rows = ["a cat sat\tthe cat sat\t4.2", "a river\ta game\t0.4", "the city\tthe city is big\t3.0"];
    std::fs::write(&data, format!("sentence1\tsentence2\tscore\n{}\n", rows.join("\n"))).unwrap();
    let o = eval_classifier(&model, &vocab, &data);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = &v["vs_baseline"]["regression"];
    assert_eq!((r["inputs"].as_u64(), r["max_abs_diff"].as_f64()), (Some(3), Some(0.0)), "{v}");
    assert!((r["r_int8_fp32"].as_f64().unwrap() - 1.0).abs() < 1e-9, "{r}");
    let (f, i) = (r["r_fp32_scores"].as_f64().unwrap(), r["r_int8_scores"].as_f64().unwrap());
    assert!(f.abs() <= 1.0 && f == i, "{r}");
    assert!(v["vs_baseline"]["fp32"]["accuracy"].is_null(), "scores are not classes: {v}");
    let (_cdir, classifier, _) = classifier();
    let e = one_error(&eval_classifier(&classifier, &vocab, &data));
    assert!(e.contains("sts.tsv") && e.contains("`4.2` (line 2)"), "{e}");
}

#[test]
fn folders_and_tokenizers_are_checked_against_the_model() {
    let (dir, model, vocab) = classifier();
    let data = dir.path().join("texts.txt");
    std::fs::write(&data, "the cat sat\na denver broncos game\n").unwrap();
    let m = s(&model);
    // 9. A config.json naming 5 classes beside 3 logits; a truncated one; one linked from outside the folder.
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"id2label": {"0": "a", "1": "b", "2": "c", "3": "d", "4": "e"}}"#,
    )
    .unwrap();
    let e = one_error(&eval_classifier(&model, &vocab, &data));
    assert!(e.contains("config.json") && e.contains("names 5 classes") && e.contains("has 3"), "{e}");
    std::fs::write(dir.path().join("config.json"), r#"{"id2label": {"0": "#).unwrap();
    let e = one_error(&eval_classifier(&model, &vocab, &data));
    assert!(e.contains("config.json"), "{e}");
    let elsewhere = tempfile::tempdir().unwrap();
    let secret = elsewhere.path().join("secret.json");
    std::fs::write(&secret, "{}").unwrap();
    std::fs::remove_file(dir.path().join("config.json")).unwrap();
    std::os::unix::fs::symlink(&secret, dir.path().join("config.json")).unwrap();
    let e = one_error(&eval_classifier(&model, &vocab, &data));
    assert!(e.contains("config.json") && e.contains("symbolic link") && e.contains("secret.json"), "{e}");
    std::fs::remove_file(dir.path().join("config.json")).unwrap();
    // 8. A vocabulary with ids past the model's word embedding, named (not ONNX Runtime's Gather).
    let big = dir.path().join("big.txt");
    let mut tokens = std::fs::read_to_string(&vocab).unwrap();
    tokens.extend((0..5000).map(|i| format!("extra{i}\n")));
    std::fs::write(&big, tokens).unwrap();
    let e = one_error(&eval_classifier(&model, &big, &data));
    assert!(e.contains("big.txt") && e.contains("past its table"), "{e}");
    // An empty vocabulary is the vocabulary's fault, not the data's.
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let e = one_error(&eval_classifier(&model, &empty, &data));
    assert!(e.contains("empty.txt") && e.contains("no tokens"), "{e}");
    // No tokenizer anywhere: the folder looked in is named, not a default path.
    std::fs::remove_file(&vocab).unwrap();
    let e = one_error(&qdq(&["eval", "--model", m, "--baseline", m, "--dataset", s(&data)]));
    assert!(e.contains("no tokenizer") && !e.contains("squad/vocab.txt"), "{e}");
}

#[test]
fn sentence_transformers_folders_are_read_as_they_say_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("model");
    std::fs::create_dir_all(root.join("1_Pooling")).unwrap();
    let cfg =
        TinyBertConfig { max_positions: 64, type_vocab: 0, head: Head::Hidden { pooler: false }, ..Default::default() };
    build(&cfg).save(root.join("model.onnx")).unwrap();
    std::fs::copy(testdata("squad/vocab.txt"), root.join("vocab.txt")).unwrap();
    std::fs::write(root.join("1_Pooling/config.json"), r#"{"pooling_mode_mean_tokens": true}"#).unwrap();
    let modules = r#"[{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}"#;
    std::fs::write(root.join("modules.json"), format!("{modules}]")).unwrap();
    let texts = dir.path().join("texts.txt");
    std::fs::write(&texts, "\u{feff}one text\r\nanother text\r\n").unwrap();
    let (m, t) = (s(&root), s(&texts));
    let o = qdq(&["eval", "--model", m, "--baseline", m, "--dataset", t, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["task"], "embedding", "{v}");
    assert!(v.to_string().contains("\"texts\":2"), "two lines, two texts: {v}");
    // Issue 76: the texts that moved most, each named with its cosine.
    let o = qdq(&["eval", "--model", m, "--baseline", m, "--dataset", t]);
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(shown.contains("Moved most (2 smallest cosines):") && shown.contains("\"another text\""), "{shown}");
    // 6. A length past the model's 64 positions, or 0: named with the file, before any work.
    for (len, says) in [("100000", "embeds 64 positions"), ("0", "positive number")] {
        std::fs::write(root.join("sentence_bert_config.json"), format!("{{\"max_seq_length\": {len}}}")).unwrap();
        let e = one_error(&qdq(&["eval", "--model", m, "--baseline", m, "--dataset", t]));
        assert!(e.contains("sentence_bert_config.json") && e.contains(says), "{len}: {e}");
    }
    std::fs::remove_file(root.join("sentence_bert_config.json")).unwrap();
    // 7. A Dense module qdq cannot compute: eval and calibrate name modules.json and the module.
    let dense = r#", {"idx": 2, "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]"#;
    std::fs::write(root.join("modules.json"), format!("{modules}{dense}")).unwrap();
    let out = dir.path().join("cal");
    for args in [
        vec!["eval", "--model", m, "--baseline", m, "--dataset", t],
        vec!["calibrate", "--model", m, "--calibration-data", t, "--out", s(&out)],
    ] {
        let e = one_error(&qdq(&args));
        assert!(e.contains("modules.json") && e.contains("Dense (2_Dense)"), "{args:?}: {e}");
    }
    assert!(!out.exists());
    // 8. A BPE tokenizer beside a folder that declares BERT's WordPiece.
    std::fs::write(root.join("modules.json"), format!("{modules}]")).unwrap();
    std::fs::write(root.join("tokenizer_config.json"), r#"{"tokenizer_class": "BertTokenizer"}"#).unwrap();
    let bpe = r#"{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": null, "post_processor": null, "decoder": null,
        "model": {"type": "BPE", "dropout": null, "unk_token": "[UNK]", "continuing_subword_prefix": null,
        "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
        "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4}, "merges": []}}"#;
    std::fs::write(root.join("tokenizer.json"), bpe).unwrap();
    let e = one_error(&qdq(&["eval", "--model", m, "--baseline", m, "--dataset", t, "--force"]));
    assert!(e.contains("tokenizer.json") && e.contains("BPE") && e.contains("BertTokenizer"), "{e}");
}
