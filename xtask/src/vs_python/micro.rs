//! Micro-benchmarks of histogram collection and entropy search, ours against numpy / ONNX Runtime on identical
//! arrays and histograms.

use super::*;

/// `n` standard normal float32 values from a fixed seed (SplitMix64 and Box-Muller), identical on every machine.
pub(super) fn normal_values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        // 53 random bits in (0, 1]
        (((z ^ (z >> 31)) >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    };
    let mut out = Vec::with_capacity(n + 1);
    while out.len() < n {
        let (u, v) = (next(), next());
        let r = (-2.0 * u.ln()).sqrt();
        let a = std::f64::consts::TAU * v;
        out.push((r * a.cos()) as f32);
        out.push((r * a.sin()) as f32);
    }
    out.truncate(n);
    out
}

/// Our microbench (default threads and one thread) and vs_ort.py micro on the same arrays and histograms.
pub(super) fn micro_benchmarks(cx: &mut Ctx, microbench: &Path) -> Result<Value> {
    let dir = cx.work.join("micro");
    let mut arrays = Vec::new();
    for (i, (n, name)) in MICRO_SIZES.iter().enumerate() {
        let path = dir.join(format!("{name}.npy"));
        npy::write(&path, &[*n], &normal_values(*n, 0x5eed + i as u64))?;
        arrays.push(path.display().to_string());
    }
    let arrays = arrays.join(",");
    let histograms = dir.join("histograms.json");
    let state = cx.work.join("ours_entropy/calib_state.json");
    let repeat = cx.opts.micro_repeat.to_string();
    let list = |scale: usize| MICRO_BINS_PER_SIDE.iter().map(|b| (scale * b).to_string()).collect::<Vec<_>>().join(",");
    let bins = list(1);
    let mut ours = Vec::new();
    for threads in [None, Some("1")] {
        let mut cmd = Command::new(microbench);
        cmd.args([
            "--arrays",
            &arrays,
            "--num-bins",
            &bins,
            "--repeat",
            &repeat,
            "--num-quantized-bins",
            "255",
            "--tensors",
            "1",
        ]);
        cmd.arg("--histograms-out").arg(&histograms);
        if state.is_file() {
            cmd.arg("--state").arg(&state);
        }
        if let Some(t) = threads {
            cmd.env("RAYON_NUM_THREADS", t);
        }
        cx.quiet();
        let log = cx.log(&format!("microbench_threads_{}", threads.unwrap_or("default")));
        let run = measure_ok(&mut cmd, &log, &mut cx.commands)?;
        let text = std::fs::read_to_string(&run.stdout).unwrap_or_default();
        let start = text.find('{').context("microbench printed no JSON")?;
        ours.push(serde_json::from_str::<Value>(&text[start..]).context("microbench printed bad JSON")?);
    }
    let py_out = dir.join("python.json");
    let mut cmd = cx.python("micro");
    cmd.args(["--arrays", &arrays, "--bins", &list(2), "--repeat", &repeat, "--num-quantized-bins", "255"]);
    cmd.arg("--histograms").arg(&histograms).arg("--out").arg(&py_out);
    cx.quiet();
    eprintln!("xtask: micro-benchmarks: numpy and ORT's entropy search (ORT takes ~10-60 s per histogram)");
    let log = cx.log("micro_python");
    measure_ok(&mut cmd, &log, &mut cx.commands)?;
    let py = read_json(&py_out)?;
    Ok(merge_micro(&ours[0], &ours[1], &py))
}

/// One row per array and per histogram, from our two runs (default threads, one thread) and Python's.
pub(super) fn merge_micro(ours: &Value, ours_1t: &Value, py: &Value) -> Value {
    let find = |v: &Value, list: &str, keys: &[&str], like: &Value| -> Value {
        let same = |x: &&Value| keys.iter().all(|k| x[*k] == like[*k]);
        v[list].as_array().and_then(|a| a.iter().find(same)).cloned().unwrap_or(Value::Null)
    };
    let collection: Vec<Value> = ours["collection"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let one = find(ours_1t, "collection", &["array", "bins"], c);
            let p = find(py, "collection", &["array", "bins"], c);
            json!({
                "array": c["array"], "values": c["values"], "bins": c["bins"],
                "ours_observe_s": c["observe_s"], "ours_histogram_only_s": c["histogram_only_s"],
                "ours_minmax_only_s": c["minmax_only_s"], "ours_minmax_only_1t_s": one["minmax_only_s"],
                "ours_observe_1t_s": one["observe_s"], "ours_histogram_only_1t_s": one["histogram_only_s"],
                "np_histogram_s": p["np_histogram_s"], "ort_collect_value_s": p["ort_collect_value_s"],
            })
        })
        .collect();
    let entropy: Vec<Value> = ours["entropy"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let p = find(py, "entropy", &["name"], e);
            json!({
                "name": e["name"], "bins": e["bins"],
                "ours_s": e["seconds"], "ours_candidates": e["candidates"], "ours_threshold": e["threshold"],
                "ort_s": p["seconds"], "ort_candidates": p["candidates"], "ort_threshold": p["threshold"],
            })
        })
        .collect();
    json!({"threads": ours["threads"], "versions": py["versions"], "collection": collection, "entropy": entropy})
}

/// The collection row of the largest array at the largest bin count (the seeds' entropy histogram size).
pub(super) fn main_collection_row(r: &Value) -> Option<&Value> {
    let rows = r["micro"]["collection"].as_array()?;
    rows.iter().max_by_key(|c| (c["values"].as_u64().unwrap_or(0), c["bins"].as_u64().unwrap_or(0)))
}

/// Nanoseconds per value of a timing `key` in a collection row.
pub(super) fn ns_per_value(row: &Value, key: &str) -> Option<f64> {
    div(f(&row[key]).map(|s| s * 1e9), f(&row["values"]))
}
