//! Tables of what a model runs: kernel time per operator type (ONNX Runtime's profiler), and the MatMul-like work left
//! in float.

use crate::steps::speed::OpProfile;

/// Kernel time per operator type of each of `models` (name, profile), side by side: ms per feature and share of the
/// model's kernel time, the operators most costly in any model first; the provider is named where it is not the CPU.
/// Columns aligned, and valid Markdown.
pub fn op_table(models: &[(&str, &OpProfile)]) -> String {
    use comfy_table::{CellAlignment, Table, presets::ASCII_MARKDOWN};
    let mut rows: Vec<(&str, &str, f64)> = vec![];
    for (_, p) in models {
        for o in &p.ops {
            match rows.iter_mut().find(|r| r.0 == o.op && r.1 == o.provider) {
                Some(r) => r.2 = r.2.max(o.ms_per_feature),
                None => rows.push((&o.op, &o.provider, o.ms_per_feature)),
            }
        }
    }
    rows.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.0.cmp(b.0)));
    let mut t = Table::new();
    t.load_preset(ASCII_MARKDOWN);
    let mut header = vec!["operator".to_owned()];
    for (name, _) in models {
        header.extend([format!("{name} nodes"), format!("{name} ms/feature")]);
    }
    t.set_header(header);
    for (op, provider, _) in rows {
        let label = match provider {
            "CPUExecutionProvider" | "" => op.to_owned(),
            p => format!("{op} ({})", p.trim_end_matches("ExecutionProvider")),
        };
        let mut row = vec![label];
        for (_, p) in models {
            match p.ops.iter().find(|o| o.op == op && o.provider == provider) {
                Some(o) => row.extend([
                    o.nodes.to_string(),
                    format!("{:.3} ({:.0} %)", o.ms_per_feature, 100.0 * o.ms_per_feature / p.kernel_ms_per_feature),
                ]),
                None => row.extend(["".to_owned(), "".to_owned()]),
            }
        }
        t.add_row(row);
    }
    for (label, value) in [("all kernels", 0), ("whole run", 1)] {
        let mut row = vec![label.to_owned()];
        for (_, p) in models {
            let ms = if value == 0 { p.kernel_ms_per_feature } else { p.run_ms_per_feature };
            row.extend([String::new(), format!("{ms:.3}")]);
        }
        t.add_row(row);
    }
    for c in t.column_iter_mut().skip(1) {
        c.set_cell_alignment(CellAlignment::Right);
    }
    let p = models.first().map(|m| m.1);
    format!(
        "{t}\nONNX Runtime's profiler: kernel time per operator type as it ran them (after its graph optimisations), \
         per feature, over {} passes of the same {} features after an untimed one; a profiled run is slower than an \
         unprofiled one, so read shares, not speed.\n",
        p.map_or(0, |p| p.passes),
        p.map_or(0, |p| p.features)
    )
}

/// `MatMul 12, Attention 6`: the float MatMul-like nodes counted per op type.
pub fn float_summary(nodes: &[qdq::FloatNode]) -> String {
    let mut by_op: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for n in nodes {
        *by_op.entry(n.op_type.as_str()).or_default() += 1;
    }
    by_op.iter().map(|(op, c)| format!("{op} {c}")).collect::<Vec<_>>().join(", ")
}
