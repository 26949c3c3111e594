//! [`Model`]: loading, external data, saving.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::LazyLock;

use prost::Message;

use crate::error::{Error, Result};
use crate::proto::tensor_proto::DataLocation;
use crate::proto::{AttributeProto, GraphProto, ModelProto, SparseTensorProto, StringStringEntryProto, TensorProto};
use crate::tensor::{check_tensor, data_type_name};

/// Largest serialized protobuf message (2 GiB - 1).
pub const PROTOBUF_LIMIT: u64 = i32::MAX as u64;

/// External tensors up to this many bytes are read even by [`Model::load_graph_only`].
const GRAPH_ONLY_READS: u64 = 1 << 20;

/// Alignment of tensors in an external data file (page size, so runtimes can mmap them).
pub const EXTERNAL_ALIGNMENT: u64 = 4096;

/// An ONNX model held fully in memory.
///
/// Invariant after [`Model::load`] / [`Model::from_bytes`]: every tensor's data is inline
/// (external data was read into `raw_data`), dims are non-negative, and data lengths match.
/// [`Model::load_graph_only`] leaves external data on disk instead (its references checked); such a model
/// describes the graph but cannot be serialized ([`Model::unread_external_data`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// The decoded protobuf.
    pub proto: ModelProto,
    dir: Option<PathBuf>,
    /// Tensors whose external data was left on disk.
    unread: usize,
    /// The external data files the model file referenced (canonical paths), whether read or not.
    external_files: std::collections::BTreeSet<PathBuf>,
}

/// What [`Model::save`] wrote besides the model file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    /// The side file holding the large tensors, when the model would pass protobuf's 2 GiB limit inline.
    pub external_data: Option<PathBuf>,
}

/// How [`Model::save_with`] writes a model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SaveOptions {
    /// Move large tensors to a side file next to the model; `None` keeps everything inline.
    pub external_data: Option<ExternalDataOptions>,
}

/// Where and which tensors [`Model::save_with`] writes to an external data file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalDataOptions {
    /// Plain file name (no directories) of the side file, created next to the model.
    pub file_name: String,
    /// Tensors whose raw data has at least this many bytes go to the side file.
    pub size_threshold: usize,
}

impl ExternalDataOptions {
    /// Side file `file_name` with the default 1024-byte threshold.
    pub fn new(file_name: &str) -> Self {
        ExternalDataOptions { file_name: file_name.to_string(), size_threshold: 1024 }
    }
}

static EMPTY_GRAPH: LazyLock<GraphProto> = LazyLock::new(GraphProto::default);

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// A file that exists but cannot be a model: an `InvalidInput` [`Error::Io`] naming it.
fn invalid_file(path: &Path, reason: String) -> Error {
    io_err(path)(std::io::Error::new(std::io::ErrorKind::InvalidInput, reason))
}

