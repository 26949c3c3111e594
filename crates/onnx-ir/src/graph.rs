//! Graph queries and edits on [`GraphProto`] via the [`GraphExt`] trait.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::error::{Result, graph_err};
use crate::proto::tensor_proto::DataType;
use crate::proto::{GraphProto, NodeProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto, type_proto};

/// Subgraphs held in a node's attributes (If branches, Loop/Scan bodies).
pub fn subgraphs(node: &NodeProto) -> impl Iterator<Item = &GraphProto> {
    node.attribute.iter().flat_map(|a| a.g.iter().chain(a.graphs.iter()))
}

/// Adds every tensor name that nodes in `g` (and nested subgraphs) read to `out`.
pub(crate) fn collect_reads<'a>(g: &'a GraphProto, out: &mut HashSet<&'a str>) {
    for n in &g.node {
        out.extend(n.input.iter().map(String::as_str));
        for sg in subgraphs(n) {
            collect_reads(sg, out);
            out.extend(sg.output.iter().map(|v| v.name()));
        }
    }
}

/// Every name used anywhere in the graph: nodes, tensors, initializers, inputs, outputs,
/// value_infos, including nested subgraphs.
fn collect_names(g: &GraphProto, out: &mut HashSet<String>) {
    for n in &g.node {
        out.insert(n.name().to_string());
        out.extend(n.input.iter().cloned());
        out.extend(n.output.iter().cloned());
        for sg in subgraphs(n) {
            collect_names(sg, out);
        }
    }
    out.extend(g.initializer.iter().map(|t| t.name().to_string()));
    out.extend(g.sparse_initializer.iter().filter_map(|s| s.values.as_ref()).map(|t| t.name().to_string()));
    for v in g.input.iter().chain(&g.output).chain(&g.value_info) {
        out.insert(v.name().to_string());
    }
}

/// A set of taken names that hands out fresh ones; build it once for many insertions.
#[derive(Debug, Clone, Default)]
pub struct NameSet {
    taken: HashSet<String>,
}

impl NameSet {
    /// All names used in `g` (nodes, tensors, initializers, inputs/outputs, subgraphs).
    pub fn from_graph(g: &GraphProto) -> Self {
        let mut taken = HashSet::new();
        collect_names(g, &mut taken);
        taken.insert(String::new());
        NameSet { taken }
    }

    /// True if `name` is already used.
    pub fn contains(&self, name: &str) -> bool {
        self.taken.contains(name)
    }

    /// Returns `base` if free, else `base_1`, `base_2`, ...; the result is reserved.
    pub fn fresh(&mut self, base: &str) -> String {
        let name = fresh_in(&self.taken, base);
        self.taken.insert(name.clone());
        name
    }

    /// Marks `name` as used.
    pub fn reserve(&mut self, name: &str) {
        self.taken.insert(name.to_string());
    }
}

fn fresh_in(taken: &HashSet<String>, base: &str) -> String {
    if !taken.contains(base) {
        return base.to_string();
    }
    (1u64..).map(|i| format!("{base}_{i}")).find(|c| !taken.contains(c)).unwrap_or_else(|| base.to_string())
}

