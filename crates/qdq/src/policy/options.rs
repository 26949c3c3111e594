//! Every policy option in one table ([`OPTIONS`]): its key, what it does, the values it takes, how it is read and
//! set; and the parsers its setters share.

use super::*;

/// One policy option: its key, one sentence on what it does, the values it takes, how to read and write it.
/// [`OPTIONS`] is the only list of them: [`Policy::set`], [`Policy::describe`], [`KEYS`] and the CLI's
/// `--list-policies` all read it.
pub struct PolicyOption {
    /// The key of `--policy-option KEY=VALUE`.
    pub key: &'static str,
    /// What the option does, one sentence.
    pub doc: &'static str,
    /// The values it takes.
    pub values: &'static str,
    pub(super) get: fn(&Policy) -> String,
    pub(super) set: fn(&mut Policy, &str) -> std::result::Result<(), String>,
}

fn boolean(v: &str) -> std::result::Result<bool, String> {
    match v {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err("true or false".into()),
    }
}

fn list(v: &str) -> Vec<String> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
}

/// Appends globs to one of the policy's glob lists after checking they compile.
fn globs(target: &mut Vec<String>, v: &str) -> std::result::Result<(), String> {
    let new = list(v);
    for p in &new {
        Glob::new(p).map_err(|e| format!("a valid glob ({e})"))?;
    }
    target.extend(new);
    Ok(())
}

/// What `op_types` takes: [`crate::MATMUL_OPS`] and `Add` (a test holds the two together).
pub(super) const OP_TYPES: &str = "a comma-separated subset of MatMul,Gemm,FusedMatMul,Attention,Add";

/// The `cpu` preset's `outlier_channels`: channels over 6 times the median channel's max |x| (docs/QUANTIZATION.md,
/// "Sentence-embedding models": why not 8).
pub const DEFAULT_OUTLIER_RATIO: f32 = 6.0;

/// An option that is `off` or a number `valid` accepts (`smooth`, `outlier_channels`), as the CLI / TOML give it.
fn off_or_number(v: &str, valid: fn(f64) -> bool, expected: &str) -> std::result::Result<Option<f32>, String> {
    match v {
        "off" | "none" | "false" => Ok(None),
        v => match v.parse::<f64>() {
            Ok(a) if valid(a) => Ok(Some(a as f32)),
            _ => Err(expected.to_owned()),
        },
    }
}

fn strength(a: f64) -> bool {
    (0.0..=1.0).contains(&a)
}

fn ratio(r: f64) -> bool {
    r.is_finite() && r > 1.0
}

/// Such an option in a serialized [`Policy`]: `"off"`, or the number.
pub(super) mod off_or_number_serde {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<f32>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(a) => s.serialize_f32(*a),
            None => s.serialize_str("off"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
        valid: fn(f64) -> bool,
        expected: &str,
    ) -> Result<Option<f32>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Value {
            Number(f64),
            Word(String),
        }
        match Value::deserialize(d)? {
            Value::Number(a) if valid(a) => Ok(Some(a as f32)),
            Value::Word(w) if w == "off" => Ok(None),
            _ => Err(serde::de::Error::custom(expected)),
        }
    }
}

/// `smooth` in a serialized [`Policy`]: `"off"`, or the migration strength.
pub(super) mod smooth_strength {
    pub use super::off_or_number_serde::serialize;

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f32>, D::Error> {
        super::off_or_number_serde::deserialize(
            d,
            super::strength,
            "expected \"off\" or a migration strength in [0, 1]",
        )
    }
}

/// `outlier_channels` in a serialized [`Policy`]: `"off"`, or the ratio.
pub(super) mod outlier_ratio {
    pub use super::off_or_number_serde::serialize;

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f32>, D::Error> {
        super::off_or_number_serde::deserialize(d, super::ratio, "expected \"off\" or a ratio > 1")
    }
}