/// Defines a tensor walker over a model: `$walk_model` calls `f` on every tensor (main graph,
/// nested subgraphs, attribute and sparse tensors, training info, functions). Instantiated
/// once for shared and once for mutable access.
macro_rules! tensor_walker {
    ($walk_model:ident, $walk_graph:ident, $walk_sparse:ident, $walk_attrs:ident, $iter:ident, $($m:ident)?) => {
        fn $walk_graph(g: &$($m)? GraphProto, f: &mut dyn FnMut(&$($m)? TensorProto) -> Result<()>) -> Result<()> {
            g.initializer.$iter().try_for_each(&mut *f)?;
            for s in g.sparse_initializer.$iter() {
                $walk_sparse(s, f)?;
            }
            for n in g.node.$iter() {
                $walk_attrs(&$($m)? n.attribute, f)?;
            }
            Ok(())
        }

        fn $walk_sparse(
            s: &$($m)? SparseTensorProto,
            f: &mut dyn FnMut(&$($m)? TensorProto) -> Result<()>,
        ) -> Result<()> {
            s.values.$iter().chain(s.indices.$iter()).try_for_each(f)
        }

        fn $walk_attrs(
            attrs: &$($m)? [AttributeProto],
            f: &mut dyn FnMut(&$($m)? TensorProto) -> Result<()>,
        ) -> Result<()> {
            for a in attrs.$iter() {
                a.t.$iter().chain(a.tensors.$iter()).try_for_each(&mut *f)?;
                for s in a.sparse_tensor.$iter().chain(a.sparse_tensors.$iter()) {
                    $walk_sparse(s, f)?;
                }
                for g in a.g.$iter().chain(a.graphs.$iter()) {
                    $walk_graph(g, f)?;
                }
            }
            Ok(())
        }

        #[allow(dead_code)]
        pub(crate) fn $walk_model(
            m: &$($m)? ModelProto,
            f: &mut dyn FnMut(&$($m)? TensorProto) -> Result<()>,
        ) -> Result<()> {
            for g in m.graph.$iter() {
                $walk_graph(g, f)?;
            }
            for ti in m.training_info.$iter() {
                for g in ti.initialization.$iter().chain(ti.algorithm.$iter()) {
                    $walk_graph(g, f)?;
                }
            }
            for func in m.functions.$iter() {
                $walk_attrs(&$($m)? func.attribute_proto, f)?;
                for n in func.node.$iter() {
                    $walk_attrs(&$($m)? n.attribute, f)?;
                }
            }
            Ok(())
        }
    };
}

tensor_walker!(walk_model, walk_graph, walk_sparse, walk_attrs, iter_mut, mut);
tensor_walker!(visit_model, visit_graph, visit_sparse, visit_attrs, iter,);

fn entry(key: &str, value: String) -> StringStringEntryProto {
    StringStringEntryProto { key: Some(key.to_string()), value: Some(value) }
}

/// Checks that `location` is a relative path staying inside the model directory.
fn check_location(tensor: &str, location: &str) -> Result<()> {
    let bad = |reason: &str| Error::ExternalData {
        tensor: tensor.to_string(),
        location: location.to_string(),
        reason: reason.to_string(),
    };
    if location.is_empty() {
        return Err(bad("empty location"));
    }
    for c in Path::new(location).components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => return Err(bad("contains '..'; it must stay inside the model's directory")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(bad("is absolute; it must be relative to the model's directory"));
            }
        }
    }
    if location.contains('\\') && cfg!(not(windows)) && location.split('\\').any(|p| p == "..") {
        return Err(bad("contains '..'; it must stay inside the model's directory"));
    }
    Ok(())
}

/// Where a tensor's external data is, checked (inside the model directory, a regular file, as many bytes as the
/// dims imply) but not read.
struct ExternalRef {
    /// The canonical path of the data file.
    file: PathBuf,
    /// The path as the model names it (for messages).
    shown: PathBuf,
    offset: u64,
    len: u64,
}

/// Reads the external data `r` of `t` (found and checked by [`locate_external`]).
fn read_external(r: &ExternalRef, t: &TensorProto) -> Result<Vec<u8>> {
    let bad = |reason: String| Error::ExternalData {
        tensor: t.name().to_string(),
        location: r.shown.display().to_string(),
        reason,
    };
    let len = usize::try_from(r.len).map_err(|_| bad("length does not fit in memory".into()))?;
    let mut file = File::open(&r.file).map_err(|e| bad(format!("cannot open {}: {e}", r.shown.display())))?;
    let mut buf = vec![0u8; len];
    file.seek(SeekFrom::Start(r.offset))
        .and_then(|_| file.read_exact(&mut buf))
        .map_err(|e| bad(format!("reading {}: {e}", r.shown.display())))?;
    Ok(buf)
}

