//! Invariants of the crate layout that the compiler does not check
//! (ARCHITECTURE.md, "Invariants"), checked by scanning the sources.

use std::path::{Path, PathBuf};
use xform::core::prim::Prim;

/// The families' enums, which a file names to single out primitives. Their
/// number is checked against the families `Prim` is derived from, so a new
/// family is added here or this test fails.
const FAMILY_ENUMS: &[&str] = &[
    "UnaryOp",
    "BinaryOp",
    "CompareOp",
    "ElementwiseOp",
    "Reduction",
    "ShapeOp",
    "IndexOp",
    "LinalgOp",
    "DecompOp",
    "CollectiveOp",
    "ConvOp",
    "RandomOp",
    "WindowOp",
    "ControlOp",
];

/// The files (or folders, ending in `/`) outside the ops crate that may
/// name specific primitives, each with its reason. Everything else reads
/// what the families state (`Props`, `JitProps`, the `Family` rules).
const MAY_NAME_PRIMITIVES: &[(&str, &str)] = &[
    ("exec/src/passes/simplify.rs", "a rewrite pass: algebraic identities of specific primitives"),
    ("exec/src/passes/diagonal.rs", "a rewrite pass: products with a diagonal operand"),
    ("exec/src/split.rs", "cuts a whole value to a half's rows with a slice it makes"),
    ("exec/src/fuse_cuda.rs", "its `samples` module: hand-built programs for the kernel tests"),
    ("transforms/src/control/", "binds the control-flow primitives whose user API it is"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") && path.file_name().is_some_and(|n| n != "tests.rs") {
            out.push(path);
        }
    }
}

/// The code of a file before its test module.
fn non_test_code(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |i| &text[..i])
}

/// The lines of `files` (outside test modules, and but for the files
/// `allowed` lists by their path under `root`) that `offends`, as
/// `path:line: code`.
fn offending_lines(
    root: &Path,
    files: &[PathBuf],
    allowed: impl Fn(&str) -> bool,
    offends: fn(&str) -> bool,
) -> Vec<String> {
    let mut offenders = Vec::new();
    for path in files {
        let rel = path.strip_prefix(root).expect("under the root").to_string_lossy().replace('\\', "/");
        if allowed(&rel) {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("a readable source");
        for (n, line) in non_test_code(&text).lines().enumerate() {
            if offends(line) {
                offenders.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    offenders
}

/// Whether `line` names a specific primitive: `Prim::Family(..)` or a
/// family enum's variant.
fn names_primitive(line: &str) -> bool {
    let code = line.split("//").next().unwrap_or("");
    let variant = |pat: &str| {
        code.match_indices(pat).any(|(i, _)| {
            let before_ok = i == 0 || !code.as_bytes()[i - 1].is_ascii_alphanumeric();
            let next = code[i + pat.len()..].chars().next();
            before_ok && next.is_some_and(|c| c.is_ascii_uppercase())
        })
    };
    variant("Prim::") || FAMILY_ENUMS.iter().any(|f| variant(&format!("{f}::")))
}

#[test]
fn the_family_list_is_complete() {
    let mut families: Vec<String> =
        Prim::all_kinds().iter().map(|k| format!("{k:?}").split('(').next().expect("a variant").to_string()).collect();
    families.dedup();
    assert_eq!(families.len(), FAMILY_ENUMS.len(), "families {families:?} vs the enums listed here");
}

#[test]
fn only_rewrite_passes_name_primitives_outside_ops() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("exec/src"), &mut files);
    rust_files(&root.join("transforms/src"), &mut files);
    rust_files(&root.join("src"), &mut files);
    assert!(files.len() > 30, "found the sources ({} files)", files.len());
    let allowed = |rel: &str| {
        MAY_NAME_PRIMITIVES.iter().any(|(p, _)| if p.ends_with('/') { rel.starts_with(p) } else { rel == *p })
    };
    let offenders = offending_lines(&root, &files, allowed, names_primitive);
    assert!(
        offenders.is_empty(),
        "these lines name specific primitives outside ops; state the fact in the family instead \
         (Props, JitProps or a Family rule), or list the file with its reason:\n{}",
        offenders.join("\n")
    );
    // the allowed files exist (a stale entry would hide nothing and mislead)
    for (p, _) in MAY_NAME_PRIMITIVES {
        assert!(root.join(p).exists(), "{p} is listed but does not exist");
    }
}

#[test]
fn the_scanner_sees_primitive_names() {
    assert!(names_primitive("    Prim::Unary(op) => 1,"));
    assert!(names_primitive("let s = ShapeOp::Slice { start, limit, strides };"));
    assert!(!names_primitive("e.prim.jit_props().sink // Prim::Linalg(_)"));
    assert!(!names_primitive("let p: Prim = prim.clone();"));
    assert!(!names_primitive("MyShapeOp::Slice"));
}

/// The crates and the workspace crates each may depend on (ARCHITECTURE.md's
/// picture): kernels <- ops <- exec <- transforms <- xform, and transforms
/// reaches kernels only through ops and exec. Dev-dependencies are not
/// layering (exec's unit tests stage programs through the transforms).
const LAYERS: &[(&str, &[&str])] = &[
    ("kernels", &[]),
    ("ops", &["xform-kernels"]),
    ("exec", &["xform-kernels", "xform-ops"]),
    ("transforms", &["xform-ops", "xform-exec"]),
    ("derive", &[]),
    (".", &["xform-kernels", "xform-ops", "xform-exec", "xform-transforms", "xform-derive"]),
];

/// The workspace crates in the `[dependencies]` table of a manifest (and
/// its target-specific ones).
fn workspace_dependencies(manifest: &str) -> Vec<String> {
    let mut deps = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line.ends_with("dependencies]") && !line.contains("dev-dependencies");
            continue;
        }
        if in_deps && line.starts_with("xform-") {
            deps.push(line.split(['=', '.', ' ']).next().expect("a name").to_string());
        }
    }
    deps
}

