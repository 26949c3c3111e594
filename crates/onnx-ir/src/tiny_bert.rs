//! A seeded, deterministic tiny BERT-for-question-answering model for tests.
//!
//! The graph mirrors a Hugging Face `BertForQuestionAnswering` ONNX export: same inputs and
//! outputs, same op patterns (bias `Add` with the bias first, Erf GELU, additive attention
//! mask, Split + Squeeze QA head) and HF-style node names, at a size that runs in
//! milliseconds.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::graph::{GraphExt, value_info};
use crate::proto::{GraphProto, ModelProto, OperatorSetIdProto, StringStringEntryProto};
use crate::tensor::tensor_from_vec;
use crate::{DataType, Model, NodeExt, attr_float, attr_int, attr_ints, node};

/// How LayerNorm is expressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerNormKind {
    /// Opset 14: ReduceMean, Sub, Pow, ReduceMean, Add eps, Sqrt, Div, Mul, Add.
    Decomposed,
    /// Opset 17: one `LayerNormalization` node.
    Fused,
}

/// Which exporter's graph the model mirrors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GraphForm {
    /// `torch.onnx.export` of Hugging Face BERT: linear layers as `MatMul` + bias `Add`.
    #[default]
    Hf,
    /// Linear layers as `Reshape` to 2-D, `Gemm` (`transB = 1`, weight `[out, in]`, bias as C), `Reshape` back: the
    /// form of exporters that flatten to 2-D (and of 2-D heads).
    Gemm,
    /// What ONNX Runtime's transformers optimizer makes of the HF form: int32 `Cast`s of the inputs,
    /// `EmbedLayerNormalization`, `Attention` with a packed `[hidden, 3·hidden]` QKV weight, `MatMul` +
    /// `SkipLayerNormalization` (bias folded in), `MatMul` + `BiasGelu` (com.microsoft ops; ORT runs them). The
    /// `layer_norm` choice does not apply; needs `type_vocab > 0`.
    OrtFused,
}

/// What the encoder's output feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Head {
    /// Question answering: `start_logits` and `end_logits` `[batch, sequence]` (BertForQuestionAnswering).
    #[default]
    Qa,
    /// Question answering with one output `cls_squad_logits` `[batch, sequence, 2]` (start, end on the last axis): a
    /// QA head exported without its split, as NVIDIA's BERT gives it.
    QaStacked,
    /// Sequence classification (BertForSequenceClassification): the `[CLS]` row through the pooler (`Gemm`, `Tanh`)
    /// and a `Gemm` classifier, one output `logits` `[batch, labels]`.
    Classifier {
        /// Number of classes.
        labels: usize,
    },
    /// Token classification (BertForTokenClassification, NER): a dense layer on every position, one output `logits`
    /// `[batch, sequence, labels]`.
    Token {
        /// Number of classes.
        labels: usize,
    },
    /// A sentence-embedding model (sentence-transformers): the token states and their mean over the attention mask,
    /// `[batch, hidden]`. With `torch_names`, as PyTorch's TorchScript exporter writes such a model: first the ids
    /// and the mask copied through (`output`, `mask_copy`), then the token states under a generated name
    /// (`onnx::Shape_9`, its shape not declared) and the mean as `17` (declared without sizes); else
    /// `token_embeddings` and `sentence_embedding`.
    MeanPooled { torch_names: bool },
    /// The encoder alone, as Hugging Face's feature-extraction export gives it: `last_hidden_state` `[batch, sequence,
    /// hidden]`, and with `pooler` BERT's `pooler_output` (the `[CLS]` row through a dense layer and tanh).
    Hidden { pooler: bool },
}

/// Shape and seed of the tiny model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TinyBertConfig {
    /// Encoder layers.
    pub layers: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Attention heads (clamped down to a divisor of `hidden`).
    pub heads: usize,
    /// FFN inner size.
    pub intermediate: usize,
    /// Rows of the word-embedding table.
    pub vocab_size: usize,
    /// Rows of the position-embedding table (longest sequence the model accepts).
    pub max_positions: usize,
    /// Rows of the token-type embedding table; 0 builds a model without `token_type_ids` and without token-type
    /// embeddings (DistilBERT's inputs).
    pub type_vocab: usize,
    /// LayerNorm form (also picks the opset: 14 or 17).
    pub layer_norm: LayerNormKind,
    /// Graph form.
    pub form: GraphForm,
    /// Head on the encoder.
    pub head: Head,
    /// Weight seed.
    pub seed: u64,
    /// ALBERT's cross-layer sharing: every encoder layer reads layer 0's weights, biases and LayerNorm parameters
    /// (one initializer each, read by as many nodes as there are layers).
    pub shared_layers: bool,
}

