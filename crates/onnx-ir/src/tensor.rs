//! Tensor storage rules and conversions between [`TensorProto`] and `ndarray`.

use half::f16;
use ndarray::{ArrayD, IxDyn};

use crate::error::{Result, tensor_err};
use crate::proto::TensorProto;
use crate::proto::tensor_proto::{DataLocation, DataType};

/// Storage size of `count` elements of `data_type` in raw_data, in bytes.
///
/// `None` for types without a fixed size (STRING, UNDEFINED, unknown codes) or on overflow.
pub fn raw_byte_len(data_type: i32, count: u64) -> Option<u64> {
    use DataType as D;
    let dt = D::try_from(data_type).ok()?;
    match dt {
        D::Undefined | D::String => None,
        D::Float6e2m3 | D::Float6e3m2 => count.div_ceil(4).checked_mul(3),
        D::Uint4 | D::Int4 | D::Float4e2m1 => Some(count.div_ceil(2)),
        D::Uint2 | D::Int2 => Some(count.div_ceil(4)),
        D::Uint8 | D::Int8 | D::Bool => Some(count),
        D::Float8e4m3fn | D::Float8e4m3fnuz | D::Float8e5m2 | D::Float8e5m2fnuz | D::Float8e8m0 => Some(count),
        D::Uint16 | D::Int16 | D::Float16 | D::Bfloat16 => count.checked_mul(2),
        D::Float | D::Int32 | D::Uint32 => count.checked_mul(4),
        D::Int64 | D::Uint64 | D::Double | D::Complex64 => count.checked_mul(8),
        D::Complex128 => count.checked_mul(16),
    }
}

/// Name of a data type code for messages ("FLOAT", "INT64", or the number if unknown).
pub fn data_type_name(data_type: i32) -> String {
    DataType::try_from(data_type)
        .map(|d| d.as_str_name().to_string())
        .unwrap_or_else(|_| format!("unknown data type {data_type}"))
}

/// Shape of a tensor as `usize` dims plus its element count, overflow-checked.
///
/// Errors on negative dims or a product that does not fit in 64 bits.
pub fn tensor_shape(t: &TensorProto) -> Result<(Vec<usize>, u64)> {
    let mut count: u64 = 1;
    let mut shape = Vec::with_capacity(t.dims.len());
    for (axis, &d) in t.dims.iter().enumerate() {
        let du = u64::try_from(d).map_err(|_| tensor_err(t.name(), format!("dim {axis} is negative ({d})")))?;
        count = count.checked_mul(du).ok_or_else(|| {
            tensor_err(t.name(), format!("element count overflows at dim {axis} (dims {:?})", t.dims))
        })?;
        shape.push(usize::try_from(du).map_err(|_| tensor_err(t.name(), format!("dim {axis} too large")))?);
    }
    Ok((shape, count))
}

/// Number of entries the typed repeated field for `data_type` must hold, and that field's
/// current length; `None` for types this check does not cover.
fn typed_field_len(t: &TensorProto, count: u64) -> Option<(u64, usize, &'static str)> {
    use DataType as D;
    let dt = D::try_from(t.data_type()).ok()?;
    let double = count.checked_mul(2)?;
    Some(match dt {
        D::Float => (count, t.float_data.len(), "float_data"),
        D::Complex64 => (double, t.float_data.len(), "float_data"),
        D::Int64 => (count, t.int64_data.len(), "int64_data"),
        D::Double => (count, t.double_data.len(), "double_data"),
        D::Complex128 => (double, t.double_data.len(), "double_data"),
        D::Uint32 | D::Uint64 => (count, t.uint64_data.len(), "uint64_data"),
        D::String => (count, t.string_data.len(), "string_data"),
        D::Uint4 | D::Int4 | D::Float4e2m1 => (count.div_ceil(2), t.int32_data.len(), "int32_data"),
        D::Uint2 | D::Int2 => (count.div_ceil(4), t.int32_data.len(), "int32_data"),
        D::Undefined | D::Float6e2m3 | D::Float6e3m2 => return None,
        _ => (count, t.int32_data.len(), "int32_data"),
    })
}

