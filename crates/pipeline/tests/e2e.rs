//! The whole job on onnx-ir's tiny BERT and the SQuAD fixtures: calibrate -> quantize -> evaluate, every output file.

use std::path::{Path, PathBuf};

use onnx_ir::tiny_bert::{GraphForm, LayerNormKind, TinyBertConfig, build};
use qdq_pipeline::{
    CalibrateOptions, Corpus, DataConfig, DataSettings, E2eConfig, E2eResults, EvalOptions, Invocation, IoNames,
    LogitAgreement, MethodKind, MethodOptions, MethodSettings, Mode, NoProgress, PolicyChoice, PolicyOverride,
    PolicySettings, SquadE2e, SquadVersion, TaskResult,
};
use runtime::SessionConfig;

/// A SQuAD run's measurements (results.json's `result`).
fn squad(r: &E2eResults) -> &SquadE2e {
    r.result.as_ref().and_then(TaskResult::squad).expect("a SQuAD model's result")
}

fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(rel)
}

fn data_settings() -> DataSettings {
    DataSettings {
        vocab: Some(testdata("squad/vocab.txt")),
        tokenizer_json: None,
        lowercase: true,
        version: SquadVersion::V1_1,
        seq_len: Some(64),
        query_len: Some(16),
        doc_stride: Some(24),
        io_names: IoNames::Hf,
        force: false,
        pad_to_max: false,
        pooling: None,
        corpus: None,
    }
}

fn data_config() -> DataConfig {
    data_settings().config(Path::new("model.onnx")).unwrap()
}

/// The tiny BERT (64 positions) and the tiny SQuAD file fitted to it (the model written into `dir`).
fn tiny_with_data(dir: &Path, cfg: &DataConfig) -> (onnx_ir::Model, Corpus) {
    let model = build(&TinyBertConfig { max_positions: 64, ..Default::default() });
    let tok = cfg.tokenizer().unwrap();
    let mut data = Corpus::load(&testdata("squad/tiny-v1.1.json"), cfg, &tok, 0).unwrap();
    data.fit_model(&model, &dir.join("tiny.onnx")).unwrap();
    (model, data)
}

fn method_settings() -> MethodSettings {
    let compare = vec![MethodKind::MinMax, MethodKind::Entropy, MethodKind::Percentile];
    let d = MethodOptions::default();
    let (percentile, symmetric, num_quantized_bins) = (Some(d.percentile), d.symmetric, Some(d.num_quantized_bins));
    let method = Some(MethodKind::Percentile);
    MethodSettings { method, compare, percentile, symmetric, num_quantized_bins, integer_default: None }
}

fn methods() -> Vec<calib::Method> {
    method_settings().methods(&[qdq::Precision::Int8]).unwrap()
}

fn config(model: PathBuf, out: PathBuf, policy: &str) -> E2eConfig {
    E2eConfig {
        model,
        dataset: testdata("squad/tiny-v1.1.json"),
        calibration_data: testdata("squad/tiny-v1.1.json"),
        out,
        data: data_config(),
        samples: 0,
        cal_num: Some(5),
        calibrate: CalibrateOptions::new(2, methods(), 512, SessionConfig::default()),
        methods: method_settings(),
        policy: qdq::Policy::preset(policy).unwrap(),
        compare: vec!["minmax".to_owned(), "entropy".to_owned()],
        also: vec![],
        policy_choice: PolicyChoice {
            preset: policy.parse().unwrap(),
            chosen_by: "--policy".to_owned(),
            target_cpu: None,
        },
        mode: Mode::Static,
        invocation: Invocation { command_line: vec!["qdq".into(), "e2e".into()], build_commit: String::new() },
        eval: EvalOptions {
            batch: 3,
            session: SessionConfig::default(),
            warmup: 1,
            workers: 1,
            at_default_float: true,
        },
        no_eval: false,
        other_eps: vec![],
        profile_ops: false,
    }
}

fn questions_in(path: &Path) -> usize {
    squad_metrics::load_dataset(path).unwrap().num_questions()
}

#[test]
fn e2e_on_tiny_bert_writes_every_output_and_scores_the_written_predictions() {
    let dir = tempfile::tempdir().unwrap();
    for kind in [LayerNormKind::Decomposed, LayerNormKind::Fused] {
        let model_path = dir.path().join(format!("tiny_{kind:?}.onnx"));
        build(&TinyBertConfig { layer_norm: kind, max_positions: 64, ..Default::default() }).save(&model_path).unwrap();
        let out = dir.path().join(format!("out_{kind:?}"));
        let cfg = config(model_path.clone(), out.clone(), "tensorrt");
        let results = qdq_pipeline::e2e(&cfg, &cfg.eval.session, &NoProgress).unwrap();

        for f in [
            "model_qdq.onnx",
            "calibration.json",
            "calibration_minmax.json",
            "calibration_entropy.json",
            "calibration.flatbuffers",
            "calibration.cache",
            "calib_state.json",
            "predictions_fp32.json",
            "predictions_int8.json",
            "results.json",
            "report.md",
        ] {
            assert!(out.join(f).is_file(), "{kind:?}: {f} missing");
        }
        // No temporary files left behind, and every output has the mode the umask gives a new file (the temp
        // file's 0600 used to leak into results.json, report.md and the predictions).
        let names: Vec<String> =
            std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert!(names.iter().all(|n| !n.starts_with('.') && !n.contains("tmp")), "{names:?}");
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let umask = status.lines().find_map(|l| l.strip_prefix("Umask:")).unwrap().trim();
            let expected = 0o666 & !u32::from_str_radix(umask, 8).unwrap();
            for n in &names {
                let mode = std::fs::metadata(out.join(n)).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, expected, "{kind:?}: {n} has mode {mode:o}, umask {umask}");
            }
        }

        let on_disk: E2eResults = serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
        assert_eq!(on_disk, results);
        // Calibrated on the evaluated file's first 5 questions: all 5 are also evaluated, and report.md says so.
        let cal = results.calibration.as_ref().unwrap();
        assert_eq!(cal.also_evaluated, Some(5), "{kind:?}");
        let report = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(report.contains("5 of the calibration questions are also evaluated"), "{report}");
        // --compare-methods: every other method quantized and evaluated like the main one.
        let compared: Vec<&str> = results.compared_methods.iter().map(|c| c.method.as_str()).collect();
        assert_eq!(compared, ["minmax", "entropy"], "{kind:?}");
        for c in &squad(&results).compared_methods {
            let r = &c.int8;
            assert_eq!(r.score.questions, questions_in(&cfg.dataset), "{kind:?} {}", c.method);
            assert!(out.join(format!("model_qdq_{}.onnx", c.method)).is_file());
            assert!(out.join(format!("predictions_int8_{}.json", c.method)).is_file());
            assert!(results.table().contains(&format!("| INT8 (QDQ, {}) ", c.method)), "{}", results.table());
        }
        assert!(results.table().contains("| INT8 (QDQ, percentile) "), "{}", results.table());
        // INT8 timed against FP32 in alternation on the first evaluation features (batches of 3: 15 of at most 16).
        let s = squad(&results).speedup.expect("a SQuAD run times INT8 against FP32");
        assert!(0.0 < s.min && s.min <= s.median && s.median <= s.max && s.max.is_finite(), "{s:?}");
        assert_eq!((s.rounds, s.features), (5, 15), "{s:?}");
        assert!(results.table().contains(&format!("INT8 runs at {} FP32's speed", s.describe())));
        assert!(results.provenance.phase_seconds.contains_key("speed"));
        // Provenance: enough to reproduce the run.
        let p = &results.provenance;
        assert!(!p.git_commit.is_empty() && !p.qdq_version.is_empty());
        assert_eq!(p.command_line, ["qdq", "e2e"]);
        assert!(p.onnxruntime.version.starts_with("1.") && p.onnxruntime.library.contains("onnxruntime"), "{p:?}");
        assert!(p.sessions["fp32"].contains("Cpu") && p.sessions.contains_key("int8"));
        assert_eq!(p.settings["data"]["seq_len"], cfg.data.features.max_seq_len);
        assert_eq!(p.settings["calibration"]["questions"], 5);
        assert_eq!(p.settings["policy"]["preset"], "tensorrt");
        for key in qdq::KEYS {
            assert!(p.settings["policy"]["options"].get(key).is_some(), "policy option {key} not recorded");
        }
        assert!(p.machine.cores > 0 && !p.machine.cpu.is_empty());
        for phase in ["smoothing_and_calibration", "quantization", "fp32_eval", "int8_eval", "total"] {
            assert!(p.phase_seconds.get(phase).is_some_and(|s| *s >= 0.0), "{phase}: {:?}", p.phase_seconds);
        }
        let total = questions_in(&cfg.dataset);
        let gold = squad_metrics::load_dataset(&cfg.dataset).unwrap();
        for (r, file) in [
            (Some(&squad(&results).fp32), "predictions_fp32.json"),
            (Some(&squad(&results).int8), "predictions_int8.json"),
        ] {
            let r = r.as_ref().unwrap();
            assert_eq!((r.score.questions, r.score.missing_predictions), (total, 0), "{kind:?} {file}");
            let preds = squad_metrics::load_predictions(out.join(file)).unwrap();
            assert_eq!(preds.len(), total);
            // The reported score is the official score of the written predictions.
            let m = squad_metrics::evaluate_v1(&gold, &preds);
            assert!(
                (m.f1 - r.score.f1).abs() < 1e-9 && (m.exact_match - r.score.exact_match).abs() < 1e-9,
                "{kind:?} {file}"
            );
            // Every answer is a span of its context.
            for a in gold.data.iter().flat_map(|a| &a.paragraphs) {
                for q in &a.qas {
                    assert!(a.context.contains(preds[&q.id].as_str()), "{kind:?}: {:?}", preds[&q.id]);
                }
            }
            assert!(r.latency.features >= total && r.latency.features_per_second > 0.0);
        }

        // Calibration saw cal_num questions and every tensor the policy quantizes got a finite range.
        assert_eq!(results.calibration.as_ref().unwrap().questions, 5);
        let table = calib::tables::read_json(out.join("calibration.json")).unwrap();
        let model = onnx_ir::Model::load(&model_path).unwrap();
        // The tensorrt preset smooths the LayerNorm outputs first: the ranges are those of the smoothed model, whose
        // LayerNorms write `<tensor>_smoothed` for the MatMuls (the original name survives only where a float
        // reader still needs it).
        let sites = qdq::smoothing_sites(&model, &cfg.policy).unwrap();
        // 5 LayerNorm outputs (embeddings + 2 per layer) and, per layer, the attention context and the FFN
        // activation: every MatMul with a constant weight.
        assert_eq!(sites.len(), 9, "{kind:?}");
        let smoothing = results.quantization.smoothing.as_deref().unwrap_or_default();
        assert!(
            smoothing.starts_with("5 LayerNorm outputs and 4 other MatMul inputs smoothed into 13 MatMuls"),
            "{smoothing}"
        );
        let wanted: Vec<String> = qdq::tensors_to_calibrate(&model, &cfg.policy)
            .unwrap()
            .into_iter()
            .map(|t| if sites.iter().any(|s| s.tensor == t) { format!("{t}_smoothed") } else { t })
            .collect();
        assert_eq!(results.calibration.as_ref().unwrap().tensors, wanted.len());
        for t in &wanted {
            let r = table.ranges.get(t).unwrap_or_else(|| panic!("{kind:?}: no range for {t}"));
            assert!(r.min.is_finite() && r.max.is_finite() && r.min <= r.max, "{t}: {r:?}");
        }
        assert_eq!(
            calib::tables::read_ort_flatbuffers(out.join("calibration.flatbuffers")).unwrap().len(),
            table.ranges.len()
        );

        // The QDQ model on disk is the one evaluated: every MatMul reads only dequantized inputs.
        let q = onnx_ir::Model::load(out.join("model_qdq.onnx")).unwrap();
        let record = qdq::smoothing_record(&q).unwrap();
        assert!(record.starts_with(&format!("alpha={}; tensors=9; factors=", qdq::DEFAULT_SMOOTH_ALPHA)), "{record}");
        // calibration.json records the smoothing it was measured after.
        assert_eq!(table.model.as_deref(), qdq::smoothing_fingerprint(&q));
        let cov = qdq::coverage(&q);
        let mm = &cov.by_op["MatMul"];
        assert_eq!(mm.nodes, mm.covered, "{kind:?}");
        let dq = q.graph().node.iter().filter(|n| n.op_type() == "DequantizeLinear").count();
        assert_eq!(results.quantization.dequantize_nodes, dq);
        assert!(results.quantization.skipped.is_empty(), "{:?}", results.quantization.skipped);
        let report = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(report.lines().any(|l| l.starts_with("| FP32 ") && l.contains("| cpu ")), "{report}");
    }
}