/// The `location`, `offset` (0 when absent) and `length` entries of `t`'s external data (named `tensor` in errors).
fn external_entries<'a>(t: &'a TensorProto, tensor: &str) -> Result<(Option<&'a str>, u64, Option<u64>)> {
    let mut location = None;
    let mut offset: u64 = 0;
    let mut length: Option<u64> = None;
    for e in &t.external_data {
        let parse = |v: &str| {
            v.parse::<u64>().map_err(|_| Error::ExternalData {
                tensor: tensor.to_owned(),
                location: String::new(),
                reason: format!("'{}' entry is not a non-negative integer: '{v}'", e.key()),
            })
        };
        match e.key() {
            "location" => location = Some(e.value()),
            "offset" => offset = parse(e.value())?,
            "length" => length = Some(parse(e.value())?),
            _ => {}
        }
    }
    Ok((location, offset, length))
}

/// `loc` below `dir` as written (`full`), resolved (`canon`, which must stay inside `dir`) and its size: a regular
/// file only (a FIFO would block forever, a device such as /dev/zero never ends). Errors through `bad`.
fn regular_file_below(dir: &Path, loc: &str, bad: &dyn Fn(String) -> Error) -> Result<(PathBuf, PathBuf, u64)> {
    let full = dir.join(loc);
    let canon_dir = dir.canonicalize().map_err(|e| bad(format!("model directory {}: {e}", dir.display())))?;
    let canon = full.canonicalize().map_err(|e| bad(format!("cannot open {}: {e}", full.display())))?;
    if !canon.starts_with(&canon_dir) {
        return Err(bad(format!("resolves to {} outside the model's directory", canon.display())));
    }
    let meta = std::fs::metadata(&canon).map_err(|e| bad(format!("cannot open {}: {e}", full.display())))?;
    if !meta.is_file() {
        return Err(bad(format!("{} is {}, not a regular file", full.display(), files::what_it_is(&meta))));
    }
    Ok((full, canon, meta.len()))
}

/// Finds and checks the external data of `t` below `dir` without reading it.
fn locate_external(dir: &Path, t: &TensorProto) -> Result<ExternalRef> {
    let tensor = t.name().to_string();
    let (location, offset, length) = external_entries(t, &tensor)?;
    let loc_str = |l: &Option<&str>| l.unwrap_or("").to_string();
    let bad = |reason: String| Error::ExternalData { tensor: tensor.clone(), location: loc_str(&location), reason };
    let Some(loc) = location else {
        return Err(bad("the tensor is marked EXTERNAL but has no 'location' entry".into()));
    };
    check_location(&tensor, loc)?;
    let (full, canon, size) = regular_file_below(dir, loc, &bad)?;
    let end = match length {
        Some(l) => offset.checked_add(l),
        None => Some(size),
    };
    let end = end.filter(|&e| e <= size && e >= offset).ok_or_else(|| {
        bad(format!(
            "offset {offset} + length {} is past the end of {} ({size} bytes)",
            length.map_or("?".into(), |l| l.to_string()),
            full.display()
        ))
    })?;
    // The bytes the dims imply, checked before anything is allocated: a small tensor pointing at a huge file must not
    // cost the file's size in memory.
    let (_, count) = crate::tensor::tensor_shape(t)?;
    let want = crate::tensor::raw_byte_len(t.data_type(), count).ok_or_else(|| {
        bad(format!(
            "dims {:?} of {} have no fixed byte size that fits in 64 bits",
            t.dims,
            data_type_name(t.data_type())
        ))
    })?;
    if end - offset != want {
        return Err(bad(format!(
            "{} bytes at offset {offset} of {}, but dims {:?} of {} need {want}",
            end - offset,
            full.display(),
            t.dims,
            data_type_name(t.data_type())
        )));
    }
    Ok(ExternalRef { file: canon, shown: full, offset, len: want })
}

/// The external data file being written by [`Model::save_with`].
struct SideFile<'a> {
    file: TempFile,
    name: &'a str,
    offset: u64,
}

