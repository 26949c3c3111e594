//! `qdq e2e` and `qdq eval` on the tiny BERT: the table, every output, progress, profiles, model forms.

use std::path::Path;
use std::process::Command;

use onnx_ir::tiny_bert::TinyBertConfig;

use crate::common::*;

#[test]
fn e2e_prints_the_table_and_writes_every_output() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let mut args = e2e_args(&f, "out", vocab.to_str().unwrap(), data.to_str().unwrap());
    args.extend(
        ["--calibrate-method", "entropy", "--num-bins", "1024", "--num_quantized_bins", "128"].map(String::from),
    );
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    // An aligned table (every line as wide as the header), which is also valid Markdown.
    let table: Vec<&str> = stdout.lines().take_while(|l| l.starts_with('|')).collect();
    assert_eq!(table.len(), 4, "{stdout}");
    assert!(table.iter().all(|l| l.chars().count() == table[0].chars().count()), "{stdout}");
    assert!(table[2].starts_with("| FP32 ") && table[3].starts_with("| INT8 (QDQ) | cpu |"), "{stdout}");
    // dF1 with its 95 % interval, which holds the difference; the notes under the table say what it means.
    assert!(table[0].contains("dF1 [95 %]"), "{stdout}");
    let column = table[0].split('|').position(|c| c.trim() == "dF1 [95 %]").unwrap();
    let cell = table[3].split('|').nth(column).unwrap();
    let numbers: Vec<f64> =
        cell.split(['[', ',', ']']).filter_map(|n| n.trim().trim_start_matches('+').parse().ok()).collect();
    assert!(numbers.len() == 3 && numbers[1] <= numbers[0] && numbers[0] <= numbers[2], "{stdout}");
    assert!(stdout.contains("over these 9 questions"), "{stdout}");
    let out = f.dir.path().join("out");
    for file in [
        "model_qdq.onnx",
        "calibration.json",
        "calibration.flatbuffers",
        "calibration.cache",
        "predictions_fp32.json",
        "predictions_int8.json",
        "results.json",
        "report.md",
    ] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    let results: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["calibration"]["method"], "entropy");
    assert_eq!(results["calibration"]["questions"], 4);
    assert_eq!((results["task"].as_str(), results["result"]["task"].as_str()), (Some("squad"), Some("squad")));
    assert_eq!(results["result"]["int8"]["questions"], 9);
    let f1 = &results["result"]["int8_vs_fp32"]["f1"];
    assert_eq!(f1["questions"], 9);
    let (low, delta, high) = (f1["low"].as_f64().unwrap(), f1["delta"].as_f64().unwrap(), f1["high"].as_f64().unwrap());
    assert!(low <= delta && delta <= high && (delta - numbers[0]).abs() < 0.006, "{f1}");
    let dropped = results["result"]["fp32"]["f1"].as_f64().unwrap() - results["result"]["int8"]["f1"].as_f64().unwrap();
    assert!((dropped + delta).abs() < 1e-6, "{f1} vs {dropped}");
    // The share of answers identical to FP32's (issue 61), as the two predictions files say, with its interval.
    let read = |f: &str| -> serde_json::Map<String, serde_json::Value> {
        serde_json::from_slice(&std::fs::read(out.join(f)).unwrap()).unwrap()
    };
    let (fp32, int8) = (read("predictions_fp32.json"), read("predictions_int8.json"));
    let same = fp32.iter().filter(|(id, a)| int8.get(*id) == Some(*a)).count();
    let s = &results["result"]["int8_vs_fp32"]["same_answers"];
    assert_eq!((s["share"].as_f64().unwrap(), s["questions"].as_u64()), (same as f64 / 9.0, Some(9)), "{s}");
    assert!(s["low"].as_f64().unwrap() <= s["share"].as_f64().unwrap() && s["share"].as_f64() <= s["high"].as_f64());
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("answers = FP32 [95 %]") && report.contains(&format!("{:.2} %", 100.0 * same as f64 / 9.0))
    );
    // report.md is Markdown a reader renders: its tables hold the table rows and nothing else.
    assert_markdown_tables(&std::fs::read_to_string(out.join("report.md")).unwrap());
    // No --policy: the preset made for the EP (--ep defaults to cpu), and the run says so.
    assert_eq!(results["quantization"]["policy"], "cpu");
    assert_eq!(results["quantization"]["policy_chosen_by"], "--ep cpu");
    // The command line as given, for reproduction.
    let line = results["provenance"]["command_line"].as_array().unwrap();
    assert!(line[1] == "e2e" && line.iter().any(|a| a == "entropy"), "{line:?}");

    // inspect reads the QDQ model back.
    let o = qdq(&["inspect", out.join("model_qdq.onnx").to_str().unwrap(), "--pairs"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("MatMul") && text.contains("DequantizeLinear") && text.contains("start_logits"), "{text}");
    // The default (cpu) model's MatMuls are integer kernels reading QuantizeLinear outputs: counted as such, and the
    // ranges those QuantizeLinear carry listed (it showed no quantized input and no range).
    let o = qdq(&["inspect", out.join("model_qdq.onnx").to_str().unwrap(), "--json"]);
    let i: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let kernels = &i["coverage"]["by_op"]["MatMulIntegerToFloat"];
    assert!(kernels["integer"].as_u64().unwrap() > 0 && kernels["integer"] == kernels["nodes"], "{i:#}");
    let quantizers = i["coverage"]["quantizers"].as_array().unwrap();
    assert_eq!(quantizers.len(), results["quantization"]["quantize_nodes"].as_u64().unwrap() as usize, "{i:#}");
    for q in quantizers {
        let r = &i["ranges"][q["tensor"].as_str().unwrap()];
        assert!(r[0].as_f64().unwrap() < r[1].as_f64().unwrap(), "{q}: {r}");
    }
    assert!(
        String::from_utf8_lossy(&qdq(&["inspect", out.join("model_qdq.onnx").to_str().unwrap()]).stdout)
            .contains("Integer kernels: ")
    );
}