#[test]
fn a_model_without_token_type_ids_runs_end_to_end() {
    // DistilBERT's inputs: input_ids and attention_mask only. The pipeline must feed just those.
    let dir = tempfile::tempdir().unwrap();
    let model_path = dir.path().join("tiny_no_tt.onnx");
    let model = build(&TinyBertConfig { type_vocab: 0, max_positions: 64, ..Default::default() });
    assert!(model.graph().input.iter().all(|i| i.name() != "token_type_ids"));
    model.save(&model_path).unwrap();
    let out = dir.path().join("out");
    let cfg = config(model_path, out.clone(), "tensorrt");
    let results = qdq_pipeline::e2e(&cfg, &cfg.eval.session, &NoProgress).unwrap();
    let total = questions_in(&cfg.dataset);
    for r in [Some(&squad(&results).fp32), Some(&squad(&results).int8)] {
        let r = r.as_ref().unwrap();
        assert_eq!((r.score.questions, r.score.missing_predictions), (total, 0));
    }
    assert!(out.join("model_qdq.onnx").is_file() && out.join("predictions_int8.json").is_file());
}

#[test]
fn calibration_is_independent_of_how_the_data_is_batched_when_padding_is_fixed() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = data_config();
    cfg.padding = squad::Padding::Fixed(64);
    let (model, data) = tiny_with_data(dir.path(), &cfg);
    let policy = qdq::Policy::preset("tensorrt").unwrap();
    let tensors = qdq::tensors_to_calibrate(&model, &policy).unwrap();
    let ranges = |batch| {
        let opts = CalibrateOptions::new(batch, methods(), 256, SessionConfig::default());
        qdq_pipeline::calibrate(&model, &tensors, &data, &opts, &NoProgress).unwrap()
    };
    let (one, four) = (ranges(1), ranges(4));
    assert_eq!(one.features, four.features);
    assert_eq!(one.questions, 9);
    for (a, b) in one.tables.iter().zip(&four.tables) {
        assert_eq!(a.method, b.method);
        for (t, ra) in &a.ranges {
            let rb = &b.ranges[t];
            let tol = 1e-5 * (1.0 + ra.max.abs().max(ra.min.abs()));
            assert!(
                (ra.min - rb.min).abs() <= tol && (ra.max - rb.max).abs() <= tol,
                "{} {t}: {ra:?} vs {rb:?}",
                a.method
            );
        }
    }
}

/// Sessions side by side each fold their own batches, merged at the end: the statistics (every histogram bin, every
/// min/max) and so every method's ranges are exactly those of one session, whatever the number of sessions and the
/// batch size. A moving average depends on batch order, so it keeps one session.
/// The tiny BERT and its test data, with the tensors the `tensorrt` preset calibrates and every range method.
struct EveryMethod {
    _dir: tempfile::TempDir,
    model: onnx_ir::Model,
    data: Corpus,
    tensors: Vec<String>,
    methods: Vec<calib::Method>,
}

impl EveryMethod {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (model, data) = tiny_with_data(dir.path(), &data_config());
        let tensors = qdq::tensors_to_calibrate(&model, &qdq::Policy::preset("tensorrt").unwrap()).unwrap();
        let methods: Vec<calib::Method> =
            MethodKind::ALL.iter().map(|k| calib::Method::new(*k, &MethodOptions::default()).unwrap()).collect();
        EveryMethod { _dir: dir, model, data, tensors, methods }
    }

    /// Calibrated with 128 bins, `batch` features per batch on `workers` sessions, read as `reading` says.
    fn run(&self, batch: usize, workers: usize, reading: Option<qdq_pipeline::Reading>) -> qdq_pipeline::Calibration {
        let opts = CalibrateOptions {
            workers: Some(workers),
            reading,
            ..CalibrateOptions::new(batch, self.methods.clone(), 128, SessionConfig::default())
        };
        qdq_pipeline::calibrate(&self.model, &self.tensors, &self.data, &opts, &NoProgress).unwrap()
    }
}

#[test]
fn sessions_side_by_side_collect_exactly_one_sessions_statistics() {
    let every = EveryMethod::new();
    let (model, tensors) = (&every.model, &every.tensors);
    let run = |batch, workers| every.run(batch, workers, None);
    let one = run(1, 1);
    assert_eq!(one.times.sessions, 1);
    assert!(one.state.tensor(&tensors[0]).unwrap().abs.as_ref().is_some_and(|h| h.total() > 0));
    for (batch, workers) in [(1, 2), (1, 3), (2, 2)] {
        let other = run(batch, workers);
        assert_eq!(other.times.sessions, workers);
        assert_eq!(other.features, one.features);
        if batch == 1 {
            assert!(other.state == one.state, "{workers} sessions: the statistics differ from one session's");
            assert_eq!(other.tables, one.tables, "{workers} sessions");
        } else {
            // Another batch size pads differently (dynamic padding): the same sessions rule, checked on its own.
            assert!(other.state == run(batch, 1).state, "batch {batch}, {workers} sessions");
        }
    }
    let moving = calib::CollectOptions { moving_average: Some(0.01), ..calib::CollectOptions::default() };
    let opts = CalibrateOptions { workers: Some(2), ..CalibrateOptions::new(1, vec![], 0, SessionConfig::default()) };
    assert_eq!(qdq_pipeline::pass_workers(model, &opts, &moving), 1);
    assert_eq!(qdq_pipeline::pass_workers(model, &opts, &calib::CollectOptions::default()), 2);
}

/// On the CPU EP a pass observes its tensors in the graph (`Observe` nodes) instead of exposing them as outputs: the
/// statistics (every histogram bin, every min/max, the non-finite counts) and the ranges are exactly the same, with
/// one session or two, and the time split is still reported.
#[test]
fn observing_the_tensors_collects_what_exposing_them_does() {
    let every = EveryMethod::new();
    let (tensors, run) = (&every.tensors, |reading, workers| every.run(2, workers, Some(reading)));
    assert_eq!(qdq_pipeline::Reading::for_ep(&runtime::Ep::Cpu), qdq_pipeline::Reading::Observe);
    let exposed = run(qdq_pipeline::Reading::Outputs, 1);
    assert!(exposed.state.tensor(&tensors[0]).unwrap().signed.as_ref().is_some_and(|h| h.total() > 0));
    for workers in [1, 2] {
        let observed = run(qdq_pipeline::Reading::Observe, workers);
        assert!(observed.state == exposed.state, "{workers} observing sessions: the statistics differ");
        assert_eq!(observed.tables, exposed.tables);
        let t = observed.times;
        assert!(t.inference_s > 0.0 && t.statistics_s > 0.0 && t.sessions == workers, "{t:?}");
    }
}

#[test]
fn model_data_mismatches_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.onnx");
    let model = build(&TinyBertConfig::default());
    let cfg = data_config();
    let tok = cfg.tokenizer().unwrap();

    // Names of another export.
    let nvidia = DataSettings { io_names: IoNames::Nvidia, ..data_settings() }.config(Path::new("model.onnx")).unwrap();
    let mut d = Corpus::load(&testdata("squad/tiny-v1.1.json"), &nvidia, &tok, 0).unwrap();
    let e = d.fit_model(&model, &path).unwrap_err().to_string();
    assert!(e.contains("tiny.onnx") && e.contains("input_mask") && e.contains("attention_mask"), "{e}");

    // A vocabulary larger than the model's embedding.
    let small = build(&TinyBertConfig { vocab_size: 100, ..Default::default() });
    let mut d = Corpus::load(&testdata("squad/tiny-v1.1.json"), &cfg, &tok, 0).unwrap();
    let e = d.fit_model(&small, &path).unwrap_err().to_string();
    assert!(e.contains("vocab.txt") && e.contains("100"), "{e}");

    // A model with fewer positions than --seq-len: said before any inference (issue 18, item 8).
    let short = build(&TinyBertConfig { max_positions: 32, ..Default::default() });
    let mut d = Corpus::load(&testdata("squad/tiny-v1.1.json"), &cfg, &tok, 0).unwrap();
    let e = d.fit_model(&short, &path).unwrap_err().to_string();
    assert!(e.contains("tiny.onnx") && e.contains("32 positions") && e.contains("--seq-len 32"), "{e}");

    // A model without segment ids is fed without them.
    let mut no_tt = model.clone();
    no_tt.graph_mut().input.retain(|i| i.name() != "token_type_ids");
    let mut d = Corpus::load(&testdata("squad/tiny-v1.1.json"), &cfg, &tok, 0).unwrap();
    d.fit_model(&no_tt, &path).unwrap();
    assert_eq!(d.io().token_type_ids, None);

    // Unreadable and empty SQuAD files.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, b"{\"data\": [ {\"paragraphs\": 3} ]}").unwrap();
    let e = Corpus::load(&bad, &cfg, &tok, 0).unwrap_err().to_string();
    assert!(e.contains("bad.json") && e.contains("paragraphs"), "{e}");
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, b"{\"version\": \"1.1\", \"data\": []}").unwrap();
    let e = Corpus::load(&empty, &cfg, &tok, 0).unwrap_err().to_string();
    assert!(e.contains("empty.json") && e.contains("no questions"), "{e}");

    // Bad settings.
    let e = "3.0".parse::<SquadVersion>().unwrap_err().to_string();
    assert!(e.contains("3.0") && e.contains("1.1 or 2.0"), "{e}");
    let e = "tf".parse::<IoNames>().unwrap_err().to_string();
    assert!(e.contains("auto, hf, nvidia") && e.contains("ids="), "{e}");
    let e = "ids=a,tokens=b".parse::<IoNames>().unwrap_err().to_string();
    assert!(e.contains("tokens") && e.contains("ids, mask, segment, start, end"), "{e}");
    assert!(DataSettings { seq_len: Some(16), ..data_settings() }.config(Path::new("model.onnx")).is_err());
}

/// Warm-up runs are untimed and change no prediction: the timed batches and the answers are the same with none.
#[test]
fn warmup_runs_are_not_timed_and_change_nothing() {
    let model = build(&TinyBertConfig::default());
    let bytes = model.to_bytes().unwrap();
    let cfg = data_config();
    let tok = cfg.tokenizer().unwrap();
    let mut data = Corpus::load(&testdata("squad/tiny-v1.1.json"), &cfg, &tok, 0).unwrap();
    data.fit_model(&model, Path::new("tiny.onnx")).unwrap();
    let run = |warmup| {
        let opts =
            EvalOptions { batch: 2, session: SessionConfig::default(), warmup, workers: 1, at_default_float: true };
        qdq_pipeline::evaluate(runtime::ModelSource::Bytes(&bytes), "tiny.onnx", &data, &opts, "eval", &NoProgress)
            .unwrap()
    };
    let (cold, warm) = (run(0), run(3));
    assert_eq!(cold.predictions, warm.predictions);
    assert_eq!((cold.latency.batches, cold.latency.features), (warm.latency.batches, warm.latency.features));
    assert_eq!(cold.score, warm.score);
}

/// Sessions side by side (`workers`) give one session's answers: every batch comes back, and the logits of batches
/// finishing out of order still reach the answers in feature order (a question over several windows is answered from
/// all of them).
#[test]
fn sessions_side_by_side_answer_as_one_session() {
    let model = build(&TinyBertConfig::default());
    let bytes = model.to_bytes().unwrap();
    // Short windows: long contexts span several features, so their order matters.
    let settings = DataSettings { seq_len: Some(24), doc_stride: Some(4), ..data_settings() };
    let cfg = settings.config(Path::new("model.onnx")).unwrap();
    let tok = cfg.tokenizer().unwrap();
    let mut data = Corpus::load(&testdata("squad/tiny-v1.1.json"), &cfg, &tok, 0).unwrap();
    data.fit_model(&model, Path::new("tiny.onnx")).unwrap();
    let run = |workers, batch| {
        let opts = EvalOptions { batch, session: SessionConfig::default(), warmup: 0, workers, at_default_float: true };
        qdq_pipeline::evaluate(runtime::ModelSource::Bytes(&bytes), "tiny.onnx", &data, &opts, "eval", &NoProgress)
            .unwrap()
    };
    let one = run(1, 1);
    assert!(one.latency.features > one.score.questions, "some question must span several windows");
    for (workers, batch) in [(2, 1), (3, 1), (3, 2)] {
        let side = run(workers, batch);
        assert_eq!(side.workers, workers);
        assert_eq!(side.predictions, one.predictions, "{workers} sessions, batch {batch}");
        assert_eq!(side.margins, one.margins, "{workers} sessions, batch {batch}");
        assert_eq!(side.score, one.score);
        assert_eq!(side.latency.features, one.latency.features);
    }
}

#[test]
fn the_policy_follows_the_ep_unless_given() {
    let settings = |preset: Option<&str>, ort_quant: bool| PolicySettings {
        preset: preset.map(|p| p.parse().unwrap()),
        mode: Mode::Static,
        ort_quant,
        precision: vec![],
        options: vec![],
        exclude_nodes: vec![],
        strict: false,
    };
    let ep = |name: &str| name.parse::<runtime::Ep>().unwrap();
    for (name, preset) in [("cpu", "cpu"), ("tensorrt", "tensorrt"), ("migraphx", "migraphx"), ("cuda", "tensorrt")] {
        let (policy, choice) = settings(None, false).policy(&ep(name)).unwrap();
        let expected =
            PolicyChoice { preset: preset.parse().unwrap(), chosen_by: format!("--ep {name}"), target_cpu: None };
        assert_eq!(choice, expected);
        assert_eq!(policy.preset.to_string(), preset);
        assert!(choice.to_string().contains("--policy chooses another"), "{choice}");
    }
    let (policy, choice) = settings(Some("tensorrt"), false).policy(&ep("cpu")).unwrap();
    assert_eq!((policy.preset.to_string().as_str(), choice.chosen_by.as_str()), ("tensorrt", "--policy"));
    let (_, choice) = settings(Some("cpu"), true).policy(&ep("tensorrt")).unwrap();
    assert_eq!((choice.preset.to_string().as_str(), choice.chosen_by.as_str()), ("ort-compatible", "--ort-quant"));
    // A preset that does not exist is not a value of the setting at all (the command line refuses it, exit 2).
    assert!("nope".parse::<qdq::Preset>().is_err());
}

