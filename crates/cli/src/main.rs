//! `qdq`: the command-line front end. Arguments, progress and printing only; the work is in `pipeline`.

mod args;
mod config;
mod progress;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{CommandFactory, FromArgMatches};

use args::{CalibArgs, Cli, Command, DataArgs, PolicyArgs, RuntimeArgs};
use runtime::{Ep, OptLevel, SessionConfig};

fn main() -> ExitCode {
    // `qdq inspect model.onnx | head` must end quietly when the reader goes away, as other Unix tools do, instead
    // of panicking in println! on EPIPE (Rust ignores SIGPIPE by default).
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of one signal at start-up, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cmd = Cli::command();
    let cli = match config::expand(argv, &cmd).and_then(|argv| {
        let matches = cmd.clone().try_get_matches_from(argv).map_err(|e| e.exit())?;
        Ok(Cli::from_arg_matches(&matches)?)
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("qdq: error: {e:#}");
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("qdq: error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, skipping a cause whose text the line already holds (library errors
/// often print their source themselves).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}

fn init_logging(verbose: bool) {
    let default = if verbose { "debug" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("QDQ_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{default},ort=warn")));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::E2e(a) => e2e(*a),
        Command::Calibrate(a) => calibrate(*a),
        Command::Quantize(a) => quantize(*a),
        Command::Eval(a) => eval(*a),
        Command::Inspect(a) => inspect(a),
        Command::Providers(a) => providers(a),
    }
}

fn parse_ep(name: &str, fp16: bool, int8: bool) -> Result<Ep> {
    let mut ep = Ep::parse(name)?;
    match &mut ep {
        Ep::TensorRt(o) => {
            o.fp16 |= fp16;
            o.int8 |= int8;
        }
        Ep::MiGraphX(o) => {
            o.fp16 |= fp16;
            o.int8 |= int8;
        }
        _ => {}
    }
    Ok(ep)
}

/// The FP32 session: the EP's INT8 mode stays off (it is for the quantized model only).
fn session(r: &RuntimeArgs, out: Option<&Path>, tag: &str) -> Result<SessionConfig> {
    let mut ep = parse_ep(&r.ep, r.fp16, false)?;
    if let Ep::TensorRt(o) = &mut ep {
        o.int8 = false;
        o.engine_cache_dir.clone_from(&r.trt_engine_cache);
    }
    if let Ep::MiGraphX(o) = &mut ep {
        o.int8 = false;
    }
    Ok(SessionConfig {
        ep,
        allow_fallback: r.allow_fallback,
        opt_level: r.opt_level.as_deref().map(OptLevel::parse).transpose()?.unwrap_or_default(),
        intra_threads: r.threads,
        verbose: r.ort_verbose,
        optimized_model_path: match (r.save_load, out) {
            (true, Some(dir)) => Some(dir.join(format!("model_{tag}_optimized.onnx"))),
            _ => None,
        },
        library: r.ort_lib.clone(),
    })
}

fn data_config(d: &DataArgs) -> Result<pipeline::DataConfig> {
    Ok(pipeline::DataConfig::new(
        d.vocab.clone(),
        d.token.clone(),
        !d.cased,
        &d.version,
        d.seq_len,
        d.query_len,
        d.doc_stride,
        &d.io_names,
        d.pad_to_max,
    )?)
}

fn methods(c: &CalibArgs) -> Result<Vec<calib::Method>> {
    let mut names = vec![c.calibrate_method.clone()];
    for m in &c.compare_methods {
        if !names.contains(m) {
            names.push(m.clone());
        }
    }
    names
        .iter()
        .map(|name| {
            let mut opts = std::collections::BTreeMap::new();
            match name.as_str() {
                "percentile" => {
                    opts.insert("percentile".to_owned(), c.percentile.to_string());
                    opts.insert("symmetric".to_owned(), c.symmetric.to_string());
                }
                "minmax" => {
                    opts.insert("symmetric".to_owned(), c.symmetric.to_string());
                }
                "entropy" => {
                    opts.insert("num_quantized_bins".to_owned(), c.num_quantized_bins.to_string());
                }
                _ => {}
            }
            calib::Method::parse(name, &opts).with_context(|| format!("--calibrate-method {name}"))
        })
        .collect()
}

fn policy(p: &PolicyArgs) -> Result<(qdq::Policy, String)> {
    let name = if p.ort_quant { "ort-compatible".to_owned() } else { p.policy.clone() };
    let mut policy = qdq::Policy::preset(&name)?;
    for kv in &p.policy_options {
        let (k, v) = kv.split_once('=').with_context(|| format!("--policy-option `{kv}` must be KEY=VALUE"))?;
        policy.set(k.trim(), v.trim())?;
    }
    for n in &p.exclude_node {
        policy.set("exclude_nodes", n)?;
    }
    if p.strict {
        policy.set("strict", "true")?;
    }
    Ok((policy, name))
}

fn e2e(a: args::E2eArgs) -> Result<()> {
    init_logging(a.verbose);
    let bars = progress::Bars::new();
    let dataset = a.dataset.clone().unwrap_or_else(|| PathBuf::from(format!("squad/dev-v{}.json", a.data.version)));
    let fp32_session = session(&a.runtime, Some(&a.out), "fp32")?;
    let cal_session = SessionConfig {
        ep: parse_ep(&a.calib.cal_ep, false, false)?,
        opt_level: OptLevel::Basic,
        optimized_model_path: None,
        ..fp32_session.clone()
    };
    let (policy, policy_name) = policy(&a.policy)?;
    let mut int8 = pipeline::int8_session(
        &fp32_session,
        a.runtime.int8,
        a.runtime.opt_level.is_some(),
        &a.out.join("calibration.flatbuffers"),
    );
    if a.runtime.save_load {
        int8.optimized_model_path = Some(a.out.join("model_int8_optimized.onnx"));
    }
    if a.runtime.int8 && matches!(int8.ep, Ep::Cpu) {
        pipeline::Progress::note(
            &bars,
            "--int8 has no extra effect on cpu: ONNX Runtime runs the QDQ model with integer kernels where it fuses them",
        );
    }
    // Fail fast on an EP the library lacks, before minutes of calibration.
    for s in [&fp32_session, &int8] {
        check_ep(s)?;
    }
    let cfg = pipeline::E2eConfig {
        model: a.model.clone(),
        calibration_data: a.calib.calibration_data.clone().unwrap_or_else(|| dataset.clone()),
        dataset,
        out: a.out.clone(),
        data: data_config(&a.data)?,
        samples: a.samples,
        cal_num: a.calib.cal_num,
        calibrate: pipeline::CalibrateOptions {
            batch: a.batch,
            methods: methods(&a.calib)?,
            num_bins: a.calib.num_bins,
            session: cal_session,
        },
        policy,
        policy_name,
        eval: pipeline::EvalOptions { batch: a.batch, session: fp32_session },
        no_eval: a.no_eval,
    };
    let results = pipeline::e2e(&cfg, &int8, &bars)?;
    println!("{}", results.table());
    println!("Outputs written to {}", a.out.display());
    Ok(())
}

/// An EP the loaded library lacks is reported before any work starts.
fn check_ep(s: &SessionConfig) -> Result<()> {
    let info = runtime::init(s.library.as_deref())?;
    if s.allow_fallback || info.providers.iter().any(|p| p == s.ep.ort_name()) {
        return Ok(());
    }
    Err(runtime::Error::EpUnavailable {
        requested: s.ep.ort_name().to_owned(),
        library: format!("{} {}", info.path.display(), info.version),
        available: info.providers.join(", "),
        hint: s.ep.install_hint().to_owned(),
    }
    .into())
}

fn calibrate(a: args::CalibrateArgs) -> Result<()> {
    init_logging(a.verbose);
    let bars = progress::Bars::new();
    let model = onnx_ir::Model::load(&a.model)?;
    let data_cfg = data_config(&a.data)?;
    let tokenizer = data_cfg.tokenizer()?;
    let file = a.calib.calibration_data.clone().context("qdq calibrate needs --calibration-data FILE")?;
    let mut data = pipeline::Corpus::load(&file, &data_cfg, &tokenizer, a.calib.cal_num)?;
    data.fit_model(&model, &a.model)?;
    let (policy, _) = policy(&a.policy)?;
    let opts = pipeline::CalibrateOptions {
        batch: a.batch,
        methods: methods(&a.calib)?,
        num_bins: a.calib.num_bins,
        session: SessionConfig {
            ep: parse_ep(&a.calib.cal_ep, false, false)?,
            opt_level: OptLevel::Basic,
            library: a.ort_lib.clone(),
            ..Default::default()
        },
    };
    if !a.merge.is_empty() && policy.smooth.is_some() && !qdq::smoothing_sites(&model, &policy)?.is_empty() {
        bail!(
            "--merge cannot be combined with smoothing: each run smooths with its own statistics, so their ranges \
             describe different models; pass --policy-option smooth=off to every run"
        );
    }
    let model = match pipeline::smooth_model(&model, &policy, &data, &opts, &bars)? {
        None => model,
        Some((smoothed, s)) => {
            std::fs::create_dir_all(&a.out).with_context(|| format!("cannot create {}", a.out.display()))?;
            let path = a.out.join("model_smoothed.onnx");
            smoothed.save(&path)?;
            println!("{}; wrote {} (quantize this model with these tables)", s.describe(), path.display());
            smoothed
        }
    };
    let tensors = qdq::tensors_to_calibrate(&model, &policy)?;
    let mut cal = pipeline::calibrate(&model, &tensors, &data, &opts, &bars)?;
    for m in &a.merge {
        let other = calib::CalibState::load_json(m)?;
        cal.state.merge(&other).with_context(|| format!("merging {}", m.display()))?;
    }
    if !a.merge.is_empty() {
        cal.tables = calib::compute_all(&cal.state, &opts.methods)?;
    }
    pipeline::write_tables(&cal, &a.out)?;
    println!(
        "Calibrated {} tensors on {} features ({} questions) in {:.1} s; tables in {}",
        cal.tensors.len(),
        cal.features,
        cal.questions,
        cal.seconds,
        a.out.display()
    );
    Ok(())
}

fn quantize(a: args::QuantizeArgs) -> Result<()> {
    init_logging(a.verbose);
    if a.list_policies {
        for name in qdq::PRESETS {
            println!("{name}:\n{}\n", qdq::Policy::preset(name)?.describe());
        }
        println!("Options (--policy-option KEY=VALUE): {}", qdq::KEYS.join(", "));
        return Ok(());
    }
    let (policy, _) = policy(&a.policy)?;
    let (Some(model_path), Some(ranges_path)) = (&a.model, &a.ranges) else {
        bail!("qdq quantize needs --model FILE and --ranges FILE");
    };
    let model = onnx_ir::Model::load(model_path)?;
    if let Some(alpha) = policy.smooth
        && qdq::smoothing_record(&model).is_none()
        && !qdq::smoothing_sites(&model, &policy)?.is_empty()
    {
        bail!(
            "{}: the policy smooths LayerNorm outputs (smooth={alpha}) but this model is not smoothed; pass the \
             model_smoothed.onnx that `qdq calibrate` wrote next to the ranges, or --policy-option smooth=off with \
             ranges calibrated without smoothing",
            model_path.display()
        );
    }
    let ranges = read_ranges(ranges_path)?;
    let plan = qdq::plan(&model, &ranges, &policy)?;
    if a.dry_run {
        println!("{plan}");
        return Ok(());
    }
    let Some(output) = a.output else { bail!("qdq quantize needs --output FILE (or --dry-run)") };
    let mut model = model;
    plan.apply(&mut model)?;
    model.save(&output)?;
    println!("Wrote {} ({} tensors quantized, {} skipped)", output.display(), plan.tensors.len(), plan.skipped.len());
    Ok(())
}

/// Ranges from calibration.json, ORT's flatbuffers table or a TensorRT cache (the last two hold amax only, so
/// the range is symmetric).
fn read_ranges(path: &Path) -> Result<qdq::Ranges> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read ranges file {}", path.display()))?;
    let symmetric = |m: std::collections::BTreeMap<String, f32>| m.into_iter().map(|(k, a)| (k, (-a, a))).collect();
    if bytes.first() == Some(&b'{') {
        let table = calib::tables::read_json(path)?;
        Ok(table.ranges.iter().map(|(k, r)| (k.clone(), (r.min, r.max))).collect())
    } else if bytes.starts_with(b"TRT-") {
        Ok(symmetric(calib::tables::read_trt_cache(path)?.amax()))
    } else {
        Ok(symmetric(calib::tables::read_ort_flatbuffers(path)?))
    }
}

fn eval(a: args::EvalArgs) -> Result<()> {
    init_logging(a.verbose);
    let bars = progress::Bars::new();
    let data_cfg = data_config(&a.data)?;
    let tokenizer = data_cfg.tokenizer()?;
    let model = onnx_ir::Model::load(&a.model)?;
    let mut data = pipeline::Corpus::load(&a.dataset, &data_cfg, &tokenizer, a.samples)?;
    data.fit_model(&model, &a.model)?;
    let bytes = model.to_bytes()?;
    drop(model);
    // --save-load: the optimised model goes beside the evaluated one (model_eval_optimized.onnx).
    let model_dir = a.model.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut s = session(&a.runtime, Some(model_dir), "eval")?;
    if let Some(p) = &s.optimized_model_path {
        pipeline::Progress::note(&bars, &format!("the model as optimised by ONNX Runtime goes to {}", p.display()));
    }
    if a.runtime.int8 {
        s = pipeline::int8_session(&s, true, a.runtime.opt_level.is_some(), Path::new("calibration.flatbuffers"));
    }
    let opts = pipeline::EvalOptions { batch: a.batch, session: s };
    let e = pipeline::evaluate(&bytes, &a.model.display().to_string(), &data, &opts, "evaluating", &bars)?;
    if let Some(p) = &a.predictions {
        let sorted: std::collections::BTreeMap<_, _> = e.predictions.iter().collect();
        pipeline::write_atomic(p, &serde_json::to_vec_pretty(&sorted)?)?;
    }
    println!(
        "{}: EM {:.2} F1 {:.2} on {} questions ({} missing) | {:.2} ms/feature, p50 {:.2}, p90 {:.2}, {:.1} features/s on {}",
        a.model.display(),
        e.exact_match,
        e.f1,
        e.questions,
        e.missing,
        e.latency.ms_per_feature,
        e.latency.p50_ms_per_feature,
        e.latency.p90_ms_per_feature,
        e.latency.features_per_second,
        e.ep
    );
    Ok(())
}

fn inspect(a: args::InspectArgs) -> Result<()> {
    let model = onnx_ir::Model::load(&a.model)?;
    let coverage = qdq::coverage(&model);
    let g = model.graph();
    let io = |v: &[onnx_ir::proto::ValueInfoProto]| v.iter().map(|v| v.name().to_owned()).collect::<Vec<_>>();
    let params: usize = g.initializer.iter().map(|t| t.dims.iter().product::<i64>().max(0) as usize).sum();
    if a.json {
        let summary = serde_json::json!({
            "model": a.model,
            "ir_version": model.proto.ir_version(),
            "opset": model.opset(""),
            "producer": format!("{} {}", model.proto.producer_name(), model.proto.producer_version()).trim(),
            "inputs": io(&g.input),
            "outputs": io(&g.output),
            "nodes": g.node.len(),
            "initializers": g.initializer.len(),
            "parameters": params,
            "smoothing": qdq::smoothing_record(&model),
            "coverage": coverage,
            "ranges": coverage.pairs.iter().filter_map(|p| p.range().map(|r| (p.tensor.clone(), [r.0, r.1]))).collect::<std::collections::BTreeMap<_, _>>(),
        });
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    println!("{}", a.model.display());
    println!(
        "  IR {} | opset {} | producer {} {}",
        model.proto.ir_version(),
        model.opset("").map_or("?".into(), |v| v.to_string()),
        model.proto.producer_name(),
        model.proto.producer_version()
    );
    println!("  inputs:  {}", io(&g.input).join(", "));
    println!("  outputs: {}", io(&g.output).join(", "));
    println!("  {} nodes, {} initializers, {} parameters", g.node.len(), g.initializer.len(), params);
    if let Some(r) = qdq::smoothing_record(&model) {
        println!("  smoothed MatMul inputs (SmoothQuant-style): {r}");
    }
    println!();
    let qnodes = g.node.iter().filter(|n| n.op_type() == "QuantizeLinear").count();
    let dqnodes = g.node.iter().filter(|n| n.op_type() == "DequantizeLinear").count();
    println!("Q/DQ: {qnodes} QuantizeLinear, {dqnodes} DequantizeLinear");
    if a.ranges {
        println!("{coverage}");
        println!("Ranges encoded by per-tensor pairs (tensor: [min, max]):");
        for p in &coverage.pairs {
            if let Some((lo, hi)) = p.range() {
                println!("  {}: [{lo:.6}, {hi:.6}]", p.tensor);
            }
        }
    } else {
        println!("{:<24} {:>6} {:>10}", "op type", "nodes", "behind DQ");
        for (op, c) in &coverage.by_op {
            println!("{op:<24} {:>6} {:>10}", c.nodes, c.covered);
        }
        if dqnodes > 0 {
            println!("(--ranges lists every pair with its scale and range)");
        }
    }
    Ok(())
}

fn providers(a: args::ProvidersArgs) -> Result<()> {
    let info = runtime::init(a.ort_lib.as_deref())?;
    println!("ONNX Runtime {} ({})", info.version, info.path.display());
    for p in &info.providers {
        println!("  {p}");
    }
    Ok(())
}
