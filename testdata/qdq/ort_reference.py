#!/usr/bin/env python3
"""Reference Q/DQ listing from ONNX Runtime's own QDQ quantizer (seed-001 / TensorRT options).

Usage:
    ort_reference.py MODEL.onnx RANGES.json OUT.json
    ort_reference.py MODEL.onnx --synth-ranges RANGES.json   # write synthetic ranges, then stop

RANGES.json maps tensor name -> [min, max]. The ranges are handed to
onnxruntime.quantization.quantize_static as a calibration cache, so no
calibration inference runs and the quantizer sees exactly these ranges.

OUT.json lists every Q->DQ pair of the quantized model, sorted by tensor and
consumers: the tensor it quantizes, whether that tensor is an initializer,
scale(s), zero point(s), axis, and the (node name, input slot) pairs that read
the DequantizeLinear output. Tested with onnxruntime==1.31.1, onnx, numpy.
"""

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper


# Per-channel scale lists are truncated to keep the listings small; scale_count and
# scale_sum still pin the whole vector.
MAX_LISTED_SCALES = 32


def synth_ranges(model: onnx.ModelProto) -> dict:
    """Deterministic, asymmetric ranges for every float node output and graph input."""
    names = [i.name for i in model.graph.input]
    for node in model.graph.node:
        names.extend(o for o in node.output if o)
    ranges = {}
    for name in names:
        h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
        k = 0.5 + (h % 1000) / 100.0  # magnitude in [0.5, 10.49]
        lo_frac = 0.25 + ((h >> 16) % 100) / 100.0  # min side in [0.25, 1.24] * k
        if (h >> 32) % 2:
            ranges[name] = [-k * lo_frac, k]
        else:
            ranges[name] = [-k, k * lo_frac]
    return ranges


def seed001_nodes_to_exclude(model: onnx.ModelProto) -> list:
    """Every Add whose output does not feed a ReduceMean or LayerNormalization."""
    consumers = {}
    for node in model.graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node.op_type)
    out = []
    for node in model.graph.node:
        if node.op_type != "Add":
            continue
        ops = [op for o in node.output for op in consumers.get(o, [])]
        if not any(op in ("ReduceMean", "LayerNormalization") for op in ops):
            out.append(node.name)
    return out


def listing(model: onnx.ModelProto) -> list:
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    consumers = {}
    for node in model.graph.node:
        for slot, i in enumerate(node.input):
            consumers.setdefault(i, []).append([node.name, slot])
    q_by_output = {n.output[0]: n for n in model.graph.node if n.op_type == "QuantizeLinear"}
    entries = []
    for dq in model.graph.node:
        if dq.op_type != "DequantizeLinear":
            continue
        q = q_by_output.get(dq.input[0])
        if q is None:
            raise SystemExit(f"DequantizeLinear {dq.name} is not fed by a QuantizeLinear")
        tensor = q.input[0]
        axis = None
        for a in dq.attribute:
            if a.name == "axis":
                axis = a.i
        scale = inits[dq.input[1]].astype(np.float64).reshape(-1).tolist()
        zp = inits[dq.input[2]].astype(np.int64).reshape(-1).tolist()
        entries.append(
            {
                "tensor": tensor,
                "scale_count": len(scale),
                "scale_sum": float(np.sum(np.asarray(scale, dtype=np.float64))),
                "is_initializer": tensor in inits,
                "quantize_node": q.name,
                "dequantize_node": dq.name,
                "scale": scale[:MAX_LISTED_SCALES],
                "zero_point": zp,
                "zero_point_type": onnx.TensorProto.DataType.Name(
                    next(t.data_type for t in model.graph.initializer if t.name == dq.input[2])
                ),
                "axis": axis if len(scale) > 1 else None,
                "consumers": sorted(consumers.get(dq.output[0], [])),
            }
        )
    entries.sort(key=lambda e: (e["tensor"], e["consumers"]))
    return entries


def quantize_seed001(model_path, ranges: dict, out_model) -> list:
    """Quantizes MODEL_PATH into OUT_MODEL with ONNX Runtime's quantize_static and the seed-001 options, taking
    RANGES (tensor name -> [min, max]) as its calibration cache. Returns the names of the excluded Add nodes."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.calibrate import TensorsData, save_tensors_data

    exclude = seed001_nodes_to_exclude(onnx.load(model_path))
    data = TensorsData(
        CalibrationMethod.MinMax,
        {k: (np.float32(v[0]), np.float32(v[1])) for k, v in ranges.items()},
    )
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "calib.json"
        save_tensors_data(data, cache)
        quantize_static(
            model_path,
            out_model,
            calibration_data_reader=None,
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=["MatMul", "Add"],
            per_channel=True,
            reduce_range=False,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=exclude,
            calibrate_method=CalibrationMethod.MinMax,
            extra_options={
                "ActivationSymmetric": True,
                "AddQDQPairToWeight": True,
                "DedicatedQDQPair": True,
                "QDQOpTypePerChannelSupportToAxis": {"MatMul": 1},
                "OpTypesToExcludeOutputQuantization": ["MatMul", "Add"],
            },
            calibration_cache_path=cache,
        )
    return exclude


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[2] == "--synth-ranges":
        model = onnx.load(sys.argv[1])
        Path(sys.argv[3]).write_text(json.dumps(synth_ranges(model), indent=1, sort_keys=True) + "\n")
        return
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    model_path, ranges_path, out_path = sys.argv[1:4]

    ranges = json.loads(Path(ranges_path).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        out_model = Path(tmp) / "q.onnx"
        exclude = quantize_seed001(model_path, ranges, out_model)
        q = onnx.load(out_model)
    opset = next(o.version for o in q.opset_import if o.domain in ("", "ai.onnx"))
    result = {
        "model": Path(model_path).name,
        "onnxruntime": __import__("onnxruntime").__version__,
        "opset": opset,
        "nodes_to_exclude": sorted(exclude),
        "pairs": listing(q),
    }
    Path(out_path).write_text(json.dumps(result, indent=0) + "\n")


if __name__ == "__main__":
    main()
