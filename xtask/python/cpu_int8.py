#!/usr/bin/env python3
"""CPU INT8 latency harness, driven by `cargo xtask bench cpu-int8`.

    cpu_int8.py dynamic --model M --out Q.onnx
        ONNX Runtime's one-liner: onnxruntime.quantization.quantize_dynamic(M, Q) with its defaults (plus the
        default float tensor type its docs name for models with com.microsoft ops, whose outputs shape inference
        cannot type).

    cpu_int8.py optimize --model M --out O.onnx
        ONNX Runtime's transformers optimizer on a BERT (model_type bert, heads and hidden size read from the graph,
        CPU): EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu. Prints the fused-op counts.

    cpu_int8.py time --models NAME=PATH[,NAME=PATH...] --shapes 1x256,8x128,1x384 --rounds R --runs N
                     --threads T --out TIMES.json
        Loads every model once (CPU EP, graph optimization level ALL, T intra-op threads), feeds each shape the same
        fixed random-token batch (seeded; attention mask all ones, token types 0 then 1), warms every session up, then
        for each round runs the models in turn, a block of N timed runs each after one untimed run (A.. B.. C.., the
        next round starting one model later), so that load on the machine hits all models alike while no model is
        timed beside another session's spinning threads. Writes, per shape and model, the per-round median latency
        in ms.

    cpu_int8.py profile --models NAME=PATH[,NAME=PATH...] --shape 8x128 --runs N --threads T
        Where each model's time goes, measured side by side: one profiling session per model (ONNX Runtime's
        profiler; intra-op threads do not spin between runs, so one session's idle threads do not slow the next),
        the same fixed batch, N runs in turn (A B C A B C ...); prints kernel time per op type per run (and node
        count) for every model in columns, the kernel total and the median wall time. For a question "why is model
        A slower than B here", asked of one moment of the host.

Tested with onnxruntime==1.31.1, numpy, sympy (the optimizer's shape inference).
"""

import argparse
import json
import time

import numpy as np


