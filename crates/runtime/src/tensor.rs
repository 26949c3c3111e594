//! Float tensors as qdq reads them from ONNX Runtime: a run's outputs and an `Observe` node's input alike.

use std::borrow::Cow;

/// A float tensor's shape and values: float32 borrowed, float16 widened; any other type is the float32 attempt's
/// error.
pub(crate) fn float_data(value: &ort::value::DynValue) -> ort::Result<(Vec<usize>, Cow<'_, [f32]>)> {
    let (shape, data) = match value.try_extract_tensor::<f32>() {
        Ok((shape, data)) => (shape, Cow::Borrowed(data)),
        Err(e) => match value.try_extract_tensor::<half::f16>() {
            Ok((shape, data)) => (shape, Cow::Owned(data.iter().map(|v| v.to_f32()).collect())),
            Err(_) => return Err(e),
        },
    };
    Ok((shape.iter().map(|&d| d.max(0) as usize).collect(), data))
}
