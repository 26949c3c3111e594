//! A QA model's start and end logits out of a run's outputs, whichever form the head writes them in.

use std::borrow::Cow;

use squad::ModelIo;

use crate::error::{Error, Result};

/// One run's start and end logits, `[features, width]` each, from the outputs [`ModelIo::logit_outputs`] names (in
/// that order): borrowed from ONNX Runtime's buffers, or taken apart from one stacked `[features, width, 2]` output.
pub struct RunLogits<'a> {
    pub start: Cow<'a, [f32]>,
    pub end: Cow<'a, [f32]>,
    pub width: usize,
}

impl RunLogits<'_> {
    /// The logits copied out of the run's outputs, to outlive them.
    pub fn into_owned(self) -> RunLogits<'static> {
        RunLogits { start: self.start.into_owned().into(), end: self.end.into_owned().into(), width: self.width }
    }
}

/// [`RunLogits`] of a run of `features` features of the model `model` (named in errors); rows past them (a
/// fixed-batch model's filler rows, [`squad::Batch::fill_to`]) are not read.
pub fn run_logits<'a>(
    outs: &[runtime::OutputRef<'a>],
    io: &ModelIo,
    features: usize,
    model: &str,
) -> Result<RunLogits<'a>> {
    let bad = |output: &str, reason: String| -> Error {
        runtime::Error::BadOutput { model: model.to_owned(), output: output.to_owned(), reason }.into()
    };
    if io.stacked_logits() {
        let o = &outs[0];
        if o.shape.len() != 3 || o.shape[0] < features || o.shape[2] != 2 {
            return Err(bad(
                &io.start_logits,
                format!(
                    "one output for both logits must be [batch {features}, sequence, 2] (start, end on the last axis), \
                     got {:?}",
                    o.shape
                ),
            ));
        }
        let used = &o.data[..features * o.shape[1] * 2];
        let start: Vec<f32> = used.iter().step_by(2).copied().collect();
        let end: Vec<f32> = used.iter().skip(1).step_by(2).copied().collect();
        return Ok(RunLogits { start: start.into(), end: end.into(), width: o.shape[1] });
    }
    let (start, end) = (&outs[0], &outs[1]);
    if start.shape.len() != 2 || start.shape != end.shape || start.shape[0] < features {
        return Err(bad(
            &io.start_logits,
            format!("expected [batch {features}, sequence] logits, got {:?} and {:?}", start.shape, end.shape),
        ));
    }
    let n = features * start.shape[1];
    let rows = |d: &Cow<'a, [f32]>| match d {
        Cow::Borrowed(b) => Cow::Borrowed(&b[..n]),
        Cow::Owned(v) => Cow::Owned(v[..n].to_vec()),
    };
    Ok(RunLogits { start: rows(&start.data), end: rows(&end.data), width: start.shape[1] })
}
