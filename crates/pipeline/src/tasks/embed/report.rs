//! An embedding evaluation as text: the table (retrieval scores, or the cosine to FP32 without labels; speed and
//! size) and the lines under it (each difference with its paired interval, the share of FP32's score kept, how close
//! the embeddings stay, the neighbours, the speed in alternation).

use comfy_table::{CellAlignment, Table, presets::ASCII_MARKDOWN};

use crate::tasks::embed::{EmbeddingEval, EmbeddingModel};

/// The table and its notes; `int8` names the quantized model's row.
pub fn embedding_table(e: &EmbeddingEval, int8: &str) -> String {
    let mut t = Table::new();
    t.load_preset(ASCII_MARKDOWN);
    let retrieval = e.retrieval.as_ref();
    let mut header = vec!["model", "EP"];
    if retrieval.is_some() {
        header.extend(["MRR@10", "nDCG@10", "R@1", "R@5", "R@10", "dnDCG@10 [95 %]"]);
    } else {
        header.push("cosine to FP32 (mean)");
    }
    header.extend(["ms/text", "texts/s", "size (MB)"]);
    t.set_header(header);
    for (name, m, quantized) in [("FP32", &e.fp32, false), (int8, &e.int8, true)] {
        t.add_row(row(e, name, m, quantized));
    }
    for c in t.column_iter_mut().skip(2) {
        c.set_cell_alignment(CellAlignment::Right);
    }
    format!("{t}\n{}", notes(e, int8))
}

/// One model's row.
fn row(e: &EmbeddingEval, name: &str, m: &EmbeddingModel, quantized: bool) -> Vec<String> {
    let mut cells = vec![name.to_owned(), m.ran.label()];
    match (&m.retrieval, &e.retrieval) {
        (Some(s), Some(r)) => {
            let f = |v: f64| format!("{v:.2}");
            cells.extend([f(s.mrr_at_10), f(s.ndcg_at_10), f(s.recall_at_1), f(s.recall_at_5), f(s.recall_at_10)]);
            cells.push(if quantized { r.difference.ndcg_at_10.describe() } else { String::new() });
        }
        _ => cells.push(if quantized { format!("{:.5}", e.fidelity.mean_cosine) } else { String::new() }),
    }
    cells.extend([
        format!("{:.2}", m.latency.ms_per_feature),
        format!("{:.1}", m.latency.features_per_second),
        format!("{:.1}", m.ran.model_bytes as f64 / 1e6),
    ]);
    cells
}

/// What is said under the table.
fn notes(e: &EmbeddingEval, int8: &str) -> String {
    let mut text = String::new();
    let pooling = match (&e.pooling, &e.pooling_from) {
        (Some(p), Some(from)) => format!(", {p} pooling (from {from})"),
        _ => String::new(),
    };
    text.push_str(&format!(
        "\nEmbedding: `{}` ({}{pooling}); texts of at most {} tokens.\n",
        e.output, e.detected, e.seq_len
    ));
    if let Some(r) = &e.retrieval {
        let d = &r.difference;
        text.push_str(&format!(
            "Retrieval: each of {} queries ranks {} documents. {int8} minus FP32, paired over the queries (95 %): \
             MRR@10 {}, nDCG@10 {}, R@1 {}, R@10 {}; {int8} keeps {:.2} % of FP32's nDCG@10 and {:.2} % of its \
             MRR@10.\n",
            r.queries,
            r.documents,
            d.mrr_at_10.describe(),
            d.ndcg_at_10.describe(),
            d.recall_at_1.describe(),
            d.recall_at_10.describe(),
            100.0 * d.ndcg_at_10_retained,
            100.0 * d.mrr_at_10_retained,
        ));
    }
    let f = &e.fidelity;
    text.push_str(&format!(
        "Fidelity: cosine between {int8}'s and FP32's embedding of each of the {} texts: mean {:.5}, 1st percentile \
         {:.5}, smallest {:.5}.\n",
        f.texts, f.mean_cosine, f.p1_cosine, f.min_cosine
    ));
    let n = &f.neighbours;
    let (what, of) = if n.among == "documents" { ("document", "queries") } else { ("other text", "texts") };
    text.push_str(&format!(
        "Neighbours: the nearest {what} is FP32's for {:.2} % of the {} {of}; {:.2} % of FP32's top 10 kept.\n",
        100.0 * n.top1_same,
        n.compared,
        100.0 * n.top10_overlap
    ));
    if let Some(w) = f.worst.first() {
        text.push_str(&format!("Moved most: text {} (cosine {:.5}): {:?}\n", w.index + 1, w.cosine, w.text));
    }
    if !e.speed.is_empty() {
        let at: Vec<String> = e.speed.iter().map(|s| s.describe()).collect();
        text.push_str(&format!(
            "{int8} against FP32, both run in turn ({} rounds, median and slowest-fastest round): {}.\n",
            e.speed[0].speedup.rounds,
            at.join("; ")
        ));
    }
    if let Some(d) = &e.speed_default_precision {
        let line = d.describe_with(&e.int8.ran.ep, |speeds| {
            let at: Vec<String> = speeds.iter().map(|s| s.describe()).collect();
            format!("{int8} against FP32, {}", at.join("; "))
        });
        text.push_str(&format!("{line}\n"));
    }
    text
}
