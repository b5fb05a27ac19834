//! Saving and loading trees of tensors in the safetensors format (the
//! format of the Hugging Face Hub and `safetensors.torch.save_file`),
//! through the `safetensors` crate.
//!
//! A tree is saved as one named tensor per leaf. The name comes from the
//! leaf's path ([`Tree::paths`]) by PyTorch's `state_dict` convention:
//! segments joined by dots, with no brackets or quotes.
//!
//! | leaf path | tensor name |
//! |---|---|
//! | `.layers[0].w` (field, vector index, field) | `layers.0.w` |
//! | `.0.b` (tuple element, field) | `0.b` |
//! | `["encoder.norm"].weight` (a `BTreeMap<String, _>` key) | `encoder.norm.weight` |
//! | `<root>` (a lone tensor) | the empty name |
//!
//! So an [`Mlp`](crate::nn::Mlp) saves as `layers.0.w`, `layers.0.b`, ...,
//! and a `BTreeMap<String, Tensor>` saves under its keys unchanged, which
//! is also what [`load_all`] returns: loading a file written by Python and
//! saving the map writes the same names back. Two leaves whose names
//! coincide (a map key `"a.b"` beside a field `a.b`) are an error that
//! names both paths.
//!
//! Every dtype is stored as itself (F32, F64, F16, BF16, I32, I64, U32,
//! BOOL), little-endian, row-major. [`load`] takes a template tree (its
//! structure, shapes and dtypes: a freshly initialized model) and checks
//! every tensor against it; an error names the leaf and the tensor.
//!
//! ```
//! use xform::prelude::*;
//! use xform::{nn::Mlp, safetensors};
//!
//! let model = Mlp::init(&Key::new(0), &[4, 8, 2], DType::F32);
//! let bytes = safetensors::to_bytes(&model)?;
//! let names: Vec<String> = safetensors::all_from_bytes(&bytes)?.into_keys().collect();
//! assert_eq!(names, vec!["layers.0.b", "layers.0.w", "layers.1.b", "layers.1.w"]);
//!
//! let template = Mlp::init(&Key::new(1), &[4, 8, 2], DType::F32);
//! let back: Mlp = safetensors::from_bytes(&bytes, &template)?;
//! assert_eq!(back.layers[1].w.to_vec::<f32>(), model.layers[1].w.to_vec::<f32>());
//! # Ok::<(), xform::Error>(())
//! ```

use crate::{DType, Error, ErrorKind, Result, Tensor, Tree};
use ::safetensors::tensor::{Dtype, SafeTensors, TensorView, View};
use half::{bf16, f16};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The safetensors name of a leaf path (see the module documentation):
/// `.layers[0].w` is `layers.0.w`, `["k"]` is `k`, `<root>` is empty.
///
/// ```
/// use xform::safetensors::name_of_path;
///
/// assert_eq!(name_of_path(".layers[0].w"), "layers.0.w");
/// assert_eq!(name_of_path(r#"["block.1"].0"#), "block.1.0");
/// ```
pub fn name_of_path(path: &str) -> String {
    if path == "<root>" {
        return String::new();
    }
    let mut parts: Vec<String> = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix("[\"") {
            // A map key, written with `{:?}`: it ends at the first unescaped quote.
            let (key, len) = unescape_debug(quoted);
            parts.push(key);
            rest = quoted[len..].strip_prefix("\"]").unwrap_or(&quoted[len..]);
        } else if let Some(idx) = rest.strip_prefix('[') {
            let end = idx.find(']').unwrap_or(idx.len());
            parts.push(idx[..end].to_string());
            rest = idx.get(end + 1..).unwrap_or("");
        } else {
            let seg = rest.strip_prefix('.').unwrap_or(rest);
            let end = seg.find(['.', '[']).unwrap_or(seg.len());
            parts.push(seg[..end].to_string());
            rest = &seg[end..];
        }
    }
    parts.join(".")
}

/// Reads a string written by `{:?}` (without its opening quote) up to its
/// closing quote: the text and the number of bytes consumed.
fn unescape_debug(s: &str) -> (String, usize) {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (out, i),
            '\\' => match chars.next() {
                Some((_, 'n')) => out.push('\n'),
                Some((_, 'r')) => out.push('\r'),
                Some((_, 't')) => out.push('\t'),
                Some((_, '0')) => out.push('\0'),
                Some((_, 'u')) => {
                    // `\u{hex}`
                    let hex: String =
                        chars.by_ref().map(|(_, c)| c).skip_while(|&c| c == '{').take_while(|&c| c != '}').collect();
                    out.extend(u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32));
                }
                Some((_, other)) => out.push(other),
                None => {}
            },
            c => out.push(c),
        }
    }
    (out, s.len())
}

