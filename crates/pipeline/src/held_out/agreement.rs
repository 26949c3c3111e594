//! What another model's outputs are measured by against FP32's on held-out inputs ([`HeldAgreement`], which each task
//! room's `held` module implements for its own measure) and [`OutputAgreement`] as reports carry it.

use std::any::Any;
use std::sync::Arc;

use serde::Serialize;

/// What every [`HeldAgreement`] has by being a plain serializable value: a downcast and its fields as JSON.
pub trait AgreementBase {
    fn as_any(&self) -> &dyn Any;
    fn json(&self) -> serde_json::Value;
}

impl<T: HeldAgreement + Serialize + 'static> AgreementBase for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// One task's measure of how another model's outputs agree with FP32's, as `qdq debug` and `qdq tune` show it.
pub trait HeldAgreement: AgreementBase + std::fmt::Debug + Send + Sync {
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

/// How another model agrees with FP32 on the held-out inputs, in its task's measure (the room's [`HeldAgreement`]):
/// serialized as that measure's own fields.
#[derive(Debug, Clone)]
pub struct OutputAgreement(Arc<dyn HeldAgreement>);

impl Serialize for OutputAgreement {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.json().serialize(s)
    }
}

impl OutputAgreement {
    /// A room's agreement.
    pub(crate) fn new(agreement: impl HeldAgreement + 'static) -> OutputAgreement {
        OutputAgreement(Arc::new(agreement))
    }

    /// The task's agreement.
    fn inner(&self) -> &dyn HeldAgreement {
        &*self.0
    }

    /// The agreement, if it is a `T` (a room's own type: SQuAD's `LogitAgreement`, ...).
    pub fn of<T: 'static>(&self) -> Option<&T> {
        self.0.as_any().downcast_ref()
    }

    /// [`HeldAgreement::loss`]: the logits' mean KL in nats, the embeddings' mean cosine distance (1 - cosine), the
    /// class probabilities' KL.
    pub fn loss(&self) -> f64 {
        self.inner().loss()
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