impl Default for TinyBertConfig {
    fn default() -> Self {
        TinyBertConfig {
            layers: 2,
            hidden: 32,
            heads: 2,
            intermediate: 64,
            vocab_size: 800,
            max_positions: 128,
            type_vocab: 2,
            layer_norm: LayerNormKind::Decomposed,
            form: GraphForm::Hf,
            head: Head::Qa,
            seed: 0,
            shared_layers: false,
        }
    }
}

/// LayerNorm epsilon used by BERT.
pub const LAYER_NORM_EPS: f32 = 1e-12;

/// ONNX Runtime's contrib-op domain.
const MS_DOMAIN: &str = "com.microsoft";

struct Builder {
    g: GraphProto,
    rng: StdRng,
    ln: LayerNormKind,
    form: GraphForm,
    /// `[batch, sequence]` of `input_ids` (Gemm form: the shape linear layers reshape back to), once built.
    batch_seq: Option<String>,
}

impl Builder {
    fn normal(&mut self, std: f32) -> f32 {
        // Box-Muller; 1 - u keeps the log argument in (0, 1].
        let u1: f64 = 1.0 - self.rng.random::<f64>();
        let u2: f64 = self.rng.random::<f64>();
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32 * std
    }

    fn init<T: crate::Element>(&mut self, name: &str, shape: &[usize], values: Vec<T>) -> String {
        // shape and values always agree here; an impossible mismatch leaves the tensor out
        // and validate() then reports the missing initializer.
        if let Ok(t) = tensor_from_vec(name, shape, values) {
            self.g.add_initializer(t);
        }
        name.to_string()
    }

