#!/usr/bin/env python3
"""ONNX Runtime's own QNN recipe, driven by `cargo xtask bench qnn`.

    qnn_bench.py recipe --model M --features DIR --out Q.onnx [--activations uint16|uint8]
        The model ONNX Runtime's documentation prescribes for QNN's HTP: M's inputs fixed to the features' shape
        (QNN takes static shapes only), `qnn_preprocess_model` (its LayerNorm / GELU fusions), then `quantize` with
        `get_qnn_qdq_config` (activations as --activations, weights uint8, per tensor: the recipe's defaults),
        calibrated on every feature in DIR (input_ids.npy, attention_mask.npy, token_type_ids.npy: the features
        `qdq calibrate` builds from the same questions, as `cargo xtask bench` writes them), one feature per item.
        Prints one JSON line: versions, features, the opset written.

Tested with onnxruntime==1.31.1, onnx==1.23.2, numpy.
"""

import argparse
import json
import os
import tempfile

import numpy as np


class Features:
    """The calibration features, one per `get_next` (the CalibrationDataReader protocol)."""

    def __init__(self, directory, names):
        self.arrays = {n: np.load(os.path.join(directory, f"{n}.npy")) for n in names}
        self.count = len(next(iter(self.arrays.values())))
        self.at = 0

    def get_next(self):
        if self.at >= self.count:
            return None
        item = {n: a[self.at : self.at + 1] for n, a in self.arrays.items()}
        self.at += 1
        return item

    def rewind(self):
        self.at = 0


def fix_inputs(model, shape):
    """Every graph input's dimensions set to `shape` (batch x sequence), by value: QNN refuses symbolic ones."""
    for i in model.graph.input:
        dims = i.type.tensor_type.shape.dim
        if len(dims) != len(shape):
            raise SystemExit(f"input {i.name} has {len(dims)} dimensions; the features have {len(shape)}")
        for d, v in zip(dims, shape):
            d.ClearField("dim_param")
            d.dim_value = int(v)


def recipe(args):
    import onnx
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config, qnn_preprocess_model

    model = onnx.load(args.model)
    names = [i.name for i in model.graph.input]
    data = Features(args.features, names)
    fix_inputs(model, (1, data.arrays[names[0]].shape[1]))
    activation = {"uint16": QuantType.QUInt16, "uint8": QuantType.QUInt8}[args.activations]
    with tempfile.TemporaryDirectory() as tmp:
        fixed = os.path.join(tmp, "fixed.onnx")
        onnx.save(onnx.shape_inference.infer_shapes(model), fixed)
        pre = os.path.join(tmp, "pre.onnx")
        changed = qnn_preprocess_model(fixed, pre)
        source = pre if changed else fixed
        config = get_qnn_qdq_config(source, data, activation_type=activation, weight_type=QuantType.QUInt8)
        quantize(source, args.out, config)
    opset = next(o.version for o in onnx.load(args.out, load_external_data=False).opset_import if o.domain in ("", "ai.onnx"))
    print(
        json.dumps(
            {
                "onnxruntime": onnxruntime.__version__,
                "features": data.count,
                "activations": args.activations,
                "preprocessed": bool(changed),
                "opset": opset,
            }
        )
    )


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recipe")
    r.add_argument("--model", required=True)
    r.add_argument("--features", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--activations", choices=["uint16", "uint8"], default="uint16")
    args = p.parse_args()
    {"recipe": recipe}[args.cmd](args)


if __name__ == "__main__":
    main()