impl SideFile<'_> {
    /// Appends `raw` (aligned) and returns `t` pointing at it.
    fn put(&mut self, mut t: TensorProto, raw: &[u8]) -> Result<TensorProto> {
        let pad = self.offset.next_multiple_of(EXTERNAL_ALIGNMENT) - self.offset;
        self.file.write(&vec![0u8; pad as usize])?;
        self.offset += pad;
        self.file.write(raw)?;
        t.raw_data = None;
        t.data_location = Some(DataLocation::External as i32);
        t.external_data = vec![
            entry("location", self.name.to_string()),
            entry("offset", self.offset.to_string()),
            entry("length", raw.len().to_string()),
        ];
        self.offset += raw.len() as u64;
        Ok(t)
    }
}

/// `t` without `raw_data`, copying nothing else of its data (every field named, so a new field is a compile error
/// here rather than silently dropped).
fn tensor_without_data(t: &TensorProto) -> TensorProto {
    let TensorProto {
        dims,
        data_type,
        segment,
        float_data,
        int32_data,
        string_data,
        int64_data,
        name,
        doc_string,
        raw_data: _,
        external_data,
        data_location,
        double_data,
        uint64_data,
        metadata_props,
    } = t;
    TensorProto {
        dims: dims.clone(),
        data_type: *data_type,
        segment: *segment,
        float_data: float_data.clone(),
        int32_data: int32_data.clone(),
        string_data: string_data.clone(),
        int64_data: int64_data.clone(),
        name: name.clone(),
        doc_string: doc_string.clone(),
        raw_data: None,
        external_data: external_data.clone(),
        data_location: *data_location,
        double_data: double_data.clone(),
        uint64_data: uint64_data.clone(),
        metadata_props: metadata_props.clone(),
    }
}

/// `m` with its main graph's initializer list left empty, copying nothing of those tensors.
fn clone_without_initializers(m: &ModelProto) -> ModelProto {
    let graph = m.graph.as_ref().map(|g| {
        let GraphProto {
            node,
            name,
            initializer: _,
            sparse_initializer,
            doc_string,
            input,
            output,
            value_info,
            quantization_annotation,
            metadata_props,
        } = g;
        GraphProto {
            node: node.clone(),
            name: name.clone(),
            initializer: Vec::new(),
            sparse_initializer: sparse_initializer.clone(),
            doc_string: doc_string.clone(),
            input: input.clone(),
            output: output.clone(),
            value_info: value_info.clone(),
            quantization_annotation: quantization_annotation.clone(),
            metadata_props: metadata_props.clone(),
        }
    });
    let ModelProto {
        ir_version,
        opset_import,
        producer_name,
        producer_version,
        domain,
        model_version,
        doc_string,
        graph: _,
        metadata_props,
        training_info,
        functions,
        configuration,
    } = m;
    ModelProto {
        ir_version: *ir_version,
        opset_import: opset_import.clone(),
        producer_name: producer_name.clone(),
        producer_version: producer_version.clone(),
        domain: domain.clone(),
        model_version: *model_version,
        doc_string: doc_string.clone(),
        graph,
        metadata_props: metadata_props.clone(),
        training_info: training_info.clone(),
        functions: functions.clone(),
        configuration: configuration.clone(),
    }
}

/// A file written atomically ([`files::AtomicFile`]: an unnamed temporary file beside the destination, linked into
/// place whole on commit). Dropped without commit, nothing appears and nothing is left behind.
struct TempFile(files::AtomicFile);

impl TempFile {
    fn create(dest: &Path) -> Result<Self> {
        files::AtomicFile::create(dest).map(TempFile).map_err(io_err(dest))
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.0.write_all(bytes).map_err(io_err(self.0.path()))
    }

    fn commit(self) -> Result<()> {
        let dest = self.0.path().to_path_buf();
        self.0.commit().map_err(io_err(&dest))
    }
}

fn encode_limited(proto: &ModelProto, what: &str, limit: u64, hint: &str) -> Result<Vec<u8>> {
    let size = proto.encoded_len() as u64;
    if size > limit {
        return Err(Error::TooLarge { what: what.to_string(), size, hint: hint.to_string() });
    }
    Ok(proto.encode_to_vec())
}