    /// A random initializer `name`, or the one already so named (a shared layer's).
    fn weight(&mut self, name: &str, shape: &[usize], mean: f32, std: f32) -> String {
        if self.g.initializer(name).is_some() {
            return name.to_string();
        }
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| mean + self.normal(std)).collect();
        self.init(name, shape, v)
    }

    fn scalar(&mut self, name: &str, v: f32) -> String {
        self.init(name, &[], vec![v])
    }

    fn ints(&mut self, name: &str, v: &[i64]) -> String {
        self.init(name, &[v.len()], v.to_vec())
    }

    /// Adds a node named `name` with output `name + "_output_0"`; returns the output.
    fn op(&mut self, op: &str, name: &str, inputs: &[&str]) -> String {
        let out = format!("{name}_output_0");
        self.g.push_node(node(op, name, inputs, &[&out]));
        out
    }

    fn op_with(&mut self, op: &str, name: &str, inputs: &[&str], attrs: Vec<crate::proto::AttributeProto>) -> String {
        let out = self.op(op, name, inputs);
        if let Some(n) = self.g.node.last_mut() {
            n.attribute.extend(attrs);
        }
        out
    }

    /// `x @ W + b` as MatMul then Add(bias, matmul) like HF exports, or (Gemm form) as Reshape, Gemm, Reshape.
    fn dense(&mut self, x: &str, prefix: &str, weight_name: &str, k: usize, n: usize) -> String {
        if self.form == GraphForm::Gemm {
            return self.gemm(x, prefix, weight_name, k, n);
        }
        let w = self.weight(&format!("{weight_name}.weight"), &[k, n], 0.0, 0.02);
        let b = self.weight(&format!("{weight_name}.bias"), &[n], 0.0, 0.02);
        let mm = self.op("MatMul", &format!("{prefix}/MatMul"), &[x, &w]);
        self.op("Add", &format!("{prefix}/Add"), &[&b, &mm])
    }

    /// `x @ W^T + b` on the rows of `x` flattened to 2-D: `Gemm(transB = 1)` with a `[n, k]` weight.
    fn gemm(&mut self, x: &str, prefix: &str, weight_name: &str, k: usize, n: usize) -> String {
        let w = self.weight(&format!("{weight_name}.weight"), &[n, k], 0.0, 0.02);
        let b = self.weight(&format!("{weight_name}.bias"), &[n], 0.0, 0.02);
        let flat = self.ints(&format!("{prefix}/Constant_flat"), &[-1, k as i64]);
        let x2 = self.op("Reshape", &format!("{prefix}/Reshape_2d"), &[x, &flat]);
        let y2 = self.op_with("Gemm", &format!("{prefix}/Gemm"), &[&x2, &w, &b], vec![attr_int("transB", 1)]);
        let bs = match &self.batch_seq {
            Some(bs) => bs.clone(),
            None => {
                let shape = self.op("Shape", "/bert/Shape_input_ids", &["input_ids"]);
                let (c0, c2) = (self.ints("/bert/Constant_bs_0", &[0]), self.ints("/bert/Constant_bs_2", &[2]));
                let bs = self.op("Slice", "/bert/Slice_batch_sequence", &[&shape, &c0, &c2]);
                self.batch_seq = Some(bs.clone());
                bs
            }
        };
        let last = self.ints(&format!("{prefix}/Constant_out"), &[n as i64]);
        let shape = self.op_with("Concat", &format!("{prefix}/Concat"), &[&bs, &last], vec![attr_int("axis", 0)]);
        self.op("Reshape", &format!("{prefix}/Reshape_3d"), &[&y2, &shape])
    }

    /// A com.microsoft node (ONNX Runtime's contrib ops).
    fn ms_op(&mut self, op: &str, name: &str, inputs: &[&str], attrs: Vec<crate::proto::AttributeProto>) -> String {
        let out = self.op_with(op, name, inputs, attrs);
        if let Some(n) = self.g.node.last_mut() {
            n.domain = Some(MS_DOMAIN.into());
        }
        out
    }

    fn layer_norm(&mut self, x: &str, prefix: &str, param: &str, hidden: usize) -> String {
        let gamma = self.weight(&format!("{param}.weight"), &[hidden], 1.0, 0.02);
        let beta = self.weight(&format!("{param}.bias"), &[hidden], 0.0, 0.02);
        match self.ln {
            LayerNormKind::Fused => self.op_with(
                "LayerNormalization",
                &format!("{prefix}/LayerNormalization"),
                &[x, &gamma, &beta],
                vec![attr_int("axis", -1), attr_float("epsilon", LAYER_NORM_EPS)],
            ),
            LayerNormKind::Decomposed => {
                let red = || vec![attr_ints("axes", &[-1]), attr_int("keepdims", 1)];
                let mean = self.op_with("ReduceMean", &format!("{prefix}/ReduceMean"), &[x], red());
                let d = self.op("Sub", &format!("{prefix}/Sub"), &[x, &mean]);
                let two = self.scalar(&format!("{prefix}/Constant_two"), 2.0);
                let sq = self.op("Pow", &format!("{prefix}/Pow"), &[&d, &two]);
                let var = self.op_with("ReduceMean", &format!("{prefix}/ReduceMean_1"), &[&sq], red());
                let eps = self.scalar(&format!("{prefix}/Constant_eps"), LAYER_NORM_EPS);
                let ve = self.op("Add", &format!("{prefix}/Add"), &[&var, &eps]);
                let sd = self.op("Sqrt", &format!("{prefix}/Sqrt"), &[&ve]);
                let norm = self.op("Div", &format!("{prefix}/Div"), &[&d, &sd]);
                let scaled = self.op("Mul", &format!("{prefix}/Mul"), &[&norm, &gamma]);
                self.op("Add", &format!("{prefix}/Add_1"), &[&scaled, &beta])
            }
        }
    }
}

/// Builds the model. Sizes of 0 are raised to 1 and `heads` is lowered to the largest
/// divisor of `hidden` not above it, so every config gives a valid model.
pub fn build(cfg: &TinyBertConfig) -> Model {
    let hidden = cfg.hidden.max(1);
    let heads = (1..=cfg.heads.clamp(1, hidden)).rev().find(|h| hidden.is_multiple_of(*h)).unwrap_or(1);
    let inter = cfg.intermediate.max(1);
    let mut b = Builder {
        g: GraphProto { name: Some("main_graph".into()), ..Default::default() },
        rng: StdRng::seed_from_u64(cfg.seed),
        ln: cfg.layer_norm,
        form: cfg.form,
        batch_seq: None,
    };
    let bs = [Err("batch"), Err("sequence")];
    let inputs: &[&str] = if cfg.type_vocab == 0 {
        &["input_ids", "attention_mask"]
    } else {
        &["input_ids", "attention_mask", "token_type_ids"]
    };
    for name in inputs {
        b.g.input.push(value_info(name, DataType::Int64, Some(&bs)));
    }

    let x = match cfg.form {
        GraphForm::OrtFused => fused_encoder(&mut b, cfg, hidden, heads, inter),
        GraphForm::Hf | GraphForm::Gemm => hf_encoder(&mut b, cfg, hidden, heads, inter),
    };

    add_head(&mut b, cfg, &x, hidden, &bs);
    finish(b, cfg)
}

