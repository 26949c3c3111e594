//! What another model's outputs are measured by against FP32's on held-out inputs, per task ([`HeldAgreement`]), and
//! [`OutputAgreement`] as reports carry it. Each task room's `held` module computes its own from its reader's sums.

use serde::Serialize;

/// One task's measure of how another model's outputs agree with FP32's, as `qdq debug` and `qdq tune` show it.
pub trait HeldAgreement {
    /// The distance from FP32 that `debug` ranks nodes by and `tune` compares candidates by (0: FP32's outputs).
    fn loss(&self) -> f64;
    /// What [`HeldAgreement::loss`] is, as the tables head it (`KL`, `1 - cos`).
    fn loss_name(&self) -> &'static str;
    /// [`HeldAgreement::loss`] as the tables show it.
    fn loss_text(&self) -> String;
    /// What [`HeldAgreement::loss`] is, in a few words (the sensitivity table's legend).
    fn explained(&self) -> &'static str;
    /// What is compared, in words: `logits`, `embeddings`, `class logits`.
    fn measured(&self) -> &'static str;
    /// What is compared, as debug.json's keys name it: `logits`, `embeddings`, `class_logits`.
    fn key(&self) -> &'static str;
    /// The second measure the tables show beside the loss, headed.
    fn second(&self) -> (&'static str, String);
    /// The agreement in one line.
    fn describe(&self) -> String;
}

/// How another model agrees with FP32 on the held-out inputs, in its task's measure.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(untagged)]
pub enum OutputAgreement {
    /// A QA head's start and end logits.
    Logits(LogitAgreement),
    /// A sentence embedding.
    Embeddings(EmbeddingAgreement),
    /// A classifier's class logits.
    Classes(ClassAgreement),
}

impl OutputAgreement {
    /// The task's agreement.
    fn inner(&self) -> &dyn HeldAgreement {
        match self {
            OutputAgreement::Logits(a) => a,
            OutputAgreement::Embeddings(a) => a,
            OutputAgreement::Classes(a) => a,
        }
    }

    /// [`HeldAgreement::loss`]: the logits' mean KL in nats, the embeddings' mean cosine distance (1 - cosine), the class
    /// probabilities' KL.
    pub fn loss(&self) -> f64 {
        self.inner().loss()
    }

    /// The logits' agreement, for a QA model.
    pub fn as_logits(&self) -> Option<&LogitAgreement> {
        match self {
            OutputAgreement::Logits(a) => Some(a),
            OutputAgreement::Embeddings(_) | OutputAgreement::Classes(_) => None,
        }
    }

    /// The embeddings' agreement, for an embedding model.
    pub fn as_embeddings(&self) -> Option<&EmbeddingAgreement> {
        match self {
            OutputAgreement::Embeddings(a) => Some(a),
            OutputAgreement::Logits(_) | OutputAgreement::Classes(_) => None,
        }
    }

    /// [`HeldAgreement::loss_name`].
    pub fn loss_name(&self) -> &'static str {
        self.inner().loss_name()
    }

    /// [`HeldAgreement::key`].
    pub fn key(&self) -> &'static str {
        self.inner().key()
    }

    /// [`HeldAgreement::measured`].
    pub fn measured(&self) -> &'static str {
        self.inner().measured()
    }

    /// [`HeldAgreement::explained`].
    pub fn explained(&self) -> &'static str {
        self.inner().explained()
    }

    /// [`HeldAgreement::loss_text`].
    pub fn loss_text(&self) -> String {
        self.inner().loss_text()
    }

    /// [`HeldAgreement::second`].
    pub fn second(&self) -> (&'static str, String) {
        self.inner().second()
    }

    /// [`HeldAgreement::describe`].
    pub fn describe(&self) -> String {
        self.inner().describe()
    }
}

/// How two models' start and end logits agree, per feature, over the feature's real tokens.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LogitAgreement {
    /// Mean KL(softmax(FP32) ‖ softmax(other)) in nats.
    pub kl_start: f64,
    pub kl_end: f64,
    /// Share of features whose argmax is the same.
    pub argmax_start: f64,
    pub argmax_end: f64,
    /// Largest |logit difference|.
    pub max_abs_diff: f64,
}

impl LogitAgreement {
    /// The mean of the start and end KL.
    pub fn kl(&self) -> f64 {
        (self.kl_start + self.kl_end) / 2.0
    }
}

impl HeldAgreement for LogitAgreement {
    fn loss(&self) -> f64 {
        self.kl()
    }

