"""The classifier make_qnli_classifier.py builds, exported again by PyTorch's own exporters (issue 77: other exporters'
graph forms): its optimum ONNX weights read back into a BertForSequenceClassification, then `torch.onnx.export` with
the TorchScript exporter (`legacy`: opset 17, LayerNormalization, an output named by a number) or the dynamo exporter
(`dynamo`: opset 18, every tensor named after its aten op, output `linear_37`), beside the folder's tokenizer and
config.json. `qdq e2e` on each must find the classifier's output and correct its bias as it does optimum's.

usage: python reexport_classifier.py OPTIMUM_FOLDER OUT legacy|dynamo
Runs in the torch venv make_qnli_classifier.py uses.
"""

import shutil
import sys
from collections import Counter
from pathlib import Path


def classifier_from_onnx(folder):
    """A BertForSequenceClassification with the weights of `folder`'s model.onnx: initializers that keep their PyTorch
    names as they are, each MatMul / Gemm weight optimum renamed (`onnx::MatMul_123`) by its node's module path (a
    MatMul's weight is the Linear's transposed, a Gemm with transB its own)."""
    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper
    from transformers import BertConfig, BertForSequenceClassification

    model = BertForSequenceClassification(BertConfig.from_pretrained(folder))
    graph = onnx.load(str(Path(folder) / "model.onnx")).graph
    init = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    module = lambda name: name if name.startswith(("bert.", "classifier.")) else "bert." + name  # noqa: E731
    state = {module(n): torch.from_numpy(np.array(v)) for n, v in init.items() if not n.startswith("onnx::")}
    for node in graph.node:
        if node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2 or not node.input[1].startswith("onnx::"):
            continue
        if node.input[1] not in init:
            continue
        weight = np.array(init[node.input[1]])
        trans_b = any(a.name == "transB" and a.i == 1 for a in node.attribute)
        key = module(node.name.strip("/").rsplit("/", 1)[0].replace("/", ".")) + ".weight"
        state[key] = torch.from_numpy(weight.copy() if trans_b else weight.T.copy())
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or unexpected:
        sys.exit(f"weights not mapped: missing {missing}, unexpected {unexpected}")
    return model.eval()


def main():
    import onnx
    import torch

    src, out, exporter = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    if exporter not in ("legacy", "dynamo"):
        sys.exit(f"exporter {exporter!r}: expected legacy or dynamo")
    out.mkdir(parents=True, exist_ok=True)
    model = classifier_from_onnx(src)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    ids = torch.ones(2, 16, dtype=torch.long)
    args = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    if exporter == "dynamo":
        batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=512)
        torch.onnx.export(model, args, str(out / "model.onnx"), dynamo=True, external_data=False, input_names=names,
                          opset_version=18, dynamic_shapes=tuple({0: batch, 1: seq} for _ in names))
    else:
        torch.onnx.export(model, args, str(out / "model.onnx"), dynamo=False, input_names=names, opset_version=17,
                          dynamic_axes={n: {0: "batch", 1: "seq"} for n in names})
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]:
        if (src / f).exists():
            shutil.copy(src / f, out / f)
    graph = onnx.load(str(out / "model.onnx")).graph
    print("inputs", [i.name for i in graph.input], "outputs", [o.name for o in graph.output])
    print("ops", Counter(n.op_type for n in graph.node).most_common(12))


if __name__ == "__main__":
    main()