/// `cfg.head` on the last hidden state `x`: its nodes and the graph outputs.
fn add_head(b: &mut Builder, cfg: &TinyBertConfig, x: &str, hidden: usize, bs: &[std::result::Result<i64, &str>]) {
    match cfg.head {
        Head::Qa => qa_head(b, x, hidden, bs),
        Head::QaStacked => {
            let logits = b.dense(x, "/qa_outputs", "qa_outputs", hidden, 2);
            b.g.push_node(node("Identity", "/Identity_logits", &[&logits], &["cls_squad_logits"]));
            let dims: Vec<std::result::Result<i64, &str>> = bs.iter().cloned().chain([Ok(2)]).collect();
            b.g.output.push(value_info("cls_squad_logits", DataType::Float, Some(&dims)));
        }
        Head::Classifier { labels } => classifier_head(b, x, hidden, labels.max(1)),
        Head::MeanPooled { torch_names } => mean_pooled_head(b, x, hidden, torch_names),
        Head::Hidden { pooler } => {
            b.g.push_node(node("Identity", "/Identity_hidden", &[x], &["last_hidden_state"]));
            let dims: Vec<std::result::Result<i64, &str>> = bs.iter().cloned().chain([Ok(hidden as i64)]).collect();
            b.g.output.push(value_info("last_hidden_state", DataType::Float, Some(&dims)));
            if pooler {
                pooler_head(b, x, hidden, "pooler_output");
            }
        }
        Head::Token { labels } => {
            let logits = b.dense(x, "/classifier", "classifier", hidden, labels.max(1));
            b.g.push_node(node("Identity", "/Identity_logits", &[&logits], &["logits"]));
            let dims: Vec<std::result::Result<i64, &str>> = bs.iter().cloned().chain([Ok(labels as i64)]).collect();
            b.g.output.push(value_info("logits", DataType::Float, Some(&dims)));
        }
    }
}

/// The model of graph `b.g`: the opset `cfg`'s LayerNorm form needs (and ONNX Runtime's domain for the fused
/// form), the seed in its metadata.
fn finish(b: Builder, cfg: &TinyBertConfig) -> Model {
    let opset = match cfg.layer_norm {
        LayerNormKind::Decomposed => 14,
        LayerNormKind::Fused => 17,
    };
    let mut opset_import = vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) }];
    if cfg.form == GraphForm::OrtFused {
        opset_import.push(OperatorSetIdProto { domain: Some(MS_DOMAIN.into()), version: Some(1) });
    }
    Model::new(ModelProto {
        ir_version: Some(8),
        opset_import,
        producer_name: Some("onnx-ir tiny_bert".into()),
        graph: Some(b.g),
        metadata_props: vec![StringStringEntryProto { key: Some("seed".into()), value: Some(cfg.seed.to_string()) }],
        ..Default::default()
    })
}

/// The HF (and Gemm) form's embeddings and encoder layers; returns the last hidden state.
fn hf_encoder(b: &mut Builder, cfg: &TinyBertConfig, hidden: usize, heads: usize, inter: usize) -> String {
    let mut x = hf_embeddings(b, cfg, hidden);
    let c = HfConstants::new(b, hidden, heads);
    for l in 0..cfg.layers {
        x = hf_layer(b, cfg, l, &x, &c, (hidden, inter));
    }
    x
}