/// The safetensors names of a tree's leaves, in leaf order.
///
/// ```
/// use xform::prelude::*;
/// use xform::{nn::Linear, safetensors};
///
/// let l = Linear::init(&Key::new(0), 2, 3, DType::F32);
/// assert_eq!(safetensors::leaf_names(&l), vec!["w", "b"]);
/// ```
pub fn leaf_names<T: Tree>(tree: &T) -> Vec<String> {
    tree.paths().iter().map(|p| name_of_path(p)).collect()
}

fn st_dtype(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::U32 => Dtype::U32,
        DType::Bool => Dtype::BOOL,
    }
}

fn xform_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::U32 => DType::U32,
        Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}

/// One tensor's bytes, ready to serialize.
struct Encoded {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Encoded {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn le_bytes<T, const N: usize>(v: Vec<T>, f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.into_iter().flat_map(f).collect()
}

fn encode(t: &Tensor) -> Encoded {
    let data = match t.dtype() {
        DType::F32 => le_bytes(t.to_vec::<f32>(), f32::to_le_bytes),
        DType::F64 => le_bytes(t.to_vec::<f64>(), f64::to_le_bytes),
        DType::F16 => le_bytes(t.to_vec::<f16>(), f16::to_le_bytes),
        DType::BF16 => le_bytes(t.to_vec::<bf16>(), bf16::to_le_bytes),
        DType::I32 => le_bytes(t.to_vec::<i32>(), i32::to_le_bytes),
        DType::I64 => le_bytes(t.to_vec::<i64>(), i64::to_le_bytes),
        DType::U32 => le_bytes(t.to_vec::<u32>(), u32::to_le_bytes),
        DType::Bool => le_bytes(t.to_vec::<bool>(), |b| [b as u8]),
    };
    Encoded { dtype: st_dtype(t.dtype()), shape: t.shape().dims().to_vec(), data }
}

fn from_le<T: xform_kernels::Element, const N: usize>(
    data: &[u8],
    shape: &[usize],
    f: impl Fn([u8; N]) -> T,
) -> Tensor {
    let v: Vec<T> = data.chunks_exact(N).map(|c| f(c.try_into().expect("chunks of N bytes"))).collect();
    Tensor::from_vec(v, shape)
}

/// The tensor a view holds, on the default device; `None` for a dtype
/// xform does not have.
fn decode(view: &TensorView<'_>) -> Option<Tensor> {
    let (d, s) = (view.data(), view.shape());
    Some(match xform_dtype(view.dtype())? {
        DType::F32 => from_le(d, s, f32::from_le_bytes),
        DType::F64 => from_le(d, s, f64::from_le_bytes),
        DType::F16 => from_le(d, s, f16::from_le_bytes),
        DType::BF16 => from_le(d, s, bf16::from_le_bytes),
        DType::I32 => from_le(d, s, i32::from_le_bytes),
        DType::I64 => from_le(d, s, i64::from_le_bytes),
        DType::U32 => from_le(d, s, u32::from_le_bytes),
        DType::Bool => from_le(d, s, |[b]: [u8; 1]| b != 0),
    })
}

/// The named, encoded leaves of a tree; an error if two leaves share a name.
fn encode_tree<T: Tree>(op: &str, tree: &T) -> Result<Vec<(String, Encoded)>> {
    let paths = tree.paths();
    let mut seen: HashMap<String, &str> = HashMap::new();
    for p in &paths {
        if let Some(q) = seen.insert(name_of_path(p), p) {
            return Err(Error::invalid(op, format!("leaves {q} and {p} would both be saved as {:?}", name_of_path(p))));
        }
    }
    let leaves = tree.leaves();
    // a leaf without one value here (a tracer of vmap, jit or trace) is
    // refused before anything is encoded, naming the leaf
    for (p, l) in paths.iter().zip(&leaves) {
        if let Err(e) = l.known(op) {
            return Err(match e.kind {
                ErrorKind::EscapedTracer { .. } | ErrorKind::ForeignTracer { .. } => e,
                _ => Error::transform(
                    op,
                    format!(
                        "leaf {p} ({}) has no single value here (under vmap it differs per example; staged \
                         by jit or trace, it has none yet): save the tensors outside the transformed function, \
                         from its results",
                        l.aval()
                    ),
                ),
            });
        }
    }
    crate::catch(|| paths.iter().zip(&leaves).map(|(p, l)| (name_of_path(p), encode(l))).collect())
}

fn to_hash_map(metadata: Option<&BTreeMap<String, String>>) -> Option<HashMap<String, String>> {
    metadata.map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn st_error(op: &str, what: &str, e: impl std::fmt::Display) -> Error {
    Error::invalid(op, format!("{what}: {e}"))
}

/// The tree in the safetensors format, with optional string metadata
/// (the header's `__metadata__`).
///
/// # Errors
/// If two leaves have the same name, or a leaf cannot be read (a tracer
/// under `vmap`).
pub fn to_bytes_with_metadata<T: Tree>(tree: &T, metadata: Option<&BTreeMap<String, String>>) -> Result<Vec<u8>> {
    let op = "safetensors::to_bytes";
    let named = encode_tree(op, tree)?;
    ::safetensors::serialize(named.iter().map(|(n, e)| (n.as_str(), e)), to_hash_map(metadata))
        .map_err(|e| st_error(op, "serializing", e))
}

/// The tree in the safetensors format (see the module documentation for
/// the tensor names).
///
/// # Errors
/// As [`to_bytes_with_metadata`].
pub fn to_bytes<T: Tree>(tree: &T) -> Result<Vec<u8>> {
    to_bytes_with_metadata(tree, None)
}

/// Writes the tree to a safetensors file, with optional string metadata.
///
/// # Errors
/// As [`to_bytes_with_metadata`], and if the file cannot be written.
pub fn save_with_metadata<T: Tree>(
    path: impl AsRef<Path>,
    tree: &T,
    metadata: Option<&BTreeMap<String, String>>,
) -> Result<()> {
    let (op, path) = ("safetensors::save", path.as_ref());
    let named = encode_tree(op, tree)?;
    ::safetensors::serialize_to_file(named.iter().map(|(n, e)| (n.as_str(), e)), to_hash_map(metadata), path)
        .map_err(|e| st_error(op, &path.display().to_string(), e))
}

/// Writes the tree to a safetensors file (see the module documentation for
/// the tensor names).
///
/// ```
/// use xform::prelude::*;
/// use xform::{nn::Linear, safetensors};
///
/// let dir = std::env::temp_dir().join(format!("xform-doc-save-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let layer = Linear::init(&Key::new(0), 3, 2, DType::F64);
/// safetensors::save(dir.join("linear.safetensors"), &layer)?;
/// let back = safetensors::load(dir.join("linear.safetensors"), &Linear::init(&Key::new(9), 3, 2, DType::F64))?;
/// assert_eq!(back.w.to_vec::<f64>(), layer.w.to_vec::<f64>());
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), xform::Error>(())
/// ```
///
/// # Errors
/// As [`save_with_metadata`].
pub fn save<T: Tree>(path: impl AsRef<Path>, tree: &T) -> Result<()> {
    save_with_metadata(path, tree, None)
}

fn read(op: &str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| st_error(op, &path.display().to_string(), e))
}

fn parse<'a>(op: &str, bytes: &'a [u8]) -> Result<SafeTensors<'a>> {
    SafeTensors::deserialize(bytes).map_err(|e| st_error(op, "not a valid safetensors buffer", e))
}

