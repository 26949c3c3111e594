"""Writes the three calibration tables ONNX Runtime's own `write_calibration_table` produces (calibration.json,
calibration.flatbuffers, calibration.cache) for a few tensors with known ranges, into testdata/calib/ort/.

    python testdata/calib/ort_tables.py          # needs onnxruntime==1.31.1, numpy, flatbuffers
    python testdata/calib/ort_tables.py QDQ_CALIBRATION_JSON OUT_DIR
        # ONNX Runtime's three tables for the ranges of a qdq calibration.json, made symmetric (-amax, amax) so
        # that every format carries the same information (to check that they drive `qdq quantize` alike)

The tensors cover what users' files hold: an ordinary activation (lowest < 0 < highest), a non-negative one (after
ReLU / Softmax), an all-negative one (ORT writes max(highest, lowest), a negative number, to the two amax formats),
an asymmetric one whose |lowest| is the larger, and a name with characters that need care (slashes, colons).
"""

import json
import os
import sys
from pathlib import Path

import numpy as np
from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData
from onnxruntime.quantization.quant_utils import write_calibration_table

RANGES = {
    "/bert/embeddings/LayerNorm/Add_1_output_0": (-4.25, 3.5),
    "/bert/encoder/layer.0/attention/self/Softmax_output_0": (0.0, 0.96875),
    "all_negative": (-0.75, -0.0064),
    "asymmetric:0": (-12.5, 2.0),
}


def main() -> None:
    ranges, out = RANGES, Path(__file__).resolve().parent / "ort"
    if len(sys.argv) == 3:
        table = json.loads(Path(sys.argv[1]).read_text())["ranges"]
        amax = {k: max(abs(r["min"]), abs(r["max"])) for k, r in table.items()}
        ranges, out = {k: (-a, a) for k, a in amax.items()}, Path(sys.argv[2])
    out.mkdir(exist_ok=True)
    data = {
        name: TensorData(lowest=np.float32(lo), highest=np.float32(hi)) for name, (lo, hi) in ranges.items()
    }
    cwd = os.getcwd()
    try:
        write_calibration_table(TensorsData(CalibrationMethod.MinMax, data), dir=str(out))
    finally:
        os.chdir(cwd)
    for f in sorted(out.iterdir()):
        print(f, f.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