/// Queries and edits on a [`GraphProto`]. Node references are indices into `graph.node`.
pub trait GraphExt {
    /// Index of the node producing `tensor`, if any.
    fn producer_of(&self, tensor: &str) -> Option<usize>;
    /// `(node index, input slot)` of every node reading `tensor`, in node order (direct
    /// inputs of this graph's nodes; reads from inside subgraphs are not listed).
    fn consumers_of(&self, tensor: &str) -> Vec<(usize, usize)>;
    /// The dense initializer named `name`.
    fn initializer(&self, name: &str) -> Option<&TensorProto>;
    /// True if a dense initializer is named `name`.
    fn is_initializer(&self, name: &str) -> bool;
    /// Node indices in a topological order (stable: already-sorted graphs keep their order).
    /// Errors naming a node on a cycle.
    fn topological_order(&self) -> Result<Vec<usize>>;
    /// Reorders `node` topologically (see [`GraphExt::topological_order`]).
    fn sort_nodes(&mut self) -> Result<()>;
    /// Checks that every node input is defined (graph input, initializer, node output or
    /// outer scope for subgraphs; "" means an omitted optional input), that no tensor is
    /// produced twice, that graph outputs are defined, and that there is no cycle.
    fn validate(&self) -> Result<()>;
    /// Inserts `nodes` before position `at` (clamped to the end).
    fn insert_nodes(&mut self, at: usize, nodes: Vec<NodeProto>);
    /// Appends a node.
    fn push_node(&mut self, node: NodeProto);
    /// Makes input `slot` of node `node` read `new_tensor`.
    fn rewire_input(&mut self, node: usize, slot: usize, new_tensor: &str) -> Result<()>;
    /// Adds a graph output of element type `elem_type` with unknown shape; no-op if present.
    fn add_output(&mut self, name: &str, elem_type: DataType);
    /// A name not used anywhere in the graph (`base`, `base_1`, ...). Not reserved: use
    /// [`NameSet`] when creating several names before inserting them.
    fn fresh_name(&self, base: &str) -> String;
    /// Drops initializers (dense and sparse) nothing reads ([`GraphExt::drop_unread_initializers`] of them all) and
    /// value_infos of tensors that no longer exist.
    fn remove_unused_initializers(&mut self);
    /// Drops the initializers (dense and sparse) named in `names` that nothing reads (no node, subgraph or graph
    /// output), each with the graph input of the same name where an old exporter (`keep_initializers_as_inputs`)
    /// listed it as one too: a default value nobody reads, which left alone would become a required input.
    fn drop_unread_initializers(&mut self, names: &HashSet<String>);
    /// Removes the nodes `prunable` selects none of whose outputs is read (by a node, from inside a subgraph, or as a
    /// graph output).
    fn remove_unread_nodes(&mut self, prunable: &dyn Fn(&NodeProto) -> bool);
    /// Adds an initializer, replacing any existing one with the same name.
    fn add_initializer(&mut self, t: TensorProto);
    /// Every tensor `tensors` are computed from, themselves included: node outputs, graph inputs and initializers,
    /// following each producing node's inputs and the outer-scope names its subgraphs read.
    fn ancestors_of(&self, tensors: &[&str]) -> HashSet<String>;
    /// Gives every unnamed node of this graph, and every node after the first with a name already taken, a name of
    /// its own (`<op_type>_<index>`, made unique): node names are optional in ONNX and need not be unique, but what
    /// refers to a node by name (sensitivity, exclusions, pairs taken out) needs one per node. Returns how many were
    /// named. Subgraphs keep their nodes' names.
    fn name_nodes(&mut self) -> usize;
}

fn node_label(g: &GraphProto, i: usize) -> String {
    match g.node.get(i) {
        Some(n) if !n.name().is_empty() => format!("node {i} '{}' ({})", n.name(), n.op_type()),
        Some(n) => format!("node {i} ({})", n.op_type()),
        None => format!("node {i}"),
    }
}

/// Names a node depends on: its inputs plus outer-scope names read by its subgraphs.
fn node_deps(n: &NodeProto) -> HashSet<&str> {
    let mut deps: HashSet<&str> = n.input.iter().map(String::as_str).collect();
    for sg in subgraphs(n) {
        collect_reads(sg, &mut deps);
    }
    deps
}

fn validate_graph(g: &GraphProto, outer: &HashSet<&str>, scope: &str) -> Result<()> {
    let mut defined: HashSet<&str> = outer.clone();
    let mut produced: HashMap<&str, usize> = HashMap::new();
    let mut own: HashSet<&str> = HashSet::new();
    for v in &g.input {
        own.insert(v.name());
    }
    for t in &g.initializer {
        own.insert(t.name());
    }
    for s in &g.sparse_initializer {
        if let Some(v) = &s.values {
            own.insert(v.name());
        }
    }
    for (i, n) in g.node.iter().enumerate() {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            if let Some(prev) = produced.insert(o, i) {
                return Err(graph_err(format!(
                    "{scope}tensor '{o}' is produced by both {} and {}",
                    node_label(g, prev),
                    node_label(g, i)
                )));
            }
            if own.contains(o.as_str()) {
                return Err(graph_err(format!(
                    "{scope}tensor '{o}' produced by {} is also a graph input or initializer",
                    node_label(g, i)
                )));
            }
        }
    }
    defined.extend(own.iter().copied());
    defined.extend(produced.keys().copied());
    for (i, n) in g.node.iter().enumerate() {
        for (slot, inp) in n.input.iter().enumerate() {
            if !inp.is_empty() && !defined.contains(inp.as_str()) {
                return Err(graph_err(format!(
                    "{scope}input {slot} '{inp}' of {} is not a graph input, initializer or node output",
                    node_label(g, i)
                )));
            }
        }
        for sg in subgraphs(n) {
            validate_graph(sg, &defined, &format!("{scope}subgraph '{}' of {}: ", sg.name(), node_label(g, i)))?;
        }
    }
    for o in &g.output {
        if !defined.contains(o.name()) {
            return Err(graph_err(format!("{scope}graph output '{}' is never produced", o.name())));
        }
    }
    topo(g).map(|_| ())
}