/// The HF form's embeddings (word, token type, position), through their LayerNorm.
fn hf_embeddings(b: &mut Builder, cfg: &TinyBertConfig, hidden: usize) -> String {
    // Embeddings.
    let e = "/bert/embeddings";
    let word = b.weight("bert.embeddings.word_embeddings.weight", &[cfg.vocab_size.max(1), hidden], 0.0, 0.02);
    let maxpos = cfg.max_positions.max(1);
    let pos_table = b.weight("bert.embeddings.position_embeddings.weight", &[maxpos, hidden], 0.0, 0.02);
    let tt_table = (cfg.type_vocab > 0)
        .then(|| b.weight("bert.embeddings.token_type_embeddings.weight", &[cfg.type_vocab, hidden], 0.0, 0.02));
    let pos_ids = b.init("bert.embeddings.position_ids", &[1, maxpos], (0..maxpos as i64).collect());
    let shape = b.op("Shape", &format!("{e}/Shape"), &["input_ids"]);
    let (c0, c1, c2) =
        (b.ints("/bert/Constant_0", &[0]), b.ints("/bert/Constant_1", &[1]), b.ints("/bert/Constant_2", &[2]));
    let seq = b.op("Slice", &format!("{e}/Slice"), &[&shape, &c1, &c2, &c0]);
    let pos = b.op("Slice", &format!("{e}/Slice_1"), &[&pos_ids, &c0, &seq, &c1]);
    let we = b.op("Gather", &format!("{e}/word_embeddings/Gather"), &[&word, "input_ids"]);
    let s1 = match &tt_table {
        Some(table) => {
            let te = b.op("Gather", &format!("{e}/token_type_embeddings/Gather"), &[table, "token_type_ids"]);
            b.op("Add", &format!("{e}/Add"), &[&we, &te])
        }
        None => we,
    };
    let pe = b.op("Gather", &format!("{e}/position_embeddings/Gather"), &[&pos_table, &pos]);
    let s2 = b.op("Add", &format!("{e}/Add_1"), &[&s1, &pe]);
    b.layer_norm(&s2, &format!("{e}/LayerNorm"), "bert.embeddings.LayerNorm", hidden)
}

/// What every HF layer reads: the extended attention mask and the constants of its attention and GELU.
struct HfConstants {
    mask: String,
    one: String,
    split_shape: String,
    merge_shape: String,
    scale: String,
    sqrt2: String,
    half: String,
}

impl HfConstants {
    fn new(b: &mut Builder, hidden: usize, heads: usize) -> HfConstants {
        let head_dim = hidden / heads;
        // Extended attention mask: (1 - mask) * -10000, shape [batch, 1, 1, sequence].
        let axes12 = b.ints("/bert/Constant_axes_1_2", &[1, 2]);
        let um = b.op("Unsqueeze", "/bert/Unsqueeze", &["attention_mask", &axes12]);
        let cm = b.op_with("Cast", "/bert/Cast", &[&um], vec![attr_int("to", DataType::Float as i64)]);
        let one = b.scalar("/bert/Constant_one", 1.0);
        let inv = b.op("Sub", "/bert/Sub", &[&one, &cm]);
        let big = b.scalar("/bert/Constant_neg", -10000.0);
        let mask = b.op("Mul", "/bert/Mul", &[&inv, &big]);

        let split_shape = b.ints("/bert/Constant_heads_shape", &[0, 0, heads as i64, head_dim as i64]);
        let merge_shape = b.ints("/bert/Constant_hidden_shape", &[0, 0, hidden as i64]);
        let scale = b.scalar("/bert/Constant_sqrt_head_dim", (head_dim as f32).sqrt());
        let sqrt2 = b.scalar("/bert/Constant_sqrt2", std::f32::consts::SQRT_2);
        let half = b.scalar("/bert/Constant_half", 0.5);
        HfConstants { mask, one, split_shape, merge_shape, scale, sqrt2, half }
    }
}