/// Every option, in the order `describe` prints them.
pub const OPTIONS: &[PolicyOption] = &[
    PolicyOption {
        key: "op_types",
        doc: "op types whose inputs get Q/DQ pairs",
        values: OP_TYPES,
        get: |p| p.op_types.join(","),
        set: |p, v| {
            let ops = list(v);
            let known = |o: &String| o == "Add" || crate::types::MATMUL_OPS.contains(&o.as_str());
            if ops.is_empty() || !ops.iter().all(known) {
                return Err(OP_TYPES.into());
            }
            p.op_types = ops;
            Ok(())
        },
    },
    PolicyOption {
        key: "matmul_const_b_only",
        doc: "quantize a MatMul only when its second input is a constant weight",
        values: "true or false",
        get: |p| p.matmul_const_b_only.to_string(),
        set: |p, v| {
            p.matmul_const_b_only = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "residual_add",
        doc: "the residual Adds (those feeding a LayerNorm): Q/DQ on both inputs, or left in float",
        values: "quantize or skip",
        get: |p| p.residual_add.to_string(),
        set: |p, v| {
            p.residual_add = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "dedicated_pairs",
        doc: "one Q/DQ pair per quantized reader of an activation (TensorRT cannot share one) instead of a shared pair",
        values: "true or false",
        get: |p| p.dedicated_pairs.to_string(),
        set: |p, v| {
            p.dedicated_pairs = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "shared_pair_feeds_all",
        doc: "a shared pair also feeds the tensor's readers that are not quantized, as ONNX Runtime does",
        values: "true or false",
        get: |p| p.shared_pair_feeds_all.to_string(),
        set: |p, v| {
            p.shared_pair_feeds_all = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "quantize_outputs",
        doc: "also Q/DQ on the outputs of quantized nodes (with shared_pair_feeds_all = true, ONNX Runtime's CPU EP then fuses QLinearMatMul instead of MatMulIntegerToFloat)",
        values: "true or false",
        get: |p| p.quantize_outputs.to_string(),
        set: |p, v| {
            p.quantize_outputs = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "quantize_fc_outputs",
        doc: "also Q/DQ on the output of each quantized constant-weight MatMul, after its bias Add when it has one (QNN's \
              HTP then runs MatMul, bias and requantization as one FullyConnected with per-channel weights)",
        values: "true or false",
        get: |p| p.quantize_fc_outputs.to_string(),
        set: |p, v| {
            p.quantize_fc_outputs = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "activations",
        doc: "activation quantization: int8 with zero point 0, uint8 with a zero point, int8 with a zero point, or \
              int16 with zero point 0 (opset 21)",
        values: "int8-symmetric, uint8-asymmetric, int8-asymmetric or int16-symmetric",
        get: |p| p.activations.to_string(),
        set: |p, v| {
            p.activations = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "variable_b",
        doc: "the type of a pair read as B by a MatMul whose B is not a constant (attention's K, V): as `activations`, \
              or int8 with zero point 0 (x86 int8 GEMMs multiply u8 by s8)",
        values: "activations or int8-symmetric",
        get: |p| p.variable_b.to_string(),
        set: |p, v| {
            p.variable_b = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "variable_min_depth",
        doc: "a MatMul of two variables (attention's Q·Kᵀ) is quantized only when it contracts over at least this many \
              elements (its head size), where the graph tells: AMX's int8 tiles contract 64 bytes, so a shallower one \
              runs faster in bf16 there; 0 = any",
        values: "a whole number (0 = any)",
        get: |p| p.variable_min_depth.to_string(),
        set: |p, v| {
            p.variable_min_depth = v.parse().map_err(|_| "a whole number (0 = any)".to_owned())?;
            Ok(())
        },
    },
    PolicyOption {
        key: "variable_a",
        doc: "the type of a pair read as A by a MatMul whose B is not a constant (attention's Q, P): as `activations`, \
              or int8 with zero point 0 (OpenVINO's int8 attention takes no zero point)",
        values: "activations or int8-symmetric",
        get: |p| p.variable_a.to_string(),
        set: |p, v| {
            p.variable_a = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "precision",
        doc: "the pairs' 8-bit type: integers (as `activations` says), or E4M3 floats for TensorRT (fp8-e4m3fn, largest \
              value 448) or MIGraphX (fp8-e4m3fnuz, 240): zero point 0, scale = range / that value, per-channel \
              weights stored as `weights` says, Softmax outputs over [0, 1]; the model raised to opset 19",
        values: "int8, fp8-e4m3fn or fp8-e4m3fnuz",
        get: |p| p.precision.to_string(),
        set: |p, v| {
            p.precision = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "per_channel",
        doc: "one scale per output column of each MatMul weight instead of one per tensor",
        values: "true or false",
        get: |p| p.per_channel.to_string(),
        set: |p, v| {
            p.per_channel = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "weights",
        doc: "weight storage: float initializer + Q + DQ, or 8-bit initializer + DQ (int8, float8 with an fp8 precision; a \
              smaller file)",
        values: "qdq-pair or int8-initializer",
        get: |p| p.weights.to_string(),
        set: |p, v| {
            p.weights = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "weight_rounding",
        doc: "which integer each int8 weight takes on its grid: the nearest, or GPTQ's choice against the calibration \
              inputs' Gram matrix (the MatMul's output error minimised; one more pass over the calibration data)",
        values: "nearest or gptq",
        get: |p| p.weight_rounding.to_string(),
        set: |p, v| {
            p.weight_rounding = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "output_bias",
        doc: "a classifier's output layer bias as it is, or corrected by the mean shift quantization leaves on its               logits (measured against FP32 on the calibration inputs; other tasks' outputs are left as they are)",
        values: "kept or corrected",
        get: |p| p.output_bias.to_string(),
        set: |p, v| {
            p.output_bias = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "embeddings",
        doc: "embedding tables (float initializers only Gathers read) as they are, or int8 with one scale per column and a DequantizeLinear after each Gather (a 4x smaller table; with contrib_ops, Cast + Mul: the same values, faster on ORT's CPU EP), or int8-table: int8 in the file, dequantized whole before the Gathers (a constant OpenVINO folds at load)",
        values: "float, int8 or int8-table",
        get: |p| p.embeddings.to_string(),
        set: |p, v| {
            p.embeddings = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "contrib_ops",
        doc: "ONNX Runtime's fused Attention and EmbedLayerNormalization (written by its transformers optimizer) become its integer QAttention / QEmbedLayerNormalization (CPU EP only) instead of reading Q/DQ pairs that its CPU EP would dequantize on every run, and a quantized MatMul with a bias Add becomes one MatMulIntegerToFloat with the bias",
        values: "true or false",
        get: |p| p.contrib_ops.to_string(),
        set: |p, v| {
            p.contrib_ops = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "reduce_range",
        doc: "7-bit weights, avoiding u8s8 saturation in ONNX Runtime's CPU kernels on x86 without VNNI",
        values: "true or false",
        get: |p| p.reduce_range.to_string(),
        set: |p, v| {
            p.reduce_range = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "bounded_pairs",
        doc: "8-bit weights with reduce_range's guarantee: adjacent weights along the contracted axis hold |a| + |b| <= 128, so ONNX Runtime's u8s8 kernels cannot saturate on x86 without VNNI either",
        values: "true or false",
        get: |p| p.bounded_pairs.to_string(),
        set: |p, v| {
            p.bounded_pairs = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "softmax_range",
        doc: "range of Softmax outputs: calibrated, [0, 1], P - 0.5 over [-0.5, 0.5] with an exact float correction, \
              [0, 1] as uint8 whatever the activations' type, or not quantized (P·V left in float)",
        values: "calibrated, full, shifted, full-uint8 or float",
        get: |p| p.softmax_range.to_string(),
        set: |p, v| {
            p.softmax_range = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "smooth",
        doc: "SmoothQuant-style migration of MatMul inputs' outlier channels into the weights, before calibration",
        values: "off or a migration strength in [0, 1], e.g. 0.5",
        get: |p| p.smooth.map_or_else(|| "off".to_string(), |a| a.to_string()),
        set: |p, v| {
            p.smooth = off_or_number(v, strength, "off or a migration strength in [0, 1], e.g. 0.5")?;
            Ok(())
        },
    },
    PolicyOption {
        key: "outlier_channels",
        doc: "carry a MatMul input's outlier channels (max |x| over this many times the median channel's) in float \
              beside its integer MatMul, the pair's range made from the other channels; for inputs smoothing leaves \
              alone (the GELU outputs)",
        values: "off or a ratio > 1, e.g. 8",
        get: |p| p.outlier_channels.map_or_else(|| "off".to_string(), |r| r.to_string()),
        set: |p, v| {
            p.outlier_channels = off_or_number(v, ratio, "off or a ratio > 1, e.g. 8")?;
            Ok(())
        },
    },
    PolicyOption {
        key: "outlier_branch",
        doc: "where the float branch of outlier channels takes them from: gathered from the MatMul's input, or \
              recomputed from the fully connected layer and elementwise activation that made it (the input then \
              keeps one reader, which OpenVINO fuses into that layer)",
        values: "gather or recompute",
        get: |p| p.outlier_branch.to_string(),
        set: |p, v| {
            p.outlier_branch = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "outlier_mask",
        doc: "how outlier channels carried in float leave the integer MatMul's input: zeroed by a Mul in front of \
              its pair, or saturated in the pair against the weight rows zeroed for them (the same integers, one \
              kernel fewer)",
        values: "mul or fold",
        get: |p| p.outlier_mask.to_string(),
        set: |p, v| {
            p.outlier_mask = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "smooth_targets",
        doc: "what smoothing rescales: LayerNorm outputs (into gamma/beta), every constant-weight MatMul input, only \
              the inputs that are not LayerNorm outputs (GELU outputs, attention context; one Mul each), or LayerNorm \
              outputs and attention contexts (not the GELU outputs)",
        values: "layernorm, all, others or layernorm-context",
        get: |p| p.smooth_targets.to_string(),
        set: |p, v| {
            p.smooth_targets = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "smooth_context",
        doc: "how an attention context is divided by its smoothing factors: in its value projection's weight columns \
              and bias, or a fused Attention's V columns of its packed weight (nothing added; for ORT's CPU EP, where \
              a Mul is a kernel of its own), or by a Mul in front of the output projection (TensorRT fuses it as the \
              pre-quant scale)",
        values: "projection or mul",
        get: |p| p.smooth_context.to_string(),
        set: |p, v| {
            p.smooth_context = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "smooth_layernorm",
        doc: "how a LayerNorm output that the residual path also reads is divided by its smoothing factors: in gamma \
              and beta (the residual path then reads it through a Mul restoring it), or by a Mul in front of its \
              MatMuls only (the residual path reads it as it is; OpenVINO fuses that Mul with the pair)",
        values: "parameters or mul",
        get: |p| p.smooth_layernorm.to_string(),
        set: |p, v| {
            p.smooth_layernorm = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "include_nodes",
        doc: "node names or globs: when any is given, only matching nodes are quantized (added to the list)",
        values: "comma-separated names or globs",
        get: |p| p.include_nodes.join(","),
        set: |p, v| globs(&mut p.include_nodes, v),
    },
    PolicyOption {
        key: "exclude_nodes",
        doc: "node names or globs never quantized (added to the list)",
        values: "comma-separated names or globs",
        get: |p| p.exclude_nodes.join(","),
        set: |p, v| globs(&mut p.exclude_nodes, v),
    },
    PolicyOption {
        key: "exclude_tensors",
        doc: "tensor names or globs never given a Q/DQ pair (added to the list)",
        values: "comma-separated names or globs",
        get: |p| p.exclude_tensors.join(","),
        set: |p, v| globs(&mut p.exclude_tensors, v),
    },
    PolicyOption {
        key: "strict",
        doc: "a tensor the policy quantizes that has no calibration range is an error instead of being skipped",
        values: "true or false",
        get: |p| p.strict.to_string(),
        set: |p, v| {
            p.strict = boolean(v)?;
            Ok(())
        },
    },
];

/// Keys accepted by [`Policy::set`], in [`OPTIONS`] order.
pub const KEYS: [&str; OPTIONS.len()] = {
    let mut keys = [""; OPTIONS.len()];
    let mut i = 0;
    while i < OPTIONS.len() {
        keys[i] = OPTIONS[i].key;
        i += 1;
    }
    keys
};