fn topo(g: &GraphProto) -> Result<Vec<usize>> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in g.node.iter().enumerate() {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            producer.entry(o).or_insert(i);
        }
    }
    let mut indegree = vec![0usize; g.node.len()];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); g.node.len()];
    for (i, n) in g.node.iter().enumerate() {
        let preds: BTreeSet<usize> = node_deps(n).into_iter().filter_map(|d| producer.get(d).copied()).collect();
        for p in preds {
            if let (Some(deg), Some(u)) = (indegree.get_mut(i), users.get_mut(p)) {
                *deg += 1;
                u.push(i);
            }
        }
    }
    let mut ready: BTreeSet<usize> = indegree.iter().enumerate().filter(|(_, d)| **d == 0).map(|(i, _)| i).collect();
    let mut order = Vec::with_capacity(g.node.len());
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &u in users.get(i).map(Vec::as_slice).unwrap_or_default() {
            if let Some(d) = indegree.get_mut(u) {
                *d -= 1;
                if *d == 0 {
                    ready.insert(u);
                }
            }
        }
    }
    if order.len() != g.node.len() {
        let stuck = indegree.iter().position(|&d| d > 0).unwrap_or(0);
        return Err(graph_err(format!("cycle: {} depends (indirectly) on its own output", node_label(g, stuck))));
    }
    Ok(order)
}

impl GraphExt for GraphProto {
    fn producer_of(&self, tensor: &str) -> Option<usize> {
        if tensor.is_empty() {
            return None;
        }
        self.node.iter().position(|n| n.output.iter().any(|o| o == tensor))
    }

    fn consumers_of(&self, tensor: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        if tensor.is_empty() {
            return out;
        }
        for (i, n) in self.node.iter().enumerate() {
            for (slot, inp) in n.input.iter().enumerate() {
                if inp == tensor {
                    out.push((i, slot));
                }
            }
        }
        out
    }

    fn initializer(&self, name: &str) -> Option<&TensorProto> {
        self.initializer.iter().find(|t| t.name() == name)
    }

    fn is_initializer(&self, name: &str) -> bool {
        self.initializer(name).is_some()
    }

    fn topological_order(&self) -> Result<Vec<usize>> {
        topo(self)
    }

    fn sort_nodes(&mut self) -> Result<()> {
        let order = topo(self)?;
        let mut old: Vec<Option<NodeProto>> = std::mem::take(&mut self.node).into_iter().map(Some).collect();
        self.node = order.into_iter().filter_map(|i| old.get_mut(i).and_then(Option::take)).collect();
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        validate_graph(self, &HashSet::new(), "")
    }

    fn insert_nodes(&mut self, at: usize, nodes: Vec<NodeProto>) {
        let at = at.min(self.node.len());
        self.node.splice(at..at, nodes);
    }

    fn push_node(&mut self, node: NodeProto) {
        self.node.push(node);
    }

    fn rewire_input(&mut self, node: usize, slot: usize, new_tensor: &str) -> Result<()> {
        let count = self.node.len();
        let n = self
            .node
            .get_mut(node)
            .ok_or_else(|| graph_err(format!("rewire_input: node index {node} out of range ({count} nodes)")))?;
        let name = n.name().to_string();
        let inputs = n.input.len();
        let s = n.input.get_mut(slot).ok_or_else(|| {
            graph_err(format!("rewire_input: node {node} '{name}' has {inputs} inputs, no slot {slot}"))
        })?;
        *s = new_tensor.to_string();
        Ok(())
    }

    fn add_output(&mut self, name: &str, elem_type: DataType) {
        if self.output.iter().any(|o| o.name() == name) {
            return;
        }
        self.output.push(value_info(name, elem_type, None));
    }

    fn fresh_name(&self, base: &str) -> String {
        let mut taken = HashSet::new();
        collect_names(self, &mut taken);
        taken.insert(String::new());
        fresh_in(&taken, base)
    }

    fn remove_unused_initializers(&mut self) {
        let dense = self.initializer.iter().map(|t| t.name());
        let sparse = self.sparse_initializer.iter().filter_map(|s| s.values.as_ref().map(|v| v.name()));
        let all: HashSet<String> = dense.chain(sparse).map(str::to_string).collect();
        self.drop_unread_initializers(&all);
        let mut existing: HashSet<String> = HashSet::new();
        existing.extend(self.initializer.iter().map(|t| t.name().to_string()));
        existing.extend(self.input.iter().map(|v| v.name().to_string()));
        for n in &self.node {
            existing.extend(n.output.iter().cloned());
        }
        self.value_info.retain(|v| existing.contains(v.name()));
    }

