#!/usr/bin/env python3
"""ONNX Runtime's Python quantization tools, driven by `cargo xtask bench vs-python`.

Every input comes from files the Rust side wrote, so both tools see byte-identical data:

    vs_ort.py calibrate --model M --features DIR --tensors calibration.json --method minmax|percentile|entropy
                        [--num-bins N] [--num-quantized-bins N] [--percentile P] [--cal-num N] [--stride N]
                        [--batch N] --out RANGES.json
        Calibrates with onnxruntime.quantization's create_calibrator on the features in DIR (input_ids.npy,
        attention_mask.npy, token_type_ids.npy, example_index.npy), restricted to the tensors named in
        calibration.json (the ones `qdq calibrate` collected), feeding the questions in groups of --stride as ORT's
        TensorRT BERT example does. Writes {tensor: [min, max]}, the phase timings and, on failure, the error text.

    vs_ort.py quantize --model M --ranges RANGES.json --out Q.onnx
        quantize_static with the seed-001 options (testdata/qdq/ort_reference.py), the ranges as calibration cache.

    vs_ort.py micro --arrays A.npy[,B.npy...] --bins N[,M...] --histograms H.json --repeat R --out MICRO.json
        numpy's np.histogram (and ORT's HistogramCollector.collect_value) on the arrays, and ORT's
        get_entropy_threshold on the histograms our calib exported (H.json), timed.

Tested with onnxruntime==1.31.1, onnx, numpy.
"""

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "testdata" / "qdq"))
sys.dont_write_bytecode = True  # no __pycache__ beside ort_reference.py in the work tree

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def versions() -> dict:
    import onnx
    import onnxruntime

    return {
        "python": sys.version.split()[0],
        "onnxruntime": onnxruntime.__version__,
        "onnx": onnx.__version__,
        "numpy": np.__version__,
    }


def write_json(path: str, value: dict) -> None:
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


class Features:
    """The calibration features of the first `cal_num` questions, fed `batch` features at a time."""

    def __init__(self, folder: Path, cal_num: int, batch: int):
        arrays = {name: np.load(folder / f"{name}.npy") for name in (*INPUTS, "example_index")}
        keep = arrays["example_index"] < cal_num if cal_num > 0 else np.ones_like(arrays["example_index"], bool)
        self.arrays = {k: v[keep] for k, v in arrays.items()}
        self.batch = batch

    def __len__(self) -> int:
        return len(self.arrays["example_index"])

    def readers(self, stride: int):
        """One reader per group of `stride` questions (all questions in one group if stride is 0)."""
        from onnxruntime.quantization import CalibrationDataReader

        examples = self.arrays["example_index"]
        groups = examples // stride if stride > 0 else np.zeros_like(examples)
        for g in np.unique(groups):
            rows = np.flatnonzero(groups == g)
            batches = [rows[i : i + self.batch] for i in range(0, len(rows), self.batch)]
            feeds = [{k: self.arrays[k][b] for k in INPUTS} for b in batches]

            class Reader(CalibrationDataReader):
                def __init__(self):
                    self.it = iter(feeds)

                def get_next(self):
                    return next(self.it, None)

            yield Reader()