/// Checks an in-memory (non-external, non-segmented) tensor: dims, and that its data length
/// matches the element count. `context` (e.g. the file) is appended to error messages.
pub(crate) fn check_tensor(t: &TensorProto, context: &str) -> Result<()> {
    let label = || if context.is_empty() { t.name().to_string() } else { format!("{}' in '{context}", t.name()) };
    let (_, count) = tensor_shape(t).map_err(|e| match e {
        crate::Error::BadTensor { reason, .. } => tensor_err(label(), reason),
        other => other,
    })?;
    if t.segment.is_some() || t.data_location() == DataLocation::External {
        return Ok(());
    }
    if let Some(raw) = &t.raw_data {
        // A fixed-size type whose byte count overflows u64 cannot match any data (it used to skip this check).
        if raw_byte_len(t.data_type(), 1).is_some() && raw_byte_len(t.data_type(), count).is_none() {
            let reason =
                format!("dims {:?} of {} need more bytes than fit in 64 bits", t.dims, data_type_name(t.data_type()));
            return Err(tensor_err(label(), reason));
        }
        if let Some(want) = raw_byte_len(t.data_type(), count)
            && raw.len() as u64 != want
        {
            return Err(tensor_err(
                label(),
                format!(
                    "raw_data has {} bytes but {} elements of {} need {want}",
                    raw.len(),
                    count,
                    data_type_name(t.data_type())
                ),
            ));
        }
        return Ok(());
    }
    if let Some((want, have, field)) = typed_field_len(t, count)
        && have as u64 != want
    {
        return Err(tensor_err(
            label(),
            format!(
                "{field} has {have} entries but dims {:?} of {} need {want}",
                t.dims,
                data_type_name(t.data_type())
            ),
        ));
    }
    Ok(())
}

mod sealed {
    pub trait Sealed {}
}

/// Element types convertible between ndarray and [`TensorProto`]: f32, f16, i64, i32, i16, u16, i8, u8.
pub trait Element: Copy + sealed::Sealed + 'static {
    /// The ONNX data type of this element.
    const DATA_TYPE: DataType;
    /// Bytes per element in raw_data.
    const SIZE: usize;
    /// Decodes one element from exactly `SIZE` little-endian bytes.
    fn from_le(bytes: &[u8]) -> Self;
    /// Appends the little-endian bytes of `self`.
    fn put_le(self, out: &mut Vec<u8>);
    /// Values from the typed repeated field ONNX uses for this type.
    fn from_typed(t: &TensorProto) -> Vec<Self>;
}

macro_rules! element {
    ($t:ty, $dt:ident, $size:expr, |$tp:ident| $typed:expr, |$b:ident| $from:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DATA_TYPE: DataType = DataType::$dt;
            const SIZE: usize = $size;
            fn from_le($b: &[u8]) -> Self {
                let mut a = [0u8; $size];
                a.copy_from_slice(&$b[..$size]);
                $from(a)
            }
            fn put_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn from_typed($tp: &TensorProto) -> Vec<Self> {
                $typed
            }
        }
    };
}

element!(f32, Float, 4, |t| t.float_data.clone(), |b| f32::from_le_bytes);
element!(i64, Int64, 8, |t| t.int64_data.clone(), |b| i64::from_le_bytes);
element!(i32, Int32, 4, |t| t.int32_data.clone(), |b| i32::from_le_bytes);
// Per the ONNX spec, 8-bit integers live in int32_data as their values and float16 as
// its bit pattern in the low 16 bits; truncating casts are the defined meaning.
element!(i8, Int8, 1, |t| t.int32_data.iter().map(|&v| v as i8).collect(), |b| i8::from_le_bytes);
element!(u8, Uint8, 1, |t| t.int32_data.iter().map(|&v| v as u8).collect(), |b| u8::from_le_bytes);
// 16-bit integers too (16-bit Q/DQ zero points, opset 21).
element!(i16, Int16, 2, |t| t.int32_data.iter().map(|&v| v as i16).collect(), |b| i16::from_le_bytes);
element!(u16, Uint16, 2, |t| t.int32_data.iter().map(|&v| v as u16).collect(), |b| u16::from_le_bytes);
element!(f16, Float16, 2, |t| t.int32_data.iter().map(|&v| f16::from_bits(v as u16)).collect(), |b| f16::from_le_bytes);

/// The shape and element count of `t` if its data can be read as `T` where it is: `T`'s data type, not external.
fn readable_as<T: Element>(t: &TensorProto) -> Result<(Vec<usize>, u64)> {
    let name = t.name();
    if t.data_type() != T::DATA_TYPE as i32 {
        return Err(tensor_err(
            name,
            format!("expected data type {}, found {}", T::DATA_TYPE.as_str_name(), data_type_name(t.data_type())),
        ));
    }
    if t.data_location() == DataLocation::External {
        return Err(tensor_err(name, "data is in an external file that was not loaded"));
    }
    tensor_shape(t)
}

/// `t`'s `raw_data`, checked to hold `count` values of `T`.
fn raw_of<T: Element>(t: &TensorProto, count: u64) -> Result<Option<&[u8]>> {
    let Some(raw) = &t.raw_data else { return Ok(None) };
    if count.checked_mul(T::SIZE as u64) != Some(raw.len() as u64) {
        let reason = format!("raw_data has {} bytes, expected {count} x {} bytes", raw.len(), T::SIZE);
        return Err(tensor_err(t.name(), reason));
    }
    Ok(Some(raw))
}

