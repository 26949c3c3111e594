#!/usr/bin/env python3
"""Sentence-embedding peers, made for `cargo xtask bench embeddings`.

    embed_bench.py dynamic --model M --out Q.onnx
        ONNX Runtime's dynamic INT8 as sentence-transformers' export_dynamic_quantized_onnx_model writes it with
        optimum's avx512_vnni configuration: quantize_dynamic over MatMul (and Add, which the dynamic mode leaves
        alone), int8 symmetric per-channel weights, uint8 asymmetric activations at run time, full range.

    embed_bench.py nncf --model M --texts T.json --out Q.onnx
        NNCF's static INT8 (nncf.quantize, ModelType.TRANSFORMER and its other defaults, SmoothQuant among them) of M,
        calibrated on every text in T.json (token ids, one list per text, framed as the model's tokenizer frames
        it: [CLS] text [SEP]; or a sentence pair's {"ids": [...], "types": [...]}), one per item, the attention mask
        all ones.

The timing of the models is cpu_int8.py's and ov_bench.py's `time`. Tested with onnxruntime==1.31.1, nncf==3.4.0,
onnx, numpy.
"""

import argparse
import json

import numpy as np


def dynamic(args):
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        args.model,
        args.out,
        op_types_to_quantize=["MatMul", "Add"],
        per_channel=True,
        reduce_range=False,
        weight_type=QuantType.QInt8,
        extra_options={
            "WeightSymmetric": True,
            "ActivationSymmetric": False,
            "DefaultTensorType": onnx.TensorProto.FLOAT,
        },
    )


def quantize_nncf(args):
    import nncf
    import onnx

    model = onnx.load(args.model)
    names = [i.name for i in model.graph.input]
    with open(args.texts) as f:
        texts = json.load(f)
    items = []
    for text in texts:
        # A text's ids, or a pair's {"ids": [...], "types": [...]} (its segment ids as the tokenizer frames it).
        ids, types = (text["ids"], text["types"]) if isinstance(text, dict) else (text, [0] * len(text))
        row = np.array([ids], dtype=np.int64)
        item = {}
        for n in names:
            if "mask" in n:
                item[n] = np.ones_like(row)
            elif "type" in n or "segment" in n:
                item[n] = np.array([types], dtype=np.int64)
            else:
                item[n] = row
        items.append(item)
    q = nncf.quantize(model, nncf.Dataset(items), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(items))
    onnx.save(q, args.out)
    print(json.dumps({"nncf": nncf.__version__, "texts": len(items)}))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dynamic")
    d.add_argument("--model", required=True)
    d.add_argument("--out", required=True)
    n = sub.add_parser("nncf")
    n.add_argument("--model", required=True)
    n.add_argument("--texts", required=True)
    n.add_argument("--out", required=True)
    args = p.parse_args()
    {"dynamic": dynamic, "nncf": quantize_nncf}[args.cmd](args)


if __name__ == "__main__":
    main()
