#!/usr/bin/env python3
"""OpenVINO bench harness, driven by `cargo xtask bench --openvino`.

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

Tested with onnxruntime==1.31.1, nncf==3.4.0, onnx==1.23.2, numpy.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_int8 import add_time_args, time_sessions  # noqa: E402


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


def time_models(args):
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
    args = p.parse_args()
    {"nncf": quantize_nncf, "time": time_models}[args.cmd](args)


if __name__ == "__main__":
    main()