const INLINE_HINT: &str = "write it with its large tensors as external data beside it (`Model::save` does so by \
                           itself; SaveOptions { external_data } names the file)";

impl Model {
    /// Wraps a protobuf built in memory (no directory; it has no external data to resolve).
    pub fn new(proto: ModelProto) -> Self {
        Model { proto, dir: None, unread: 0, external_files: Default::default() }
    }

    /// A model of `graph` in the default domain at `opset` (IR version 10), as a test or a tool builds one.
    pub fn of_graph(graph: crate::proto::GraphProto, opset: i64) -> Self {
        Model::new(ModelProto {
            ir_version: Some(10),
            opset_import: vec![crate::proto::OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) }],
            graph: Some(graph),
            ..Default::default()
        })
    }

    /// Reads, decodes and checks a model file, loading all external data into memory.
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        Self::load_file(path.as_ref(), true)
    }

    /// Reads and decodes a model file, checking every external data reference (inside the model directory, a
    /// regular file, the byte length the dims imply) but reading only tensors up to 1 MiB (scales, zero points,
    /// shapes): the graph and every tensor's dims and type, for work that does not need the large weights
    /// (evaluation hands ONNX Runtime the file itself). [`Model::to_bytes`] and saving refuse such a model while
    /// data is missing.
    pub fn load_graph_only(path: impl AsRef<Path>) -> Result<Model> {
        Self::load_file(path.as_ref(), false)
    }

    /// Tensors whose external data [`Model::load_graph_only`] left on disk (0 after [`Model::load`]).
    pub fn unread_external_data(&self) -> usize {
        self.unread
    }

    /// The external data files the loaded file referenced (canonical paths; empty for a model with all data inline):
    /// with the model file, what the model takes on disk.
    pub fn external_files(&self) -> impl Iterator<Item = &Path> {
        self.external_files.iter().map(PathBuf::as_path)
    }

    fn load_file(path: &Path, read_external_data: bool) -> Result<Model> {
        // Regular files only, and at most protobuf's 2 GiB: a FIFO or a device (/dev/zero) would block or read until
        // memory runs out.
        let meta = std::fs::metadata(path).map_err(io_err(path))?;
        if !meta.is_file() {
            return Err(invalid_file(path, format!("{}, not a regular file", files::what_it_is(&meta))));
        }
        if meta.len() > PROTOBUF_LIMIT {
            return Err(invalid_file(
                path,
                format!(
                    "{} bytes, more than protobuf's 2 GiB limit for one file (larger models keep their weights as \
                     external data beside the .onnx file)",
                    meta.len()
                ),
            ));
        }
        let bytes = std::fs::read(path).map_err(io_err(path))?;
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Self::decode(&bytes, &path.display().to_string(), Some(dir), read_external_data)
    }

    /// Decodes a model from memory; `name_for_errors` names it in errors. External data is
    /// rejected (there is no directory to resolve it against).
    pub fn from_bytes(bytes: &[u8], name_for_errors: &str) -> Result<Model> {
        Self::decode(bytes, name_for_errors, None, true)
    }

    fn decode(bytes: &[u8], what: &str, dir: Option<PathBuf>, read: bool) -> Result<Model> {
        let mut proto = ModelProto::decode(bytes).map_err(|source| Error::Decode { what: what.to_string(), source })?;
        if proto.graph.is_none() {
            return Err(Error::Graph { reason: format!("{what}: the model has no graph") });
        }
        let (mut unread, mut external_files) = (0, std::collections::BTreeSet::new());
        walk_model(&mut proto, &mut |t| {
            if t.data_location() == DataLocation::External {
                let Some(dir) = &dir else {
                    return Err(Error::ExternalData {
                        tensor: t.name().to_string(),
                        location: t
                            .external_data
                            .iter()
                            .find(|e| e.key() == "location")
                            .map(|e| e.value().to_string())
                            .unwrap_or_default(),
                        reason: format!("{what} was given as bytes, so there is no directory to read it from"),
                    });
                };
                let r = locate_external(dir, t)?;
                external_files.insert(r.file.clone());
                if !read && r.len > GRAPH_ONLY_READS {
                    unread += 1;
                    return check_tensor(t, what);
                }
                t.raw_data = Some(read_external(&r, t)?);
                t.external_data.clear();
                t.data_location = None;
            }
            check_tensor(t, what)
        })?;
        Ok(Model { proto, dir, unread, external_files })
    }

    /// Refuses to serialize a model whose external data was not read.
    fn check_complete(&self, what: &str) -> Result<()> {
        if self.unread == 0 {
            return Ok(());
        }
        Err(Error::Graph {
            reason: format!(
                "{what}: the model was loaded without its external data ({} tensors), so it cannot be written; load \
                 it whole",
                self.unread
            ),
        })
    }

    /// Directory the model was loaded from, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Serializes the model with all data inline; errors if over 2 GiB.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        self.check_complete("the model")?;
        encode_limited(&self.proto, "the model", PROTOBUF_LIMIT, INLINE_HINT)
    }

    /// Serialized size with all data inline, in bytes.
    pub fn encoded_len(&self) -> u64 {
        self.proto.encoded_len() as u64
    }

    /// Writes the model (temp file + rename; never truncates `path` in place, so saving over the loaded file is
    /// safe): inline, or, when that would pass protobuf's 2 GiB limit, with every tensor of 1 KiB or more in the side
    /// file `<file name>.data` beside it, as ONNX Runtime and the onnx package read it ([`Saved`] says which).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<Saved> {
        self.save_auto(path.as_ref(), PROTOBUF_LIMIT)
    }

    /// [`Model::save`] with a custom size limit instead of 2 GiB, so tests can exercise the automatic external data
    /// without gigabytes.
    #[cfg(feature = "test-support")]
    pub fn save_auto_for_test(&self, path: impl AsRef<Path>, limit: u64) -> Result<Saved> {
        self.save_auto(path.as_ref(), limit)
    }

    fn save_auto(&self, path: &Path, limit: u64) -> Result<Saved> {
        if self.encoded_len() <= limit {
            self.save_limited(path, &SaveOptions::default(), limit)?;
            return Ok(Saved { external_data: None });
        }
        let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
            return Err(Error::Options { reason: format!("{}: not a file name for a model", path.display()) });
        };
        let name = format!("{file}.data");
        self.save_limited(path, &SaveOptions { external_data: Some(ExternalDataOptions::new(&name)) }, limit)?;
        Ok(Saved { external_data: Some(path.with_file_name(name)) })
    }

    /// Writes the model per `opts`, optionally moving large tensors to a side file.
    pub fn save_with(&self, path: impl AsRef<Path>, opts: &SaveOptions) -> Result<()> {
        self.save_limited(path.as_ref(), opts, PROTOBUF_LIMIT)
    }

    /// [`Model::save_with`] with a custom size limit instead of 2 GiB, so tests can exercise
    /// the over-the-limit paths without gigabytes of data.
    #[cfg(feature = "test-support")]
    pub fn save_limited_for_test(&self, path: impl AsRef<Path>, opts: &SaveOptions, limit: u64) -> Result<()> {
        self.save_limited(path.as_ref(), opts, limit)
    }

    fn save_limited(&self, path: &Path, opts: &SaveOptions, limit: u64) -> Result<()> {
        let what = path.display().to_string();
        self.check_complete(&what)?;
        let Some(ext) = &opts.external_data else {
            let bytes = encode_limited(&self.proto, &what, limit, INLINE_HINT)?;
            let mut tmp = TempFile::create(path)?;
            tmp.write(&bytes)?;
            return tmp.commit();
        };
        self.save_external(path, ext, limit, &mut |_| {})
    }

    /// Writes an edited copy of the model with its large tensors in a side file, without copying the main graph's
    /// weights: `edit` changes the copy (e.g. more graph outputs, or nodes of another domain and its import) after
    /// the tensors are moved. For a session on an edited model over 2 GiB (calibration's augmented model).
    pub fn save_edited_with_external_data(
        &self,
        path: impl AsRef<Path>,
        ext: &ExternalDataOptions,
        edit: &mut dyn FnMut(&mut ModelProto),
    ) -> Result<()> {
        let path = path.as_ref();
        self.check_complete(&path.display().to_string())?;
        self.save_external(path, ext, PROTOBUF_LIMIT, edit)
    }

    fn save_external(
        &self,
        path: &Path,
        ext: &ExternalDataOptions,
        limit: u64,
        edit: &mut dyn FnMut(&mut ModelProto),
    ) -> Result<()> {
        let what = path.display().to_string();
        let name = ext.file_name.as_str();
        let plain = matches!(Path::new(name).components().collect::<Vec<_>>().as_slice(), [Component::Normal(_)]);
        if !plain {
            return Err(Error::Options {
                reason: format!("external data file name '{name}' must be a plain file name without directories"),
            });
        }
        if path.file_name().is_some_and(|f| f == name) {
            return Err(Error::Options { reason: format!("external data file '{name}' is the model file itself") });
        }
        let side_path = path.parent().map_or_else(|| PathBuf::from(name), |d| d.join(name));
        let mut side = SideFile { file: TempFile::create(&side_path)?, name, offset: 0 };
        let big = |t: &TensorProto| t.raw_data.as_ref().is_some_and(|r| r.len() >= ext.size_threshold);
        // The main graph's initializers (a model's weights) are copied without their data, so the weights are not
        // held twice; any other tensor (attributes, subgraphs, functions) is copied whole, and moved if large.
        let mut proto = clone_without_initializers(&self.proto);
        if let (Some(from), Some(to)) = (&self.proto.graph, proto.graph.as_mut()) {
            for t in &from.initializer {
                to.initializer.push(match &t.raw_data {
                    Some(raw) if big(t) => side.put(tensor_without_data(t), raw)?,
                    _ => t.clone(),
                });
            }
        }
        // The initializers moved already have no raw data left to move.
        walk_model(&mut proto, &mut |t| {
            if big(t) {
                let raw = t.raw_data.take().unwrap_or_default();
                *t = side.put(std::mem::take(t), &raw)?;
            }
            Ok(())
        })?;
        let side = side.file;
        edit(&mut proto);
        let bytes = encode_limited(&proto, &what, limit, "lower ExternalDataOptions::size_threshold")?;
        let mut tmp = TempFile::create(path)?;
        tmp.write(&bytes)?;
        // The pair lands together as far as SIGINT / SIGTERM go (they wait for both commits).
        let _held = files::signals::hold();
        side.commit()?;
        tmp.commit()
    }

    /// The main graph (an empty graph if the proto has none).
    pub fn graph(&self) -> &GraphProto {
        self.proto.graph.as_ref().unwrap_or(&EMPTY_GRAPH)
    }

    /// The main graph, mutably (created empty if missing).
    pub fn graph_mut(&mut self) -> &mut GraphProto {
        self.proto.graph.get_or_insert_with(GraphProto::default)
    }

    /// Imported version of operator set `domain` ("" and "ai.onnx" both mean the default).
    pub fn opset(&self, domain: &str) -> Option<i64> {
        let norm = |d: &str| if d == "ai.onnx" { String::new() } else { d.to_string() };
        let want = norm(domain);
        self.proto.opset_import.iter().find(|o| norm(o.domain()) == want).map(|o| o.version())
    }

    /// Re-checks every tensor (dims, data lengths) and the graph structure.
    pub fn validate(&self) -> Result<()> {
        visit_model(&self.proto, &mut |t| check_tensor(t, ""))?;
        crate::GraphExt::validate(self.graph())
    }
}
