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
pub(super) fn micro_benchmarks(cx: &mut Ctx, microbench: &Path) -> Result<Micro> {
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
        ours.push(serde_json::from_str::<OursMicro>(&text[start..]).context("microbench printed unexpected JSON")?);
    }
    let py_out = dir.join("python.json");
    let mut cmd = cx.python("micro");
    cmd.args(["--arrays", &arrays, "--bins", &list(2), "--repeat", &repeat, "--num-quantized-bins", "255"]);
    cmd.arg("--histograms").arg(&histograms).arg("--out").arg(&py_out);
    cx.quiet();
    eprintln!("xtask: micro-benchmarks: numpy and ORT's entropy search (ORT takes ~10-60 s per histogram)");
    let log = cx.log("micro_python");
    measure_ok(&mut cmd, &log, &mut cx.commands)?;
    let py: PythonMicro = read_json(&py_out)?;
    Ok(merge_micro(&ours[0], &ours[1], &py))
}

/// One row per array and per histogram, from our two runs (default threads, one thread) and Python's.
pub(super) fn merge_micro(ours: &OursMicro, ours_1t: &OursMicro, py: &PythonMicro) -> Micro {
    let collection = ours
        .collection
        .iter()
        .map(|c| {
            let one = ours_1t.collection.iter().find(|x| x.array == c.array && x.bins == c.bins);
            let p = py.collection.iter().find(|x| x.array == c.array && x.bins == c.bins);
            CollectionRow {
                array: c.array.clone(),
                values: c.values,
                bins: c.bins,
                ours_observe_s: c.observe_s,
                ours_histogram_only_s: c.histogram_only_s,
                ours_minmax_only_s: c.minmax_only_s,
                ours_minmax_only_1t_s: one.and_then(|o| o.minmax_only_s),
                ours_observe_1t_s: one.and_then(|o| o.observe_s),
                ours_histogram_only_1t_s: one.and_then(|o| o.histogram_only_s),
                np_histogram_s: p.and_then(|p| p.np_histogram_s),
                ort_collect_value_s: p.and_then(|p| p.ort_collect_value_s),
            }
        })
        .collect();
    let entropy = ours
        .entropy
        .iter()
        .map(|e| {
            let p = py.entropy.iter().find(|x| x.name == e.name);
            EntropyRow {
                name: e.name.clone(),
                bins: e.bins,
                ours_s: e.seconds,
                ours_candidates: e.candidates,
                ours_threshold: e.threshold,
                ort_s: p.and_then(|p| p.seconds),
                ort_candidates: p.and_then(|p| p.candidates),
                ort_threshold: p.and_then(|p| p.threshold),
            }
        })
        .collect();
    Micro { threads: ours.threads, versions: py.versions.clone(), collection, entropy }
}

/// The collection row of the largest array at the largest bin count (the seeds' entropy histogram size).
pub(super) fn main_collection_row(r: &Report) -> Option<&CollectionRow> {
    r.micro.collection.iter().max_by_key(|c| (c.values, c.bins))
}

/// Nanoseconds per value of a timing in a collection row.
pub(super) fn ns_per_value(row: &CollectionRow, seconds: Option<f64>) -> Option<f64> {
    div(seconds.map(|s| s * 1e9), Some(row.values as f64))
}
