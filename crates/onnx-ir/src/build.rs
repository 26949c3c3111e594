//! Small builders for nodes and attributes, and typed attribute readers.

use crate::error::{Error, Result};
use crate::proto::attribute_proto::AttributeType;
use crate::proto::{AttributeProto, GraphProto, NodeProto, TensorProto};

/// A node in the default domain with no attributes.
pub fn node(op_type: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op_type.to_string()),
        name: Some(name.to_string()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn attr(name: &str, ty: AttributeType) -> AttributeProto {
    AttributeProto { name: Some(name.to_string()), r#type: Some(ty as i32), ..Default::default() }
}

/// An INT attribute.
pub fn attr_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto { i: Some(v), ..attr(name, AttributeType::Int) }
}

/// A FLOAT attribute.
pub fn attr_float(name: &str, v: f32) -> AttributeProto {
    AttributeProto { f: Some(v), ..attr(name, AttributeType::Float) }
}

/// A STRING attribute.
pub fn attr_string(name: &str, v: &str) -> AttributeProto {
    AttributeProto { s: Some(v.as_bytes().to_vec()), ..attr(name, AttributeType::String) }
}

/// An INTS attribute.
pub fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto { ints: v.to_vec(), ..attr(name, AttributeType::Ints) }
}

/// A FLOATS attribute.
pub fn attr_floats(name: &str, v: &[f32]) -> AttributeProto {
    AttributeProto { floats: v.to_vec(), ..attr(name, AttributeType::Floats) }
}

/// A STRINGS attribute.
pub fn attr_strings(name: &str, v: &[&str]) -> AttributeProto {
    AttributeProto { strings: v.iter().map(|s| s.as_bytes().to_vec()).collect(), ..attr(name, AttributeType::Strings) }
}

/// A TENSOR attribute (e.g. `Constant`'s `value`).
pub fn attr_tensor(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto { t: Some(t), ..attr(name, AttributeType::Tensor) }
}

/// A GRAPH attribute (e.g. `If`'s branches).
pub fn attr_graph(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto { g: Some(g), ..attr(name, AttributeType::Graph) }
}

/// Builder-style attribute adding on [`NodeProto`].
pub trait NodeExt {
    /// Adds an attribute and returns the node.
    fn with_attr(self, a: AttributeProto) -> Self;
    /// Sets the node's domain and returns it.
    fn with_domain(self, domain: &str) -> Self;
}

impl NodeExt for NodeProto {
    fn with_attr(mut self, a: AttributeProto) -> Self {
        self.attribute.push(a);
        self
    }
    fn with_domain(mut self, domain: &str) -> Self {
        self.domain = Some(domain.to_string());
        self
    }
}

/// The attribute `name` of `node`, if present.
pub fn get_attr<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute.iter().find(|a| a.name() == name)
}

fn typed<'a>(node: &'a NodeProto, name: &str, want: AttributeType) -> Result<Option<&'a AttributeProto>> {
    match get_attr(node, name) {
        None => Ok(None),
        Some(a) if a.r#type() == want => Ok(Some(a)),
        Some(a) => Err(Error::Attribute {
            node: node.name().to_string(),
            attr: name.to_string(),
            reason: format!("expected type {}, found {}", want.as_str_name(), a.r#type().as_str_name()),
        }),
    }
}

/// INT attribute value; `Ok(None)` if absent, error if present with another type.
pub fn get_attr_int(node: &NodeProto, name: &str) -> Result<Option<i64>> {
    Ok(typed(node, name, AttributeType::Int)?.map(|a| a.i()))
}

/// FLOAT attribute value; `Ok(None)` if absent, error if present with another type.
pub fn get_attr_float(node: &NodeProto, name: &str) -> Result<Option<f32>> {
    Ok(typed(node, name, AttributeType::Float)?.map(|a| a.f()))
}

/// INTS attribute value; `Ok(None)` if absent, error if present with another type.
pub fn get_attr_ints<'a>(node: &'a NodeProto, name: &str) -> Result<Option<&'a [i64]>> {
    Ok(typed(node, name, AttributeType::Ints)?.map(|a| a.ints.as_slice()))
}

/// STRING attribute value as UTF-8 (lossy); `Ok(None)` if absent.
pub fn get_attr_string(node: &NodeProto, name: &str) -> Result<Option<String>> {
    Ok(typed(node, name, AttributeType::String)?.map(|a| String::from_utf8_lossy(a.s()).into_owned()))
}

/// TENSOR attribute value; `Ok(None)` if absent, error if present with another type.
pub fn get_attr_tensor<'a>(node: &'a NodeProto, name: &str) -> Result<Option<&'a TensorProto>> {
    Ok(typed(node, name, AttributeType::Tensor)?.and_then(|a| a.t.as_ref()))
}