/// Issue 75: the `openvino` preset is laid out for the CPU the model is for, OpenVINO's `--ov-cpu` (this machine's
/// unless named; on another EP, this machine's): on AMX the attention scores stay float below 64 contracted
/// elements, every other kind takes the preset as it is; a `--policy-option` still wins, and the choice says the kind.
#[test]
fn the_openvino_preset_follows_the_cpu_it_is_for() {
    let settings = |options: Vec<PolicyOverride>| PolicySettings {
        preset: None,
        mode: Mode::Static,
        ort_quant: false,
        precision: vec![],
        options,
        exclude_nodes: vec![],
        strict: false,
    };
    let ov = |cpu: runtime::CpuKind| runtime::Ep::OpenVino(runtime::OpenVinoOptions { cpu, ..Default::default() });
    let base = qdq::Policy::preset("openvino").unwrap();
    for cpu in [runtime::CpuKind::Amx, runtime::CpuKind::Avx512Bf16, runtime::CpuKind::Vnni, runtime::CpuKind::Avx2] {
        let (policy, choice) = settings(vec![]).policy(&ov(cpu)).unwrap();
        assert_eq!((choice.preset, choice.target_cpu), (qdq::Preset::OpenVino, Some(cpu)));
        assert!(choice.to_string().contains(&format!("for {cpu} CPUs")), "{choice}");
        let depth = if cpu == runtime::CpuKind::Amx { 64 } else { 0 };
        assert_eq!(policy.variable_min_depth, depth, "{cpu}");
        // Nothing else differs from the preset.
        assert_eq!(qdq::Policy { variable_min_depth: 0, ..policy }, base, "{cpu}");
    }
    let option = vec![PolicyOverride { key: "variable_min_depth", value: "16".into() }];
    let (policy, _) = settings(option).policy(&ov(runtime::CpuKind::Amx)).unwrap();
    assert_eq!(policy.variable_min_depth, 16);
    // `--policy openvino` on the CPU EP: this machine's kind; other presets name none.
    let on_cpu = PolicySettings { preset: Some(qdq::Preset::OpenVino), ..settings(vec![]) };
    let (_, choice) = on_cpu.policy(&runtime::Ep::Cpu).unwrap();
    assert_eq!(choice.target_cpu, Some(runtime::CpuKind::host()));
    let (_, choice) = settings(vec![]).policy(&runtime::Ep::Cpu).unwrap();
    assert_eq!(choice.target_cpu, None);
}

/// Issue 16: the Gemm form and ONNX Runtime's fused form go through the whole job (smoothing, calibration,
/// quantization, evaluation) with the `cpu` and `tensorrt` presets: nothing MatMul-like is left in float but what the
/// `cpu` preset leaves by design, and the summary names the integer forms written.
#[test]
fn other_graph_forms_run_end_to_end() {
    for form in [GraphForm::Gemm, GraphForm::OrtFused] {
        for policy in ["cpu", "tensorrt"] {
            let dir = tempfile::tempdir().unwrap();
            let model_path = dir.path().join("tiny.onnx");
            build(&TinyBertConfig { max_positions: 64, form, ..Default::default() }).save(&model_path).unwrap();
            let out = dir.path().join("out");
            let cfg = config(model_path, out.clone(), policy);
            let r = qdq_pipeline::e2e(&cfg, &cfg.eval.session, &NoProgress).unwrap();
            let q = &r.quantization;
            assert!(q.smoothing.is_some() && q.quantized_tensors > 0, "{form:?} {policy}: {q:?}");
            let (fp32, int8) = (squad(&r).fp32.clone(), squad(&r).int8.clone());
            assert_eq!(int8.score.questions, fp32.score.questions);
            let float_by_design = |n: &String| n.contains("/attention/self/MatMul");
            match (form, policy) {
                (GraphForm::Gemm, "cpu") => {
                    assert!(q.float_matmul_like.iter().all(float_by_design), "{q:?}");
                    assert!(q.integer_forms.iter().any(|l| l.contains("Gemm biases as int32")), "{q:?}");
                }
                (GraphForm::OrtFused, "cpu") => {
                    assert!(q.float_matmul_like.is_empty(), "{q:?}");
                    let lines = q.integer_forms.join("\n");
                    assert!(lines.contains("QAttention: Attention_0, Attention_1"), "{lines}");
                    assert!(lines.contains("QEmbedLayerNormalization: EmbedLayerNormalization_0"), "{lines}");
                }
                _ => assert!(q.float_matmul_like.is_empty() && q.integer_forms.is_empty(), "{form:?}: {q:?}"),
            }
            let report = std::fs::read_to_string(out.join("report.md")).unwrap();
            assert!(q.integer_forms.iter().all(|l| report.contains(l.as_str())), "{report}");
        }
    }
}

/// Exporters that do not fold constants: the same weights written as `Constant` nodes, stored transposed behind a
/// `Transpose`, in float16 behind a `Cast` or as int8 behind a `DequantizeLinear` (weight-only quantization; rounded
/// the same in the plain model, so both compute the same). qdq
/// folds them into initializers on load: the INT8 model quantizes the same MatMuls and gives the same answers.
#[test]
fn weights_behind_constant_transpose_or_cast_nodes_are_quantized_as_weights() {
    use onnx_ir::{NodeExt, attr_int, attr_ints, attr_tensor, node, tensor_from_vec};
    use std::collections::HashSet;
    let dir = tempfile::tempdir().unwrap();
    let mut plain = build(&TinyBertConfig { max_positions: 64, ..Default::default() });
    let weights: Vec<String> = {
        let g = plain.graph();
        let inits: HashSet<&str> = g.initializer.iter().map(|t| t.name()).collect();
        g.node
            .iter()
            .filter(|n| n.op_type() == "MatMul" && inits.contains(n.input[1].as_str()))
            .map(|n| n.input[1].clone())
            .collect()
    };
    assert!(weights.len() >= 6, "{weights:?}");
    // Every fourth weight goes behind each form; the float16 and int8 ones are rounded in the plain model too.
    let mut unfolded = plain.clone();
    let ug = unfolded.graph_mut();
    let mut front = Vec::new();
    for (k, w) in weights.iter().enumerate() {
        let t = ug.initializer.iter().find(|t| t.name() == w).unwrap().clone();
        let a = onnx_ir::tensor_to_array::<f32>(&t).unwrap();
        let (rows, cols) = (a.shape()[0], a.shape()[1]);
        let hidden = format!("{w}_stored");
        match k % 4 {
            0 => front.push(node("Constant", &format!("{w}_c"), &[], &[w]).with_attr(attr_tensor("value", t.clone()))),
            3 => {
                // Weight-only int8, per output channel (axis 1 of [in, out]); the plain model holds what it decodes to.
                let mut scales = vec![1e-6f32; cols];
                a.iter().zip(0..).for_each(|(v, i)| scales[i % cols] = scales[i % cols].max(v.abs() / 127.0));
                let q: Vec<i8> = a.iter().zip(0..).map(|(v, i)| (v / scales[i % cols]).round() as i8).collect();
                let decoded: Vec<f32> = q.iter().zip(0..).map(|(&v, i)| f32::from(v) * scales[i % cols]).collect();
                ug.initializer.push(tensor_from_vec(&hidden, &[rows, cols], q).unwrap());
                let scale = format!("{w}_scale");
                ug.initializer.push(tensor_from_vec::<f32>(&scale, &[cols], scales).unwrap());
                front.push(node("DequantizeLinear", &format!("{w}_dq"), &[&hidden, &scale], &[w]));
                onnx_ir::GraphExt::add_initializer(
                    plain.graph_mut(),
                    tensor_from_vec::<f32>(w, &[rows, cols], decoded).unwrap(),
                );
            }
            1 => {
                let at: Vec<f32> = a.t().iter().copied().collect();
                ug.initializer.push(tensor_from_vec::<f32>(&hidden, &[cols, rows], at).unwrap());
                front
                    .push(node("Transpose", &format!("{w}_t"), &[&hidden], &[w]).with_attr(attr_ints("perm", &[1, 0])));
            }
            _ => {
                let h: Vec<half::f16> = a.iter().map(|&v| half::f16::from_f32(v)).collect();
                ug.initializer.push(tensor_from_vec(&hidden, &[rows, cols], h.clone()).unwrap());
                front.push(node("Cast", &format!("{w}_cast"), &[&hidden], &[w]).with_attr(attr_int("to", 1)));
                let rounded: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
                onnx_ir::GraphExt::add_initializer(
                    plain.graph_mut(),
                    tensor_from_vec::<f32>(w, &[rows, cols], rounded).unwrap(),
                );
            }
        }
        ug.initializer.retain(|t| t.name() != w);
    }
    ug.node.splice(0..0, front);
    let mut answers = Vec::new();
    for (name, model) in [("plain", &plain), ("unfolded", &unfolded)] {
        let path = dir.path().join(format!("{name}.onnx"));
        model.save(&path).unwrap();
        let out = dir.path().join(format!("out_{name}"));
        let cfg = config(path, out.clone(), "cpu");
        let r = qdq_pipeline::e2e(&cfg, &cfg.eval.session, &NoProgress).unwrap();
        let q = &r.quantization;
        let int8 = squad(&r).int8.clone();
        let predictions = std::fs::read_to_string(out.join("predictions_int8.json")).unwrap();
        answers.push((q.quantized_tensors, q.float_matmul_like.clone(), int8.score.f1, predictions));
    }
    assert_eq!(answers[0], answers[1], "the unfolded model must quantize and answer as the plain one");
    assert!(answers[1].1.iter().all(|n| n.contains("/attention/self/MatMul")), "{:?}", answers[1].1);
}

/// An export that takes position ids as an input (`position_ids`, gathered from the position table) gets 0, 1, 2, ...
/// on every row: the FP32 answers are the plain model's, which slices them from its own constant.
#[test]
fn position_ids_taken_as_an_input_are_fed_0_1_2() {
    use onnx_ir::DataType;
    let dir = tempfile::tempdir().unwrap();
    let plain = build(&TinyBertConfig { max_positions: 64, ..Default::default() });
    let mut with_input = plain.clone();
    let g = with_input.graph_mut();
    let gather = g.node.iter_mut().find(|n| n.name().ends_with("position_embeddings/Gather")).unwrap();
    gather.input[1] = "pos_in".into();
    g.input.push(onnx_ir::value_info("pos_in", DataType::Int64, Some(&[Err("batch"), Err("sequence")])));
    let io = qdq_pipeline::detect_io(&with_input, Path::new("m.onnx"), &IoNames::Auto).unwrap();
    assert_eq!(io.position_ids.as_deref(), Some("pos_in"), "found by the table it gathers from, whatever its name");
    assert_eq!(io.attention_mask, "attention_mask");
    let named = |s: &str| qdq_pipeline::detect_io(&with_input, Path::new("m.onnx"), &s.parse().unwrap()).unwrap();
    assert_eq!(named("position=pos_in").position_ids.as_deref(), Some("pos_in"));
    assert_eq!(named("position=").position_ids, None, "`position=` says there is none");
    let e = "positio=x".parse::<IoNames>().unwrap_err().to_string();
    assert!(e.contains("unknown role `positio`") && e.contains("position"), "{e}");
    let mut runs = Vec::new();
    for (name, model) in [("plain", &plain), ("with_input", &with_input)] {
        let path = dir.path().join(format!("{name}.onnx"));
        model.save(&path).unwrap();
        let out = dir.path().join(format!("out_{name}"));
        for io_names in [IoNames::Auto, IoNames::Hf] {
            let mut cfg = config(path.clone(), out.clone(), "tensorrt");
            cfg.data = DataSettings { io_names, ..data_settings() }.config(&path).unwrap();
            let r = qdq_pipeline::e2e(&cfg, &cfg.eval.session, &NoProgress).unwrap();
            assert_eq!(squad(&r).int8.clone().score.missing_predictions, 0);
            runs.push((
                name,
                squad(&r).fp32.clone().score.f1,
                std::fs::read_to_string(out.join("predictions_fp32.json")).unwrap(),
            ));
        }
    }
    assert!(runs.windows(2).all(|w| w[0].1 == w[1].1 && w[0].2 == w[1].2), "FP32 answers must not change: {runs:?}");
}