/// A tree shaped like `template` from safetensors bytes: every leaf of the
/// template is read from the tensor of its name (see the module
/// documentation), which must have the leaf's shape and dtype, and is
/// placed on the leaf's device. The template's non-leaf contents (static
/// fields, settings) are kept.
///
/// # Errors
/// If the bytes are not safetensors, a leaf's tensor is missing or has
/// another shape or dtype, or the buffer holds tensors the template does
/// not have (as PyTorch's `load_state_dict(strict=True)`; use
/// [`all_from_bytes`] to pick tensors by hand). Each error names the leaf.
pub fn from_bytes<T: Tree>(bytes: &[u8], template: &T) -> Result<T> {
    load_into("safetensors::from_bytes", bytes, template)
}

/// A tree shaped like `template` from a safetensors file; see
/// [`from_bytes`] for the checks.
///
/// # Errors
/// As [`from_bytes`], and if the file cannot be read.
pub fn load<T: Tree>(path: impl AsRef<Path>, template: &T) -> Result<T> {
    let op = "safetensors::load";
    let path = path.as_ref();
    load_into(op, &read(op, path)?, template).map_err(|mut e| {
        e.op = format!("{op} ({})", path.display());
        e
    })
}

fn load_into<T: Tree>(op: &str, bytes: &[u8], template: &T) -> Result<T> {
    let st = parse(op, bytes)?;
    let paths = template.paths();
    let leaves = template.leaves();
    let mut out = Vec::with_capacity(leaves.len());
    let mut used = std::collections::HashSet::new();
    for (path, leaf) in paths.iter().zip(&leaves) {
        let name = name_of_path(path);
        let view = st.tensor(&name).map_err(|_| {
            let mut names = st.names();
            names.sort();
            let shown: Vec<&str> = names.iter().take(20).copied().collect();
            let more = if names.len() > 20 { format!(", ... ({} in all)", names.len()) } else { String::new() };
            Error::invalid(op, format!("no tensor {name:?} for leaf {path}; the file has {}{more}", shown.join(", ")))
        })?;
        let Some(dtype) = xform_dtype(view.dtype()) else {
            return Err(Error::dtype(
                op,
                format!("tensor {name:?} (leaf {path}) is {:?}, which xform has no dtype for", view.dtype()),
                &[leaf.dtype()],
            ));
        };
        if dtype != leaf.dtype() {
            return Err(Error::dtype(
                op,
                format!("tensor {name:?} (leaf {path}) has dtype {dtype:?}, the template's leaf {:?}", leaf.dtype()),
                &[dtype, leaf.dtype()],
            ));
        }
        if view.shape() != leaf.shape().dims() {
            let file_shape = crate::Shape::from(view.shape());
            return Err(Error::shape(
                op,
                format!("tensor {name:?} (leaf {path}) has another shape than the template's leaf"),
                &[&file_shape, &leaf.shape()],
            ));
        }
        let t = crate::catch(|| decode(&view).expect("a known dtype").to_device(leaf.device()))?;
        used.insert(name);
        out.push(t);
    }
    let mut extra: Vec<&str> = st.names().into_iter().filter(|n| !used.contains(*n)).collect();
    if !extra.is_empty() {
        extra.sort();
        return Err(Error::invalid(op, format!("the file has tensors the template does not: {}", extra.join(", "))));
    }
    Ok(template.with_leaves(out))
}