    fn drop_unread_initializers(&mut self, names: &HashSet<String>) {
        let mut reads: HashSet<&str> = HashSet::new();
        collect_reads(self, &mut reads);
        reads.extend(self.output.iter().map(|o| o.name()));
        let dropped: HashSet<String> = names.iter().filter(|n| !reads.contains(n.as_str())).cloned().collect();
        self.initializer.retain(|t| !dropped.contains(t.name()));
        self.sparse_initializer.retain(|s| s.values.as_ref().is_none_or(|v| !dropped.contains(v.name())));
        self.input.retain(|v| !dropped.contains(v.name()));
    }

    fn remove_unread_nodes(&mut self, prunable: &dyn Fn(&NodeProto) -> bool) {
        let mut reads: HashSet<&str> = HashSet::new();
        collect_reads(self, &mut reads);
        reads.extend(self.output.iter().map(|o| o.name()));
        let reads: HashSet<String> = reads.into_iter().map(str::to_string).collect();
        self.node.retain(|n| !prunable(n) || n.output.iter().any(|o| reads.contains(o)));
    }

    fn add_initializer(&mut self, t: TensorProto) {
        match self.initializer.iter_mut().find(|x| x.name() == t.name()) {
            Some(slot) => *slot = t,
            None => self.initializer.push(t),
        }
    }

    fn ancestors_of(&self, tensors: &[&str]) -> HashSet<String> {
        let producer: HashMap<&str, &NodeProto> =
            self.node.iter().flat_map(|n| n.output.iter().map(move |o| (o.as_str(), n))).collect();
        let mut seen: HashSet<String> = HashSet::new();
        let mut todo: Vec<&str> = tensors.iter().copied().filter(|t| !t.is_empty()).collect();
        while let Some(t) = todo.pop() {
            if !seen.insert(t.to_owned()) {
                continue;
            }
            if let Some(n) = producer.get(t) {
                todo.extend(node_deps(n).into_iter().filter(|d| !d.is_empty() && !seen.contains(*d)));
            }
        }
        seen
    }

    fn name_nodes(&mut self) -> usize {
        let mut names = NameSet::from_graph(self);
        let mut seen: HashSet<String> = HashSet::new();
        let mut named = 0;
        for (i, n) in self.node.iter_mut().enumerate() {
            if n.name().is_empty() || !seen.insert(n.name().to_owned()) {
                let name = names.fresh(&format!("{}_{i}", n.op_type()));
                seen.insert(name.clone());
                n.name = Some(name);
                named += 1;
            }
        }
        named
    }
}

/// A declared tensor shape, as [`value_info`] takes it: each dim a value or a symbol (`Err`; an axis declared without
/// either is `Err("")`); `None` for no shape or a type other than a tensor.
pub fn declared_dims(v: &ValueInfoProto) -> Option<Vec<std::result::Result<i64, String>>> {
    use crate::proto::tensor_shape_proto::dimension;
    match v.r#type.as_ref()?.value.as_ref()? {
        type_proto::Value::TensorType(t) => Some(
            t.shape
                .as_ref()?
                .dim
                .iter()
                .map(|d| match &d.value {
                    Some(dimension::Value::DimValue(v)) => Ok(*v),
                    Some(dimension::Value::DimParam(s)) => Err(s.clone()),
                    None => Err(String::new()),
                })
                .collect(),
        ),
        _ => None,
    }
}

/// The element type a [`ValueInfoProto`] declares for a tensor (`None` for another type or none).
pub fn declared_elem_type(v: &ValueInfoProto) -> Option<i32> {
    match v.r#type.as_ref()?.value.as_ref()? {
        type_proto::Value::TensorType(t) => Some(t.elem_type()),
        _ => None,
    }
}

/// A tensor [`ValueInfoProto`]; `dims` entries are `Ok(value)` or `Err(symbol)`; `None` means
/// unknown rank.
pub fn value_info(name: &str, elem_type: DataType, dims: Option<&[Result<i64, &str>]>) -> ValueInfoProto {
    use crate::proto::tensor_shape_proto::{Dimension, dimension};
    let shape = dims.map(|ds| TensorShapeProto {
        dim: ds
            .iter()
            .map(|d| Dimension {
                value: Some(match d {
                    Ok(v) => dimension::Value::DimValue(*v),
                    Err(s) => dimension::Value::DimParam(s.to_string()),
                }),
                denotation: None,
            })
            .collect(),
    });
    ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor { elem_type: Some(elem_type as i32), shape })),
            denotation: None,
        }),
        ..Default::default()
    }
}
