//! An embedding evaluation as text: the table (retrieval scores, or the cosine to FP32 without labels; speed and
//! size) and the lines under it (each difference with its paired interval, the share of FP32's score kept, how close
//! the embeddings stay, the neighbours, the speed in alternation).

use comfy_table::{CellAlignment, Table, presets::ASCII_MARKDOWN};

use crate::tasks::default_float::DefaultFloat;
use crate::tasks::embed::EmbeddingAt;
use crate::tasks::embed::speed::SpeedAt;

use crate::tasks::embed::{EmbeddingEval, EmbeddingModel, RetrievalEval};

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
    t.add_row(row("FP32", &e.fp32, None));
    t.add_row(row(int8, &e.int8, Some((e.retrieval.as_ref(), e.fidelity.mean_cosine))));
    if let Some(d) = &e.default_float {
        // The rows at the EP's own default float precision, each against FP32 at the run's.
        for (name, at) in [("FP32", &d.fp32), (int8, &d.int8)] {
            if let Some(at) = at {
                t.add_row(row(name, &at.model, Some((at.retrieval.as_ref(), at.fidelity.mean_cosine))));
            }
        }
    }
    for c in t.column_iter_mut().skip(2) {
        c.set_cell_alignment(CellAlignment::Right);
    }
    format!("{t}\n{}", notes(e, int8))
}

/// One model's row; `vs_fp32` for a model compared with FP32: its retrieval against FP32's (on retrieval data) and
/// its mean cosine to FP32's embeddings.
fn row(name: &str, m: &EmbeddingModel, vs_fp32: Option<(Option<&RetrievalEval>, f64)>) -> Vec<String> {
    let mut cells = vec![name.to_owned(), m.ran.label()];
    match (&m.retrieval, vs_fp32) {
        (Some(s), vs) => {
            let f = |v: f64| format!("{v:.2}");
            cells.extend([f(s.mrr_at_10), f(s.ndcg_at_10), f(s.recall_at_1), f(s.recall_at_5), f(s.recall_at_10)]);
            let d = vs.and_then(|(r, _)| r).map(|r| r.difference.ndcg_at_10.describe());
            cells.push(d.unwrap_or_default());
        }
        (None, vs) => cells.push(vs.map_or(String::new(), |(_, cosine)| format!("{cosine:.5}"))),
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
    if !f.groups.is_empty() {
        let parts: Vec<String> = f
            .groups
            .iter()
            .map(|g| {
                format!("{} ({}) {:.5} / {:.5} / {:.5}", g.name, g.texts, g.mean_cosine, g.p1_cosine, g.min_cosine)
            })
            .collect();
        text.push_str(&format!("By kind and length (mean / 1st percentile / smallest): {}.\n", parts.join("; ")));
    }
    let n = &f.neighbours;
    let (what, of) = if n.among == "documents" { ("document", "queries") } else { ("other text", "texts") };
    text.push_str(&format!(
        "Neighbours: the nearest {what} is FP32's for {:.2} % of the {} {of}; {:.2} % of FP32's top 10 kept.\n",
        100.0 * n.top1_same,
        n.compared,
        100.0 * n.top10_overlap
    ));
    // No text left behind: the ones that moved most, each with its cosine and its beginning.
    if !f.worst.is_empty() {
        text.push_str(&format!("Moved most ({} smallest cosines):\n", f.worst.len()));
        for w in &f.worst {
            text.push_str(&format!("- text {} (cosine {:.5}): {:?}\n", w.index + 1, w.cosine, w.text));
        }
    }
    text.push_str(&speed_notes(e, int8));
    text
}

/// The speed against FP32 in alternation, at the run's precision and at the EP's own default, and what the rows at
/// that default say.
fn speed_notes(e: &EmbeddingEval, int8: &str) -> String {
    let mut text = String::new();
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
    if let Some(d) = &e.default_float {
        text.push_str(&default_float_note(e, d, int8));
    }
    text
}

/// What the rows at the EP's own default float precision say: how close each model's embeddings stay to FP32's at the
/// run's precision, and how fast FP32 runs at each precision.
fn default_float_note(e: &EmbeddingEval, d: &DefaultFloat<EmbeddingAt, Vec<SpeedAt>>, int8: &str) -> String {
    let run = e.fp32.ran.ep_precision.as_deref().unwrap_or("the run's precision");
    let mut text = format!(
        "At {}, {}'s own default float precision here (the FP32 its users run), against FP32's embeddings at {run}:",
        d.name(),
        e.int8.ran.ep
    );
    let mut parts = vec![];
    for (name, at) in [("FP32", &d.fp32), (int8, &d.int8)] {
        if let Some(at) = at {
            let f = &at.fidelity;
            parts.push(format!(
                " {name} cosine mean {:.5}, 1st percentile {:.5}, nearest {} FP32's for {:.2} %",
                f.mean_cosine,
                f.p1_cosine,
                if f.neighbours.among == "documents" { "document" } else { "text" },
                100.0 * f.neighbours.top1_same
            ));
        }
    }
    text.push_str(&parts.join(";"));
    text.push_str(".\n");
    if let Some(speeds) = &d.fp32_speedup {
        let at: Vec<String> = speeds.iter().map(|s| s.describe()).collect();
        text.push_str(&format!("FP32 at {run} against FP32 at {}: {}.\n", d.precision, at.join("; ")));
    }
    if let Some(err) = &d.error {
        text.push_str(&format!("Not measured at {}: {err}.\n", d.precision));
    }
    text
}
