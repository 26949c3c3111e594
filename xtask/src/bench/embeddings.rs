//! `cargo xtask bench embeddings`: qdq's INT8 sentence-embedding model against the two INT8 models users make with
//! sentence-transformers' export helpers: ONNX Runtime's dynamic INT8 as `export_dynamic_quantized_onnx_model` writes
//! it (optimum's avx512_vnni configuration) and NNCF's static INT8 of the same calibration texts (its ONNX backend,
//! `ModelType.TRANSFORMER`), both made in the bench venv (xtask/python/embed_bench.py). Every model is scored by
//! `qdq eval --baseline <FP32>` on the SQuAD dev set as a retrieval task (each question retrieving its own paragraph)
//! on the CPU EP and on OpenVINO's plugin EP: retained nDCG@10 and MRR@10 with their paired intervals, cosine to
//! FP32's embeddings, the top neighbour kept; and timed by one Python harness per EP at one text and a batch of 32 at
//! the model's length (cpu_int8.py / ov_bench.py `time`: blocks in turn, each round starting one model later).
//! Every embedding model of the assets (or --embedding-model), each with its own targets and verdicts, in
//! out/bench/embeddings.{json,md}.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::bench::measure::wait_quiet;
use crate::bench::report::{Target, targets_table, write};
use crate::bench::rows::{ShapeRow, Times, shape_rows};
use crate::bench::venv::{ensure_venv, git_head};
use crate::e2e::{Assets, build_qdq, ort_library};
use crate::flags::{BenchData, EmbeddingModels, TimingArgs};
use crate::qdq_json::{Embedding, EmbeddingEval};
use crate::setup::LIBRARY_ENV;
use crate::workspace::{root, run_cmd, write_atomic};

/// The targets for qdq's INT8 against FP32 on the CPU EP (whole dev set).
const MAX_LOSS: f64 = 0.1;
const MIN_MEAN_COSINE: f64 = 0.999;
const MIN_P1_COSINE: f64 = 0.997;
/// No text left behind (issue 76): the smallest cosine of any text.
const MIN_COSINE: f64 = 0.99;
const MIN_TOP1: f64 = 0.97;
/// Speed-ups over FP32 at one text and at a batch of 32 (the model's length).
const MIN_SPEEDUP: [(usize, f64); 2] = [(1, 1.3), (32, 1.6)];

/// One quantized model on one EP, against FP32 on that EP.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ModelRow {
    name: String,
    what: String,
    ep: String,
    path: PathBuf,
    /// `qdq eval --baseline`'s comparison; absent when the model could not run there (`not_scored` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    eval: Option<Embedding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    not_scored: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct EpShapes {
    ep: String,
    shapes: Vec<ShapeRow>,
    /// Why the EP could not be timed (its plugin offers no device on this CPU, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    not_timed: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct EmbeddingsReport {
    command: String,
    git: Option<String>,
    machine: crate::qdq_json::Machine,
    model: PathBuf,
    /// Queries (0: every dev question), calibration questions (with their paragraphs), tokens per text.
    samples: usize,
    cal_num: usize,
    seq_len: usize,
    rounds: usize,
    runs: usize,
    threads: usize,
    models: Vec<ModelRow>,
    speed: Vec<EpShapes>,
    targets: Vec<Target>,
}

/// The models compared: name, what it is, file.
type Models = Vec<(&'static str, String, PathBuf)>;

/// Every model of one run, each with its own rows, speeds and targets.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct EmbeddingsBench {
    command: String,
    git: Option<String>,
    models: Vec<EmbeddingsReport>,
}

/// What every model's run shares.
struct Run<'a> {
    which: &'a EmbeddingModels,
    timing: &'a TimingArgs,
    vs: &'a BenchData,
    dataset: &'a Path,
    calibration: &'a Path,
    lib: PathBuf,
    py: PathBuf,
    qdq: PathBuf,
    plugin: Option<PathBuf>,
}