/// HF layer `l` (its weights layer 0's when `cfg.shared_layers`) on `x`; returns its output.
fn hf_layer(
    b: &mut Builder,
    cfg: &TinyBertConfig,
    l: usize,
    x: &str,
    c: &HfConstants,
    (hidden, inter): (usize, usize),
) -> String {
    let HfConstants { mask, one, split_shape, merge_shape, scale, sqrt2, half } = c;
    let p = format!("/bert/encoder/layer.{l}");
    let w = format!("bert.encoder.layer.{}", if cfg.shared_layers { 0 } else { l });
    let a = format!("{p}/attention/self");
    let heads_of = |b: &mut Builder, which: &str, perm: &[i64]| {
        let y = b.dense(x, &format!("{a}/{which}"), &format!("{w}.attention.self.{which}"), hidden, hidden);
        let r = b.op("Reshape", &format!("{a}/{which}/Reshape"), &[&y, split_shape]);
        b.op_with("Transpose", &format!("{a}/{which}/Transpose"), &[&r], vec![attr_ints("perm", perm)])
    };
    let q = heads_of(b, "query", &[0, 2, 1, 3]);
    let k = heads_of(b, "key", &[0, 2, 3, 1]);
    let v = heads_of(b, "value", &[0, 2, 1, 3]);
    let scores = b.op("MatMul", &format!("{a}/MatMul"), &[&q, &k]);
    let scaled = b.op("Div", &format!("{a}/Div"), &[&scores, scale]);
    let masked = b.op("Add", &format!("{a}/Add"), &[&scaled, mask]);
    let probs = b.op_with("Softmax", &format!("{a}/Softmax"), &[&masked], vec![attr_int("axis", -1)]);
    let ctx = b.op("MatMul", &format!("{a}/MatMul_1"), &[&probs, &v]);
    let ctx_t = b.op_with("Transpose", &format!("{a}/Transpose_3"), &[&ctx], vec![attr_ints("perm", &[0, 2, 1, 3])]);
    let merged = b.op("Reshape", &format!("{a}/Reshape_3"), &[&ctx_t, merge_shape]);
    let o = format!("{p}/attention/output");
    let dense = b.dense(&merged, &format!("{o}/dense"), &format!("{w}.attention.output.dense"), hidden, hidden);
    let res = b.op("Add", &format!("{o}/Add"), &[&dense, x]);
    let x = b.layer_norm(&res, &format!("{o}/LayerNorm"), &format!("{w}.attention.output.LayerNorm"), hidden);

    let i = format!("{p}/intermediate");
    let h = b.dense(&x, &format!("{i}/dense"), &format!("{w}.intermediate.dense"), hidden, inter);
    let g = format!("{i}/intermediate_act_fn");
    let d = b.op("Div", &format!("{g}/Div"), &[&h, sqrt2]);
    let erf = b.op("Erf", &format!("{g}/Erf"), &[&d]);
    let e1 = b.op("Add", &format!("{g}/Add"), &[&erf, one]);
    let m = b.op("Mul", &format!("{g}/Mul"), &[&h, &e1]);
    let gelu = b.op("Mul", &format!("{g}/Mul_1"), &[&m, half]);
    let o = format!("{p}/output");
    let f = b.dense(&gelu, &format!("{o}/dense"), &format!("{w}.output.dense"), inter, hidden);
    let res = b.op("Add", &format!("{o}/Add"), &[&f, &x]);
    b.layer_norm(&res, &format!("{o}/LayerNorm"), &format!("{w}.output.LayerNorm"), hidden)
}