/// The error of a typed field with `have` values where `count` are needed.
fn typed_len_err(t: &TensorProto, have: usize, count: u64) -> crate::Error {
    tensor_err(t.name(), format!("typed data has {have} values, expected {count} for dims {:?}", t.dims))
}

/// Reads a tensor into an array of `T`.
///
/// Accepts raw_data (little-endian) or the typed repeated field. Errors, naming the tensor,
/// if the data type is not `T`'s, the data length does not match the dims, or the data is
/// still external.
pub fn tensor_to_array<T: Element>(t: &TensorProto) -> Result<ArrayD<T>> {
    let (shape, count) = readable_as::<T>(t)?;
    let values: Vec<T> = match raw_of::<T>(t, count)? {
        Some(raw) => raw.chunks_exact(T::SIZE).map(T::from_le).collect(),
        None => {
            let v = T::from_typed(t);
            if v.len() as u64 != count {
                return Err(typed_len_err(t, v.len(), count));
            }
            v
        }
    };
    ArrayD::from_shape_vec(IxDyn(&shape), values).map_err(|e| tensor_err(t.name(), e.to_string()))
}

/// The values of a float32 tensor, read where they are (no copy of the data: a weight of gigabytes is not held
/// twice), with the tensor's shape. Errors as [`tensor_to_array`] does.
pub fn f32_values(t: &TensorProto) -> Result<(Vec<usize>, F32Values<'_>)> {
    let (shape, count) = readable_as::<f32>(t)?;
    let values = match raw_of::<f32>(t, count)? {
        Some(raw) => F32Values::Raw(raw.chunks_exact(4)),
        None if t.float_data.len() as u64 == count => F32Values::Typed(t.float_data.iter()),
        None => return Err(typed_len_err(t, t.float_data.len(), count)),
    };
    Ok((shape, values))
}

/// Iterator over a float32 tensor's values in place ([`f32_values`]).
#[derive(Debug, Clone)]
pub enum F32Values<'a> {
    /// Little-endian `raw_data`.
    Raw(std::slice::ChunksExact<'a, u8>),
    /// The `float_data` field.
    Typed(std::slice::Iter<'a, f32>),
}

impl Iterator for F32Values<'_> {
    type Item = f32;

    fn next(&mut self) -> Option<f32> {
        match self {
            F32Values::Raw(c) => c.next().map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            F32Values::Typed(i) => i.next().copied(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            F32Values::Raw(c) => c.size_hint(),
            F32Values::Typed(i) => i.size_hint(),
        }
    }
}

impl ExactSizeIterator for F32Values<'_> {}

/// Builds a tensor named `name` from an array, storing the data as little-endian raw_data.
pub fn array_to_tensor<T: Element>(name: &str, a: &ArrayD<T>) -> TensorProto {
    let mut raw = Vec::with_capacity(a.len() * T::SIZE);
    for &v in a.iter() {
        v.put_le(&mut raw);
    }
    TensorProto {
        name: Some(name.to_string()),
        dims: a.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(T::DATA_TYPE as i32),
        raw_data: Some(raw),
        ..Default::default()
    }
}

/// Builds a tensor named `name` from little-endian bytes it takes over (no copy: a large weight is not held twice);
/// errors, naming the tensor, if their length is not what `shape` of `data_type` needs.
pub fn tensor_from_raw(name: &str, shape: &[usize], data_type: DataType, raw: Vec<u8>) -> Result<TensorProto> {
    let count = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
    let want = count.and_then(|c| raw_byte_len(data_type as i32, c));
    if want != Some(raw.len() as u64) {
        let reason = format!("{} bytes do not hold shape {shape:?} of {}", raw.len(), data_type.as_str_name());
        return Err(tensor_err(name, reason));
    }
    Ok(TensorProto {
        name: Some(name.to_owned()),
        dims: shape.iter().map(|&d| d as i64).collect(),
        data_type: Some(data_type as i32),
        raw_data: Some(raw),
        ..TensorProto::default()
    })
}

/// Builds a tensor from a shape and row-major values; errors if their sizes disagree.
pub fn tensor_from_vec<T: Element>(name: &str, shape: &[usize], values: Vec<T>) -> Result<TensorProto> {
    let a = ArrayD::from_shape_vec(IxDyn(shape), values)
        .map_err(|e| tensor_err(name, format!("shape {shape:?} does not match the values: {e}")))?;
    Ok(array_to_tensor(name, &a))
}