def dynamic(args):
    import onnx
    from onnxruntime.quantization import quantize_dynamic

    quantize_dynamic(args.model, args.out, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


def optimize(args):
    from onnxruntime.transformers.optimizer import optimize_model

    model = optimize_model(args.model, model_type="bert", num_heads=0, hidden_size=0, opt_level=0, use_gpu=False)
    counts = {k: v for k, v in model.get_fused_operator_statistics().items() if v}
    print(json.dumps(counts))
    if not counts.get("Attention"):
        raise SystemExit(f"the optimizer fused no Attention in {args.model}: {counts}")
    model.save_model_to_file(args.out)


def batch_for(session, batch, seq, rng):
    names = [i.name for i in session.get_inputs()]
    ids = rng.integers(1000, 29000, size=(batch, seq), dtype=np.int64)
    ids[:, 0] = 101
    ids[:, -1] = 102
    feeds = {}
    for name in names:
        if "mask" in name:
            feeds[name] = np.ones((batch, seq), dtype=np.int64)
        elif "type" in name or "segment" in name:
            tt = np.zeros((batch, seq), dtype=np.int64)
            tt[:, seq // 3 :] = 1
            feeds[name] = tt
        else:
            feeds[name] = ids
    return feeds


def run_by_run(sessions, feeds, runs):
    """Runs the sessions run by run in turn (A B C A B C ...), `runs` times each, for the profiler (whose sessions do
    not spin): each model's runs spread over the same seconds. Returns each session's latencies in ms."""
    times = {name: [] for name in sessions}
    for _ in range(runs):
        for name, s in sessions.items():
            t0 = time.perf_counter()
            s.run(None, feeds[name])
            times[name].append((time.perf_counter() - t0) * 1e3)
    return times


def in_turn(sessions, feeds, runs, first):
    """Runs the sessions in turn, starting with the `first`-th, each for one untimed run then `runs` timed ones.

    Not run by run (A B C A B C ...): ONNX Runtime's intra-op threads spin for a while after a run, and a session
    started while another's threads spin shares the cores with them (MiniLM at 1x384 on 2 cores: FP32 100 ms run
    by run against 56 ms in blocks, the INT8 models inflated by other amounts), which is no user's setting. A block
    is a few tenths of a second, short beside the host's swings, and the rotating start puts every model first in
    turn. Returns each session's latencies in ms."""
    names = list(sessions)
    names = names[first % len(names):] + names[: first % len(names)]
    times = {name: [] for name in names}
    for name in names:
        s = sessions[name]
        s.run(None, feeds[name])
        for _ in range(runs):
            t0 = time.perf_counter()
            s.run(None, feeds[name])
            times[name].append((time.perf_counter() - t0) * 1e3)
    return times


def time_models(args):
    import onnxruntime as ort

    models = [m.split("=", 1) for m in args.models.split(",")]
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    sessions = {}
    for name, path in models:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        sessions[name] = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    time_sessions(sessions, shapes, args, ort.__version__)


def time_sessions(sessions, shapes, args, version):
    """Times `sessions` at each shape: warm-up, then `args.rounds` rounds of blocks in turn ([`in_turn`]); writes
    per shape and model the per-round median latency in ms to `args.out` (also `ov_bench.py time`'s harness)."""
    result = {"versions": {"onnxruntime": version}, "threads": args.threads, "shapes": {}}
    for batch, seq in shapes:
        feeds = {name: batch_for(s, batch, seq, np.random.default_rng(1234)) for name, s in sessions.items()}
        for name, s in sessions.items():
            for _ in range(args.warmup):
                s.run(None, feeds[name])
        rounds = {name: [] for name in sessions}
        for r in range(args.rounds):
            times = in_turn(sessions, feeds, args.runs, r)
            for name in sessions:
                rounds[name].append(float(np.median(times[name])))
        result["shapes"][f"{batch}x{seq}"] = rounds
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


def profile_models(args):
    import collections
    import tempfile

    import onnxruntime as ort

    models = [m.split("=", 1) for m in args.models.split(",")]
    batch, seq = (int(x) for x in args.shape.split("x"))
    sessions = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in models:
            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads
            so.inter_op_num_threads = 1
            so.enable_profiling = True
            so.profile_file_prefix = f"{tmp}/{name}"
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            sessions[name] = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        feeds = {name: batch_for(s, batch, seq, np.random.default_rng(1234)) for name, s in sessions.items()}
        wall = run_by_run(sessions, feeds, args.runs)
        kernel, nodes = {}, {}
        for name, s in sessions.items():
            with open(s.end_profiling()) as f:
                events = json.load(f)
            k, n = collections.Counter(), collections.Counter()
            for e in events:
                if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                    k[e["args"]["op_name"]] += e["dur"] / 1e3 / args.runs
                    n[e["args"]["op_name"]] += 1
            kernel[name], nodes[name] = k, {op: c // args.runs for op, c in n.items()}
    ops = sorted(set().union(*kernel.values()), key=lambda op: -max(kernel[m][op] for m in kernel))
    print(f"{batch}x{seq}, {args.runs} runs per model in turn, ms per run (nodes)")
    print(f"{'op':<26}" + "".join(f"{m:>18}" for m in kernel))
    for op in ops[: args.top]:
        print(f"{op:<26}" + "".join(f"{kernel[m][op]:>11.2f} ({nodes[m].get(op, 0):>3})" for m in kernel))
    print(f"{'kernel total':<26}" + "".join(f"{sum(kernel[m].values()):>17.1f} " for m in kernel))
    print(f"{'wall median':<26}" + "".join(f"{float(np.median(wall[m])):>17.1f} " for m in kernel))


def add_time_args(t):
    """The options of a `time` command (also `ov_bench.py time`'s)."""
    t.add_argument("--models", required=True)
    t.add_argument("--shapes", default="1x256,8x128,1x384")
    t.add_argument("--rounds", type=int, default=9)
    t.add_argument("--runs", type=int, default=8)
    t.add_argument("--warmup", type=int, default=3)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--out", required=True)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dynamic")
    d.add_argument("--model", required=True)
    d.add_argument("--out", required=True)
    o = sub.add_parser("optimize")
    o.add_argument("--model", required=True)
    o.add_argument("--out", required=True)
    add_time_args(sub.add_parser("time"))
    r = sub.add_parser("profile")
    r.add_argument("--models", required=True)
    r.add_argument("--shape", default="8x128")
    r.add_argument("--runs", type=int, default=10)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--top", type=int, default=16)
    args = p.parse_args()
    {"dynamic": dynamic, "optimize": optimize, "time": time_models, "profile": profile_models}[args.cmd](args)


if __name__ == "__main__":
    main()