/// ONNX Runtime's fused form ([`GraphForm::OrtFused`]); returns the last hidden state.
fn fused_encoder(b: &mut Builder, cfg: &TinyBertConfig, hidden: usize, heads: usize, inter: usize) -> String {
    let to_i32 = || vec![attr_int("to", DataType::Int32 as i64)];
    let ids = b.op_with("Cast", "/Cast_input_ids", &["input_ids"], to_i32());
    let mask = b.op_with("Cast", "/Cast_attention_mask", &["attention_mask"], to_i32());
    let word = b.weight("bert.embeddings.word_embeddings.weight", &[cfg.vocab_size.max(1), hidden], 0.0, 0.02);
    let pos = b.weight("bert.embeddings.position_embeddings.weight", &[cfg.max_positions.max(1), hidden], 0.0, 0.02);
    let (segment, tt_table) = if cfg.type_vocab > 0 {
        let table = b.weight("bert.embeddings.token_type_embeddings.weight", &[cfg.type_vocab, hidden], 0.0, 0.02);
        (b.op_with("Cast", "/Cast_token_type_ids", &["token_type_ids"], to_i32()), table)
    } else {
        (String::new(), String::new())
    };
    let gamma = b.weight("bert.embeddings.LayerNorm.weight", &[hidden], 1.0, 0.02);
    let beta = b.weight("bert.embeddings.LayerNorm.bias", &[hidden], 0.0, 0.02);
    let eps = || vec![attr_float("epsilon", LAYER_NORM_EPS)];
    let name = "EmbedLayerNormalization_0";
    let (emb, mask_index) = (format!("{name}_output"), format!("{name}_mask_index"));
    let inputs = [ids.as_str(), &segment, &word, &pos, &tt_table, &gamma, &beta, &mask];
    let mut n = node("EmbedLayerNormalization", name, &inputs, &[&emb, &mask_index]).with_attr(eps()[0].clone());
    n.domain = Some(MS_DOMAIN.into());
    b.g.push_node(n);
    let mut x = emb;
    let skip_ln = |b: &mut Builder, y: &str, x: &str, name: &str, w: &str, bias: &str| {
        let gamma = b.weight(&format!("{w}.LayerNorm.weight"), &[hidden], 1.0, 0.02);
        let beta = b.weight(&format!("{w}.LayerNorm.bias"), &[hidden], 0.0, 0.02);
        b.ms_op("SkipLayerNormalization", name, &[y, x, &gamma, &beta, bias], eps())
    };
    for l in 0..cfg.layers {
        let wl = if cfg.shared_layers { 0 } else { l };
        let (p, w) = (format!("/bert/encoder/layer.{l}"), format!("bert.encoder.layer.{wl}"));
        let qkv_w = b.weight(&format!("Attention_{wl}_qkv_weight"), &[hidden, 3 * hidden], 0.0, 0.02);
        let qkv_b = b.weight(&format!("Attention_{wl}_qkv_bias"), &[3 * hidden], 0.0, 0.02);
        let heads_attr = vec![attr_int("num_heads", heads as i64)];
        let ctx = b.ms_op("Attention", &format!("Attention_{l}"), &[&x, &qkv_w, &qkv_b, &mask_index], heads_attr);
        let o = format!("{w}.attention.output");
        let wo = b.weight(&format!("{o}.dense.weight"), &[hidden, hidden], 0.0, 0.02);
        let bo = b.weight(&format!("{o}.dense.bias"), &[hidden], 0.0, 0.02);
        let ao = b.op("MatMul", &format!("{p}/attention/output/dense/MatMul"), &[&ctx, &wo]);
        x = skip_ln(b, &ao, &x, &format!("SkipLayerNorm_AddBias_{}", 2 * l), &o, &bo);
        let wi = b.weight(&format!("{w}.intermediate.dense.weight"), &[hidden, inter], 0.0, 0.02);
        let bi = b.weight(&format!("{w}.intermediate.dense.bias"), &[inter], 0.0, 0.02);
        let h = b.op("MatMul", &format!("{p}/intermediate/dense/MatMul"), &[&x, &wi]);
        let g = b.ms_op("BiasGelu", &format!("Gelu_AddBias_{l}"), &[&h, &bi], vec![]);
        let w2 = b.weight(&format!("{w}.output.dense.weight"), &[inter, hidden], 0.0, 0.02);
        let b2 = b.weight(&format!("{w}.output.dense.bias"), &[hidden], 0.0, 0.02);
        let f = b.op("MatMul", &format!("{p}/output/dense/MatMul"), &[&g, &w2]);
        x = skip_ln(b, &f, &x, &format!("SkipLayerNorm_AddBias_{}", 2 * l + 1), &format!("{w}.output"), &b2);
    }
    x
}

/// QA head: `[batch, sequence, 2]` -> two `[batch, sequence]` logits.
fn qa_head(b: &mut Builder, x: &str, hidden: usize, bs: &[std::result::Result<i64, &str>]) {
    let logits = b.dense(x, "/qa_outputs", "qa_outputs", hidden, 2);
    let split = b.ints("/Constant_split", &[1, 1]);
    let last = b.ints("/Constant_last_axis", &[-1]);
    b.g.push_node(
        node("Split", "/Split", &[&logits, &split], &["/Split_output_0", "/Split_output_1"])
            .with_attr(attr_int("axis", -1)),
    );
    b.g.push_node(node("Squeeze", "/Squeeze", &["/Split_output_0", &last], &["start_logits"]));
    b.g.push_node(node("Squeeze", "/Squeeze_1", &["/Split_output_1", &last], &["end_logits"]));
    for name in ["start_logits", "end_logits"] {
        b.g.output.push(value_info(name, DataType::Float, Some(bs)));
    }
}