    fn loss_name(&self) -> &'static str {
        "KL"
    }

    fn loss_text(&self) -> String {
        format!("{:.4}", self.kl())
    }

    fn explained(&self) -> &'static str {
        "KL: mean of start and end"
    }

    fn measured(&self) -> &'static str {
        "logits"
    }

    fn key(&self) -> &'static str {
        "logits"
    }

    /// The share of features with the same argmax, start and end together.
    fn second(&self) -> (&'static str, String) {
        ("same argmax", format!("{:.1} %", 50.0 * (self.argmax_start + self.argmax_end)))
    }

    fn describe(&self) -> String {
        format!(
            "KL start {:.4} / end {:.4} nats, same argmax {:.1} % / {:.1} %, max |diff| {:.3}",
            self.kl_start,
            self.kl_end,
            100.0 * self.argmax_start,
            100.0 * self.argmax_end,
            self.max_abs_diff
        )
    }
}

/// How two models' sentence embeddings of the same texts agree.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct EmbeddingAgreement {
    /// Mean cosine between the two models' embeddings of a text.
    pub mean_cosine: f64,
    /// The lowest of those cosines.
    pub min_cosine: f64,
    /// How much the model moves the similarities that order each text's neighbours, relative to how far apart those
    /// similarities are: for every held-out text, the change of its cosine to each other text, less that change's
    /// mean over the others (a shift common to them all reorders nothing), root-mean-square, over the spread
    /// (standard deviation) of FP32's cosines; the mean over texts. 0: every text ranks the others as FP32 does by
    /// the same margins. Retrieval loses what reorders neighbours, which a mean cosine does not tell apart from error
    /// in directions no ranking reads. Over the first 1,000 texts (the pairs grow with their square).
    pub similarity_distortion: f64,
}

impl HeldAgreement for EmbeddingAgreement {
    fn loss(&self) -> f64 {
        1.0 - self.mean_cosine
    }

    fn loss_name(&self) -> &'static str {
        "1 - cos"
    }

    /// A cosine distance (often 1e-5) in scientific notation.
    fn loss_text(&self) -> String {
        format!("{:.3e}", self.loss())
    }

    fn explained(&self) -> &'static str {
        "1 - cos: mean cosine distance to FP32's embedding"
    }

    fn measured(&self) -> &'static str {
        "embeddings"
    }

    fn key(&self) -> &'static str {
        "embeddings"
    }

    fn second(&self) -> (&'static str, String) {
        ("min cos", format!("{:.5}", self.min_cosine))
    }

    fn describe(&self) -> String {
        format!(
            "cosine mean {:.5} (distance {:.2e}), min {:.5}, similarity distortion {:.4}",
            self.mean_cosine,
            1.0 - self.mean_cosine,
            self.min_cosine,
            self.similarity_distortion
        )
    }
}

/// How two classifiers' class logits agree, per input (a token classifier: per token the mask keeps).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ClassAgreement {
    /// Classes per row (1: a regression head, compared by its squared difference).
    pub classes: usize,
    /// Mean KL(softmax(FP32) ‖ softmax(other)) of the class probabilities, in nats.
    pub mean_kl: f64,
    /// Share of rows whose class (argmax) is FP32's.
    pub same_class: f64,
    /// Rows whose class is not FP32's.
    pub flips: u64,
    /// Mean squared logit difference (a regression head's distance).
    pub mean_sq_diff: f64,
    /// Largest |logit difference|.
    pub max_abs_diff: f64,
}

impl HeldAgreement for ClassAgreement {
    /// The class KL; a regression head's mean squared difference.
    fn loss(&self) -> f64 {
        if self.classes == 1 { self.mean_sq_diff } else { self.mean_kl }
    }

    fn loss_name(&self) -> &'static str {
        if self.classes == 1 { "mean sq diff" } else { "KL" }
    }

    fn loss_text(&self) -> String {
        format!("{:.3e}", self.loss())
    }

    fn explained(&self) -> &'static str {
        if self.classes == 1 {
            "mean squared difference of the regression output"
        } else {
            "KL: of the class probabilities, mean over inputs"
        }
    }

    fn measured(&self) -> &'static str {
        "class logits"
    }

    fn key(&self) -> &'static str {
        "class_logits"
    }

    /// The share of inputs whose class is FP32's (a regression head: the largest difference).
    fn second(&self) -> (&'static str, String) {
        if self.classes == 1 {
            ("max |diff|", format!("{:.4}", self.max_abs_diff))
        } else {
            ("class = FP32", format!("{:.2} %", 100.0 * self.same_class))
        }
    }

    fn describe(&self) -> String {
        if self.classes == 1 {
            return format!(
                "regression output: mean squared difference {:.3e}, max |diff| {:.4}",
                self.mean_sq_diff, self.max_abs_diff
            );
        }
        format!(
            "class KL {:.3e} nats, class = FP32's {:.2} % ({} flipped), max |diff| {:.3}",
            self.mean_kl,
            100.0 * self.same_class,
            self.flips,
            self.max_abs_diff
        )
    }
}
