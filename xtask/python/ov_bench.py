#!/usr/bin/env python3
"""OpenVINO bench harness, driven by `cargo xtask bench openvino`.

    ov_bench.py nncf --model M --features DIR --out Q.onnx
        NNCF's INT8 model of M: nncf.quantize with ModelType.TRANSFORMER and its other defaults (SmoothQuant among
        them), calibrated on every feature in DIR (input_ids.npy, attention_mask.npy, token_type_ids.npy: the features
        `qdq calibrate` builds from the same questions, as `cargo xtask bench` writes them), one feature per item.

    ov_bench.py time --plugin LIB --models NAME=PATH@PRECISION[,...] --shapes 1x256,8x128,1x384 --rounds R --runs N
                     --threads T --out TIMES.json
        cpu_int8.py's timing harness (the same fixed random-token batches, blocks in turn, each round starting one
        model later) with every session on OpenVINO's CPU device: the plugin library registered into this
        onnxruntime, the device appended with `load_config` {"CPU": {"INFERENCE_PRECISION_HINT": PRECISION,
        "INFERENCE_NUM_THREADS": T}}, ONNX Runtime's CPU fallback off (the whole graph on OpenVINO, or an error).
        With --plugin runtime, the models are compiled by the `openvino` package itself (the same OpenVINO release
        as the plugin's; its ONNX front end reads the file as the plugin does): for a CPU the plugin serves no
        device on (AMD), where OpenVINO's CPU plugin itself runs.

    ov_bench.py devices --plugin LIB
        What can time models here, as JSON: whether the plugin serves a CPU device (it serves Intel CPUs only), the
        CPU OpenVINO's runtime sees, its capabilities and the precision it runs float parts in by default
        (INFERENCE_PRECISION_HINT: bf16 on CPUs with AMX or AVX512-BF16, else f32).

    ov_bench.py profile --models NAME=PATH@PRECISION[,...] --shape 8x128 --runs N --threads T --out PROFILE.json
        Where each model's time goes on OpenVINO's CPU plugin (the `openvino` package, PERF_COUNT on): per executed
        node (after OpenVINO's fusions) its layer type, kernel (exec_type, e.g. brgemm_avx512_amx_I8) and real
        time, summed per layer type and kernel over N runs in turn (A B A B ...) of one fixed batch. Also writes
        the executed graph's node counts per type and precision.

Tested with onnxruntime==1.31.1, nncf==3.4.0, openvino==2026.4.1, onnx==1.23.2, numpy.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_int8 import add_time_args, batch_for, time_sessions  # noqa: E402


def quantize_nncf(args):
    import nncf
    import onnx

    model = onnx.load(args.model)
    names = [i.name for i in model.graph.input]
    arrays = {n: np.load(os.path.join(args.features, f"{n}.npy")) for n in names}
    count = len(next(iter(arrays.values())))
    items = [{n: arrays[n][i : i + 1] for n in names} for i in range(count)]
    q = nncf.quantize(model, nncf.Dataset(items), model_type=nncf.ModelType.TRANSFORMER, subset_size=count)
    onnx.save(q, args.out)
    print(json.dumps({"nncf": nncf.__version__, "features": count}))


class OvSession:
    """An OpenVINO compiled model with the two methods the timing harness calls (`get_inputs`, `run`)."""

    class Input:
        def __init__(self, name):
            self.name = name

    def __init__(self, core, path, precision, threads, perf_count=False):
        model = core.read_model(path)
        config = {
            "INFERENCE_PRECISION_HINT": precision,
            "INFERENCE_NUM_THREADS": threads,
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": 1,
        }
        if perf_count:
            config["PERF_COUNT"] = True
        self.compiled = core.compile_model(model, "CPU", config)
        self.request = self.compiled.create_infer_request()
        self.names = [i.get_any_name() for i in self.compiled.inputs]

    def get_inputs(self):
        return [OvSession.Input(n) for n in self.names]

    def run(self, _outputs, feeds):
        return self.request.infer(feeds)


def models_of(spec):
    """NAME=PATH@PRECISION[,...] as (name, path, precision)."""
    out = []
    for item in spec.split(","):
        name, rest = item.split("=", 1)
        path, precision = rest.rsplit("@", 1)
        out.append((name, path, precision))
    return out


def time_on_runtime(args):
    import openvino as ov

    core = ov.Core()
    sessions = {n: OvSession(core, p, prec, args.threads) for n, p, prec in models_of(args.models)}
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    time_sessions(sessions, shapes, args, f"openvino {ov.__version__.split('-')[0]} (runtime)")


def profile_models(args):
    import collections

    import openvino as ov

    core = ov.Core()
    batch, seq = (int(x) for x in args.shape.split("x"))
    sessions = {n: OvSession(core, p, prec, args.threads, True) for n, p, prec in models_of(args.models)}
    feeds = {n: batch_for(s, batch, seq, np.random.default_rng(1234)) for n, s in sessions.items()}
    for name, s in sessions.items():
        for _ in range(3):
            s.run(None, feeds[name])
    totals = {n: collections.Counter() for n in sessions}
    counts = {n: collections.Counter() for n in sessions}
    walls = {n: [] for n in sessions}
    for _ in range(args.runs):
        for name, s in sessions.items():
            t0 = time.perf_counter()
            s.run(None, feeds[name])
            walls[name].append((time.perf_counter() - t0) * 1e3)
            for info in s.request.profiling_info:
                if info.status != info.Status.EXECUTED:
                    continue
                key = f"{info.node_type} | {info.exec_type}"
                totals[name][key] += info.real_time.total_seconds() * 1e3 / args.runs
    for name, s in sessions.items():
        for op in s.compiled.get_runtime_model().get_ordered_ops():
            rt = op.get_rt_info()
            layer = str(rt["layerType"]) if "layerType" in rt else op.get_type_name()
            prec = str(rt["runtimePrecision"]) if "runtimePrecision" in rt else "?"
            counts[name][f"{layer} | {prec}"] += 1
    result = {
        "shape": args.shape,
        "runs": args.runs,
        "openvino": ov.__version__,
        "models": {
            n: {
                "wall_ms_median": float(np.median(walls[n])),
                "node_ms": dict(totals[n].most_common()),
                "executed_nodes": dict(sorted(counts[n].items())),
            }
            for n in sessions
        },
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    for n, m in result["models"].items():
        total = sum(m["node_ms"].values())
        print(f"== {n}: wall {m['wall_ms_median']:.2f} ms, nodes {total:.2f} ms")
        for k, v in list(m["node_ms"].items())[: args.top]:
            print(f"  {v:8.3f} ms {100 * v / total:5.1f} %  {k}")


def devices(args):
    import onnxruntime as ort
    import openvino as ov

    plugin = False
    try:
        ort.register_execution_provider_library("OpenVINOExecutionProvider", args.plugin)
        plugin = any(
            d.ep_name == "OpenVINOExecutionProvider" and d.device.type == ort.OrtHardwareDeviceType.CPU
            for d in ort.get_ep_devices()
        )
    except Exception as e:  # noqa: BLE001 - a plugin that cannot register serves no device
        print(f"the plugin did not register: {e}", file=sys.stderr)
    core = ov.Core()
    precision = core.get_property("CPU", "INFERENCE_PRECISION_HINT")
    print(
        json.dumps(
            {
                "plugin_cpu": plugin,
                "cpu": core.get_property("CPU", "FULL_DEVICE_NAME"),
                "capabilities": list(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")),
                "default_precision": next(
                    (short for name, short in [("bf", "bf16"), ("f16", "f16"), ("float16", "f16")] if name in str(precision)),
                    "f32",
                ),
                "openvino": ov.__version__.split("-")[0],
            }
        )
    )


def time_models(args):
    if args.plugin == "runtime":
        return time_on_runtime(args)
    import onnxruntime as ort

    ort.register_execution_provider_library("OpenVINOExecutionProvider", args.plugin)
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "OpenVINOExecutionProvider"]
    devices = [d for d in devices if d.device.type == ort.OrtHardwareDeviceType.CPU]
    if not devices:
        raise SystemExit(f"no OpenVINO CPU device after registering {args.plugin}")
    sessions = {}
    for spec in args.models.split(","):
        name, rest = spec.split("=", 1)
        path, precision = rest.rsplit("@", 1)
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        config = {"CPU": {"INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": str(args.threads)}}
        so.add_provider_for_devices(devices, {"load_config": json.dumps(config)})
        sessions[name] = ort.InferenceSession(path, sess_options=so)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    time_sessions(sessions, shapes, args, ort.__version__)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    n = sub.add_parser("nncf")
    n.add_argument("--model", required=True)
    n.add_argument("--features", required=True)
    n.add_argument("--out", required=True)
    t = sub.add_parser("time")
    t.add_argument("--plugin", required=True)
    add_time_args(t)
    d = sub.add_parser("devices")
    d.add_argument("--plugin", required=True)
    r = sub.add_parser("profile")
    r.add_argument("--models", required=True)
    r.add_argument("--shape", default="8x128")
    r.add_argument("--runs", type=int, default=20)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--top", type=int, default=20)
    r.add_argument("--out", required=True)
    args = p.parse_args()
    {"nncf": quantize_nncf, "time": time_models, "profile": profile_models, "devices": devices}[args.cmd](args)


if __name__ == "__main__":
    main()
