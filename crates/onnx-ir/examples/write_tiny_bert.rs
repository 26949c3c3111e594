//! Writes tiny BERT models: `cargo run -p qdq-onnx-ir --example write_tiny_bert -- OUT_DIR [VOCAB_SIZE]`
//! produces OUT_DIR/tiny_bert_decomposed.onnx and OUT_DIR/tiny_bert_fused.onnx.

use qdq_onnx_ir::tiny_bert::{LayerNormKind, TinyBertConfig, build};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = std::path::PathBuf::from(args.next().ok_or("usage: write_tiny_bert OUT_DIR [VOCAB_SIZE]")?);
    let vocab_size = match args.next() {
        Some(v) => v.parse()?,
        None => TinyBertConfig::default().vocab_size,
    };
    for (kind, name) in [(LayerNormKind::Decomposed, "decomposed"), (LayerNormKind::Fused, "fused")] {
        let m = build(&TinyBertConfig { layer_norm: kind, vocab_size, ..Default::default() });
        let path = out.join(format!("tiny_bert_{name}.onnx"));
        m.save(&path)?;
        println!("{}", path.display());
    }
    Ok(())
}