/// A BERT converted to float16 (ONNX Runtime's `convert_float_to_float16`, with float32 inputs and outputs or
/// float16 ones) is calibrated and quantized in float32: its INT8 model is the one of the same weights in float32, and
/// its own float16 logits are read for the FP32 row. Before, no MatMul was quantized and INT8 was the model itself.
#[test]
fn a_float16_model_is_quantized_as_its_float32_twin() {
    use onnx_ir::NodeExt as _;
    use onnx_ir::proto::type_proto;
    let dir = tempfile::tempdir().unwrap();
    let plain = build(&TinyBertConfig { max_positions: 64, ..Default::default() });
    let (f16, f32_) = (onnx_ir::DataType::Float16 as i32, onnx_ir::DataType::Float as i32);
    // The float32 twin: every weight rounded to float16 and back.
    let mut twin = plain.clone();
    for t in &mut twin.graph_mut().initializer {
        if t.data_type() == f32_ {
            let a = onnx_ir::tensor_to_array::<f32>(t).unwrap().mapv(|v| half::f16::from_f32(v).to_f32());
            *t = onnx_ir::array_to_tensor(t.name(), &a);
        }
    }
    let half_form = |io16: bool| {
        let mut m = plain.clone();
        let g = m.graph_mut();
        for t in &mut g.initializer {
            if t.data_type() == f32_ {
                let a = onnx_ir::tensor_to_array::<f32>(t).unwrap().mapv(half::f16::from_f32);
                *t = onnx_ir::array_to_tensor(t.name(), &a);
            }
        }
        for n in &mut g.node {
            for a in &mut n.attribute {
                if a.name() == "to" && a.i == Some(i64::from(f32_)) {
                    a.i = Some(i64::from(f16));
                }
            }
        }
        let outputs: Vec<String> = g.output.iter().map(|o| o.name().to_owned()).collect();
        let mut tail = Vec::new();
        for o in &mut g.output {
            if let Some(type_proto::Value::TensorType(t)) = o.r#type.as_mut().and_then(|t| t.value.as_mut()) {
                t.elem_type = Some(f16);
            }
        }
        if !io16 {
            // float32 outputs: the float16 logits cast back at the end, as keep_io_types writes it.
            for name in &outputs {
                let inner = format!("{name}_fp16");
                for n in &mut g.node {
                    n.output.iter_mut().filter(|t| *t == name).for_each(|t| t.clone_from(&inner));
                }
                tail.push(
                    onnx_ir::node("Cast", &format!("{name}_cast"), &[&inner], &[name])
                        .with_attr(onnx_ir::attr_int("to", i64::from(f32_))),
                );
            }
            for o in &mut g.output {
                if let Some(type_proto::Value::TensorType(t)) = o.r#type.as_mut().and_then(|t| t.value.as_mut()) {
                    t.elem_type = Some(f32_);
                }
            }
        }
        g.node.extend(tail);
        g.value_info.clear();
        m
    };
    let mut runs = Vec::new();
    for (name, model) in [("twin", twin), ("fp16_io32", half_form(false)), ("fp16_io16", half_form(true))] {
        let path = dir.path().join(format!("{name}.onnx"));
        model.save(&path).unwrap();
        let out = dir.path().join(format!("out_{name}"));
        let cfg = config(path, out.clone(), "cpu");
        let r = qdq_pipeline::e2e(&cfg, &cfg.eval.session, &NoProgress).unwrap();
        let fp32 = squad(&r).fp32.clone();
        assert_eq!(fp32.score.missing_predictions, 0, "{name}: the float16 logits are read");
        let q = &r.quantization;
        let int8 = squad(&r).int8.clone();
        let predictions = std::fs::read_to_string(out.join("predictions_int8.json")).unwrap();
        runs.push((q.quantized_tensors, q.float_matmul_like.clone(), int8.score.f1, predictions));
    }
    assert!(runs[0].0 > 0 && runs[0].1.iter().all(|n| n.contains("/attention/self/MatMul")), "{:?}", runs[0].1);
    assert_eq!(runs[1], runs[0], "float16 with float32 outputs must quantize as its float32 twin");
    assert_eq!(runs[2], runs[0], "float16 with float16 outputs must quantize as its float32 twin");
}

/// Old exporters (`keep_initializers_as_inputs`, IR < 4) list every initializer as a graph input too. They are
/// constants all the same: the `cpu` layout stores the weights and embedding tables as int8, the float originals go
/// with their inputs, and no input the caller would have to feed appears.
#[test]
fn initializers_listed_as_graph_inputs_are_quantized_as_constants() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = build(&TinyBertConfig { max_positions: 64, ..Default::default() });
    let g = m.graph_mut();
    let real: Vec<String> = g.input.iter().map(|v| v.name().to_owned()).collect();
    let listed: Vec<_> = g
        .initializer
        .iter()
        .map(|t| onnx_ir::value_info(t.name(), onnx_ir::DataType::try_from(t.data_type()).unwrap(), None))
        .collect();
    g.input.extend(listed);
    let path = dir.path().join("inputs.onnx");
    m.save(&path).unwrap();
    let out = dir.path().join("out");
    let cfg = config(path.clone(), out.clone(), "cpu");
    let r = qdq_pipeline::e2e(&cfg, &cfg.eval.session, &NoProgress).unwrap();
    let q = onnx_ir::Model::load(out.join("model_qdq.onnx")).unwrap();
    let g = q.graph();
    for v in &g.input {
        let backed = onnx_ir::GraphExt::initializer(g, v.name()).is_some();
        assert!(real.contains(&v.name().to_owned()) || backed, "{} must be fed", v.name());
    }
    assert_eq!(r.quantization.embedding_tables, 3, "{:?}", r.quantization);
    assert!(r.quantization.float_matmul_like.iter().all(|n| n.contains("/attention/self/MatMul")));
    let (fp32, int8) = (squad(&r).fp32.clone(), squad(&r).int8.clone());
    assert!(
        int8.ran.model_bytes * 2 < fp32.ran.model_bytes,
        "{} against {}",
        int8.ran.model_bytes,
        fp32.ran.model_bytes
    );
}

#[test]
fn dynamic_mode_needs_no_calibration() {
    let dir = tempfile::tempdir().unwrap();
    let model_path = dir.path().join("tiny.onnx");
    build(&TinyBertConfig { max_positions: 64, ..Default::default() }).save(&model_path).unwrap();
    let out = dir.path().join("out");
    let mut cfg = config(model_path, out.clone(), "cpu");
    cfg.mode = Mode::Dynamic;
    // A calibration file that does not exist: dynamic mode must not read it.
    cfg.calibration_data = dir.path().join("absent.json");
    let results = qdq_pipeline::e2e(&cfg, &cfg.eval.session, &NoProgress).unwrap();
    assert!(results.calibration.is_none());
    assert_eq!(results.quantization.mode, Mode::Dynamic);
    assert!(results.quantization.quantized_tensors > 0 && results.quantization.embedding_tables > 0);
    assert!(!out.join("calibration.json").exists() && out.join("model_qdq.onnx").is_file());
    let (fp32, int8) = (squad(&results).fp32.clone(), squad(&results).int8.clone());
    assert_eq!(int8.score.questions, fp32.score.questions);
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("- mode: dynamic") && report.contains("dynamic mode quantizes"), "{report}");
    assert!(report.lines().any(|l| l.starts_with("| INT8 (dynamic) ")), "{report}");
}

/// Issue 16: input and output roles found in the graph, whatever the names (the Hugging Face names, NVIDIA's,
/// `input.N` / `output.N` as torch.onnx writes without names, shuffled input order), named ones win, and a model whose
/// roles cannot be told apart is one error listing what was found.
/// A QA head exported without its split: one output `[batch, seq, 2]` (start, end on the last axis) is found as both
/// logits, scored exactly like the split head with the same weights, and calibrated, quantized (each preset) and
/// evaluated end to end.
/// The ONNX Model Zoo's BERT-Squad as tf2onnx wrote it: `input_ids:0`-style names, a `unique_ids` input the model
/// only copies to an output of its own, the logits as `unstack:0` / `unstack:1` listed end first, and token inputs
/// declared `[batch, 64]`. It runs as exported (the pass-through input fed zeros, start and end told apart by the
/// Split they come from, features of 64 tokens padded to 64) and answers as the plain model run the same way.
#[test]
fn the_model_zoo_bert_squad_form_runs_as_exported() {
    use onnx_ir::{DataType, GraphExt as _, node, proto::tensor_shape_proto::dimension::Value};
    let dir = tempfile::tempdir().unwrap();
    let plain = build(&TinyBertConfig { max_positions: 64, ..Default::default() });
    let zoo_form = |batch: Option<i64>| {
        let mut m = plain.clone();
        let g = m.graph_mut();
        let names = [
            ("input_ids", "input_ids:0"),
            ("attention_mask", "input_mask:0"),
            ("token_type_ids", "segment_ids:0"),
            ("start_logits", "unstack:0"),
            ("end_logits", "unstack:1"),
        ];
        let rename = |t: &mut String| {
            if let Some((_, to)) = names.iter().find(|(from, _)| from == t) {
                *t = (*to).to_owned();
            }
        };
        for n in &mut g.node {
            n.input.iter_mut().for_each(rename);
            n.output.iter_mut().for_each(rename);
        }
        for v in g.input.iter_mut().chain(g.output.iter_mut()) {
            let mut name = v.name().to_owned();
            rename(&mut name);
            v.name = Some(name);
        }
        for v in &mut g.input {
            let dims = &mut v.r#type.as_mut().unwrap().value.as_mut().map(|t| match t {
                onnx_ir::proto::type_proto::Value::TensorType(t) => t.shape.as_mut().unwrap(),
                _ => unreachable!(),
            });
            let dims = &mut dims.as_mut().unwrap().dim;
            dims[1].value = Some(Value::DimValue(64));
            if let Some(b) = batch {
                dims[0].value = Some(Value::DimValue(b));
            }
        }
        g.input.insert(0, onnx_ir::value_info("unique_ids_raw_output___9:0", DataType::Int64, Some(&[Err("unk")])));
        g.push_node(node(
            "Identity",
            "unique_ids_graph_outputs_Identity__10",
            &["unique_ids_raw_output___9:0"],
            &["unique_ids:0"],
        ));
        g.output.swap(0, 1);
        g.output.push(onnx_ir::value_info("unique_ids:0", DataType::Int64, Some(&[Err("unk")])));
        assert!(g.validate().is_ok());
        m
    };
    let zoo = zoo_form(None);
    let io = qdq_pipeline::detect_io(&zoo, Path::new("zoo.onnx"), &IoNames::Auto).unwrap();
    assert_eq!((io.input_ids.as_str(), io.attention_mask.as_str()), ("input_ids:0", "input_mask:0"));
    assert_eq!((io.start_logits.as_str(), io.end_logits.as_str()), ("unstack:0", "unstack:1"), "start is Split part 0");

    let (zoo8, zoo1) = (zoo_form(Some(8)), zoo_form(Some(1)));
    let mut runs = Vec::new();
    for (name, model) in [("plain", &plain), ("zoo", &zoo), ("zoo8", &zoo8), ("zoo1", &zoo1)] {
        let path = dir.path().join(format!("{name}.onnx"));
        model.save(&path).unwrap();
        let out = dir.path().join(format!("out_{name}"));
        let mut cfg = config(path.clone(), out.clone(), "cpu");
        cfg.data = match name {
            "plain" => DataSettings { pad_to_max: true, ..data_settings() },
            _ => DataSettings { io_names: IoNames::Auto, seq_len: None, ..data_settings() },
        }
        .config(&path)
        .unwrap();
        assert_eq!((cfg.data.features.max_seq_len, cfg.data.padding), (64, squad::Padding::Fixed(64)), "{name}");
        let r = qdq_pipeline::e2e(&cfg, &cfg.eval.session, &NoProgress).unwrap();
        let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap();
        let int8 = squad(&r).int8.clone();
        assert_eq!(int8.score.missing_predictions, 0, "{name}");
        let ranges: serde_json::Value = serde_json::from_str(&read("calibration.json")).unwrap();
        runs.push((
            squad(&r).fp32.clone().score.f1,
            int8.score.f1,
            read("predictions_fp32.json"),
            read("predictions_int8.json"),
            ranges["ranges"].clone(),
            serde_json::from_str::<serde_json::Value>(&read("calib_state.json")).unwrap()["tensors"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(t, v)| (t.clone(), v["count"].clone()))
                .collect::<Vec<_>>(),
        ));
        let q = onnx_ir::Model::load(out.join("model_qdq.onnx")).unwrap();
        let outputs: Vec<&str> = q.graph().output.iter().map(|o| o.name()).collect();
        if name != "plain" {
            assert_eq!(outputs, ["unstack:1", "unstack:0", "unique_ids:0"], "the INT8 model keeps the model's outputs");
            assert_eq!(q.graph().input.len(), 4);
        }
    }
    assert_eq!(runs[0], runs[1], "the zoo form must answer as the plain model");
    // Declared batches of exactly 8 and 1: runs of that many features whatever the batch asked (3 to evaluate, 2 to
    // calibrate); the last batch of 8 is filled up with copies, left out of the statistics and the answers. The
    // calibration sees the same features (ranges equal up to the last bits batched GEMMs move) and FP32 answers alike.
    for run in &runs[2..] {
        assert_eq!((run.0, &run.2), (runs[0].0, &runs[0].2), "fixed batch: FP32 answers as the plain model");
        assert_eq!(run.5, runs[0].5, "the statistics count the features' values, not the filler rows'");
        let (a, b) = (run.4.as_object().unwrap(), runs[0].4.as_object().unwrap());
        assert_eq!(a.len(), b.len());
        for (t, r) in b {
            for end in ["min", "max"] {
                let (x, y) = (a[t][end].as_f64().unwrap(), r[end].as_f64().unwrap());
                assert!((x - y).abs() <= 1e-4 * y.abs().max(1e-3), "{t} {end}: {x} against {y}");
            }
        }
    }

    // What the shapes rule out is said before any work, naming the model.
    let zoo_path = dir.path().join("zoo.onnx");
    let e = DataSettings { seq_len: Some(48), ..data_settings() }.config(&zoo_path).unwrap_err().to_string();
    assert!(e.contains("zoo.onnx") && e.contains("exactly 64 tokens") && e.contains("--seq-len is 48"), "{e}");
    let mut odd = zoo_form(None);
    if let Some(onnx_ir::proto::type_proto::Value::TensorType(t)) =
        odd.graph_mut().input[2].r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.shape.as_mut().unwrap().dim[1].value = Some(Value::DimValue(32));
    }
    let odd_path = dir.path().join("odd.onnx");
    odd.save(&odd_path).unwrap();
    let e = data_settings().config(&odd_path).unwrap_err().to_string();
    assert!(e.contains("different sequence dimensions") && e.contains("`input_mask:0` 32"), "{e}");
    // debug compares features, not filler rows: the same count as with batches of 1.
    let debug = |name: &str| {
        qdq_pipeline::Job::run(
            &qdq_pipeline::DebugJob {
                model: dir.path().join(format!("{name}.onnx")),
                qdq: dir.path().join(format!("out_{name}")).join("model_qdq.onnx"),
                dataset: testdata("squad/tiny-v1.1.json"),
                held_out: 3,
                top: 5,
                out: None,
                sensitivity: false,
                confirm: 0,
                samples: 0,
                runtime: qdq_pipeline::RuntimeSettings::default(),
                data: DataSettings { io_names: IoNames::Auto, seq_len: None, ..data_settings() },
            },
            &NoProgress,
        )
        .unwrap()
    };
    let (d8, d1) = (debug("zoo8"), debug("zoo1"));
    assert_eq!((d8.features, d8.tensors.len()), (d1.features, d1.tensors.len()));
    let (k8, k1) =
        (d8.logits.of::<LogitAgreement>().unwrap().kl_start, d1.logits.of::<LogitAgreement>().unwrap().kl_start);
    assert!((k8 - k1).abs() <= 1e-3 * k1.max(1e-3), "{d8} {d1}");
    let batch8 = dir.path().join("batch8.onnx");
    zoo8.save(&batch8).unwrap();
    let eight = DataSettings { io_names: IoNames::Auto, seq_len: None, ..data_settings() }.config(&batch8).unwrap();
    let mut data = Corpus::load(&testdata("squad/tiny-v1.1.json"), &eight, &eight.tokenizer().unwrap(), 0).unwrap();
    data.fit_model(&zoo8, &batch8).unwrap();
    let batches: Vec<squad::Batch> = data.batches(3).unwrap().map(Result::unwrap).collect();
    let features: usize = batches.iter().map(squad::Batch::len).sum();
    assert!(batches.iter().all(|b| b.rows() == 8) && !features.is_multiple_of(8), "every run 8 rows, the last filled");
    let last = batches.last().unwrap();
    assert_eq!(last.input_ids.row(last.len()), last.input_ids.row(0), "filled with copies of its first feature");
    // Inputs from a file are not filled up: refused, naming the model's batch.
    let lines = dir.path().join("lines.txt");
    std::fs::write(&lines, "a question\n").unwrap();
    let text = qdq_pipeline::TextInputs::for_model(&zoo8, &batch8, &eight);
    let e = qdq_pipeline::InputSet::load(&lines, &zoo8, &text, 0).err().unwrap().to_string();
    assert!(e.contains("exactly 8") && e.contains("dynamic batch"), "{e}");
}