pub fn embeddings(bench: crate::flags::EmbeddingsBench) -> Result<()> {
    let crate::flags::EmbeddingsBench { args, models: which, timing, data: vs, download } = bench;
    let timing = &timing;
    let mut download = download.resolved();
    download.set.get_or_insert_with(|| "minilm".to_owned());
    let assets = Assets::download(&download)?;
    let mut folders = match &which.embedding_model {
        Some(m) => vec![m.clone()],
        None => assets.embedding_models.clone(),
    };
    folders.extend(which.base_model.clone());
    if folders.is_empty() {
        bail!("no sentence-embedding model: give --embedding-model DIR (a sentence-transformers folder)");
    }
    let (dataset, calibration) =
        (vs.dataset.clone().unwrap_or(assets.dataset), vs.calibration_data.clone().unwrap_or(assets.calibration));
    let (lib, py, qdq) = (ort_library()?, ensure_venv()?, build_qdq()?);
    crate::bench::venv::ensure_nncf(&py)?;
    let plugin = if args.no_openvino { None } else { Some(crate::setup::openvino(false)?) };
    let run =
        Run { which: &which, timing, vs: &vs, dataset: &dataset, calibration: &calibration, lib, py, qdq, plugin };
    let mut models = vec![];
    for folder in &folders {
        models.push(one_model(&run, folder)?);
    }
    let bench = EmbeddingsBench {
        command: format!("cargo xtask {}", std::env::args().skip(1).collect::<Vec<_>>().join(" ")),
        git: git_head(),
        models,
    };
    let mut md = String::from("# Sentence embeddings: qdq against ONNX Runtime's dynamic INT8 and NNCF\n\n");
    md.push_str(&bench.models.iter().map(render).collect::<Vec<_>>().join("\n"));
    write(&bench, &md, &vs.out, "embeddings")
}

/// One embedding model: qdq's INT8 and the peers', scored against FP32 on each EP and timed at 1x and 32x its length.
fn one_model(run: &Run<'_>, model: &Path) -> Result<EmbeddingsReport> {
    let timing = run.timing;
    let name = model.file_name().map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned());
    let work = run.vs.out.join("embeddings").join(&name);
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let seq_len = max_seq_length(model).unwrap_or(128);
    let qdq_cmd = |sub: &str| {
        let mut c = Command::new(&run.qdq);
        c.arg(sub).env(LIBRARY_ENV, &run.lib);
        c
    };

    eprintln!(
        "xtask: {name}: qdq's INT8 (qdq e2e --no-eval, {} calibration questions and their paragraphs)",
        run.which.embedding_cal_num
    );
    let qdq_dir = work.join("qdq");
    let cal_num = run.which.embedding_cal_num.to_string();
    let mut e2e = qdq_cmd("e2e");
    e2e.arg("--model").arg(model).arg("--calibration-data").arg(run.calibration).args(["--cal-num", &cal_num]);
    run_cmd(e2e.args(["--no-eval", "--out"]).arg(&qdq_dir))?;
    let models = peers(&run.py, model, run.calibration, run.which.embedding_cal_num, seq_len, &work, &qdq_dir)?;

    let rows = score_all(run, &models, model, seq_len)?;

    let mut timed: Models = vec![("fp32", "FP32".into(), onnx_in(model))];
    timed.extend(models.iter().cloned());
    let speed = time_models(&run.py, &timed, timing, seq_len, run.plugin.as_deref(), &work, run.vs.wait)?;
    let made: crate::qdq_json::Results = crate::qdq_json::read(&qdq_dir.join("results.json"))?;
    let report = EmbeddingsReport {
        command: format!("cargo xtask {}", std::env::args().skip(1).collect::<Vec<_>>().join(" ")),
        git: git_head(),
        machine: made.provenance.machine,
        model: model.to_path_buf(),
        samples: run.which.embedding_samples,
        cal_num: run.which.embedding_cal_num,
        seq_len,
        rounds: timing.rounds,
        runs: timing.runs,
        threads: timing.threads,
        models: rows,
        speed,
        targets: vec![],
    };
    Ok(EmbeddingsReport { targets: targets(&report), ..report })
}