#[test]
fn crates_depend_only_downward() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace manifest");
    for (dir, allowed) in LAYERS {
        assert!(dir == &"." || workspace.contains(&format!("\"{dir}\"")), "{dir} is not a workspace member");
        let manifest = std::fs::read_to_string(root.join(dir).join("Cargo.toml")).expect("a crate manifest");
        for dep in workspace_dependencies(&manifest) {
            assert!(allowed.contains(&dep.as_str()), "{dir} depends on {dep}, which its layer may not import");
        }
    }
    assert_eq!(
        workspace_dependencies(
            "[dependencies]\nxform-ops.workspace = true\n[dev-dependencies]\nxform-transforms = 1\n"
        ),
        ["xform-ops"]
    );
}

/// Whether `line` branches on a device: the backend seam (ops/src/backend.rs)
/// is the one place that chooses where a primitive runs.
fn branches_on_device(line: &str) -> bool {
    let code = line.split("//").next().unwrap_or("");
    ["Device::Cuda", "device() == Device", "device() != Device", "Device::Cpu =>", "if let Device::"]
        .iter()
        .any(|p| code.contains(p))
}

#[test]
fn families_carry_no_device_branches() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("ops/src/prims"), &mut files);
    rust_files(&root.join("ops/src/methods"), &mut files);
    files.push(root.join("ops/src/mutation.rs"));
    files.push(root.join("ops/src/lax.rs"));
    let offenders = offending_lines(&root, &files, |_| false, branches_on_device);
    assert!(
        offenders.is_empty(),
        "these lines choose a device outside the backend seam; state the work in `Backend`'s kernels \
         (Family::lower_device) instead:\n{}",
        offenders.join("\n")
    );
    assert!(branches_on_device("    if let Device::Cuda(_) = x.device() {"));
    assert!(!branches_on_device("let z = lax::full(&s, 0.0, t.dtype(), t.device())?;"));
}

/// ops' modules in layers (ARCHITECTURE.md, "The layers of ops"): the
/// values (devices, errors, arrays, the shared pointers beneath tensors
/// and the provenance of arrays computed while a trace records), then the
/// core (tensors, the interpreter stack and `bind`, the primitive catalog
/// with every family's rules, `lax`, programs, staging, the program
/// transformations, the backend seam), then the user surface. The scan
/// reads paths (`crate::`, and `super::` in a top-level file), not method
/// calls: an inherent method defined in a higher layer (`Error::new` in
/// interp.rs, `Array::to_device` in backend.rs) is the layering's one kind
/// of upward call, named in ARCHITECTURE.md.
const OPS_VALUES: &[&str] = &["device", "error", "array", "counted", "free_list", "value_cell", "stack", "provenance"];
/// The user surface of ops: `Tensor`'s methods, in-place writes, random
/// keys and printing.
const OPS_SURFACE: &[&str] = &["methods", "mutation", "random", "display"];
/// What the crate root re-exports from the values, which values may name
/// as `crate::Name`.
const VALUE_REEXPORTS: &[&str] = &[
    "Error",
    "ErrorKind",
    "Result",
    "OrRaise",
    "raise",
    "catch",
    "Device",
    "Array",
    "Aval",
    "AvalRef",
    "VersionGuard",
    "default_device",
    "set_default_device",
];
/// What the crate root re-exports from the surface.
const SURFACE_REEXPORTS: &[&str] = &["Idx", "Scalar", "Key"];

/// The first segment of every `crate::` path in `code`, those inside a
/// `use crate::{..}` group included.
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // the group's items, split at its top-level commas
            let (mut depth, mut item) = (0, String::new());
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(std::mem::take(&mut item));
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    item.push(c);
                }
            }
            out.push(item);
            for item in out.iter_mut() {
                *item = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            }
            out.retain(|s| !s.is_empty());
        } else {
            out.push(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
        }
    }
    out
}

#[test]
fn ops_is_layered() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("ops/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut offenders = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(&src).expect("under ops/src").to_string_lossy().replace('\\', "/");
        let module = rel.split('/').next().expect("a path").trim_end_matches(".rs").to_string();
        if module == "lib" || OPS_SURFACE.contains(&module.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("a readable source");
        let mut code: String =
            non_test_code(&text).lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
        if !rel.contains('/') {
            // in a top-level file, `super::` is the crate root
            code = code.replace("super::", "crate::");
        }
        for first in crate_paths(&code) {
            let bad = if OPS_VALUES.contains(&module.as_str()) {
                !OPS_VALUES.contains(&first.as_str()) && !VALUE_REEXPORTS.contains(&first.as_str())
            } else {
                OPS_SURFACE.contains(&first.as_str()) || SURFACE_REEXPORTS.contains(&first.as_str())
            };
            if bad {
                offenders.push(format!("ops/src/{rel} names crate::{first}"));
            }
        }
    }
    offenders.sort();
    offenders.dedup();
    assert!(
        offenders.is_empty(),
        "ops' layers are values <- core <- surface (ARCHITECTURE.md, \"The layers of ops\"); these imports run \
         upward:\n{}",
        offenders.join("\n")
    );
    let seen =
        crate_paths("use crate::{array::Array, tensor::{Tensor, Value}, Error};\nlet x = crate::lax::add(a, b);");
    assert_eq!(seen, ["array", "tensor", "Error", "lax"]);
}
