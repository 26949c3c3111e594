//! Tensors observed where ONNX Runtime computes them: a custom operator, `ai.qdq.observe:Observe`, hands its input
//! to an [`Observer`] while the run is under way and outputs one float.
//!
//! Exposing a tensor as a graph output makes ONNX Runtime keep it alive to the end of the run and hand it back (every
//! exposed tensor written out and read again after the run, long out of the caches); an `Observe` node reads it where
//! ONNX Runtime places the node in its execution order, and the tensor's buffer is reused once the node has run. The
//! caller adds the nodes ([`OBSERVE_DOMAIN`], [`OBSERVE_OP`], the [`OBSERVE_SLOT`] attribute saying which tensor it
//! is), makes each node's output a graph output, so nothing is pruned, and lists them so that each runs right behind
//! its tensor's producer (ONNX Runtime walks back from the last-listed leaf first: pipeline's calibration pass lists
//! them latest-produced tensor first); it opens the session with [`crate::Session::open_observed`].

use std::sync::Arc;

use ort::operator::{
    BoxedKernel, ComputeContext, KernelContext, Operator, OperatorDomain, OperatorInput, OperatorOutput,
};
use ort::value::{Shape, SymbolicDimensions, TensorElementType, ValueType};

/// The custom operator domain of [`OBSERVE_OP`] (the model must import it, version 1).
pub const OBSERVE_DOMAIN: &str = "ai.qdq.observe";
/// The observing operator: one float32 or float16 tensor in, a one-element float32 tensor out.
pub const OBSERVE_OP: &str = "Observe";
/// The int attribute of an [`OBSERVE_OP`] node: the index handed to [`Observer::observe`].
pub const OBSERVE_SLOT: &str = "slot";

/// Held while a session with the observing domain is made ([`crate::Session::open_observed`]).
pub(crate) static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Receives each observed tensor during a run, on the thread that runs the node.
pub trait Observer: Send + Sync {
    /// `data` of shape `shape` (row-major) reached the `Observe` node whose slot is `slot`. An error fails the run
    /// with this message; the observer keeps its own richer error for the caller.
    fn observe(&self, slot: usize, shape: &[usize], data: &[f32]) -> Result<(), String>;
}

/// The kernel for one input element type: float32 (handed over as it is) or float16 (widened, as
/// [`crate::Session::run_with`] hands float16 outputs over).
struct Observe {
    observer: Arc<dyn Observer>,
    input: TensorElementType,
}

impl Operator for Observe {
    type Kernel<'attr> = BoxedKernel<'attr>;

    fn name(&self) -> &str {
        OBSERVE_OP
    }

    fn inputs(&self) -> impl IntoIterator<Item = OperatorInput> {
        [OperatorInput::required(self.input)]
    }

    fn outputs(&self) -> impl IntoIterator<Item = OperatorOutput> {
        [OperatorOutput::required(TensorElementType::Float32)]
    }

    fn create_kernel<'attr>(&self, kctx: &KernelContext<'attr>) -> ort::Result<Self::Kernel<'attr>> {
        let slot = kctx.get::<i64>(OBSERVE_SLOT).and_then(|s| usize::try_from(s).ok()).ok_or_else(|| {
            ort::Error::new(format!("{OBSERVE_OP} needs a non-negative int attribute `{OBSERVE_SLOT}`"))
        })?;
        let observer = Arc::clone(&self.observer);
        Ok(Box::new(move |ctx: &ComputeContext| {
            let input = ctx.input(0)?.ok_or_else(|| ort::Error::new(format!("{OBSERVE_OP}: no input")))?;
            let (shape, data) = crate::tensor::float_data(&input)?;
            observer.observe(slot, &shape, &data).map_err(ort::Error::new)?;
            let mut out =
                ctx.output(0, [1usize])?.ok_or_else(|| ort::Error::new(format!("{OBSERVE_OP}: no output")))?;
            out.try_extract_tensor_mut::<f32>()?.1.fill(0.0);
            Ok(())
        }))
    }

    fn infer_shape(&self, ctx: &mut ort::operator::ShapeInferenceContext) -> ort::Result<()> {
        let ty = ValueType::Tensor {
            ty: TensorElementType::Float32,
            shape: Shape::new([1i64]),
            dimension_symbols: SymbolicDimensions::new([String::new()]),
        };
        ctx.set_output(0, &ty)
    }
}

/// The operator domain handing observed tensors to `observer`.
pub(crate) fn domain(observer: Arc<dyn Observer>) -> ort::Result<OperatorDomain> {
    let f16 = Observe { observer: Arc::clone(&observer), input: TensorElementType::Float16 };
    OperatorDomain::new(OBSERVE_DOMAIN)?.add(Observe { observer, input: TensorElementType::Float32 })?.add(f16)
}