/// Every one of `models` (of the FP32 folder `model`) scored against FP32 on each EP (`qdq eval --baseline`), a
/// failure kept as the row's reason.
fn score_all(
    run: &Run<'_>,
    models: &[(&'static str, String, PathBuf)],
    model: &Path,
    seq_len: usize,
) -> Result<Vec<ModelRow>> {
    let mut rows = vec![];
    for ep in std::iter::once("cpu").chain(run.plugin.as_ref().map(|_| "openvino")) {
        for (name, what, path) in models {
            eprintln!("xtask: qdq eval {name} against FP32 on {ep} ({} queries; 0 = all)", run.which.embedding_samples);
            let mut eval = Command::new(&run.qdq);
            eval.arg("eval").env(LIBRARY_ENV, &run.lib);
            if let Some(p) = run.plugin.as_ref().filter(|_| ep == "openvino") {
                eval.args(["--ep", "openvino", "--ep-plugin"]).arg(p);
            }
            let (eval, not_scored) = match score(eval, path, model, (run.dataset, run.which.embedding_samples), seq_len)
            {
                Ok(e) => (Some(e), None),
                Err(e) => (None, Some(short_reason(&format!("{e:#}")))),
            };
            rows.push(ModelRow {
                name: (*name).into(),
                what: what.clone(),
                ep: ep.into(),
                path: path.clone(),
                eval,
                not_scored,
            });
        }
    }
    Ok(rows)
}

/// The ONNX file of a sentence-transformers folder (`model.onnx`) or of the hub layout (`onnx/model.onnx`).
pub(crate) fn onnx_in(folder: &Path) -> PathBuf {
    let flat = folder.join("model.onnx");
    if flat.is_file() { flat } else { folder.join("onnx/model.onnx") }
}

/// What a failed run's last line says, in a table cell: the sentence that names the cause.
pub(crate) fn short_reason(error: &str) -> String {
    let last = error.lines().rfind(|l| !l.trim().is_empty()).unwrap_or_default();
    let sentence = last.split(". ").find(|s| s.contains("offers no")).unwrap_or(last);
    sentence.chars().take(240).collect()
}

/// `max_seq_length` of the folder's sentence_bert_config.json.
pub(crate) fn max_seq_length(folder: &Path) -> Option<usize> {
    let text = std::fs::read_to_string(folder.join("sentence_bert_config.json")).ok()?;
    serde_json::from_str::<serde_json::Value>(&text).ok()?.get("max_seq_length")?.as_u64().map(|n| n as usize)
}

/// qdq's model and the peers made in the bench venv: ONNX Runtime's dynamic INT8 and NNCF's of the same texts.
fn peers(
    py: &Path,
    model: &Path,
    calibration: &Path,
    cal_num: usize,
    seq_len: usize,
    work: &Path,
    qdq: &Path,
) -> Result<Models> {
    let script = root().join("xtask/python/embed_bench.py");
    let fp32 = onnx_in(model);
    eprintln!("xtask: ONNX Runtime's dynamic INT8 (sentence-transformers' avx512_vnni export)");
    let dynamic = work.join("ort_dynamic.onnx");
    run_cmd(Command::new(py).arg(&script).args(["dynamic", "--model"]).arg(&fp32).arg("--out").arg(&dynamic))?;
    eprintln!("xtask: NNCF's INT8 from the same calibration texts");
    let texts = work.join("calibration_texts.json");
    write_atomic(&texts, &serde_json::to_vec(&calibration_ids(calibration, model, cal_num, seq_len)?)?)?;
    let nncf = work.join("nncf_int8.onnx");
    let mut c = Command::new(py);
    c.arg(&script).args(["nncf", "--model"]).arg(&fp32).arg("--texts").arg(&texts).arg("--out").arg(&nncf);
    run_cmd(&mut c)?;
    Ok(vec![
        ("qdq", "qdq INT8 (default: `cpu` preset)".into(), qdq.join("model_qdq.onnx")),
        ("ort-dynamic", "ONNX Runtime dynamic INT8 (sentence-transformers' avx512_vnni export)".into(), dynamic),
        ("nncf", format!("NNCF INT8 ({}, ModelType.TRANSFORMER)", crate::bench::venv::NNCF), nncf),
    ])
}

/// The tokenizer qdq reads from a model's folder, as `qdq eval`'s flag and file: its tokenizer.json (`--token`; its
/// post-processor frames the texts, `<s> text </s>` for MPNet) when it has one, else its vocab.txt (`--vocab`).
pub(crate) fn folder_tokenizer(folder: &Path) -> (&'static str, PathBuf) {
    match folder.join("tokenizer.json") {
        json if json.is_file() => ("--token", json),
        _ => ("--vocab", folder.join("vocab.txt")),
    }
}

/// The tokenizer of [`folder_tokenizer`], loaded.
pub(crate) fn load_folder_tokenizer(folder: &Path) -> Result<tokenizer::Tokenizer> {
    Ok(match folder_tokenizer(folder) {
        ("--token", json) => tokenizer::Tokenizer::from_tokenizer_json(json)?,
        (_, vocab) => tokenizer::Tokenizer::from_vocab(vocab, true)?,
    })
}

/// The calibration texts qdq takes from a SQuAD file (each paragraph, then its questions, until `cal_num`
/// questions) as token ids framed as the model's tokenizer in `folder` frames one text (`[CLS] text [SEP]`,
/// `<s> text </s>`), at most `seq_len` of them.
pub(crate) fn calibration_ids(
    calibration: &Path,
    folder: &Path,
    cal_num: usize,
    seq_len: usize,
) -> Result<Vec<Vec<i64>>> {
    let data = squad_metrics::load_dataset(calibration)?;
    let tok = load_folder_tokenizer(folder)?;
    let framing = tok.framing();
    let (mut texts, mut questions) = (vec![], 0);
    for p in data.data.iter().flat_map(|a| &a.paragraphs) {
        if questions >= cal_num {
            break;
        }
        let asked: Vec<&str> = p.qas.iter().take(cal_num - questions).map(|q| q.question.as_str()).collect();
        questions += asked.len();
        texts.push(p.context.as_str());
        texts.extend(asked);
    }
    texts
        .iter()
        .map(|t| {
            let mut ids: Vec<i64> = vec![i64::from(framing.cls)];
            ids.extend(tok.tokenize(t, "text")?.ids.iter().take(seq_len.saturating_sub(2)).map(|&i| i64::from(i)));
            ids.push(i64::from(framing.sep));
            Ok(ids)
        })
        .collect()
}

/// `qdq eval --json` of `model` against the FP32 folder on the dev set's first `samples` questions (0: all).
pub(crate) fn score(
    mut eval: Command,
    model: &Path,
    fp32: &Path,
    (dataset, samples): (&Path, usize),
    seq_len: usize,
) -> Result<Embedding> {
    eval.arg("--model").arg(model).arg("--baseline").arg(fp32).arg("--dataset").arg(dataset);
    // Texts sorted by length in batches of 32: the same for every model, FP32 included; the peers' files have no
    // folder of their own, so the tokenizer and the length are given.
    let (samples, seq_len) = (samples.to_string(), seq_len.to_string());
    let (flag, tokenizer) = folder_tokenizer(fp32);
    eval.args(["--samples", &samples, "--batch", "32", "--seq-len", &seq_len, flag]).arg(tokenizer);
    let out = eval.arg("--json").current_dir(root()).output()?;
    if !out.status.success() {
        bail!("qdq eval of {} failed:\n{}", model.display(), String::from_utf8_lossy(&out.stderr));
    }
    let doc: EmbeddingEval =
        crate::qdq_json::parse(&String::from_utf8_lossy(&out.stdout)).context("qdq eval --json")?;
    Ok(doc.vs_baseline)
}

/// Every model timed at 1xL and 32xL on the CPU EP (cpu_int8.py) and, with `plugin`, on OpenVINO at f32 (ov_bench.py).
fn time_models(
    py: &Path,
    models: &Models,
    timing: &TimingArgs,
    seq_len: usize,
    plugin: Option<&Path>,
    work: &Path,
    wait: bool,
) -> Result<Vec<EpShapes>> {
    let shapes = format!("1x{seq_len},32x{seq_len}");
    let mut out = vec![];
    for (ep, script) in std::iter::once(("cpu", "cpu_int8.py")).chain(plugin.map(|_| ("openvino", "ov_bench.py"))) {
        wait_quiet(wait);
        eprintln!(
            "xtask: timing {} models on {ep} at {shapes} ({} rounds x {} runs)",
            models.len(),
            timing.rounds,
            timing.runs
        );
        let at = if ep == "openvino" { "@f32" } else { "" };
        let list: Vec<String> = models.iter().map(|(n, _, p)| format!("{n}={}{at}", p.display())).collect();
        let times_path = work.join(format!("times_{ep}.json"));
        let mut c = Command::new(py);
        c.arg(root().join("xtask/python").join(script)).arg("time");
        if let Some(p) = plugin.filter(|_| ep == "openvino") {
            c.arg("--plugin").arg(p);
        }
        c.args(["--models", &list.join(","), "--shapes", &shapes, "--rounds", &timing.rounds.to_string()]);
        c.args(["--runs", &timing.runs.to_string(), "--threads", &timing.threads.to_string(), "--out"])
            .arg(&times_path);
        // An EP that cannot run here (OpenVINO's plugin offers no device on a CPU it does not support) is reported,
        // not fatal: the CPU EP's figures stand.
        let output = c.output().with_context(|| format!("cannot start the {ep} timing harness"))?;
        if !output.status.success() {
            let why = short_reason(&String::from_utf8_lossy(&output.stderr));
            eprintln!("xtask: {ep} not timed: {why}");
            out.push(EpShapes { ep: ep.into(), shapes: vec![], not_timed: Some(why) });
            continue;
        }
        let times: Times =
            serde_json::from_slice(&std::fs::read(&times_path)?).context("the timing harness wrote bad JSON")?;
        out.push(EpShapes { ep: ep.into(), shapes: shape_rows(&times), not_timed: None });
    }
    Ok(out)
}

/// A model's comparison with FP32 on an EP.
fn eval_of<'a>(r: &'a EmbeddingsReport, name: &str, ep: &str) -> Option<&'a Embedding> {
    r.models.iter().find(|m| m.name == name && m.ep == ep)?.eval.as_ref()
}

