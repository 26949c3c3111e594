//! How a model gives its sentence embedding ([`EmbeddingHead`]): a pooled output, or token states and their pooling.

use model_io::roles::EmbeddingOutput;
use ndarray::ArrayView2;

use crate::error::{Error, Result};
use crate::inputs::pooling::Pooling;

/// How a model gives its sentence embedding: the output, and for token states the pooling.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingHead {
    pub output: EmbeddingOutput,
    /// The pooling of token states (`None` for a pooled output).
    pub pooling: Option<Pooling>,
}

impl EmbeddingHead {
    /// `rows` embeddings from one run's output (`shape`, `data`) and its attention mask.
    pub(crate) fn embeddings(
        &self,
        model: &str,
        shape: &[usize],
        data: &[f32],
        mask: Option<ArrayView2<i64>>,
    ) -> Result<Vec<Vec<f32>>> {
        let bad = |reason: String| -> Error {
            runtime::Error::BadOutput { model: model.to_owned(), output: self.output.name().to_owned(), reason }.into()
        };
        match (&self.output, &self.pooling, shape) {
            (EmbeddingOutput::Pooled(_), _, [rows, dim]) => {
                Ok(data.chunks(*dim.max(&1)).take(*rows).map(<[f32]>::to_vec).collect())
            }
            (EmbeddingOutput::TokenStates(_), Some(p), [rows, seq, hidden]) => {
                let mask = mask.ok_or_else(|| bad("token states need the attention mask to pool over".into()))?;
                Ok(p.pool(data, (*rows, *seq, *hidden), mask))
            }
            (EmbeddingOutput::TokenStates(_), None, _) => Err(Error::Internal("token states without a pooling".into())),
            (EmbeddingOutput::Pooled(_), _, _) => Err(bad(format!("expected a [batch, dim] embedding, got {shape:?}"))),
            (EmbeddingOutput::TokenStates(_), _, _) => {
                Err(bad(format!("expected [batch, sequence, hidden] token states, got {shape:?}")))
            }
        }
    }
}