#[test]
fn a_stacked_qa_output_is_both_logits() {
    use onnx_ir::tiny_bert::Head;
    let dir = tempfile::tempdir().unwrap();
    let cfg = |head| TinyBertConfig { max_positions: 64, head, ..Default::default() };
    let (split, stacked) = (build(&cfg(Head::Qa)), build(&cfg(Head::QaStacked)));
    let io = qdq_pipeline::detect_io(&stacked, Path::new("stacked.onnx"), &IoNames::Auto).unwrap();
    assert_eq!((io.start_logits.as_str(), io.end_logits.as_str()), ("cls_squad_logits", "cls_squad_logits"));
    assert!(io.stacked_logits() && io.logit_outputs() == ["cls_squad_logits"]);
    assert!(qdq_pipeline::is_squad_model(&stacked, &IoNames::Auto));
    // Rank 2 with two columns is a classifier's logits, not a QA head.
    let classifier = build(&TinyBertConfig { head: Head::Classifier { labels: 2 }, ..Default::default() });
    assert!(!qdq_pipeline::is_squad_model(&classifier, &IoNames::Auto));

    let auto = DataSettings { io_names: IoNames::Auto, ..data_settings() }.config(Path::new("model.onnx")).unwrap();
    let tok = auto.tokenizer().unwrap();
    let mut f1 = Vec::new();
    for (name, model) in [("split", &split), ("stacked", &stacked)] {
        let path = dir.path().join(format!("{name}.onnx"));
        model.save(&path).unwrap();
        let mut data = Corpus::load(&testdata("squad/tiny-v1.1.json"), &auto, &tok, 0).unwrap();
        data.fit_model(model, &path).unwrap();
        let opts =
            EvalOptions { batch: 3, session: SessionConfig::default(), warmup: 0, workers: 1, at_default_float: true };
        let e =
            qdq_pipeline::evaluate(runtime::ModelSource::File(&path), name, &data, &opts, "eval", &NoProgress).unwrap();
        f1.push((e.score.f1, e.score.exact_match, e.predictions));
    }
    assert_eq!(f1[0], f1[1], "the stacked head must give the split head's answers");

    let path = dir.path().join("stacked.onnx");
    for policy in ["tensorrt", "cpu"] {
        let out = dir.path().join(format!("out_{policy}"));
        let mut cfg = config(path.clone(), out.clone(), policy);
        cfg.data = auto.clone();
        let results = qdq_pipeline::e2e(&cfg, &cfg.eval.session, &NoProgress).unwrap();
        let int8 = &squad(&results).int8;
        assert_eq!((int8.score.questions, int8.score.missing_predictions), (questions_in(&cfg.dataset), 0));
        let q = onnx_ir::Model::load(out.join("model_qdq.onnx")).unwrap();
        assert_eq!(q.graph().output.iter().map(|o| o.name()).collect::<Vec<_>>(), ["cls_squad_logits"], "{policy}");
    }
}

#[test]
fn io_roles_are_found_in_the_graph() {
    let path = Path::new("odd.onnx");
    let renamed_form = |names: [(&str, &str); 5], shuffle: bool, form: GraphForm| {
        let mut m = build(&TinyBertConfig { form, ..Default::default() });
        let g = m.graph_mut();
        for (from, to) in names {
            for n in &mut g.node {
                for i in n.input.iter_mut().chain(n.output.iter_mut()) {
                    if i == from {
                        *i = to.to_owned();
                    }
                }
            }
            for v in g.input.iter_mut().chain(g.output.iter_mut()) {
                if v.name() == from {
                    v.name = Some(to.to_owned());
                }
            }
        }
        if shuffle {
            g.input.reverse();
        }
        m
    };
    let renamed = |names, shuffle| renamed_form(names, shuffle, GraphForm::Hf);
    let hf = [
        ("input_ids", "input_ids"),
        ("attention_mask", "attention_mask"),
        ("token_type_ids", "token_type_ids"),
        ("start_logits", "start_logits"),
        ("end_logits", "end_logits"),
    ];
    let odd = [
        ("input_ids", "input.1"),
        ("attention_mask", "input.2"),
        ("token_type_ids", "input.3"),
        ("start_logits", "output.0"),
        ("end_logits", "output.1"),
    ];
    let nvidia = [
        ("input_ids", "input_ids"),
        ("attention_mask", "input_mask"),
        ("token_type_ids", "segment_ids"),
        ("start_logits", "output_start_logits"),
        ("end_logits", "output_end_logits"),
    ];
    let auto = IoNames::Auto;
    for (names, shuffle) in [(hf, false), (odd, true), (nvidia, true)] {
        let m = renamed(names, shuffle);
        let io = qdq_pipeline::detect_io(&m, path, &auto).unwrap();
        let got =
            [&io.input_ids, &io.attention_mask, io.token_type_ids.as_ref().unwrap(), &io.start_logits, &io.end_logits];
        let want: Vec<&str> = names.iter().map(|(_, to)| *to).collect();
        assert_eq!(got.map(String::as_str).to_vec(), want, "{names:?}");
        // And the whole pipeline runs on it.
        let cfg = data_config();
        let tok = cfg.tokenizer().unwrap();
        let mut d = Corpus::load(
            &testdata("squad/tiny-v1.1.json"),
            &DataSettings { io_names: IoNames::Auto, ..data_settings() }.config(Path::new("model.onnx")).unwrap(),
            &tok,
            2,
        )
        .unwrap();
        d.fit_model(&m, path).unwrap();
        assert_eq!(d.io().input_ids, want[0]);
    }
    // ONNX Runtime's fused form reads its inputs through int32 Casts into EmbedLayerNormalization, and its quantized
    // form into QEmbedLayerNormalization.
    for names in [hf, odd, nvidia] {
        let fused = renamed_form(names, true, GraphForm::OrtFused);
        let (quantized, _) = qdq::quantize_dynamic(&fused, &qdq::Policy::preset("cpu").unwrap()).unwrap();
        assert!(quantized.graph().node.iter().any(|n| n.op_type() == "QEmbedLayerNormalization"));
        for m in [fused, quantized] {
            let io = qdq_pipeline::detect_io(&m, path, &auto).unwrap();
            let got = [&io.input_ids, &io.attention_mask, io.token_type_ids.as_ref().unwrap()];
            assert_eq!(got.map(String::as_str).to_vec(), names[..3].iter().map(|(_, to)| *to).collect::<Vec<_>>());
        }
    }
    // TF BERT's lookups (the Model Zoo's BERT-Squad, any tf2onnx export of Google's BERT): the ids reshaped before the
    // word Gather, the segment ids through a OneHot of depth 2 times the token-type table.
    let tf_form = |mut m: onnx_ir::Model| {
        use onnx_ir::GraphExt as _;
        let g = m.graph_mut();
        let rows = |g: &onnx_ir::proto::GraphProto, t: &str| g.initializer(t).map_or(0, |t| t.dims[0]);
        let word = g.node.iter().position(|n| n.op_type() == "Gather" && rows(g, &n.input[0]) > 16).unwrap();
        let ids = g.node[word].input[1].clone();
        g.node[word].input[1] = "ids_flat".into();
        g.add_initializer(onnx_ir::tensor_from_vec::<i64>("keep_shape", &[2], vec![0, -1]).unwrap());
        g.node.insert(word, onnx_ir::node("Reshape", "tf_reshape", &[&ids, "keep_shape"], &["ids_flat"]));
        let at = g.node.iter().position(|n| n.op_type() == "Gather" && rows(g, &n.input[0]) == 2).unwrap();
        let seg = g.node.remove(at);
        g.add_initializer(onnx_ir::tensor_from_vec::<i64>("depth", &[], vec![2]).unwrap());
        g.add_initializer(onnx_ir::tensor_from_vec::<f32>("on_off", &[2], vec![0.0, 1.0]).unwrap());
        g.node.insert(at, onnx_ir::node("OneHot", "tf_onehot", &[&seg.input[1], "depth", "on_off"], &["one_hot"]));
        g.node.insert(at + 1, onnx_ir::node("MatMul", "tf_token_type", &["one_hot", &seg.input[0]], &[&seg.output[0]]));
        m
    };
    let cfg_of = |m: &onnx_ir::Model, name: &str| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{name}.onnx"));
        m.save(&path).unwrap();
        let out = dir.path().join("out");
        (dir, config(path, out, "cpu"))
    };
    let plain = build(&TinyBertConfig { max_positions: 64, ..Default::default() });
    let (_keep, cfg) = cfg_of(&plain, "plain");
    qdq_pipeline::e2e(&cfg, &cfg.eval.session, &NoProgress).unwrap();
    let answers = |cfg: &E2eConfig| std::fs::read_to_string(cfg.out.join("predictions_fp32.json")).unwrap();
    let reference = answers(&cfg);
    let m = tf_form(renamed(odd, true));
    let io = qdq_pipeline::detect_io(&m, path, &auto).unwrap();
    let got = [&io.input_ids, &io.attention_mask, io.token_type_ids.as_ref().unwrap()];
    assert_eq!(got.map(String::as_str), ["input.1", "input.2", "input.3"], "TF lookups");
    let mut tf_plain = tf_form(plain.clone());
    tf_plain.graph_mut().input.reverse();
    let (_keep, cfg) = cfg_of(&tf_plain, "tf");
    let run = qdq_pipeline::e2e(&cfg, &cfg.eval.session, &NoProgress).unwrap();
    assert_eq!(answers(&cfg), reference, "the TF form computes the same answers");
    assert!(squad(&run).int8.score.missing_predictions == 0);
    // Named roles win over what the graph says (here: start and end swapped on purpose).
    let m = renamed(odd, false);
    let swapped: IoNames = "start=output.1,end=output.0".parse().unwrap();
    let io = qdq_pipeline::detect_io(&m, path, &swapped).unwrap();
    assert_eq!(
        (io.start_logits.as_str(), io.end_logits.as_str(), io.input_ids.as_str()),
        ("output.1", "output.0", "input.1")
    );
    // A model without segment ids (DistilBERT-style): none found, and `segment=` says so explicitly.
    let no_tt = build(&TinyBertConfig { type_vocab: 0, ..Default::default() });
    assert_eq!(qdq_pipeline::detect_io(&no_tt, path, &auto).unwrap().token_type_ids, None);
    let none: IoNames = "segment=".parse().unwrap();
    assert_eq!(qdq_pipeline::detect_io(&no_tt, path, &none).unwrap().token_type_ids, None);
    // Two integer inputs the graph does not tell apart: one error naming them.
    let mut amb = renamed(odd, false);
    let g = amb.graph_mut();
    let extra = g.input.iter().find(|i| i.name() == "input.2").unwrap().clone();
    g.input.push(onnx_ir::proto::ValueInfoProto { name: Some("input.4".into()), ..extra });
    let e = qdq_pipeline::detect_io(&amb, path, &auto).unwrap_err().to_string();
    assert!(
        e.contains("attention mask") && e.contains("input.2") && e.contains("input.4") && e.contains("--io-names"),
        "{e}"
    );
}