/// Retained nDCG@10, retained MRR@10, mean cosine and top-1 neighbour kept (higher is better for each).
fn measures(e: &Embedding) -> [(&'static str, f64); 4] {
    let d = e.retrieval.as_ref().map(|r| (r.difference.ndcg_at_10_retained, r.difference.mrr_at_10_retained));
    let (ndcg, mrr) = d.unwrap_or((f64::NAN, f64::NAN));
    [
        ("retained nDCG@10", ndcg),
        ("retained MRR@10", mrr),
        ("mean cosine to FP32", e.fidelity.mean_cosine),
        ("top neighbour as FP32's", e.fidelity.neighbours.top1_same),
    ]
}

/// The targets: qdq against FP32 on the CPU EP, and qdq at least each peer on every measure and speed, on
/// each EP.
fn targets(r: &EmbeddingsReport) -> Vec<Target> {
    let mut out = vec![];
    if let Some(e) = eval_of(r, "qdq", "cpu") {
        out.extend(against_fp32(e));
    }
    for s in r.speed.iter().filter(|s| s.ep == "cpu") {
        for (batch, min) in MIN_SPEEDUP {
            let Some(row) = s.shapes.iter().find(|x| x.shape == format!("{batch}x{}", r.seq_len)) else { continue };
            let Some(q) = row.speedup.get("qdq") else { continue };
            out.push(target(
                format!("speed-up over FP32 at {} (cpu)", row.shape),
                format!(">= {min}x"),
                q.median,
                q.median >= min,
            ));
        }
    }
    for ep in ["cpu", "openvino"] {
        let Some(ours) = eval_of(r, "qdq", ep) else { continue };
        for peer in ["ort-dynamic", "nncf"] {
            let Some(theirs) = eval_of(r, peer, ep) else { continue };
            for ((what, a), (_, b)) in measures(ours).into_iter().zip(measures(theirs)) {
                out.push(target(format!("{what} ({ep}) against {peer}"), format!(">= {b:.5}"), a, a >= b));
            }
        }
        for s in r.speed.iter().filter(|s| s.ep == ep) {
            for row in &s.shapes {
                let Some(q) = row.speedup.get("qdq") else { continue };
                for peer in ["ort-dynamic", "nncf"] {
                    let Some(p) = row.speedup.get(peer) else { continue };
                    let name = format!("speed-up over FP32 at {} ({ep}) against {peer}", row.shape);
                    out.push(target(name, format!(">= {:.2}x", p.median), q.median, q.median >= p.median));
                }
            }
        }
    }
    out
}

fn target(name: String, goal: String, value: f64, pass: bool) -> Target {
    Target::new(name, goal, format!("{value:.5}"), pass)
}

/// qdq's INT8 against FP32: retrieval within [`MAX_LOSS`] (paired), cosine and neighbours.
fn against_fp32(e: &Embedding) -> Vec<Target> {
    let mut out = vec![];
    if let Some(r) = &e.retrieval {
        for (what, d) in [("nDCG@10", r.difference.ndcg_at_10), ("MRR@10", r.difference.mrr_at_10)] {
            let value = format!("{:+.3} [{:+.3}, {:+.3}]", d.delta, d.low, d.high);
            out.push(Target {
                name: format!("{what} minus FP32's (cpu, paired)"),
                target: format!(">= -{MAX_LOSS}"),
                value,
                pass: d.delta >= -MAX_LOSS,
            });
        }
    }
    let f = &e.fidelity;
    out.push(target(
        "mean cosine to FP32 (cpu)".into(),
        format!(">= {MIN_MEAN_COSINE}"),
        f.mean_cosine,
        f.mean_cosine >= MIN_MEAN_COSINE,
    ));
    out.push(target(
        "1st-percentile cosine to FP32 (cpu)".into(),
        format!(">= {MIN_P1_COSINE}"),
        f.p1_cosine,
        f.p1_cosine >= MIN_P1_COSINE,
    ));
    out.push(target(
        "smallest cosine to FP32, any text (cpu)".into(),
        format!(">= {MIN_COSINE}"),
        f.min_cosine,
        f.min_cosine >= MIN_COSINE,
    ));
    let top1 = f.neighbours.top1_same;
    out.push(target("top neighbour as FP32's (cpu)".into(), format!(">= {MIN_TOP1}"), top1, top1 >= MIN_TOP1));
    out
}

/// One model's row of the scores table.
fn model_line(md: &mut String, m: &ModelRow) {
    let Some(e) = &m.eval else {
        let _ = writeln!(
            md,
            "| {} | {} | not scored: {} | | | | | |",
            m.name,
            m.ep,
            m.not_scored.as_deref().unwrap_or("?")
        );
        return;
    };
    let f = &e.fidelity;
    let (kept, dn, dm) = match &e.retrieval {
        Some(r) => {
            let p = |d: crate::qdq_json::Paired| format!("{:+.2} [{:+.2}, {:+.2}]", d.delta, d.low, d.high);
            (
                format!("{:.2} %", 100.0 * r.difference.ndcg_at_10_retained),
                p(r.difference.ndcg_at_10),
                p(r.difference.mrr_at_10),
            )
        }
        None => Default::default(),
    };
    let _ = writeln!(
        md,
        "| {} | {} | {kept} | {dn} | {dm} | {:.5} / {:.5} / {:.4} | {:.2} % | {:.2} % |",
        m.name,
        m.ep,
        f.mean_cosine,
        f.p1_cosine,
        f.min_cosine,
        100.0 * f.neighbours.top1_same,
        100.0 * f.neighbours.top10_overlap
    );
}

fn render(r: &EmbeddingsReport) -> String {
    let name = r.model.file_name().map_or_else(|| r.model.display().to_string(), |n| n.to_string_lossy().into_owned());
    let mut md = format!("## {name}\n\n");
    let _ = writeln!(
        md,
        "`{}` ({}), {} on {}; SQuAD v1.1 dev as retrieval ({} queries; 0 = all 10,570), texts of at most {} tokens; \
         calibration: {} questions and their paragraphs.\n",
        r.command,
        r.git.as_deref().unwrap_or("?"),
        r.model.display(),
        r.machine.cpu,
        r.samples,
        r.seq_len,
        r.cal_num
    );
    md.push_str("| model | EP | nDCG@10 kept | dnDCG@10 [95 %] | dMRR@10 [95 %] | cosine mean / p1 / min | top-1 kept | top-10 kept |\n");
    md.push_str("|---|---|---:|---:|---:|---:|---:|---:|\n");
    for m in &r.models {
        model_line(&mut md, m);
    }
    md.push_str("\nSpeed-up over FP32 (median of rounds, slowest-fastest round):\n\n| EP | shape | model | speed-up |\n|---|---|---|---:|\n");
    for s in &r.speed {
        if let Some(why) = &s.not_timed {
            let _ = writeln!(md, "| {} | | | not timed: {why} |", s.ep);
        }
        for row in &s.shapes {
            for (model, q) in &row.speedup {
                let _ = writeln!(
                    md,
                    "| {} | {} | {model} | {:.2}x ({:.2}-{:.2}) |",
                    s.ep, row.shape, q.median, q.min, q.max
                );
            }
        }
    }
    targets_table(&mut md, &format!("Targets ({})", r.model.display()), &r.targets);
    md
}
