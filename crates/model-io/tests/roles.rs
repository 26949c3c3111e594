//! The outputs of sentence-embedding models (issue 61): which one holds the embedding, in every form exporters write
//! (a pooled output by name, one pooled in the graph under a generated name beside copies of the inputs, token states
//! alone, token states beside BERT's pooler), and that question-answering models and classifiers have none.

use model_io::roles::{EmbeddingOutput, NamedRoles, echo_outputs, embedding_output};
use onnx_ir::tiny_bert::{Head, LayerNormKind, TinyBertConfig, build};

/// onnx-ir's tiny BERT at small sizes: one layer, one head, no token types.
fn tiny_config(layer_norm: LayerNormKind) -> TinyBertConfig {
    TinyBertConfig {
        layers: 1,
        hidden: 8,
        heads: 1,
        intermediate: 16,
        vocab_size: 16,
        max_positions: 8,
        type_vocab: 0,
        layer_norm,
        seed: 42,
        ..Default::default()
    }
}

fn model(head: Head, layer_norm: LayerNormKind) -> onnx_ir::Model {
    build(&TinyBertConfig { head, ..tiny_config(layer_norm) })
}

fn found(m: &onnx_ir::Model, pooling_asked: bool) -> Option<EmbeddingOutput> {
    embedding_output(m.graph(), &NamedRoles::default(), pooling_asked).unwrap().map(|f| f.output)
}

#[test]
fn every_export_form_gives_its_embedding_output() {
    for ln in [LayerNormKind::Decomposed, LayerNormKind::Fused] {
        // sentence-transformers' names: the pooled output wins, whether or not a pooling is asked for.
        let st = model(Head::MeanPooled { torch_names: false }, ln);
        assert_eq!(found(&st, false), Some(EmbeddingOutput::Pooled("sentence_embedding".into())), "{ln:?}");
        assert_eq!(found(&st, true), Some(EmbeddingOutput::Pooled("sentence_embedding".into())), "{ln:?}");
        // PyTorch's names: the ids and the mask copied through, the states undeclared, the mean numbered.
        let torch = model(Head::MeanPooled { torch_names: true }, ln);
        assert_eq!(echo_outputs(torch.graph()), ["output", "mask_copy"]);
        assert_eq!(found(&torch, false), Some(EmbeddingOutput::Pooled("17".into())), "{ln:?}");
        // With --pooling the caller pools the token states itself.
        assert_eq!(found(&torch, true), Some(EmbeddingOutput::TokenStates("onnx::Shape_9".into())), "{ln:?}");
        // Feature extraction: the token states, never BERT's pooler (a dense layer after [CLS]).
        let hidden = model(Head::Hidden { pooler: true }, ln);
        assert_eq!(found(&hidden, false), Some(EmbeddingOutput::TokenStates("last_hidden_state".into())), "{ln:?}");
        let alone = model(Head::Hidden { pooler: false }, ln);
        assert_eq!(found(&alone, false), Some(EmbeddingOutput::TokenStates("last_hidden_state".into())), "{ln:?}");
    }
}

/// The other graph forms (Gemm layers, ONNX Runtime's fused ops, whose outputs' ranks the graph does not declare):
/// the pooled output is found behind the fused SkipLayerNormalization as behind a LayerNorm.
#[test]
fn every_graph_form_gives_its_pooled_output() {
    use onnx_ir::tiny_bert::GraphForm;
    for form in [GraphForm::Hf, GraphForm::Gemm, GraphForm::OrtFused] {
        let cfg = TinyBertConfig {
            form,
            type_vocab: 2,
            head: Head::MeanPooled { torch_names: true },
            ..tiny_config(LayerNormKind::Fused)
        };
        let m = build(&cfg);
        assert_eq!(found(&m, false), Some(EmbeddingOutput::Pooled("17".into())), "{form:?}");
        assert_eq!(found(&m, true), Some(EmbeddingOutput::TokenStates("onnx::Shape_9".into())), "{form:?}");
    }
}

#[test]
fn question_answering_models_and_classifiers_have_no_embedding() {
    for head in [Head::Qa, Head::QaStacked, Head::Classifier { labels: 3 }, Head::Token { labels: 5 }] {
        let m = model(head, LayerNormKind::Decomposed);
        assert_eq!(found(&m, false), None, "{head:?}");
        assert!(echo_outputs(m.graph()).is_empty(), "{head:?}");
    }
    // Two outputs in order are a QA head's start and end, unless they are an encoder's states and pooler.
    let two = model(Head::Hidden { pooler: true }, LayerNormKind::Fused);
    assert!(model_io::roles::logit_roles(two.graph(), &NamedRoles::default()).is_err());
    let qa = model(Head::Qa, LayerNormKind::Fused);
    assert!(model_io::roles::logit_roles(qa.graph(), &NamedRoles::default()).is_ok());
}

#[test]
fn a_named_embedding_is_taken_by_its_rank_and_an_unknown_name_is_refused() {
    let m = model(Head::MeanPooled { torch_names: false }, LayerNormKind::Fused);
    let named = |n: &str| NamedRoles { embedding: Some(n.into()), ..Default::default() };
    let get = |n: &str| embedding_output(m.graph(), &named(n), false);
    assert_eq!(
        get("token_embeddings").unwrap().unwrap().output,
        EmbeddingOutput::TokenStates("token_embeddings".into())
    );
    assert_eq!(
        get("sentence_embedding").unwrap().unwrap().output,
        EmbeddingOutput::Pooled("sentence_embedding".into())
    );
    let e = get("pooled").unwrap_err().to_string();
    assert!(e.contains("no output `pooled`") && e.contains("sentence_embedding"), "{e}");
}