/// Every tensor in safetensors bytes, by name, on the default device.
///
/// # Errors
/// If the bytes are not safetensors, or a tensor has a dtype xform lacks
/// (U8, I8, I16, U16, U64, the 8-bit floats, C64): the error names it.
pub fn all_from_bytes(bytes: &[u8]) -> Result<BTreeMap<String, Tensor>> {
    let op = "safetensors::all_from_bytes";
    let st = parse(op, bytes)?;
    let mut out = BTreeMap::new();
    for (name, view) in st.iter() {
        let Some(t) = crate::catch(|| decode(&view))? else {
            return Err(Error::invalid(
                op,
                format!("tensor {name:?} is {:?}, which xform has no dtype for", view.dtype()),
            ));
        };
        out.insert(name.to_string(), t);
    }
    Ok(out)
}

/// Every tensor in a safetensors file, by name, on the default device: a
/// `BTreeMap<String, Tensor>`, itself a tree (saving it writes the same
/// names back).
///
/// # Errors
/// As [`all_from_bytes`], and if the file cannot be read.
pub fn load_all(path: impl AsRef<Path>) -> Result<BTreeMap<String, Tensor>> {
    let path = path.as_ref();
    all_from_bytes(&read("safetensors::load_all", path)?).map_err(|mut e| {
        e.op = format!("safetensors::load_all ({})", path.display());
        e
    })
}

/// The string metadata of safetensors bytes (the header's
/// `__metadata__`; empty if there is none).
///
/// # Errors
/// If the bytes are not safetensors.
pub fn metadata_from_bytes(bytes: &[u8]) -> Result<BTreeMap<String, String>> {
    let (_, meta) = SafeTensors::read_metadata(bytes)
        .map_err(|e| st_error("safetensors::metadata", "not a valid safetensors buffer", e))?;
    Ok(meta.metadata().iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// The string metadata of a safetensors file (empty if there is none).
///
/// # Errors
/// If the file cannot be read or is not safetensors.
pub fn load_metadata(path: impl AsRef<Path>) -> Result<BTreeMap<String, String>> {
    metadata_from_bytes(&read("safetensors::metadata", path.as_ref())?)
}