/// The mean of the token states `x` over the attention mask, as sentence-transformers' Pooling module is exported:
/// `sum(x * mask) / max(sum(mask), 1e-9)` over the sequence axis.
fn mean_pooled_head(b: &mut Builder, x: &str, hidden: usize, torch_names: bool) {
    let (states, pooled) =
        if torch_names { ("onnx::Shape_9", "17") } else { ("token_embeddings", "sentence_embedding") };
    let p = "/pooling";
    b.g.push_node(node("Identity", &format!("{p}/Identity_states"), &[x], &[states]));
    let last = b.ints(&format!("{p}/Constant_last"), &[-1]);
    let seq_axis = b.ints(&format!("{p}/Constant_seq_axis"), &[1]);
    let m = b.op("Unsqueeze", &format!("{p}/Unsqueeze"), &["attention_mask", &last]);
    let shape = b.op("Shape", &format!("{p}/Shape"), &[states]);
    let expanded = b.op("Expand", &format!("{p}/Expand"), &[&m, &shape]);
    let mf = b.op_with("Cast", &format!("{p}/Cast"), &[&expanded], vec![attr_int("to", DataType::Float as i64)]);
    let masked = b.op("Mul", &format!("{p}/Mul"), &[states, &mf]);
    let keep0 = || vec![attr_int("keepdims", 0)];
    let sum = b.op_with("ReduceSum", &format!("{p}/ReduceSum"), &[&masked, &seq_axis], keep0());
    let count = b.op_with("ReduceSum", &format!("{p}/ReduceSum_1"), &[&mf, &seq_axis], keep0());
    let eps = b.scalar(&format!("{p}/Constant_eps"), 1e-9);
    let clipped = b.op("Clip", &format!("{p}/Clip"), &[&count, &eps]);
    let mean = b.op("Div", &format!("{p}/Div"), &[&sum, &clipped]);
    b.g.push_node(node("Identity", &format!("{p}/Identity"), &[&mean], &[pooled]));
    let bs = [Err("batch"), Err("sequence")];
    if torch_names {
        b.g.push_node(node("Identity", "/Identity_ids", &["input_ids"], &["output"]));
        b.g.push_node(node("Identity", "/Identity_mask", &["attention_mask"], &["mask_copy"]));
        b.g.output.push(value_info("output", DataType::Int64, Some(&bs)));
        b.g.output.push(value_info("mask_copy", DataType::Int64, Some(&bs)));
        b.g.output.push(value_info(states, DataType::Float, None));
        b.g.output.push(value_info(pooled, DataType::Float, Some(&[Err("Div_dim_0"), Err("Div_dim_1")])));
    } else {
        let dims: Vec<std::result::Result<i64, &str>> = bs.iter().cloned().chain([Ok(hidden as i64)]).collect();
        b.g.output.push(value_info(states, DataType::Float, Some(&dims)));
        b.g.output.push(value_info(pooled, DataType::Float, Some(&[Err("batch"), Ok(hidden as i64)])));
    }
}

/// BERT's pooler: the `[CLS]` row of `x` through a dense layer (`Gemm`) and `Tanh`, as output `name` `[batch,
/// hidden]`.
fn pooler_head(b: &mut Builder, x: &str, hidden: usize, name: &str) {
    let zero = b.init("/bert/pooler/Constant_first", &[], vec![0i64]);
    let cls = b.op_with("Gather", "/bert/pooler/Gather_first", &[x, &zero], vec![attr_int("axis", 1)]);
    let w = b.weight("bert.pooler.dense.weight", &[hidden, hidden], 0.0, 0.2);
    let bias = b.weight("bert.pooler.dense.bias", &[hidden], 0.0, 0.02);
    let dense = b.op_with("Gemm", "/bert/pooler/dense/Gemm_0", &[&cls, &w, &bias], vec![attr_int("transB", 1)]);
    b.g.push_node(node("Tanh", "/bert/pooler/activation/Tanh_0", &[&dense], &[name]));
    b.g.output.push(value_info(name, DataType::Float, Some(&[Err("batch"), Ok(hidden as i64)])));
}

/// Classifier head: `[CLS]` row -> pooler `Gemm` + `Tanh` -> classifier `Gemm` -> `logits` `[batch, labels]`.
fn classifier_head(b: &mut Builder, x: &str, hidden: usize, labels: usize) {
    let zero = b.init("/bert/pooler/Constant_cls", &[], vec![0i64]);
    let cls = b.op_with("Gather", "/bert/pooler/Gather", &[x, &zero], vec![attr_int("axis", 1)]);
    let gemm = |b: &mut Builder, x: &str, name: &str, param: &str, n: usize| {
        let w = b.weight(&format!("{param}.weight"), &[n, hidden], 0.0, 0.2);
        let bias = b.weight(&format!("{param}.bias"), &[n], 0.0, 0.02);
        b.op_with("Gemm", name, &[x, &w, &bias], vec![attr_int("transB", 1)])
    };
    let pooled = gemm(b, &cls, "/bert/pooler/dense/Gemm", "bert.pooler.dense", hidden);
    let act = b.op("Tanh", "/bert/pooler/activation/Tanh", &[&pooled]);
    let logits = gemm(b, &act, "/classifier/Gemm", "classifier", labels);
    b.g.push_node(node("Identity", "/classifier/Identity", &[&logits], &["logits"]));
    let shape = [Err("batch"), Ok(labels as i64)];
    b.g.output.push(value_info("logits", DataType::Float, Some(&shape)));
}
