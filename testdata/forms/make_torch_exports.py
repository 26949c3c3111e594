#!/usr/bin/env python3
"""Tiny question-answering models as PyTorch itself exports them, for the tests of graph forms qdq did not write.

    make_torch_exports.py --out testdata/forms

Writes, from seeded random weights (vocabulary 800 as testdata/squad/vocab.txt, hidden 32, 2 layers, 2 heads,
64 positions), each with both of PyTorch's exporters (`dynamo`: torch.export, opset 18+; `legacy`: TorchScript,
opset 17), weights inline:

- torch_bert_{dynamo,legacy}.onnx: BertForQuestionAnswering with transformers' default attention
  (scaled_dot_product_attention, exported with the "safe softmax" Where(IsNaN(P), 0, P) after every Softmax);
- torch_albert_{dynamo,legacy}.onnx: AlbertForQuestionAnswering (embedding size 16; both layers run one shared set
  of weights: one initializer read twice from the dynamo exporter, an initializer and Identity nodes of it from the
  legacy one).

Each file's logits are checked against PyTorch's in ONNX Runtime before it is written. Needs torch, transformers,
onnx, onnxscript and onnxruntime (made with torch 2.15.0, transformers 5.24.0, onnxruntime 1.31.1).
"""

import argparse
import os
import warnings

import numpy as np
import onnxruntime as ort
import torch
import transformers as T

NAMES = ["input_ids", "attention_mask", "token_type_ids"]
SIZES = dict(vocab_size=800, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             max_position_embeddings=64, type_vocab_size=2)


def models():
    torch.manual_seed(0)
    yield "bert", T.BertForQuestionAnswering(T.BertConfig(**SIZES))
    torch.manual_seed(1)
    yield "albert", T.AlbertForQuestionAnswering(T.AlbertConfig(embedding_size=16, **SIZES))


def export(model, dynamo, path):
    ids = torch.randint(5, 800, (2, 20))
    mask = torch.ones_like(ids)
    mask[1, 15:] = 0
    segment = torch.zeros_like(ids)
    segment[:, 10:] = 1
    args = (ids, mask, segment)
    kw = dict(input_names=NAMES, output_names=["start_logits", "end_logits"])
    if dynamo:
        from torch.export import Dim

        batch, seq = Dim("batch"), Dim("sequence", max=64)
        shapes = tuple({0: batch, 1: seq} for _ in NAMES)
        torch.onnx.export(model, args, path, dynamo=True, dynamic_shapes=shapes, external_data=False, **kw)
    else:
        axes = {n: {0: "batch", 1: "sequence"} for n in NAMES + kw["output_names"]}
        torch.onnx.export(model, args, path, dynamo=False, opset_version=17, dynamic_axes=axes, **kw)
    with torch.no_grad():
        want = model(*args)
    got = ort.InferenceSession(path).run(None, {n: a.numpy() for n, a in zip(NAMES, args)})
    err = max(np.abs(got[0] - want.start_logits.numpy()).max(), np.abs(got[1] - want.end_logits.numpy()).max())
    assert err < 1e-4, f"{path}: ONNX Runtime differs from PyTorch by {err}"
    print(f"{path}: {os.path.getsize(path)} bytes, logits within {err:.1e} of PyTorch's")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    out = p.parse_args().out
    warnings.filterwarnings("ignore")
    for name, model in models():
        model.eval()
        for exporter in ["dynamo", "legacy"]:
            export(model, exporter == "dynamo", os.path.join(out, f"torch_{name}_{exporter}.onnx"))


if __name__ == "__main__":
    main()