/// Issue 16: a Hugging Face export folder as --model: its model.onnx (or only .onnx), and its tokenizer (tokenizer.json,
/// else vocab.txt) when no --vocab / --token is given; a folder with several models is an error naming them.
#[test]
fn a_model_directory_is_looked_into() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("bert-squad");
    std::fs::create_dir(&folder).unwrap();
    build(&TinyBertConfig::default()).save(folder.join("exported.onnx")).unwrap();
    std::fs::copy(testdata("squad/vocab.txt"), folder.join("vocab.txt")).unwrap();
    let model = qdq_pipeline::resolve_model(&folder).unwrap();
    assert_eq!(model, folder.join("exported.onnx"));
    let settings = DataSettings { vocab: None, ..data_settings() };
    let cfg = settings.config(&model).unwrap();
    assert_eq!((cfg.vocab.as_path(), cfg.tokenizer_json.as_deref()), (folder.join("vocab.txt").as_path(), None));
    // An explicit --vocab wins.
    let given = DataSettings { vocab: Some(testdata("squad/vocab.txt")), ..data_settings() }.config(&model).unwrap();
    assert_eq!(given.vocab, testdata("squad/vocab.txt"));
    // A tokenizer.json beside the model is preferred to vocab.txt.
    std::fs::write(folder.join("tokenizer.json"), "{}").unwrap();
    assert_eq!(settings.config(&model).unwrap().tokenizer_json, Some(folder.join("tokenizer.json")));
    // model.onnx wins over other .onnx files; without it, two models are ambiguous.
    build(&TinyBertConfig::default()).save(folder.join("other.onnx")).unwrap();
    let e = qdq_pipeline::resolve_model(&folder).unwrap_err().to_string();
    assert!(e.contains("bert-squad") && e.contains("exported.onnx") && e.contains("other.onnx"), "{e}");
    build(&TinyBertConfig::default()).save(folder.join("model.onnx")).unwrap();
    assert_eq!(qdq_pipeline::resolve_model(&folder).unwrap(), folder.join("model.onnx"));
    // A plain file is itself.
    assert_eq!(qdq_pipeline::resolve_model(&model).unwrap(), model);
}

/// Issue 14: `qdq debug` measures every activation pair against its float value and finds the one that does the
/// damage; a model compared with itself agrees exactly.
#[test]
fn debug_finds_the_tensor_that_does_the_damage() {
    let dir = tempfile::tempdir().unwrap();
    let model_path = dir.path().join("tiny.onnx");
    build(&TinyBertConfig { max_positions: 64, ..Default::default() }).save(&model_path).unwrap();
    let out = dir.path().join("out");
    let mut cfg = config(model_path.clone(), out.clone(), "tensorrt");
    cfg.no_eval = true;
    cfg.policy.softmax_range = qdq::SoftmaxRange::Shifted;
    qdq_pipeline::e2e(&cfg, &cfg.eval.session, &NoProgress).unwrap();
    let job = |qdq_model: PathBuf| qdq_pipeline::DebugJob {
        model: model_path.clone(),
        qdq: qdq_model,
        dataset: testdata("squad/tiny-v1.1.json"),
        held_out: 3,
        top: 5,
        out: Some(dir.path().join("debug")),
        sensitivity: true,
        confirm: 0,
        samples: 0,
        runtime: qdq_pipeline::RuntimeSettings::default(),
        data: data_settings(),
    };

    // Itself: no pairs, identical logits.
    let same = qdq_pipeline::Job::run(&job(model_path.clone()), &NoProgress).unwrap();
    assert!(same.tensors.is_empty() && same.features >= 3, "{same}");
    let l = same.logits.of::<LogitAgreement>().unwrap();
    assert_eq!((l.kl_start, l.argmax_start, l.max_abs_diff), (0.0, 1.0, 0.0));

    let qdq_path = out.join("model_qdq.onnx");
    let honest = qdq_pipeline::Job::run(&job(qdq_path.clone()), &NoProgress).unwrap();
    let int8 = onnx_ir::Model::load(&qdq_path).unwrap();
    let quantized: std::collections::BTreeSet<String> =
        qdq::activation_pairs(&int8).into_iter().map(|p| p.tensor).collect();
    assert_eq!(honest.tensors.len(), quantized.len());
    assert!(honest.tensors.iter().any(|t| t.tensor.contains("_shifted")), "the shifted Softmax pair is measured");
    let db: Vec<f64> = honest.tensors.iter().map(|t| t.own.sqnr_db()).collect();
    assert!(db.windows(2).all(|w| w[0] <= w[1]), "worst first: {db:?}");
    assert!(honest.tensors.iter().all(|t| t.own.sqnr_db() > 15.0 && t.total.values > 0), "{honest}");

    // The pair read by the QA head made 40x coarser (its scale is shared by its Q and DQ): nothing downstream is
    // quantized, so it becomes the worst tensor, by its own rounding.
    let victim = honest.tensors.iter().find(|t| t.readers.iter().any(|r| r.contains("qa_outputs"))).unwrap();
    let victim = victim.tensor.clone();
    let mut broken = int8.clone();
    let scale =
        broken.graph().node.iter().find(|n| n.op_type() == "QuantizeLinear" && n.input[0] == victim).unwrap().input[1]
            .clone();
    let t = onnx_ir::GraphExt::initializer(broken.graph(), &scale).unwrap().clone();
    let v: Vec<f32> = onnx_ir::tensor_to_array::<f32>(&t).unwrap().iter().map(|s| s * 40.0).collect();
    onnx_ir::GraphExt::add_initializer(broken.graph_mut(), onnx_ir::tensor_from_vec::<f32>(&scale, &[], v).unwrap());
    let broken_path = dir.path().join("broken_qdq.onnx");
    broken.save(&broken_path).unwrap();
    let found = qdq_pipeline::Job::run(&job(broken_path), &NoProgress).unwrap();
    assert_eq!(found.tensors[0].tensor, victim, "{found}");
    let before = honest.tensors.iter().find(|t| t.tensor == victim).unwrap();
    assert!(found.tensors[0].own.sqnr_db() < before.own.sqnr_db() - 20.0, "{found}");
    assert!(
        found.logits.of::<LogitAgreement>().unwrap().kl_start > honest.logits.of::<LogitAgreement>().unwrap().kl_start,
        "{found}"
    );
    // Sensitivity: keeping the broken pair's reader in float recovers (nearly) all of the damage, more than any other
    // node; every node reading quantized activations is measured.
    let readers: std::collections::BTreeSet<&str> =
        found.tensors.iter().flat_map(|t| &t.readers).map(|r| r.split('[').next().unwrap()).collect();
    assert_eq!(found.sensitivity.len(), readers.len());
    let best = &found.sensitivity[0];
    assert!(best.inputs.contains(&victim) && best.recovered > 0.8, "{found}");
    // The JSON lists every tensor, worst first.
    let json = qdq_pipeline::Report::json(&found);
    assert_eq!(json["schema"], "qdq.debug/1");
    assert_eq!(json["tensors"][0]["tensor"], victim.as_str());
    assert_eq!(json["tensors"].as_array().unwrap().len(), found.tensors.len());
    assert_eq!(json["sensitivity"][0]["node"], best.node.as_str());
    // --out: the same document, the text and the chart (one bar per pair).
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("debug/debug.json")).unwrap()).unwrap();
    assert_eq!(written, json);
    let svg = std::fs::read_to_string(dir.path().join("debug/sqnr.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.matches("<rect").count() > found.tensors.len(), "{svg}");
    assert!(std::fs::read_to_string(dir.path().join("debug/debug.md")).unwrap().contains("](sqnr.svg)"));
}

/// A token-classification head (`logits` `[batch, seq, labels]`, NER) is compared per token, on the tokens the
/// attention mask keeps: batched with padding, the rows compared are the same as one text at a time.
#[test]
fn a_token_classifier_is_compared_on_its_unmasked_tokens() {
    use onnx_ir::tiny_bert::Head;
    let dir = tempfile::tempdir().unwrap();
    let model = build(&TinyBertConfig { max_positions: 64, head: Head::Token { labels: 5 }, ..Default::default() });
    let model_path = dir.path().join("ner.onnx");
    model.save(&model_path).unwrap();
    assert!(!qdq_pipeline::is_squad_model(&model, &IoNames::Auto));
    let txt = dir.path().join("eval.txt");
    std::fs::write(
        &txt,
        "the cat\nwhich river flows through the city of denver\na game\nnormans came from normandy in france",
    )
    .unwrap();
    let run = |batch: usize| {
        let mut c = config(model_path.clone(), dir.path().join(format!("out_{batch}")), "cpu");
        (c.dataset, c.calibration_data) = (txt.clone(), txt.clone());
        c.eval.batch = batch;
        c.data = DataSettings { io_names: IoNames::Auto, ..data_settings() }.config(&model_path).unwrap();
        qdq_pipeline::e2e(&c, &c.eval.session, &NoProgress)
            .unwrap()
            .result
            .and_then(|r| r.classification().cloned())
            .unwrap()
    };
    let (one, padded) = (run(1), run(4));
    assert!(one.agreement.per_token && padded.agreement.per_token);
    assert_eq!(one.agreement.classes, 5);
    assert!(one.agreement.inputs > 4, "one row per token, {:?}", one.agreement);
    assert_eq!(padded.agreement.inputs, one.agreement.inputs, "padding must not be compared");
    assert!((padded.agreement.top1 - one.agreement.top1).abs() < 0.2, "{:?} vs {:?}", padded.agreement, one.agreement);
    let report = std::fs::read_to_string(dir.path().join("out_4/report.md")).unwrap();
    assert!(report.contains(&format!("{} tokens (padding left out)", one.agreement.inputs)), "{report}");
}

/// Issue 16: a BERT classifier (no start / end logits; one `logits` output) through the whole job: calibration from
/// an `.npz` file keyed by input name, evaluation on text (one text or a tab-separated pair per line) and on
/// labelled JSONL, INT8 compared with FP32 (top-1 agreement, KL, largest logit difference) and scored against the
/// labels. The labels are FP32's own answers, so FP32's accuracy must be 1 and INT8's its top-1 agreement.
#[test]
fn a_classifier_runs_end_to_end_with_npz_and_text_inputs() {
    use onnx_ir::tiny_bert::Head;
    let dir = tempfile::tempdir().unwrap();
    let model_path = dir.path().join("classifier.onnx");
    let cfg = TinyBertConfig { max_positions: 64, head: Head::Classifier { labels: 3 }, ..Default::default() };
    let model = build(&cfg);
    model.save(&model_path).unwrap();
    // Calibration: 6 rows of random token ids, as numpy would save them.
    let npz = dir.path().join("calibration.npz");
    {
        let ids = ndarray::Array2::from_shape_fn((6, 12), |(i, j)| ((i * 37 + j * 11) % 700 + 5) as i64);
        let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&npz).unwrap());
        w.add_array("input_ids", &ids).unwrap();
        w.add_array("attention_mask", &ndarray::Array2::<i64>::ones((6, 12))).unwrap();
        w.add_array("token_type_ids", &ndarray::Array2::<i64>::zeros((6, 12))).unwrap();
        w.finish().unwrap();
    }
    let texts = [
        "the cat sat on the mat",
        "which river flows through the city\tthe river is long",
        "a denver broncos game",
        "normans came from normandy in france",
        "what is the name of the stadium\tit is called levi",
    ];
    let txt = dir.path().join("eval.txt");
    std::fs::write(&txt, texts.join("\n")).unwrap();
    let run = |dataset: &Path, out: &str, policy: &str| {
        let mut c = config(model_path.clone(), dir.path().join(out), policy);
        (c.dataset, c.calibration_data) = (dataset.to_path_buf(), npz.clone());
        c.profile_ops = out == "out_text";
        qdq_pipeline::e2e(&c, &c.eval.session, &NoProgress).unwrap()
    };
    let r = run(&txt, "out_text", "cpu");
    assert_eq!(r.task, "classification");
    // --profile-ops on a classifier: both models on the 5 inputs, the INT8 one's MatMuls integer.
    let p = r.op_profile.as_ref().unwrap();
    assert_eq!((p.fp32.features, p.int8.features), (5, 5));
    let ran = |p: &qdq_pipeline::OpProfile, op: &str| p.ops.iter().any(|o| o.op == op);
    assert!(ran(&p.int8, "MatMulIntegerToFloat") && !ran(&p.fp32, "MatMulIntegerToFloat"), "{p:?}");
    assert!(r.result.as_ref().and_then(TaskResult::squad).is_none());
    let c = r.result.as_ref().and_then(TaskResult::classification).unwrap();
    assert_eq!((c.agreement.inputs, c.agreement.classes, c.agreement.output.as_str()), (5, 3, "logits"));
    assert!(c.agreement.max_abs_diff > 0.0 && c.agreement.mean_kl >= 0.0 && c.agreement.top1 >= 0.6, "{c:?}");
    assert_eq!((c.fp32.accuracy, c.int8.accuracy), (None, None), "no labels in plain text");
    let cal = r.calibration.as_ref().unwrap();
    assert_eq!((cal.questions, cal.features), (5, 5), "cal_num 5 of the 6 rows");
    assert_eq!(cal.also_evaluated, None, "inputs of two different files cannot be compared");
    assert!(
        r.quantization.integer_forms.iter().any(|l| l.contains("Gemm biases as int32") && l.ends_with(": 2")),
        "{:?}",
        r.quantization
    );
    let report = std::fs::read_to_string(dir.path().join("out_text/report.md")).unwrap();
    assert!(report.contains("top-1 = FP32") && report.contains("task: classification"), "{report}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out_text/results.json")).unwrap()).unwrap();
    assert_eq!(json["result"]["agreement"]["inputs"], 5);
    assert_eq!(json["result"]["task"], "classification", "results.json's result tagged by its task");

    // Labelled JSONL whose labels are FP32's argmax.
    let fp32_logits = {
        let set = c.agreement.inputs;
        let mut s =
            runtime::Session::from_bytes(&model.to_bytes().unwrap(), "fp32", &SessionConfig::default()).unwrap();
        let tok = data_config().tokenizer().unwrap();
        let roles = qdq_pipeline::detect_inputs(&model, &model_path, &IoNames::Auto).unwrap();
        let text = qdq_pipeline::TextInputs {
            roles: Ok(roles),
            tokenizer: Ok(tok),
            tokenizer_file: PathBuf::new(),
            max_len: 64,
            label_ids: None,
        };
        let inputs = qdq_pipeline::InputSet::load(&txt, &model, &text, 0).unwrap();
        assert_eq!(inputs.len(), set);
        (0..set)
            .map(|i| {
                let b = inputs.batch(i..i + 1);
                let feeds: Vec<(&str, ndarray::ArrayView2<i64>)> =
                    b.iter().map(|(n, a)| (n.as_str(), a.view())).collect();
                let out = s.run(&feeds, &["logits"]).unwrap().remove(0);
                out.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0
            })
            .collect::<Vec<_>>()
    };
    let jsonl = dir.path().join("eval.jsonl");
    let lines: Vec<String> = texts
        .iter()
        .zip(&fp32_logits)
        .map(|(t, l)| {
            let (a, b) = t.split_once('\t').map_or((*t, None), |(a, b)| (a, Some(b)));
            serde_json::json!({"text": a, "text_pair": b, "label": l}).to_string()
        })
        .collect();
    std::fs::write(&jsonl, lines.join("\n")).unwrap();
    let r = run(&jsonl, "out_jsonl", "tensorrt");
    let c = r.result.as_ref().and_then(TaskResult::classification).unwrap();
    assert_eq!(c.fp32.accuracy, Some(1.0), "labels are FP32's answers");
    assert_eq!(c.int8.accuracy, Some(c.agreement.top1));
    // The same as a GLUE-style TSV: a header naming the columns (here in another order, with an extra one).
    let tsv = dir.path().join("eval.tsv");
    let mut rows = vec!["idx\tlabel\tsentence1\tsentence2".to_owned()];
    for (k, (t, l)) in texts.iter().zip(&fp32_logits).enumerate() {
        let (a, b) = t.split_once('\t').unwrap_or((*t, ""));
        rows.push(format!("{k}\t{l}\t{a}\t{b}"));
    }
    std::fs::write(&tsv, rows.join("\n")).unwrap();
    let c = run(&tsv, "out_tsv", "cpu").result.and_then(|r| r.classification().cloned()).unwrap();
    assert_eq!((c.agreement.inputs, c.fp32.accuracy), (5, Some(1.0)));
    // Calibrated on the evaluated file itself (through another path to it): its first 4 rows are also evaluated.
    let mut same = config(model_path.clone(), dir.path().join("out_same"), "cpu");
    (same.dataset, same.calibration_data, same.cal_num) = (txt.clone(), dir.path().join(".").join("eval.txt"), Some(4));
    let r = qdq_pipeline::e2e(&same, &same.eval.session, &NoProgress).unwrap();
    assert_eq!(r.calibration.as_ref().unwrap().also_evaluated, Some(4));
    let report = std::fs::read_to_string(dir.path().join("out_same/report.md")).unwrap();
    assert!(report.contains("4 of the calibration inputs are also evaluated"), "{report}");

    // Bad inputs are one error naming the file: an .npz without a model input, a text line with a label missing.
    let bad = dir.path().join("bad.npz");
    {
        let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&bad).unwrap());
        w.add_array("input_ids", &ndarray::Array2::<i64>::ones((2, 4))).unwrap();
        w.finish().unwrap();
    }
    let mut c = config(model_path.clone(), dir.path().join("out_bad"), "cpu");
    (c.dataset, c.calibration_data) = (txt.clone(), bad.clone());
    let e = qdq_pipeline::e2e(&c, &c.eval.session, &NoProgress).unwrap_err().to_string();
    assert!(e.contains("bad.npz") && e.contains("attention_mask"), "{e}");
    std::fs::write(&jsonl, format!("{}\n{{\"text\": \"no label\"}}", lines[0])).unwrap();
    c.dataset = jsonl.clone();
    c.calibration_data = npz.clone();
    let e = qdq_pipeline::e2e(&c, &c.eval.session, &NoProgress).unwrap_err().to_string();
    assert!(e.contains("eval.jsonl") && e.contains("label"), "{e}");
}