/// `--profile-ops` runs each model under ONNX Runtime's profiler and reports its kernel time per operator type: the
/// INT8 model's MatMuls run as integer kernels, the FP32 model's as float ones, and every node ONNX Runtime ran is
/// counted once; without the flag nothing is profiled.
#[test]
fn profile_ops_shows_which_kernels_each_model_ran() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let (vocab, data) = (vocab.to_str().unwrap(), data.to_str().unwrap());
    let mut args = e2e_args(&f, "prof", vocab, data);
    args.extend(["--profile-ops", "--json"].map(String::from));
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ops = |model: &str| -> Vec<(String, u64, f64)> {
        let p = &r["op_profile"][model];
        assert_eq!(p["passes"], 3, "{p}");
        assert!(p["features"].as_u64().unwrap() >= 1, "{p}");
        let kernels = p["kernel_ms_per_feature"].as_f64().unwrap();
        assert!(kernels > 0.0 && kernels <= p["run_ms_per_feature"].as_f64().unwrap(), "{p}");
        let ops: Vec<_> = p["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["op"].as_str().unwrap().to_owned(),
                    o["nodes"].as_u64().unwrap(),
                    o["ms_per_feature"].as_f64().unwrap(),
                )
            })
            .collect();
        let sum: f64 = ops.iter().map(|o| o.2).sum();
        assert!((sum - kernels).abs() <= 1e-9 * kernels.max(1.0), "{p}");
        ops
    };
    let (fp32, int8) = (ops("fp32"), ops("int8"));
    let has = |ops: &[(String, u64, f64)], op: &str| ops.iter().any(|o| o.0 == op && o.1 > 0);
    assert!(has(&int8, "MatMulIntegerToFloat") && has(&int8, "QuantizeLinear"), "{int8:?}");
    assert!(!has(&fp32, "MatMulIntegerToFloat") && (has(&fp32, "MatMul") || has(&fp32, "FusedMatMul")), "{fp32:?}");
    let err = stderr(&o);
    assert!(err.contains("Where the time goes") && err.contains("MatMulIntegerToFloat"), "{err}");
    let report = std::fs::read_to_string(f.dir.path().join("prof/report.md")).unwrap();
    assert!(report.contains("## Where the time goes") && report.contains("| all kernels"), "{report}");

    // eval: one model, in its JSON and under its line.
    let q = f.dir.path().join("prof/model_qdq.onnx");
    let eval = ["eval", "--model", q.to_str().unwrap(), "--vocab", vocab, "--dataset", data];
    let o = qdq(&[&eval[..], &TINY_SHAPE, &["--profile-ops"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("Where the time goes") && text.contains("| MatMulIntegerToFloat"), "{text}");
    let o = qdq(&[&eval[..], &TINY_SHAPE, &["--json"]].concat());
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(e["op_profile"].is_null(), "{e}");
}

/// Off a terminal (here: a pipe) long stages log plain progress lines (done / total, rate, time left) in the same
/// log format as every other message, instead of hidden bars; notes are log lines too, not `qdq:` lines.
#[test]
fn progress_in_a_pipe_is_plain_log_lines() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let args = e2e_args(&f, "piped", vocab.to_str().unwrap(), data.to_str().unwrap());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = Command::new(env!("CARGO_BIN_EXE_qdq")).args(&refs).env("QDQ_PROGRESS_SECS", "0").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let progress: Vec<&str> = err.lines().filter(|l| l.contains(" questions (") && l.contains("%), ")).collect();
    assert!(!progress.is_empty(), "no progress line:\n{err}");
    // Before the first question is done there is no rate to tell the time left from: the line says so far.
    let told = |l: &&str| l.contains("/s, about") || l.contains(" 0/") && l.contains(" s so far");
    assert!(progress.iter().all(|l| l.contains(" INFO ") && told(l)), "{progress:?}");
    assert!(err.lines().any(|l| l.contains(" INFO ") && l.contains("questions in")), "{err}");
    assert!(err.lines().all(|l| !l.starts_with("qdq:")), "{err}");
}

