#!/usr/bin/env python3
"""Does qdq's output folder load where its source loads? Driven by `cargo xtask bench serve`.

    serve_check.py embedding --source DIR --out DIR --dataset DEV.json --samples N
        Loads the quantized folder with sentence-transformers as its users do (backend="onnx",
        model_kwargs={"file_name": "model_qdq.onnx"}; nothing copied by hand) and the source folder likewise (its own
        ONNX file), embeds the texts qdq's e2e embedded (the dataset's first N questions, then every paragraph), and
        prints as JSON each text's cosine between the two: mean, 1st percentile, smallest, and the count, for the
        bench to set beside the fidelity qdq measured (results.json in --out).

    serve_check.py qa --out DIR --features DIR
        Loads the quantized QA folder with optimum's ORTModelForQuestionAnswering (file_name="model_qdq.onnx") and
        runs the features in DIR (input_ids.npy, attention_mask.npy, token_type_ids.npy), and the same file with
        onnxruntime directly; prints the largest start / end logit difference between the two.

Tested with sentence-transformers 5.7.0, transformers 4.57.6, optimum-onnx 0.1.0, onnxruntime 1.31.1.
"""

import argparse
import json
import os

import numpy as np


def texts_of(dataset, samples):
    with open(dataset) as f:
        data = json.load(f)["data"]
    questions, paragraphs = [], []
    for article in data:
        for p in article["paragraphs"]:
            paragraphs.append(p["context"])
            questions.extend(q["question"] for q in p["qas"])
    if samples > 0:
        questions = questions[:samples]
    return questions + paragraphs


def source_file(folder):
    """The source folder's ONNX file as sentence-transformers is told it: at the top, else under onnx/."""
    return "model.onnx" if os.path.isfile(os.path.join(folder, "model.onnx")) else "onnx/model.onnx"


def embedding(args):
    from sentence_transformers import SentenceTransformer

    int8 = SentenceTransformer(args.out, backend="onnx", model_kwargs={"file_name": "model_qdq.onnx"})
    fp32 = SentenceTransformer(args.source, backend="onnx", model_kwargs={"file_name": source_file(args.source)})
    texts = texts_of(args.dataset, args.samples)
    a = fp32.encode(texts, batch_size=32, normalize_embeddings=True)
    b = int8.encode(texts, batch_size=32, normalize_embeddings=True)
    cos = np.sum(a * b, axis=1)
    print(
        json.dumps(
            {
                "texts": len(texts),
                "mean_cosine": float(cos.mean()),
                "p1_cosine": float(np.percentile(cos, 1)),
                "min_cosine": float(cos.min()),
                "max_seq_length": int(int8.max_seq_length),
            }
        )
    )


def qa(args):
    import onnxruntime as ort
    from optimum.onnxruntime import ORTModelForQuestionAnswering

    model = ORTModelForQuestionAnswering.from_pretrained(args.out, file_name="model_qdq.onnx")
    feeds = {n: np.load(os.path.join(args.features, f"{n}.npy")) for n in ("input_ids", "attention_mask", "token_type_ids")}
    out = model(**{k: v for k, v in feeds.items()})
    session = ort.InferenceSession(os.path.join(args.out, "model_qdq.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    start, end = session.run(["start_logits", "end_logits"], {n: feeds[n] for n in names})
    print(
        json.dumps(
            {
                "features": int(feeds["input_ids"].shape[0]),
                "start_max_diff": float(np.abs(np.asarray(out.start_logits) - start).max()),
                "end_max_diff": float(np.abs(np.asarray(out.end_logits) - end).max()),
            }
        )
    )


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("embedding")
    e.add_argument("--source", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--dataset", required=True)
    e.add_argument("--samples", type=int, default=300)
    q = sub.add_parser("qa")
    q.add_argument("--out", required=True)
    q.add_argument("--features", required=True)
    args = p.parse_args()
    {"embedding": embedding, "qa": qa}[args.cmd](args)


if __name__ == "__main__":
    main()
