//! `cargo xtask bench`: criterion benchmarks plus the end-to-end timing, summarised in out/bench/summary.md;
//! `cargo xtask bench <name>` runs one comparison instead, a module each: `vs_python` (qdq's calibration against ONNX
//! Runtime's Python tools), `cpu_int8` (CPU INT8 latency / size / F1 against ORT's quantize_dynamic), `big_model` (a
//! model over 2 GiB, each command's peak memory), `openvino`, `embeddings`, `classify`, `qnn`, `serve`.

pub(crate) mod big_model;
pub(crate) mod classify;
pub(crate) mod cpu_int8;
pub(crate) mod embeddings;
pub(crate) mod measure;
pub(crate) mod openvino;
pub(crate) mod qnn;
pub(crate) mod report;
pub(crate) mod rounds;
pub(crate) mod rows;
pub(crate) mod serve;
pub(crate) mod venv;
pub(crate) mod vs_python;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::flags::{BenchArgs, BenchCmd};
use crate::workspace::{cargo, root, run_cmd};

/// `cargo xtask bench`: the bench its flags name, else the criterion benchmarks and the end-to-end timing.
pub fn bench(args: BenchArgs) -> Result<()> {
    match args.bench {
        Some(BenchCmd::VsPython(a)) => return crate::bench::vs_python::vs_python(a),
        Some(BenchCmd::BigModel(a)) => return crate::bench::big_model::big_model(a.args, &a.out),
        Some(BenchCmd::Embeddings(a)) => return crate::bench::embeddings::embeddings(a),
        Some(BenchCmd::Classify(a)) => return crate::bench::classify::classify(a),
        Some(BenchCmd::Serve(a)) => return crate::bench::serve::serve(a.data, a.download),
        Some(BenchCmd::Qnn(a)) => return crate::bench::qnn::qnn(a.args, a.data, a.download),
        Some(BenchCmd::Openvino(a)) => return crate::bench::openvino::openvino(a),
        Some(BenchCmd::CpuInt8(a)) => return crate::bench::cpu_int8::cpu_int8(a.args, &a.timing, a.data, a.download),
        None => {}
    }
    run_cmd(cargo().args(["bench", "--locked", "-p", "qdq-calib"]))?;
    let out = root().join("out/bench");
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut md = String::from(
        "# qdq benchmarks\n\n## calib (criterion, median)\n\n| benchmark | time | throughput |\n|---|---:|---:|\n",
    );
    for (name, median_ns, elements) in criterion_results(&root().join("target/criterion"))? {
        let thr = elements.map(|n| format!("{:.1} M elem/s", n as f64 / median_ns * 1e3)).unwrap_or_default();
        let _ = writeln!(md, "| {name} | {} | {thr} |", human_ns(median_ns));
    }
    if !args.no_e2e {
        end_to_end(&mut md, args.download, &out)?;
    }
    let path = out.join("summary.md");
    crate::workspace::write_atomic(&path, md.as_bytes())?;
    print!("{md}");
    eprintln!("xtask: summary written to {}", path.display());
    Ok(())
}

/// The end-to-end run on the shipped model into `out`/e2e, its calibration time and both legs' F1 and speed in `md`.
fn end_to_end(md: &mut String, download: crate::download::DownloadArgs, out: &Path) -> Result<()> {
    let e2e_out = out.join("e2e");
    crate::e2e::e2e(crate::flags::E2eArgs {
        download,
        check: false,
        int8_tolerance: 1.0,
        qdq: vec!["--out".to_owned(), e2e_out.display().to_string()],
    })?;
    let results = std::fs::read_to_string(e2e_out.join("results.json")).context("e2e wrote no results.json")?;
    let v: crate::qdq_json::E2e = crate::qdq_json::parse(&results).context("e2e's results.json")?;
    let _ = writeln!(md, "\n## end to end\n");
    let seconds = v.calibration.and_then(|c| c.seconds).unwrap_or(f64::NAN);
    let _ = writeln!(md, "calibration: {seconds:.1} s\n");
    for (leg, e) in [("fp32", &v.result.fp32), ("int8", &v.result.int8)] {
        let _ = writeln!(
            md,
            "- {leg}: F1 {:.2}, {:.2} ms/feature, {:.1} features/s",
            e.f1,
            e.latency.ms_per_feature.unwrap_or(f64::NAN),
            e.latency.features_per_second.unwrap_or(f64::NAN)
        );
    }
    Ok(())
}

/// (benchmark id, median ns, elements per iteration) from criterion's JSON files.
fn criterion_results(dir: &Path) -> Result<Vec<(String, f64, Option<u64>)>> {
    let mut found = Vec::new();
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n == "new") {
                    if let Some(r) = read_one(&p)? {
                        found.push(r);
                    }
                } else if p.file_name().is_none_or(|n| n != "base" && n != "report") {
                    stack.push(p);
                }
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}

fn read_one(new_dir: &Path) -> Result<Option<(String, f64, Option<u64>)>> {
    let (Ok(est), Ok(bench)) = (
        std::fs::read_to_string(new_dir.join("estimates.json")),
        std::fs::read_to_string(new_dir.join("benchmark.json")),
    ) else {
        return Ok(None);
    };
    let est: Estimates = serde_json::from_str(&est).context("criterion's estimates.json")?;
    let bench: Benchmark = serde_json::from_str(&bench).context("criterion's benchmark.json")?;
    let elements = bench.throughput.and_then(|t| t.elements);
    Ok(Some((bench.full_id, est.median.point_estimate, elements)))
}

fn human_ns(ns: f64) -> String {
    match ns {
        n if n >= 1e9 => format!("{:.2} s", n / 1e9),
        n if n >= 1e6 => format!("{:.2} ms", n / 1e6),
        n if n >= 1e3 => format!("{:.2} µs", n / 1e3),
        n => format!("{n:.0} ns"),
    }
}

/// The parts of criterion's estimates.json and benchmark.json read here.
#[derive(serde::Deserialize)]
struct Estimates {
    median: Estimate,
}

#[derive(serde::Deserialize)]
struct Estimate {
    point_estimate: f64,
}

#[derive(serde::Deserialize)]
struct Benchmark {
    full_id: String,
    throughput: Option<Throughput>,
}

#[derive(serde::Deserialize)]
struct Throughput {
    #[serde(rename = "Elements")]
    elements: Option<u64>,
}
