#!/usr/bin/env python3
"""A BERT classifier made from a BERT QA model, for trying `qdq e2e` on a model that is not a SQuAD model.

    make_classifier.py --model model.onnx --squad-train train.json --squad-dev dev.json --out DIR [--classes 3]

Keeps the encoder of the QA model (everything up to the input of its QA head, the MatMul whose weight is [hidden, 2]),
takes the [CLS] row (Gather on axis 1) and adds a seeded random linear head (Gemm, transB=1, as torch exports a 2-D
nn.Linear) with one output `logits` [batch, classes]. Writes DIR/classifier.onnx, DIR/calibration.txt (100 question /
context pairs from the train file, tab-separated) and DIR/eval.txt (the first 1,000 dev questions with their
contexts). The head is random, so there is no accuracy to speak of: what `qdq e2e` reports is how closely the INT8
model agrees with FP32.

Needs onnx and numpy (the bench venv has both: .venv-bench/bin/python).
"""

import argparse
import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def encoder_output(graph):
    inits = {i.name: i for i in graph.initializer}
    for n in graph.node:
        if n.op_type == "MatMul" and n.input[1] in inits and list(inits[n.input[1]].dims)[-1] == 2:
            return n.input[0], list(inits[n.input[1]].dims)[0]
    raise SystemExit("no QA head (a MatMul with a [hidden, 2] weight) found")


def needed(graph, target):
    producer = {o: n for n in graph.node for o in n.output}
    keep, stack = set(), [target]
    while stack:
        t = stack.pop()
        n = producer.get(t)
        if n is None or id(n) in keep:
            continue
        keep.add(id(n))
        stack.extend(i for i in n.input if i)
    return [n for n in graph.node if id(n) in keep]


def pairs(path, n):
    data = json.load(open(path))["data"]
    out = []
    for article in data:
        for p in article["paragraphs"]:
            context = " ".join(p["context"].split()[:60])
            for qa in p["qas"]:
                out.append(f"{' '.join(qa['question'].split())}\t{context}")
                if len(out) == n:
                    return out
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--squad-train", required=True)
    ap.add_argument("--squad-dev", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--classes", type=int, default=3)
    args = ap.parse_args()
    m = onnx.load(args.model)
    g = m.graph
    hidden_state, hidden = encoder_output(g)
    nodes = needed(g, hidden_state)
    rng = np.random.default_rng(16)
    w = (rng.standard_normal((args.classes, hidden)) / np.sqrt(hidden) * 4).astype(np.float32)
    b = np.zeros(args.classes, dtype=np.float32)
    new_inits = [
        numpy_helper.from_array(np.array(0, dtype=np.int64), "classifier.cls_index"),
        numpy_helper.from_array(w, "classifier.weight"),
        numpy_helper.from_array(b, "classifier.bias"),
    ]
    nodes += [
        helper.make_node("Gather", [hidden_state, "classifier.cls_index"], ["cls"], name="/classifier/Gather", axis=1),
        helper.make_node("Gemm", ["cls", "classifier.weight", "classifier.bias"], ["logits"], name="/classifier/Gemm",
                         transB=1),
    ]
    used = {i for n in nodes for i in n.input}
    inits = [i for i in g.initializer if i.name in used] + new_inits
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", args.classes])
    graph = helper.make_graph(nodes, "bert_classifier", list(g.input), [out], inits)
    model = helper.make_model(graph, opset_imports=list(m.opset_import), producer_name="testdata/forms/make_classifier.py")
    model.ir_version = m.ir_version
    onnx.checker.check_model(model)
    os.makedirs(args.out, exist_ok=True)
    onnx.save(model, os.path.join(args.out, "classifier.onnx"))
    with open(os.path.join(args.out, "calibration.txt"), "w") as f:
        f.write("\n".join(pairs(args.squad_train, 100)) + "\n")
    with open(os.path.join(args.out, "eval.txt"), "w") as f:
        f.write("\n".join(pairs(args.squad_dev, 1000)) + "\n")
    print(f"wrote {args.out}/classifier.onnx ({len(nodes)} nodes), calibration.txt, eval.txt")


if __name__ == "__main__":
    main()
