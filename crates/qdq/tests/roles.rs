//! A quantized model keeps the outputs `model_io::roles` finds in the FP32 model (its own tests are in
//! crates/model-io).

use model_io::roles::{EmbeddingOutput, NamedRoles, embedding_output};
use onnx_ir::tiny_bert::{Head, LayerNormKind, TinyBertConfig, build};

use crate::common::*;

fn model(head: Head, layer_norm: LayerNormKind) -> onnx_ir::Model {
    build(&TinyBertConfig { head, ..tiny_config(layer_norm) })
}

fn found(m: &onnx_ir::Model, pooling_asked: bool) -> Option<EmbeddingOutput> {
    embedding_output(m.graph(), &NamedRoles::default(), pooling_asked).unwrap().map(|f| f.output)
}

/// A quantized model keeps its outputs: `qdq eval` finds the embedding in it as in the FP32 model.
#[test]
fn the_quantized_model_gives_the_same_embedding_output() {
    let fp32 = model(Head::MeanPooled { torch_names: true }, LayerNormKind::Fused);
    for preset in ["cpu", "tensorrt"] {
        let policy = unsmoothed(preset);
        let tensors = qdq::tensors_to_calibrate(&fp32, &policy).unwrap();
        let (q, _) = qdq::quantize(&fp32, &observed_ranges(&fp32, &tensors), &policy).unwrap();
        assert_eq!(found(&q, false), Some(EmbeddingOutput::Pooled("17".into())), "{preset}");
    }
}
