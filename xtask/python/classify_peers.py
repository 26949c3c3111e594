"""A sentence-pair classifier's peers for the issue-77 measurement (docs/BENCHMARKS.md): NNCF's INT8 and ONNX Runtime's
dynamic INT8 of the classifier make_qnli_classifier.py writes, scored on GLUE-layout dev pairs against FP32.

    classify_peers.py tokenize MODEL_DIR DEV.tsv TRAIN.tsv IDS.json
        (a venv with transformers) the pairs as the model's own tokenizer frames them (384 tokens at most): every dev
        pair, and the first 300 training pairs (NNCF's default subset) for NNCF's calibration.
    classify_peers.py peers MODEL.onnx IDS.json OUT_DIR
        (the bench venv: onnxruntime==1.31.1, nncf==3.4.0) OUT_DIR/dynamic.onnx (quantize_dynamic as optimum's
        avx512_vnni configuration: MatMul and Add, int8 symmetric per-channel weights) and OUT_DIR/nncf.onnx
        (nncf.quantize, ModelType.TRANSFORMER, its defaults), then FP32 and both on every dev pair, one pair per run:
        accuracy, INT8 minus FP32 paired per pair with its 95 % interval, class = FP32's, mean KL. Prints JSON.
"""

import json
import sys

import numpy as np

LABELS = {"entailment": 0, "not_entailment": 1}


def tokenize(model_dir, dev, train, out):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)

    def read(path, n=None):
        rows = [line.rstrip("\n").split("\t") for line in open(path)][1:]
        rows = rows[:n] if n else rows
        enc = tok([r[1] for r in rows], [r[2] for r in rows], truncation=True, max_length=384)
        return {"input_ids": enc["input_ids"], "token_type_ids": enc["token_type_ids"],
                "labels": [LABELS[r[3]] for r in rows]}

    json.dump({"dev": read(dev), "train": read(train, 300)}, open(out, "w"))


def peers(model, ids, out):
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    data = json.load(open(ids))

    def items(part):
        d = data[part]
        for i, t in zip(d["input_ids"], d["token_type_ids"]):
            a = np.array([i], dtype=np.int64)
            yield {"input_ids": a, "attention_mask": np.ones_like(a), "token_type_ids": np.array([t], dtype=np.int64)}

    quantize_dynamic(model, f"{out}/dynamic.onnx", op_types_to_quantize=["MatMul", "Add"], per_channel=True,
                     reduce_range=False, weight_type=QuantType.QInt8,
                     extra_options={"WeightSymmetric": True, "ActivationSymmetric": False,
                                    "DefaultTensorType": onnx.TensorProto.FLOAT})
    import nncf
    calibration = list(items("train"))
    q = nncf.quantize(onnx.load(model), nncf.Dataset(calibration), model_type=nncf.ModelType.TRANSFORMER,
                      subset_size=len(calibration))
    onnx.save(q, f"{out}/nncf.onnx")

    def logits(path):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        return np.array([s.run(["logits"], it)[0][0] for it in items("dev")])

    def softmax(x):
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    labels = np.array(data["dev"]["labels"])
    fp32 = logits(model)
    result = {"pairs": len(labels), "fp32_accuracy": float((fp32.argmax(1) == labels).mean())}
    for name in ["dynamic", "nncf"]:
        q = logits(f"{out}/{name}.onnx")
        d = (q.argmax(1) == labels).astype(float) - (fp32.argmax(1) == labels)
        p, r = softmax(fp32), softmax(q)
        result[name] = {
            "accuracy": float((q.argmax(1) == labels).mean()),
            "difference": float(d.mean()),
            "difference_95": float(1.96 * d.std(ddof=1) / np.sqrt(len(d))),
            "same_class": float((fp32.argmax(1) == q.argmax(1)).mean()),
            "mean_kl": float((p * (np.log(p) - np.log(r))).sum(1).mean()),
        }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    {"tokenize": tokenize, "peers": peers}[sys.argv[1]](*sys.argv[2:])