/// Calibration runs the augmented model with ONNX Runtime's full graph optimisation: every exposed tensor, also one
/// inside a pattern ONNX Runtime fuses (LayerNorm's and GELU's pieces, attention scores), must keep the values the
/// unoptimised graph computes. And the pass reports where its time went.
#[test]
fn the_optimised_calibration_session_keeps_every_exposed_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data) = tiny_with_data(dir.path(), &data_config());
    let tensors: Vec<String> = model
        .graph()
        .node
        .iter()
        .flat_map(|n| n.output.iter())
        .filter(|o| o.starts_with("/bert/encoder/"))
        .cloned()
        .collect();
    assert!(tensors.iter().any(|t| t.contains("LayerNorm/Sqrt")) && tensors.iter().any(|t| t.contains("Erf")));
    let optimised = qdq_pipeline::calibration_session(&runtime::Ep::Cpu, &SessionConfig::default());
    assert_eq!(optimised.opt_level, runtime::OptLevel::All);
    let plain = SessionConfig { opt_level: runtime::OptLevel::Disable, ..SessionConfig::default() };
    let collect = calib::CollectOptions::default();
    let pass = |s: &SessionConfig| {
        let opts = CalibrateOptions { workers: Some(1), ..CalibrateOptions::new(2, vec![], 0, s.clone()) };
        qdq_pipeline::collect_stats(&model, &tensors, &data, &opts, collect.clone(), "test", &NoProgress).unwrap()
    };
    let (a, b) = (pass(&optimised), pass(&plain));
    for t in &tensors {
        let (ra, rb) = (a.state.tensor(t).unwrap().minmax.unwrap(), b.state.tensor(t).unwrap().minmax.unwrap());
        let tol = 1e-5 * (1.0 + ra.max.abs().max(ra.min.abs()));
        assert!((ra.min - rb.min).abs() <= tol && (ra.max - rb.max).abs() <= tol, "{t}: {ra:?} vs {rb:?}");
    }
    let times = a.times;
    assert!(times.inference_s > 0.0 && times.statistics_s > 0.0, "{times:?}");
    assert!(times.pass_s >= times.inference_s + times.statistics_s, "{times:?}");
}

/// An export older than opset 13 (TensorRT-era PyTorch exports use 11 or 12; the Model Zoo's BERT-Squad 10) holds
/// `Unsqueeze` / `Squeeze` axes and `Split` sizes as attributes, which opset 13 (needed by per-channel Q/DQ) reads
/// from inputs. The INT8 model is the same as the opset-14 original's, and ONNX Runtime loads and runs it.
#[test]
fn an_opset_11_export_is_carried_over_to_opset_13_and_quantized_as_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let plain = build(&TinyBertConfig { max_positions: 64, ..Default::default() });
    let mut old = plain.clone();
    let g = old.graph_mut();
    let moved = [("Unsqueeze", "axes"), ("Squeeze", "axes"), ("Split", "split")];
    let mut attrs = 0;
    for n in &mut g.node {
        if let Some((_, attr)) = moved.iter().find(|(op, _)| n.op_type() == *op)
            && n.input.len() > 1
        {
            let values =
                onnx_ir::tensor_to_array::<i64>(g.initializer.iter().find(|t| t.name() == n.input[1]).unwrap());
            n.attribute.push(onnx_ir::attr_ints(attr, &values.unwrap().iter().copied().collect::<Vec<_>>()));
            n.input.truncate(1);
            attrs += 1;
        }
        if n.op_type() == "Softmax" {
            // Opset 11 exports name the last axis of the attention scores by number.
            n.attribute.retain(|a| a.name() != "axis");
            n.attribute.push(onnx_ir::attr_int("axis", 3));
        }
    }
    assert!(attrs >= 4, "the tiny BERT reads axes from inputs in {attrs} nodes");
    onnx_ir::GraphExt::remove_unused_initializers(g);
    old.proto.opset_import.iter_mut().filter(|o| o.domain().is_empty()).for_each(|o| o.version = Some(11));
    let mut runs = Vec::new();
    for policy in ["cpu", "tensorrt"] {
        for (name, model) in [("opset14", &plain), ("opset11", &old)] {
            let path = dir.path().join(format!("{name}.onnx"));
            model.save(&path).unwrap();
            let out = dir.path().join(format!("out_{name}_{policy}"));
            let cfg = config(path, out.clone(), policy);
            let r = qdq_pipeline::e2e(&cfg, &cfg.eval.session, &NoProgress).unwrap();
            let q = &r.quantization;
            let int8 = squad(&r).int8.clone();
            let predictions = std::fs::read_to_string(out.join("predictions_int8.json")).unwrap();
            let written = onnx_ir::Model::load(out.join("model_qdq.onnx")).unwrap();
            assert_eq!(written.opset(""), Some(if name == "opset11" { 13 } else { 14 }), "{name}");
            assert!(
                written
                    .graph()
                    .node
                    .iter()
                    .filter(|n| moved.iter().any(|(op, _)| n.op_type() == *op))
                    .all(|n| { onnx_ir::get_attr(n, "axes").is_none() && onnx_ir::get_attr(n, "split").is_none() }),
                "{name} {policy}: opset 13 reads Unsqueeze / Squeeze axes and Split sizes from inputs"
            );
            runs.push((q.quantized_tensors, q.float_matmul_like.clone(), int8.score.f1, predictions));
        }
        let (old_run, new_run) = (runs.pop().unwrap(), runs.pop().unwrap());
        assert!(new_run.0 > 0);
        assert_eq!(old_run, new_run, "{policy}: the opset-11 export quantizes as the original");
    }
}

