//! [`GraphIndex`]: who produces and who reads every tensor of a graph, built in one scan.

use std::collections::{HashMap, HashSet};

use crate::proto::{GraphProto, NodeProto, TensorProto};

/// Producers, readers, initializers and names of a graph, built once per pass so that every question a pass asks is
/// a map look-up instead of a scan of the graph (what [`crate::GraphExt::producer_of`] and friends do).
///
/// Node references are indices into `graph.node` as it was when the index was built: a pass that inserts or removes
/// nodes builds a new index afterwards. Where a name is defined twice (an invalid graph), the first definition wins,
/// as with the [`crate::GraphExt`] queries.
///
/// ```
/// use qdq_onnx_ir::{GraphIndex, node, proto::GraphProto};
/// let g = GraphProto {
///     node: vec![node("Relu", "r", &["x"], &["y"]), node("Add", "a", &["y", "y"], &["z"])],
///     ..Default::default()
/// };
/// let ix = GraphIndex::new(&g);
/// assert_eq!(ix.producer_op("y"), Some("Relu"));
/// assert_eq!(ix.readers("y"), &[(1, 0), (1, 1)]);
/// assert_eq!(ix.node_named("a"), Some(1));
/// assert!(ix.readers("z").is_empty() && !ix.is_initializer("x"));
/// ```
#[derive(Debug, Clone)]
pub struct GraphIndex<'g> {
    graph: &'g GraphProto,
    producer: HashMap<&'g str, usize>,
    readers: HashMap<&'g str, Vec<(usize, usize)>>,
    initializers: HashMap<&'g str, &'g TensorProto>,
    graph_inputs: HashSet<&'g str>,
    graph_outputs: HashSet<&'g str>,
    by_name: HashMap<&'g str, usize>,
}

impl<'g> GraphIndex<'g> {
    /// Indexes `graph` (its own nodes; reads from inside subgraphs are not listed as readers).
    pub fn new(graph: &'g GraphProto) -> Self {
        let mut producer = HashMap::new();
        let mut readers: HashMap<&str, Vec<(usize, usize)>> = HashMap::new();
        let mut by_name = HashMap::new();
        for (i, n) in graph.node.iter().enumerate() {
            for o in n.output.iter().filter(|o| !o.is_empty()) {
                producer.entry(o.as_str()).or_insert(i);
            }
            for (slot, inp) in n.input.iter().enumerate().filter(|(_, t)| !t.is_empty()) {
                readers.entry(inp.as_str()).or_default().push((i, slot));
            }
            if !n.name().is_empty() {
                by_name.entry(n.name()).or_insert(i);
            }
        }
        let mut initializers = HashMap::new();
        for t in &graph.initializer {
            initializers.entry(t.name()).or_insert(t);
        }
        GraphIndex {
            graph,
            producer,
            readers,
            initializers,
            graph_inputs: graph.input.iter().map(|v| v.name()).collect(),
            graph_outputs: graph.output.iter().map(|v| v.name()).collect(),
            by_name,
        }
    }

    /// The indexed graph.
    pub fn graph(&self) -> &'g GraphProto {
        self.graph
    }

    /// Node `i` of the graph.
    pub fn node(&self, i: usize) -> &'g NodeProto {
        &self.graph.node[i]
    }

    /// Index of the node producing `tensor`.
    pub fn producer(&self, tensor: &str) -> Option<usize> {
        self.producer.get(tensor).copied()
    }

    /// The node producing `tensor`.
    pub fn producer_node(&self, tensor: &str) -> Option<&'g NodeProto> {
        self.producer(tensor).map(|i| self.node(i))
    }

    /// Op type of the node producing `tensor`.
    pub fn producer_op(&self, tensor: &str) -> Option<&'g str> {
        self.producer_node(tensor).map(NodeProto::op_type)
    }

    /// `(node, input slot)` of every read of `tensor`, in node order.
    pub fn readers(&self, tensor: &str) -> &[(usize, usize)] {
        self.readers.get(tensor).map(Vec::as_slice).unwrap_or_default()
    }

    /// The dense initializer named `name`.
    pub fn initializer(&self, name: &str) -> Option<&'g TensorProto> {
        self.initializers.get(name).copied()
    }

    /// True if a dense initializer is named `name`.
    pub fn is_initializer(&self, name: &str) -> bool {
        self.initializers.contains_key(name)
    }

    /// True if `name` is an output of the graph.
    pub fn is_graph_output(&self, name: &str) -> bool {
        self.graph_outputs.contains(name)
    }

    /// True if `name` is a graph input, an initializer or a node output.
    pub fn is_defined(&self, name: &str) -> bool {
        self.graph_inputs.contains(name) || self.is_initializer(name) || self.producer.contains_key(name)
    }

    /// Index of the node named `name`.
    pub fn node_named(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// Element type of `name`: its initializer's, else the type declared in the graph's inputs, outputs or
    /// value_info.
    pub fn elem_type(&self, name: &str) -> Option<i32> {
        if let Some(t) = self.initializer(name) {
            return Some(t.data_type());
        }
        let g = self.graph;
        g.input
            .iter()
            .chain(&g.output)
            .chain(&g.value_info)
            .find(|v| v.name() == name)
            .and_then(crate::declared_elem_type)
    }
}
