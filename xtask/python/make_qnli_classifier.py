"""A real fine-tuned sentence-pair classifier for `cargo xtask bench classify` (issue 77): QNLI rebuilt from SQuAD
v1.1 as GLUE built it (does this sentence of the paragraph hold the answer to the question?), written in GLUE's own
TSV layout (index, question, sentence, label; labels `entailment` / `not_entailment`), and all-MiniLM-L6-v2's encoder
(its ONNX export's weights, read back into a BertModel) fine-tuned on the training pairs, then exported by Hugging Face
optimum as users export classifiers (`optimum-cli export onnx --task text-classification`: config.json with id2label
and label2id, inputs input_ids / attention_mask / token_type_ids, output `logits`).

usage: python make_qnli_classifier.py SQUAD_TRAIN SQUAD_DEV EMBED_FOLDER OUT [--train-pairs N] [--epochs E]
Runs in a venv with torch, transformers and optimum-onnx (../shared/tools/make-all-mpnet-base-v2.sh makes one).
Writes OUT/train.tsv, OUT/dev.tsv, OUT/model/ (the ONNX classifier folder) and OUT/fp32_dev.json (the FP32 model's
dev accuracy through onnxruntime with the tokenizer's own framing: the independent figure qdq's FP32 must equal).
"""

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

LABELS = ["entailment", "not_entailment"]


def sentences(context):
    """(start, end) character spans of the paragraph's sentences: split after . ! ? followed by whitespace."""
    spans, start = [], 0
    for m in re.finditer(r"(?<=[.!?])\s+", context):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(context)))
    return [(a, b) for a, b in spans if b > a]


def qnli_pairs(squad_file, seed):
    """Per question: the sentence holding its first answer (entailment) and another sentence of the paragraph
    (not_entailment), GLUE's construction without its lexical-overlap filter."""
    rng = random.Random(seed)
    pairs = []
    for article in json.load(open(squad_file))["data"]:
        for para in article["paragraphs"]:
            ctx = para["context"]
            spans = sentences(ctx)
            if len(spans) < 2:
                continue
            for qa in para["qas"]:
                if not qa["answers"]:
                    continue
                at = qa["answers"][0]["answer_start"]
                hit = [i for i, (a, b) in enumerate(spans) if a <= at < b]
                if not hit:
                    continue
                other = rng.choice([i for i in range(len(spans)) if i != hit[0]])
                q = " ".join(qa["question"].split())
                for i, label in ((hit[0], 0), (other, 1)):
                    s = " ".join(ctx[spans[i][0]:spans[i][1]].split())
                    pairs.append((q, s, label))
    return pairs


def write_tsv(path, pairs):
    with open(path, "w") as f:
        f.write("index\tquestion\tsentence\tlabel\n")
        for i, (q, s, label) in enumerate(pairs):
            f.write(f"{i}\t{q}\t{s}\t{LABELS[label]}\n")


def bert_from_onnx(folder):
    """all-MiniLM-L6-v2's BertModel with the weights of its ONNX export (MatMul weights are the Linear weights
    transposed; the rest keep their PyTorch names)."""
    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig.from_pretrained(folder)
    config.num_labels = len(LABELS)
    config.id2label = dict(enumerate(LABELS))
    config.label2id = {l: i for i, l in enumerate(LABELS)}
    model = BertForSequenceClassification(config)
    onnx_file = next(Path(folder).glob("**/model.onnx"))
    graph = onnx.load(str(onnx_file)).graph
    init = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    state = {}
    for name, value in init.items():
        if not name.startswith("onnx::"):
            state["bert." + name] = torch.from_numpy(np.array(value))
    for node in graph.node:
        if node.op_type == "MatMul" and node.input[1] in init and node.name.startswith("/encoder/"):
            key = "bert." + node.name.strip("/").rsplit("/", 1)[0].replace("/", ".") + ".weight"
            state[key] = torch.from_numpy(np.array(init[node.input[1]]).T.copy())
    missing, unexpected = model.load_state_dict(state, strict=False)
    left = [k for k in missing if not k.startswith(("classifier.", "bert.pooler.", "bert.embeddings.position_ids"))]
    if left or unexpected:
        sys.exit(f"weights not mapped: missing {left}, unexpected {unexpected}")
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("train")
    ap.add_argument("dev")
    ap.add_argument("embed_folder")
    ap.add_argument("out")
    ap.add_argument("--train-pairs", type=int, default=8000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-len", type=int, default=128, help="tokens per training pair")
    ap.add_argument("--eval-len", type=int, default=384, help="tokens per dev pair (qdq's default --seq-len)")
    ap.add_argument("--seed", type=int, default=13)
    a = ap.parse_args()

    import numpy as np
    import torch
    from transformers import AutoTokenizer

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    train = qnli_pairs(a.train, a.seed)
    dev = qnli_pairs(a.dev, a.seed)
    write_tsv(out / "train.tsv", train)
    write_tsv(out / "dev.tsv", dev)
    print(f"QNLI from SQuAD: {len(train)} training pairs, {len(dev)} dev pairs", flush=True)

    torch.manual_seed(a.seed)
    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(a.embed_folder)
    model = bert_from_onnx(a.embed_folder)
    rng = random.Random(a.seed)
    picked = rng.sample(train, min(a.train_pairs, len(train)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    steps = a.epochs * ((len(picked) + 31) // 32)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / (0.1 * steps)) * max(0.0, 1 - s / steps))
    model.train()
    step = 0
    for epoch in range(a.epochs):
        rng.shuffle(picked)
        for i in range(0, len(picked), 32):
            batch = picked[i:i + 32]
            enc = tok([p[0] for p in batch], [p[1] for p in batch], truncation=True, max_length=a.max_len,
                      padding=True, return_tensors="pt")
            loss = model(**enc, labels=torch.tensor([p[2] for p in batch])).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            if step % 25 == 0:
                print(f"epoch {epoch + 1} step {step}/{steps} loss {loss.item():.4f}", flush=True)
    model.eval()
    hf = out / "hf"
    model.save_pretrained(hf)
    tok.save_pretrained(hf)
    onnx_dir = out / "model"
    subprocess.run([str(Path(sys.executable).parent / "optimum-cli"), "export", "onnx", "--model", str(hf), "--task",
                    "text-classification", str(onnx_dir)], check=True, stdout=subprocess.DEVNULL)

    # The independent FP32 figure: onnxruntime on every dev pair, framed by the tokenizer itself.
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(onnx_dir / "model.onnx"), so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    right = 0
    for i in range(0, len(dev), 64):
        batch = dev[i:i + 64]
        enc = tok([p[0] for p in batch], [p[1] for p in batch], truncation=True, max_length=a.eval_len,
                  padding=True, return_tensors="np")
        logits = sess.run(["logits"], {n: enc[n].astype(np.int64) for n in names})[0]
        right += int((logits.argmax(1) == np.array([p[2] for p in batch])).sum())
    result = {"dev_pairs": len(dev), "fp32_accuracy": right / len(dev), "train_pairs_used": len(picked),
              "epochs": a.epochs, "max_len": a.max_len, "eval_len": a.eval_len}
    (out / "fp32_dev.json").write_text(json.dumps(result, indent=1))
    shutil.rmtree(hf)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