/// Files PyTorch writes (testdata/forms/make_torch_exports.py: tiny random BERT and ALBERT QA models from
/// transformers, each with both of PyTorch's exporters): every preset quantizes them as their graphs mean. The
/// attention probabilities behind the "safe softmax" `Where(IsNaN(P), 0, P)` of `scaled_dot_product_attention` get
/// the shifted pair, and ALBERT's shared layer weights (one initializer, or Identity nodes of one) stay one each.
#[test]
fn pytorch_exports_of_bert_and_albert_are_quantized_as_their_graphs_mean() {
    let dir = tempfile::tempdir().unwrap();
    // Initializers of at least 32 x 32 values: the weights and embedding tables, in whatever type they are stored.
    let weights =
        |m: &onnx_ir::Model| m.graph().initializer.iter().filter(|t| t.dims.iter().product::<i64>() >= 32 * 32).count();
    for file in ["torch_bert_dynamo", "torch_bert_legacy", "torch_albert_dynamo", "torch_albert_legacy"] {
        let path = testdata(&format!("forms/{file}.onnx"));
        let fp32 = onnx_ir::Model::load(&path).unwrap();
        let g = fp32.graph();
        let softmaxes = g.node.iter().filter(|n| n.op_type() == "Softmax").count();
        assert_eq!(softmaxes, 2, "{file}");
        assert!(g.node.iter().any(|n| n.op_type() == "IsNaN"), "{file}: the safe softmax is in the export");
        let stored = weights(&fp32);
        for policy in ["tensorrt", "cpu"] {
            let out = dir.path().join(format!("{file}_{policy}"));
            let cfg = config(path.clone(), out.clone(), policy);
            let r = qdq_pipeline::e2e(&cfg, &cfg.eval.session, &NoProgress).unwrap();
            let int8 = squad(&r).int8.clone();
            assert_eq!(int8.score.questions, squad(&r).fp32.clone().score.questions, "{file} {policy}");
            let q = onnx_ir::Model::load(out.join("model_qdq.onnx")).unwrap();
            assert_eq!(weights(&q), stored, "{file} {policy}: every weight written once");
            // Each Softmax's input and output declared with one shape (ORT may then compute it in place), whichever
            // exporter wrote the shapes on the way to it.
            let declared =
                |t: &str| q.graph().value_info.iter().find(|v| v.name() == t).and_then(onnx_ir::declared_dims);
            for n in q.graph().node.iter().filter(|n| n.op_type() == "Softmax") {
                let (x, y) = (declared(&n.input[0]), declared(&n.output[0]));
                assert!(x.as_ref().is_some_and(|d| d.len() == 4 && !d.contains(&Err(String::new()))), "{file} {x:?}");
                assert_eq!(x, y, "{file} {policy}: {}", n.name());
            }
            // Where P·V stays float, the dynamo export's attention contexts are divided in their value projections
            // (the legacy one puts a Reshape after P·V, ALBERT shares the projection: they keep the Mul).
            if policy == "cpu" && file == "torch_bert_dynamo" {
                let g = q.graph();
                let context_muls = g.node.iter().filter(|n| {
                    n.op_type() == "Mul"
                        && n.input.iter().any(|i| i.contains("smooth_inverse"))
                        && onnx_ir::GraphExt::producer_of(g, &n.input[0])
                            .is_some_and(|p| g.node[p].op_type() == "Reshape")
                });
                assert_eq!(context_muls.count(), 0, "{file}");
            }
            if policy == "tensorrt" {
                let shifted = qdq::coverage(&q).pairs.iter().filter(|p| p.tensor.ends_with("_shifted")).count();
                assert_eq!(shifted, softmaxes, "{file}: attention probabilities quantized shifted");
            }
        }
    }
}

/// Issue 61, a form the reference model does not have: the Hugging Face hub layout with a tokenizer.json and no
/// vocab.txt, three inputs (token type ids fed 0), the token states alone with CLS pooling in the folder's config,
/// and texts longer than the folder's max_seq_length (cut to it). Everything is found without a setting.
#[test]
fn a_hub_folder_with_tokenizer_json_and_three_inputs_embeds_with_its_pooling() {
    use onnx_ir::tiny_bert::Head;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("bge-like");
    std::fs::create_dir_all(root.join("onnx")).unwrap();
    std::fs::create_dir_all(root.join("1_Pooling")).unwrap();
    let cfg =
        TinyBertConfig { max_positions: 64, type_vocab: 2, head: Head::Hidden { pooler: false }, ..Default::default() };
    build(&cfg).save(root.join("onnx/model.onnx")).unwrap();
    tokenizer::Tokenizer::from_vocab(testdata("squad/vocab.txt"), true)
        .unwrap()
        .save_tokenizer_json(root.join("tokenizer.json"))
        .unwrap();
    std::fs::write(root.join("1_Pooling/config.json"), r#"{"pooling_mode_cls_token": true}"#).unwrap();
    std::fs::write(root.join("sentence_bert_config.json"), r#"{"max_seq_length": 20}"#).unwrap();
    let model = qdq_pipeline::resolve_model(&root).unwrap();
    assert_eq!(model, root.join("onnx/model.onnx"));
    let settings = DataSettings {
        vocab: None,
        seq_len: None,
        query_len: None,
        doc_stride: None,
        io_names: IoNames::Auto,
        ..data_settings()
    };
    let mut c = config(model.clone(), dir.path().join("out"), "cpu");
    c.data = settings.config(&model).unwrap();
    assert_eq!(
        (c.data.tokenizer_json.as_deref(), c.data.features.max_seq_len),
        (Some(root.join("tokenizer.json").as_path()), 20)
    );
    let r = qdq_pipeline::e2e(&c, &c.eval.session, &NoProgress).unwrap();
    assert_eq!(r.task, "embedding");
    let e = r.result.as_ref().and_then(TaskResult::embedding).unwrap().clone();
    assert_eq!((e.output.as_str(), e.token_states, e.pooling.as_deref()), ("last_hidden_state", true, Some("cls")));
    assert_eq!(e.seq_len, 20, "the paragraphs (up to 100 tokens) cut to max_seq_length");
    let r = e.retrieval.unwrap();
    assert_eq!((r.queries, r.documents, e.fidelity.texts), (9, 4, 13));
    assert!(e.fidelity.mean_cosine > 0.9, "{:?}", e.fidelity);
    // The run's folder is read as the model's: its tokenizer and pooling carried beside model_qdq.onnx.
    for f in ["tokenizer.json", "1_Pooling/config.json", "sentence_bert_config.json"] {
        assert!(dir.path().join("out").join(f).is_file(), "{f}");
    }
}

/// Eight rows of 12 tokens for a tiny classifier, written to `dir`/calibration.npz: the file and its ids, mask and
/// segment arrays.
fn classifier_inputs(dir: &Path) -> (PathBuf, [ndarray::Array2<i64>; 3]) {
    let ids = ndarray::Array2::from_shape_fn((8, 12), |(i, j)| ((i * 37 + j * 11) % 700 + 5) as i64);
    let mask = ndarray::Array2::<i64>::ones((8, 12));
    let types = ndarray::Array2::<i64>::zeros((8, 12));
    let npz = dir.join("calibration.npz");
    let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&npz).unwrap());
    w.add_array("input_ids", &ids).unwrap();
    w.add_array("attention_mask", &mask).unwrap();
    w.add_array("token_type_ids", &types).unwrap();
    w.finish().unwrap();
    (npz, [ids, mask, types])
}

/// Policy `output_bias = corrected` (every preset): the mean shift quantization leaves on a classifier's logits over
/// the calibration inputs is measured against FP32 and subtracted from the classifier's bias, so the quantized model's
/// mean shift there is gone (left: the int32 bias's rounding), and the shift recorded in the model is the one the
/// uncorrected (`kept`) model shows; results.json says what was done.
#[test]
fn a_classifiers_mean_output_shift_is_corrected_in_its_bias() {
    use onnx_ir::tiny_bert::Head;
    let dir = tempfile::tempdir().unwrap();
    let model_path = dir.path().join("classifier.onnx");
    let cfg = TinyBertConfig { max_positions: 64, head: Head::Classifier { labels: 3 }, seed: 7, ..Default::default() };
    build(&cfg).save(&model_path).unwrap();
    let (npz, [ids, mask, types]) = classifier_inputs(dir.path());
    let run = |output_bias: &str| {
        let mut c = config(model_path.clone(), dir.path().join(output_bias), "cpu");
        (c.dataset, c.calibration_data, c.cal_num, c.compare) = (npz.clone(), npz.clone(), Some(8), vec![]);
        c.policy.set("output_bias", output_bias).unwrap();
        qdq_pipeline::e2e(&c, &c.eval.session, &NoProgress).unwrap()
    };
    let logits = |path: &Path| {
        let mut s = runtime::Session::from_file(path, &SessionConfig::default()).unwrap();
        let feeds = [("input_ids", ids.view()), ("attention_mask", mask.view()), ("token_type_ids", types.view())];
        s.run(&feeds, &["logits"]).unwrap().remove(0)
    };
    let dir_path = |d: &str| dir.path().join(d).join("model_qdq.onnx");
    let mean_shift = |d: &str| -> Vec<f32> {
        let diff = logits(&dir_path(d)) - logits(&model_path);
        diff.mean_axis(ndarray::Axis(0)).unwrap().iter().copied().collect()
    };
    let (kept, corrected) = (run("kept"), run("corrected"));
    assert_eq!(kept.quantization.output_bias, None);
    let said = corrected.quantization.output_bias.as_deref().unwrap();
    assert!(said.contains("output `logits`") && said.contains("on the 8 calibration rows"), "{said}");
    assert!(said.contains("corrected in its bias classifier.bias"), "{said}");
    let before = mean_shift("kept");
    let after = mean_shift("corrected");
    let recorded: Vec<f32> = {
        let m = onnx_ir::Model::load(dir_path("corrected")).unwrap();
        let r = qdq::output_bias_record(&m).unwrap().strip_prefix("logits: ").unwrap().to_owned();
        r.split(' ').map(|v| -v.parse::<f32>().unwrap()).collect()
    };
    assert!(before.iter().any(|b| b.abs() > 1e-3), "the tiny classifier's quantization shifts its logits: {before:?}");
    for ((b, r), a) in before.iter().zip(&recorded).zip(&after) {
        assert!((b - r).abs() < 1e-4, "recorded {r} against {b} measured on the uncorrected model");
        assert!(a.abs() < 2e-4, "left after correction: {after:?} (was {before:?})");
    }
}

/// A classifier exported with its Softmax (one output of probabilities) is measured and corrected as its logits are:
/// the same agreement with FP32 and KL of the class probabilities as the same classifier without it (not the
/// softmax of probabilities), and its shift measured in log-probabilities and moved in the logits' bias, so that no
/// mean shift between classes is left.
#[test]
fn a_classifier_with_its_softmax_is_measured_and_corrected_as_its_logits() {
    use onnx_ir::tiny_bert::Head;
    use onnx_ir::{GraphExt as _, NodeExt as _};
    let dir = tempfile::tempdir().unwrap();
    let cfg = TinyBertConfig { max_positions: 64, head: Head::Classifier { labels: 3 }, seed: 7, ..Default::default() };
    let (logits_path, probs_path) = (dir.path().join("logits.onnx"), dir.path().join("probabilities.onnx"));
    build(&cfg).save(&logits_path).unwrap();
    let mut probs = build(&cfg);
    let g = probs.graph_mut();
    let last = g.producer_of("logits").unwrap();
    g.node[last].output[0] = "scores".into();
    g.push_node(
        onnx_ir::node("Softmax", "/softmax", &["scores"], &["logits"]).with_attr(onnx_ir::attr_int("axis", -1)),
    );
    probs.save(&probs_path).unwrap();
    let (npz, [ids, mask, types]) = classifier_inputs(dir.path());
    let run = |model: &Path, out: &str| {
        let mut c = config(model.to_path_buf(), dir.path().join(out), "cpu");
        (c.dataset, c.calibration_data, c.cal_num, c.compare) = (npz.clone(), npz.clone(), Some(8), vec![]);
        qdq_pipeline::e2e(&c, &c.eval.session, &NoProgress).unwrap()
    };
    let (a, b) = (run(&logits_path, "logits"), run(&probs_path, "probabilities"));
    let said = b.quantization.output_bias.as_deref().unwrap();
    assert!(said.contains("output `logits` (log-probabilities)") && said.contains("bias classifier.bias"), "{said}");
    let (a, b) = (
        a.result.and_then(|r| r.classification().cloned()).unwrap(),
        b.result.and_then(|r| r.classification().cloned()).unwrap(),
    );
    assert_eq!(a.agreement.top1, b.agreement.top1);
    let (ka, kb) = (a.agreement.mean_kl, b.agreement.mean_kl);
    assert!(
        ka > 0.0 && (ka - kb).abs() <= 0.05 * ka,
        "KL {kb} of the probabilities' model against {ka} of the logits'"
    );
    // No mean shift between classes left in the log-probabilities.
    let log_probs = |path: &Path| {
        let mut s = runtime::Session::from_file(path, &SessionConfig::default()).unwrap();
        let feeds = [("input_ids", ids.view()), ("attention_mask", mask.view()), ("token_type_ids", types.view())];
        s.run(&feeds, &["logits"]).unwrap().remove(0).mapv(f32::ln)
    };
    let shift = (log_probs(&dir.path().join("probabilities/model_qdq.onnx")) - log_probs(&probs_path))
        .mean_axis(ndarray::Axis(0))
        .unwrap();
    let spread = shift.iter().fold(f32::MIN, |m, v| m.max(*v)) - shift.iter().fold(f32::MAX, |m, v| m.min(*v));
    assert!(spread < 4e-4, "left after correction: {shift:?}");
}