class TimedSession:
    """Forwards to an InferenceSession, adding up the time spent in run()."""

    def __init__(self, session):
        self.session = session
        self.seconds = 0.0

    def run(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return self.session.run(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t

    def __getattr__(self, name):
        return getattr(self.session, name)


def calibrate(a) -> int:
    from onnxruntime.quantization.calibrate import CalibraterBase, CalibrationMethod, create_calibrator

    started = time.perf_counter()
    wanted = set(json.loads(Path(a.tensors).read_text())["ranges"])
    selected = {}
    original_select = CalibraterBase.select_tensors_to_calibrate

    def restricted(self, model):
        """ORT's own selection (inputs and outputs of MatMul/Add nodes), narrowed to the tensors qdq calibrates."""
        tensors, value_infos = original_select(self, model)
        selected["ort"] = sorted(tensors)
        return tensors & wanted, value_infos

    CalibraterBase.select_tensors_to_calibrate = restricted
    method = {
        "minmax": CalibrationMethod.MinMax,
        "percentile": CalibrationMethod.Percentile,
        "entropy": CalibrationMethod.Entropy,
    }[a.method]
    extra = {}
    if a.method == "percentile":
        extra = {"num_bins": a.num_bins, "percentile": a.percentile}
    elif a.method == "entropy":
        extra = {"num_bins": a.num_bins, "num_quantized_bins": a.num_quantized_bins}
    result = {"method": a.method, "options": extra, "versions": versions(), "stride": a.stride, "batch": a.batch}
    phases = {}
    try:
        data = Features(Path(a.features), a.cal_num, a.batch)
        result["features"] = len(data)
        phases["load_features"] = time.perf_counter() - started
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            calibrator = create_calibrator(
                a.model,
                ["MatMul", "Add"],
                augmented_model_path=str(Path(tmp) / "augmented_model.onnx"),
                calibrate_method=method,
                extra_options=extra,
            )
            phases["create_calibrator"] = time.perf_counter() - t
            timed = TimedSession(calibrator.infer_session)
            calibrator.infer_session = timed
            result["missing"] = sorted(wanted - set(selected.get("ort", [])))
            t = time.perf_counter()
            for reader in data.readers(a.stride):
                calibrator.collect_data(reader)
            phases["collect_data"] = time.perf_counter() - t
            phases["inference"] = timed.seconds
            t = time.perf_counter()
            computed = calibrator.compute_data()
            phases["compute_data"] = time.perf_counter() - t
        ranges = {}
        for name, td in computed.items():
            lo, hi = td.range_value
            ranges[name] = [float(np.asarray(lo).reshape(-1)[0]), float(np.asarray(hi).reshape(-1)[0])]
        result["ranges"] = ranges
        code = 0
    except Exception as e:  # noqa: BLE001 - the report records any failure of ORT's tools
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()
        code = 3
    finally:
        CalibraterBase.select_tensors_to_calibrate = original_select
    phases["total_in_script"] = time.perf_counter() - started
    result["phases"] = phases
    write_json(a.out, result)
    return code


def quantize(a) -> int:
    from ort_reference import quantize_seed001

    ranges = json.loads(Path(a.ranges).read_text())["ranges"]
    quantize_seed001(a.model, ranges, a.out)
    return 0


def median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def micro(a) -> int:
    from onnxruntime.quantization.calibrate import HistogramCollector

    out = {"versions": versions(), "collection": [], "entropy": []}
    for path in a.arrays.split(","):
        x = np.load(path)
        t = np.float32(np.abs(x).max())
        for bins in (int(b) for b in a.bins.split(",")):
            hist = lambda: np.histogram(x, bins, range=(-t, t))  # noqa: E731
            collect = lambda: HistogramCollector("entropy", False, bins, 255, 99.999, "same").collect_value(  # noqa: E731
                {"t": x}
            )
            out["collection"].append(
                {
                    "array": Path(path).name,
                    "values": int(x.size),
                    "bins": bins,
                    "np_histogram_s": median_seconds(hist, a.repeat),
                    "ort_collect_value_s": median_seconds(collect, a.repeat),
                }
            )
    collector = HistogramCollector("entropy", False, 0, a.num_quantized_bins, 99.999, "same")
    for h in json.loads(Path(a.histograms).read_text()):
        counts = np.asarray(h["counts"], dtype=np.int64)
        per_side = h["per_side"]
        edges = (np.arange(-per_side, per_side + 1, dtype=np.float64) * h["width"]).astype(np.float32)
        lo, hi = np.float32(h["min"]), np.float32(h["max"])
        histogram = (counts, edges, lo, hi, np.float32(max(abs(lo), abs(hi))))
        t = time.perf_counter()
        threshold = collector.get_entropy_threshold(histogram, a.num_quantized_bins)
        seconds = time.perf_counter() - t
        out["entropy"].append(
            {
                "name": h["name"],
                "bins": int(counts.size),
                "candidates": int(counts.size // 2 - a.num_quantized_bins // 2 + 1),
                "seconds": seconds,
                "threshold": [float(threshold[0]), float(threshold[1])],
            }
        )
    write_json(a.out, out)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("calibrate")
    c.add_argument("--model", required=True)
    c.add_argument("--features", required=True)
    c.add_argument("--tensors", required=True)
    c.add_argument("--method", required=True, choices=["minmax", "percentile", "entropy"])
    c.add_argument("--num-bins", type=int, default=2048)
    c.add_argument("--num-quantized-bins", type=int, default=128)
    c.add_argument("--percentile", type=float, default=99.999)
    c.add_argument("--cal-num", type=int, default=0)
    c.add_argument("--stride", type=int, default=10)
    c.add_argument("--batch", type=int, default=1)
    c.add_argument("--out", required=True)
    q = sub.add_parser("quantize")
    q.add_argument("--model", required=True)
    q.add_argument("--ranges", required=True)
    q.add_argument("--out", required=True)
    m = sub.add_parser("micro")
    m.add_argument("--arrays", required=True)
    m.add_argument("--bins", required=True, help="total bins, comma-separated")
    m.add_argument("--histograms", required=True)
    m.add_argument("--num-quantized-bins", type=int, default=255)
    m.add_argument("--repeat", type=int, default=5)
    m.add_argument("--out", required=True)
    a = p.parse_args()
    return {"calibrate": calibrate, "quantize": quantize, "micro": micro}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