/// A model whose large weights are external data (as every export over 2 GiB must be): `eval` hands ONNX Runtime the
/// file itself (qdq never reads those tensors) and answers exactly as the same model inline; `quantize` reads them and
/// writes the same model as from the inline file.
#[test]
fn a_model_with_external_data_evaluates_and_quantizes_as_the_same_model_inline() {
    // A 10,000-row word embedding (1.3 MB) is over the 1 MiB up to which graph-only loading reads external tensors.
    let f = fixture(TinyBertConfig { max_positions: 64, vocab_size: 10_000, ..Default::default() });
    let ext = f.dir.path().join("ext.onnx");
    let opts = onnx_ir::SaveOptions { external_data: Some(onnx_ir::ExternalDataOptions::new("ext.onnx.data")) };
    onnx_ir::Model::load(&f.model).unwrap().save_with(&ext, &opts).unwrap();
    assert!(onnx_ir::Model::load_graph_only(&ext).unwrap().unread_external_data() > 0);
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    // --force: the 800-token test vocabulary indexes the large table (which is there for its size).
    let small = ["--seq-len", "64", "--query-len", "16", "--doc-stride", "24", "--force"];
    let mut answers = vec![];
    for m in [&f.model, &ext] {
        let preds = m.with_extension("predictions.json");
        let args = ["eval", "--model", m.to_str().unwrap(), "--vocab", vocab.to_str().unwrap(), "--dataset"];
        let more = [data.to_str().unwrap(), "--out", preds.to_str().unwrap()];
        let o = qdq(&[&args[..], &more, &small].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        answers.push(std::fs::read_to_string(&preds).unwrap());
        let q = m.with_extension("dynamic.onnx");
        let o = qdq(&["quantize", "--model", m.to_str().unwrap(), "--mode", "dynamic", "-o", q.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    assert_eq!(answers[0], answers[1]);
    let read = |p: &Path| std::fs::read(p).unwrap();
    assert_eq!(read(&f.model.with_extension("dynamic.onnx")), read(&ext.with_extension("dynamic.onnx")));
}

/// A model that embeds 64 positions, run without any window flag: the sequence length follows its position table and
/// the query length and window step shrink with it (each logged), where 384 / 64 / 128 would not fit; a query length
/// that does not fit is one error naming both flags.
#[test]
fn window_defaults_follow_a_short_position_table() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let base = ["eval", "--model", f.model.to_str().unwrap(), "--vocab", vocab.to_str().unwrap()];
    let base = [&base[..], &["--dataset", data.to_str().unwrap()]].concat();
    let o = qdq(&[&base[..], &["--json"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("the model embeds 64 positions") && err.contains("features of 64 tokens"), "{err}");
    assert!(err.contains("queries of at most 32 tokens") && err.contains("a step of 14 tokens"), "{err}");
    let defaults: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // The same features as the flags spelled out give.
    let spelled = qdq(&[&base[..], &["--json", "--seq-len", "64", "--query-len", "32", "--doc-stride", "14"]].concat());
    assert!(spelled.status.success(), "{}", stderr(&spelled));
    let spelled: serde_json::Value = serde_json::from_slice(&spelled.stdout).unwrap();
    let features = |v: &serde_json::Value| v["latency"]["features"].as_u64().unwrap();
    assert_eq!(features(&defaults), features(&spelled));
    assert!(features(&defaults) > defaults["questions"].as_u64().unwrap(), "overlapping windows: more features");
    assert_eq!(defaults["f1"].as_f64().unwrap(), spelled["f1"].as_f64().unwrap());
    let e = one_error(&qdq(&[&base[..], &["--query-len", "64"]].concat()));
    assert!(
        e.contains("--seq-len 64 leaves no room for --query-len 64") && e.contains("--query-len 60 or less"),
        "{e}"
    );
    let e = one_error(&qdq(&[&base[..], &["--seq-len", "4"]].concat()));
    assert!(e.contains("--seq-len 4 is too short"), "{e}");
    // The shortest sequence that holds a query and a context token runs with the defaults.
    let o = qdq(&[&base[..], &["--seq-len", "5"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Issue 50: the models qdq writes carry their tokenizer, so the second command every user types, `qdq eval` of the
/// output, needs no --vocab (it failed on squad/vocab.txt) and scores as the run did, a cased run's included;
/// `quantize` carries the files beside its input model.
#[test]
fn output_models_carry_their_tokenizer() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let (vocab, data) = (vocab.to_str().unwrap(), data.to_str().unwrap());
    for (out, cased) in [("out", false), ("cased", true)] {
        let mut args = e2e_args(&f, out, vocab, data);
        if cased {
            args.push("--cased".into());
        }
        let o = run(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let dir = f.dir.path().join(out);
        assert_eq!(std::fs::read(dir.join("vocab.txt")).unwrap(), std::fs::read(vocab).unwrap());
        assert_eq!(dir.join("tokenizer_config.json").is_file(), cased);
        let results: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
        let model = dir.join("model_qdq.onnx");
        let args = ["eval", "--model", model.to_str().unwrap(), "--dataset", data, "--json"];
        let o = qdq(&[&args[..], &TINY_SHAPE].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(e["f1"], results["result"]["int8"]["f1"], "{out}");
        assert!(stderr(&o).contains(&format!("{out}/vocab.txt (no --vocab / --token given)")), "{}", stderr(&o));
    }
    // quantize: the files beside the model read go beside the model written.
    std::fs::copy(vocab, f.dir.path().join("vocab.txt")).unwrap();
    let q = f.dir.path().join("elsewhere/q.onnx");
    std::fs::create_dir(f.dir.path().join("elsewhere")).unwrap();
    let o = qdq(&["quantize", "--model", f.model.to_str().unwrap(), "--mode", "dynamic", "-o", q.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(f.dir.path().join("elsewhere/vocab.txt").is_file());
}

/// Issue 50: `--ep tensorrt --allow-fallback` here (no TensorRT) runs on the CPU at the CPU's graph optimisation
/// level, not TensorRT's "disable" (which left INT8 at a tenth of FP32's speed: no integer kernels); the fallback is
/// a warning and the table says where the models ran.
#[test]
fn a_fallback_to_cpu_runs_at_cpus_optimisation_level_and_says_so() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let mut args = e2e_args(&f, "out", vocab.to_str().unwrap(), data.to_str().unwrap());
    args.extend(["--ep", "tensorrt", "--allow-fallback", "--save-load"].map(String::from));
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let int8 = stdout.lines().find(|l| l.starts_with("| INT8")).unwrap();
    assert!(int8.contains("| cpu (fallback from tensorrt) |"), "{stdout}");
    let err = stderr(&o);
    assert!(err.lines().any(|l| l.contains("WARN") && l.contains("CPU's graph optimisation level (all")), "{err}");
    let out = f.dir.path().join("out");
    let results: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(
        (results["result"]["int8"]["ep"].as_str(), results["result"]["int8"]["fallback_from"].as_str()),
        (Some("cpu"), Some("tensorrt"))
    );
    // The model ONNX Runtime ran: its Q/DQ MatMuls fused into integer kernels, which only graph optimisation does.
    let ran = onnx_ir::Model::load(out.join("model_int8_optimized.onnx")).unwrap();
    let integer =
        ran.graph().node.iter().filter(|n| n.op_type() == "MatMulIntegerToFloat" || n.op_type() == "QLinearMatMul");
    assert!(integer.count() > 0, "no integer kernels in the model ONNX Runtime ran");
}

/// Issue 51: `--precision int8,fp8` quantizes both from one calibration and evaluates them side by side: an FP8 row
/// with its interval, results.json `compared_precisions`, a float8 model at opset 19 (ranges from fp8-mse, weights as
/// float8 initializers) that
/// `qdq eval` runs too; `--precision fp8` alone writes no INT8 tables; the cpu preset and one-model commands refuse
/// what they cannot do, each in one line.
#[test]
fn int8_and_fp8_side_by_side_from_one_calibration() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let (vocab, data) = (vocab.to_str().unwrap(), data.to_str().unwrap());
    let mut args = e2e_args(&f, "both", vocab, data);
    // On MIGraphX, absent here: the fallback to CPU runs the float8 model at the basic level too.
    args.extend(["--ep", "migraphx", "--allow-fallback", "--precision", "int8,fp8", "--json"].map(String::from));
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let fp8 = &r["result"]["compared_precisions"][0];
    assert_eq!((fp8["precision"].as_str(), fp8["method"].as_str()), (Some("fp8-e4m3fnuz"), Some("fp8-mse")));
    assert!(fp8["vs_fp32"]["f1"]["low"].is_number() && fp8["vs_fp32"]["f1"]["high"].is_number(), "{fp8}");
    assert_eq!(r["quantization"]["precision"], "int8");
    let dir = f.dir.path().join("both");
    let q = onnx_ir::Model::load(dir.join("model_qdq_fp8.onnx")).unwrap();
    assert_eq!(q.opset(""), Some(19));
    let cov = qdq::coverage(&q);
    assert_eq!(cov.precisions(), format!("{} e4m3fnuz", r["compared_precisions"][0]["pairs"]));
    let weights = q.graph().initializer.iter().filter(|t| t.data_type() == onnx_ir::DataType::Float8e4m3fnuz as i32);
    assert!(weights.filter(|t| t.dims.len() == 2).count() >= 12, "the weights as float8 initializers");
    assert!(dir.join("calibration_fp8-mse.json").is_file() && dir.join("predictions_fp8.json").is_file());
    let table = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(table.lines().any(|l| l.starts_with("| FP8 E4M3FNUZ (QDQ, fp8-mse)")), "{table}");
    let m = dir.join("model_qdq_fp8.onnx");
    let o = qdq(&[&["eval", "--model", m.to_str().unwrap(), "--dataset", data, "--json"][..], &TINY_SHAPE].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(e["f1"], fp8["result"]["f1"]);

    // FP8 alone: the main model is float8 (E4M3FN for tensorrt); no INT8 tables.
    let mut args = e2e_args(&f, "fp8", vocab, data);
    args.extend(["--policy", "tensorrt", "--precision", "fp8", "--json"].map(String::from));
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["quantization"]["precision"], "fp8-e4m3fn");
    let dir = f.dir.path().join("fp8");
    assert!(!dir.join("calibration.flatbuffers").exists() && !dir.join("calibration.cache").exists());
    assert!(stderr(&o).contains("FP8 scales live in the model"), "{}", stderr(&o));

    // What cannot be done is said before any work.
    let mut args = e2e_args(&f, "cpu", vocab, data);
    args.extend(["--policy", "cpu", "--precision", "fp8"].map(String::from));
    let o = run(&args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--precision fp8 is for --policy tensorrt"), "{}", stderr(&o));
    assert!(!f.dir.path().join("cpu").exists());
    let q = f.dir.path().join("q.onnx");
    let o = qdq(&[
        "quantize",
        "--model",
        f.model.to_str().unwrap(),
        "--ranges",
        "x.json",
        "--precision",
        "int8,fp8",
        "-o",
        q.to_str().unwrap(),
    ]);
    assert!(stderr(&o).contains("this command makes one model"), "{}", stderr(&o));
}

/// Whether this CPU has bf16 matrix instructions (AMX or AVX512-BF16): OpenVINO's own default precision is bf16 there.
fn runtime_bf16() -> bool {
    let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    flags.split_whitespace().any(|f| f == "avx512_bf16" || f == "amx_bf16")
}

/// Issue 49: `--ep cpu,openvino` evaluates the same FP32 and quantized models on both EPs (OpenVINO from its plugin,
/// which `cargo xtask test` provisions) in one table, each EP's rows naming it (OpenVINO with the precision its float
/// parts ran in), and sets each model on OpenVINO against the same model on the CPU EP: paired dF1, answers, logits.
/// `qdq eval` takes the list too; commands that run on one EP say so for a list.
#[test]
fn one_run_evaluates_the_same_models_on_cpu_and_openvino() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let mut args = e2e_args(&f, "both", vocab.to_str().unwrap(), data.to_str().unwrap());
    args.extend(["--ep", "cpu,openvino"].map(String::from));
    let o = run(&args);
    // OpenVINO's plugin (provisioned by `cargo xtask test`) does not serve every CPU: on one it offers no device for,
    // nothing here can run, and the run says so in one error.
    if !o.status.success() && stderr(&o).contains("registered but offers no CPU device") {
        eprintln!("skipped on this machine: {}", one_error(&o));
        return;
    }
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    // The table's rows by their first two cells (model, EP).
    let rows: Vec<(String, String)> = stdout
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells.len() > 3).then(|| (cells[1].to_owned(), cells[2].to_owned()))
        })
        .collect();
    let has = |model: &str, ep: &str| rows.iter().any(|(m, e)| m == model && e == ep);
    for (model, ep) in
        [("FP32", "cpu"), ("INT8 (QDQ)", "cpu"), ("FP32", "openvino f32"), ("INT8 (QDQ)", "openvino f32")]
    {
        assert!(has(model, ep), "no row {model} on {ep}:\n{stdout}");
    }
    assert!(stdout.contains("On openvino f32 against cpu, the same models (paired)"), "{stdout}");
    // Issue 75: where OpenVINO's own default precision is bf16 (a CPU with bf16 instructions), both models again at
    // it, against FP32's answers on OpenVINO at f32; nowhere else.
    let bf16 = runtime_bf16();
    assert_eq!(has("FP32", "openvino bf16") && has("INT8 (QDQ)", "openvino bf16"), bf16, "{stdout}");
    let dir = f.dir.path().join("both");
    assert!(
        dir.join("predictions_fp32_openvino.json").is_file() && dir.join("predictions_int8_openvino.json").is_file()
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
    let ov = &r["result"]["other_eps"][0];
    assert_eq!((ov["ep"].as_str(), ov["first_ep"].as_str()), (Some("openvino"), Some("cpu")), "{ov}");
    assert_eq!((ov["int8"]["ep"].as_str(), ov["int8"]["ep_precision"].as_str()), (Some("openvino"), Some("f32")));
    assert!(ov["int8_vs_first"]["f1"]["low"].is_number() && ov["int8_vs_fp32"]["f1"]["high"].is_number(), "{ov}");
    assert!(ov["int8_logits"]["features"].as_u64().unwrap() > 0, "{ov}");
    // The same FP32 model in f32 on both EPs: the same logits up to float rounding.
    assert!(ov["fp32_logits"]["max_abs"].as_f64().unwrap() < 1e-3, "{ov}");
    let default = &ov["default_float"];
    assert_eq!(default["precision"].as_str(), bf16.then_some("bf16"), "{ov}");
    if bf16 {
        assert!(dir.join("predictions_fp32_openvino_bf16.json").is_file());
        for model in ["fp32", "int8"] {
            let m = &default[model];
            assert_eq!(m["ep_precision"], "bf16", "{default}");
            assert!((0.0..=1.0).contains(&m["vs_fp32"]["same_answers"]["share"].as_f64().unwrap()), "{default}");
        }
    }
    assert!((0.0..=1.0).contains(&ov["int8_same_answers"].as_f64().unwrap()), "{ov}");

    // qdq eval of the quantized model on both: the same answers and F1 as e2e's evaluations on each EP.
    let q = dir.join("model_qdq.onnx");
    let (q, data_s) = (q.to_str().unwrap(), data.to_str().unwrap());
    let o = qdq(
        &[&["eval", "--model", q, "--dataset", data_s, "--ep", "cpu,openvino", "--json"][..], &TINY_SHAPE].concat()
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (e["f1"].as_f64(), e["other_eps"][0]["f1"].as_f64()),
        (r["result"]["int8"]["f1"].as_f64(), ov["int8"]["f1"].as_f64())
    );
    assert_eq!(e["other_eps"][0]["ep_precision"], "f32");
    assert_eq!(e["other_eps"][0]["vs_first"]["f1"]["delta"], ov["int8_vs_first"]["f1"]["delta"]);

    let model = f.model.to_str().unwrap();
    let o = qdq(&["tune", "--model", model, "--dataset", data.to_str().unwrap(), "--ep", "cpu,openvino"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(one_error(&o).contains("tune runs on one execution provider"), "{}", stderr(&o));
}

/// Issues 68 and 75: the `openvino` preset's model is plain Q/DQ (no contrib op) with every quantized MatMul reading
/// DequantizeLinear outputs on both inputs: the constant-weight ones (their inputs uint8 with a zero point) and the
/// attention scores `Q·Kᵀ` (Q and K int8 with zero point 0), the probabilities and `P·V` in float. On the CPU EP (the
/// same Q/DQ arithmetic) its answers stay close to FP32's; where OpenVINO's plugin serves this CPU, the same model's
/// logits there stay as close to the CPU EP's as FP32's do, with every speed-up also against OpenVINO's own default
/// precision when that is not f32.
#[test]
fn the_openvino_preset_is_plain_qdq_with_integer_attention_scores() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let mut args = e2e_args(&f, "ov", vocab.to_str().unwrap(), data.to_str().unwrap());
    args.extend(["--policy", "openvino"].map(String::from));
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let dir = f.dir.path().join("ov");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
    assert_eq!(r["quantization"]["policy"], "openvino", "{}", r["quantization"]);
    let d = r["result"]["int8_vs_fp32"]["f1"]["delta"].as_f64().unwrap();
    assert!(d.abs() <= 10.0, "dF1 {d} on the tiny model");
    use onnx_ir::GraphExt as _;
    let m = onnx_ir::Model::load(dir.join("model_qdq.onnx")).unwrap();
    let g = m.graph();
    assert!(g.node.iter().all(|n| n.domain().is_empty()), "a contrib op in the openvino layout");
    let producer = |t: &str| g.node.iter().find(|n| n.output.iter().any(|o| o == t));
    let dequantized = |t: &str| producer(t).is_some_and(|p| p.op_type() == "DequantizeLinear");
    // The pair's type and zero points.
    let zero_point = |t: &str| -> (i32, Vec<i32>) {
        let dq = producer(t).unwrap();
        let zp = g.initializer(&dq.input[2]).unwrap();
        let values = match zp.data_type() {
            d if d == onnx_ir::DataType::Int8 as i32 => onnx_ir::tensor_to_array::<i8>(zp).unwrap().map(|&z| z.into()),
            _ => onnx_ir::tensor_to_array::<u8>(zp).unwrap().map(|&z| z.into()),
        };
        (zp.data_type(), values.iter().copied().collect())
    };
    let (int8, uint8) = (onnx_ir::DataType::Int8 as i32, onnx_ir::DataType::Uint8 as i32);
    let (mut scores, mut contexts, mut zero_points) = (0, 0, vec![]);
    for n in g.node.iter().filter(|n| n.op_type() == "MatMul") {
        if n.name().ends_with("attention/self/MatMul_1") {
            contexts += 1;
            assert!(!dequantized(&n.input[0]) && !dequantized(&n.input[1]), "{}: P·V in float", n.name());
            continue;
        }
        assert!(dequantized(&n.input[0]) && dequantized(&n.input[1]), "{}: not fed by DequantizeLinear", n.name());
        if n.name().ends_with("attention/self/MatMul") {
            // OpenVINO's int8 attention: both operands signed, without a zero point.
            scores += 1;
            for slot in [0, 1] {
                assert_eq!(zero_point(&n.input[slot]), (int8, vec![0]), "{}: operand {slot}", n.name());
            }
        } else {
            // A fully connected layer's input: uint8 with a zero point (OpenVINO's native u8 x s8 GEMMs).
            let (kind, z) = zero_point(&n.input[0]);
            assert_eq!(kind, uint8, "{}: a uint8 pair", n.name());
            zero_points.extend(z);
        }
    }
    assert!(scores > 0 && scores == contexts, "{scores} scores, {contexts} contexts");
    assert!(zero_points.iter().any(|&z| z != 0), "activations with a zero point: {zero_points:?}");
    // The kind of CPU the layout was made for (this machine's: no OpenVINO device named one), in the model and in
    // results.json.
    let kind = r["quantization"]["target_cpu"].as_str().unwrap_or_default().to_owned();
    assert!(["amx", "avx512-bf16", "vnni", "avx2"].contains(&kind.as_str()), "{}", r["quantization"]);
    let recorded = m.proto.metadata_props.iter().find(|e| e.key() == "qdq.target_cpu").map(|e| e.value());
    assert_eq!(recorded, Some(kind.as_str()));

    // The same model on OpenVINO, where its plugin serves this CPU.
    let mut both = e2e_args(&f, "both", vocab.to_str().unwrap(), data.to_str().unwrap());
    both.extend(["--ep", "cpu,openvino", "--policy", "openvino"].map(String::from));
    let o = run(&both);
    if !o.status.success() && stderr(&o).contains("registered but offers no CPU device") {
        eprintln!("OpenVINO part skipped on this machine: {}", one_error(&o));
        return;
    }
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(f.dir.path().join("both/results.json")).unwrap()).unwrap();
    let ov = &r["result"]["other_eps"][0];
    let (fp32, int8) =
        (ov["fp32_logits"]["max_abs"].as_f64().unwrap(), ov["int8_logits"]["mean_abs"].as_f64().unwrap());
    assert!(fp32 < 1e-3 && int8 < 0.05, "OpenVINO against the CPU EP: FP32 {fp32}, INT8 mean {int8}: {ov}");
    // On a CPU with bf16 matrix instructions OpenVINO's own default is bf16: the speed-up is also measured there.
    let bf16 = runtime_bf16();
    let default = &ov["speedup_default_precision"];
    assert_eq!(default["precision"].as_str(), bf16.then_some("bf16"), "{ov}");
    assert!(!bf16 || default["speedup"]["median"].as_f64().is_some_and(|m| m > 0.0), "{ov}");

    // Issue 75: laid out for an AMX CPU named on the command line (this one may be another): the tiny BERT's heads
    // contract fewer than 64 elements, so its attention scores stay float; its FP32 is also compared at bf16, the
    // float AMX users run, in the table's rows and results.json, whatever this CPU has (bf16 without its instructions
    // is emulated: slow, the same numbers).
    let mut amx = e2e_args(&f, "amx", vocab.to_str().unwrap(), data.to_str().unwrap());
    amx.extend(["--ep", "openvino", "--ov-cpu", "amx"].map(String::from));
    let o = run(&amx);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(f.dir.path().join("amx/results.json")).unwrap()).unwrap();
    assert_eq!(r["quantization"]["target_cpu"], "amx", "{}", r["quantization"]);
    let q = onnx_ir::Model::load(f.dir.path().join("amx/model_qdq.onnx")).unwrap();
    let g = q.graph();
    let scores = g.node.iter().filter(|n| n.name().ends_with("attention/self/MatMul")).collect::<Vec<_>>();
    let dequantized =
        |t: &str| g.node.iter().any(|p| p.output.iter().any(|o| o == t) && p.op_type() == "DequantizeLinear");
    assert!(!scores.is_empty() && scores.iter().all(|n| !dequantized(&n.input[0])), "scores float on AMX");
    let d = &r["result"]["default_float"];
    assert_eq!((d["precision"].as_str(), d["instructions"].as_str()), (Some("bf16"), Some("AMX")), "{d}");
    assert_eq!((d["fp32"]["ep_precision"].as_str(), d["int8"]["ep_precision"].as_str()), (Some("bf16"), Some("bf16")));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("At bf16 (AMX), openvino's own default float precision here"), "{stdout}");

    // `qdq eval --baseline` on OpenVINO compares both at that precision too, against the baseline's answers at f32.
    let (qm, model) = (f.dir.path().join("amx/model_qdq.onnx"), f.model.to_str().unwrap());
    let args = ["eval", "--model", qm.to_str().unwrap(), "--baseline", model, "--vocab", vocab.to_str().unwrap()];
    let more = ["--dataset", data.to_str().unwrap(), "--ep", "openvino", "--ov-cpu", "amx", "--json"];
    let o = qdq(&[&args[..], &more, &TINY_SHAPE].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(e["default_float"]["precision"], "bf16", "{e}");
    assert!(e["default_float"]["fp32"]["vs_fp32"]["f1"]["delta"].is_number(), "{e}");
    // Left out on request.
    let o = qdq(&[&args[..], &more, &TINY_SHAPE, &["--no-default-float"]].concat());
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(e.get("default_float").is_none(), "{e}");
}
