//! Compiling generated kernels to PTX with NVRTC (loaded at run time), with
//! an optional on-disk PTX cache.
//!
//! * NVRTC: cudarc loads `libnvrtc` dynamically and panics if it is absent,
//!   so [`nvrtc_available`] checks first and a missing library is an error
//!   value.
//! * Headers: kernels over f16/bf16 include `cuda_fp16.h` and `cuda_bf16.h`.
//!   Their directory is `$XFORM_CUDA_INCLUDE` if set, else the `include`
//!   folder next to the loaded libnvrtc (the layout of the
//!   `nvidia-cuda-nvrtc` / `nvidia-cuda-runtime` wheels and of a toolkit),
//!   else one next to a `LD_LIBRARY_PATH` entry, `$CUDA_HOME/include`,
//!   `$CUDA_PATH/include` or `/usr/local/cuda/include`.
//! * Target: `compute_XY` PTX for the device's compute capability, or
//!   `compute_90` (the H200) without a device; `$XFORM_CUDA_ARCH` (e.g.
//!   `compute_80`) overrides.
//! * Cache: if `$XFORM_CUDA_PTX_CACHE` names a directory, compiled PTX is
//!   stored there as `<kernel>.<arch>.<hash of source>.ptx` and reused, so a
//!   machine without NVRTC can run kernels compiled elsewhere.

use super::error::{CudaError, Result};
use super::source::Kernel;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The architecture PTX is generated for when no device says otherwise.
pub const DEFAULT_ARCH: &str = "compute_90";

/// True if the NVRTC library can be loaded.
pub fn nvrtc_available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: `is_culib_present` only tries to dlopen the library by its
    // candidate names and closes it again; it has no other effect.
    *PRESENT.get_or_init(|| unsafe { cudarc::nvrtc::sys::is_culib_present() })
}

/// NVRTC's version `(major, minor)`, if the library can be loaded.
pub fn nvrtc_version() -> Option<(i32, i32)> {
    if !nvrtc_available() {
        return None;
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present (checked above), so cudarc's loader
    // succeeds; nvrtcVersion writes two ints through valid pointers.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    (r == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).then_some((major, minor))
}

/// The target architecture: `$XFORM_CUDA_ARCH`, else `compute_<cc>` for a
/// compute capability, else [`DEFAULT_ARCH`].
pub fn arch_for(cc: Option<(i32, i32)>) -> String {
    if let Ok(a) = std::env::var("XFORM_CUDA_ARCH") {
        if !a.is_empty() {
            return a;
        }
    }
    match cc {
        Some((major, minor)) => format!("compute_{major}{minor}"),
        None => DEFAULT_ARCH.to_string(),
    }
}

fn has_half_headers(dir: &Path) -> bool {
    dir.join("cuda_fp16.h").is_file() && dir.join("cuda_bf16.h").is_file()
}

/// Directories holding loaded libraries whose file name starts with `prefix`.
fn loaded_library_dirs(prefix: &str) -> Vec<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut dirs = Vec::new();
    for line in maps.lines() {
        if let Some(path) = line.split_whitespace().nth(5) {
            let p = Path::new(path);
            let hit = p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix));
            if hit {
                if let Some(parent) = p.parent() {
                    if !dirs.iter().any(|d: &PathBuf| d == parent) {
                        dirs.push(parent.to_path_buf());
                    }
                }
            }
        }
    }
    dirs
}

/// The directory with `cuda_fp16.h` and `cuda_bf16.h`, if one is found
/// (see the module docs for the search order).
pub fn half_include_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("XFORM_CUDA_INCLUDE") {
        for part in std::env::split_paths(&dir) {
            if has_half_headers(&part) {
                return Some(part);
            }
        }
    }
    // Make sure libnvrtc is mapped, then look next to it.
    let _ = nvrtc_version();
    let mut candidates: Vec<PathBuf> = Vec::new();
    for lib in loaded_library_dirs("libnvrtc") {
        candidates.push(lib.join("../include"));
        candidates.push(lib.join("../../include"));
    }
    if let Ok(ld) = std::env::var("LD_LIBRARY_PATH") {
        for p in std::env::split_paths(&ld) {
            candidates.push(p.join("../include"));
        }
    }
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Ok(v) = std::env::var(var) {
            candidates.push(Path::new(&v).join("include"));
        }
    }
    candidates.push(PathBuf::from("/usr/local/cuda/include"));
    candidates.into_iter().find(|d| has_half_headers(d)).map(|d| d.canonicalize().unwrap_or(d))
}

/// A stable 64-bit FNV-1a hash (cache keys must not change between builds).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn cache_path(kernel: &Kernel, arch: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("XFORM_CUDA_PTX_CACHE")?;
    if dir.is_empty() {
        return None;
    }
    Some(PathBuf::from(dir).join(format!("{}.{arch}.{:016x}.ptx", kernel.name, fnv1a(kernel.source.as_bytes()))))
}

/// Compiles `kernel` to PTX for `arch` (`compute_XY`) with NVRTC, or takes it
/// from the PTX cache.
///
/// # Errors
/// [`CudaError::NvrtcMissing`] without NVRTC (and no cached PTX),
/// [`CudaError::Compile`] with NVRTC's log if the source is rejected.
pub fn compile_ptx(kernel: &Kernel, arch: &str) -> Result<String> {
    let cached = cache_path(kernel, arch);
    if let Some(p) = &cached {
        if let Ok(ptx) = std::fs::read_to_string(p) {
            return Ok(ptx);
        }
    }
    if !nvrtc_available() {
        return Err(CudaError::NvrtcMissing { kernel: kernel.name.clone() });
    }
    let mut options = base_options(arch);
    if kernel.needs_half {
        match half_include_dir() {
            Some(dir) => options.push(format!("--include-path={}", dir.display())),
            None => {
                return Err(CudaError::Compile {
                    kernel: kernel.name.clone(),
                    log: "cuda_fp16.h / cuda_bf16.h not found: set XFORM_CUDA_INCLUDE to the CUDA include directory \
                          (pip install nvidia-cuda-runtime puts it at site-packages/nvidia/cu13/include)"
                        .to_string(),
                })
            }
        }
    }
    let opts =
        cudarc::nvrtc::CompileOptions { options, name: Some(format!("{}.cu", kernel.name)), ..Default::default() };
    let ptx = match cudarc::nvrtc::compile_ptx_with_opts(&kernel.source, opts) {
        Ok(ptx) => ptx.to_src(),
        Err(cudarc::nvrtc::CompileError::CompileError { log, .. }) => {
            return Err(CudaError::Compile { kernel: kernel.name.clone(), log: log.to_string_lossy().into_owned() })
        }
        Err(e) => return Err(CudaError::Compile { kernel: kernel.name.clone(), log: format!("{e:?}") }),
    };
    if let Some(p) = &cached {
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        // A unique temporary name, then an atomic rename: concurrent writers
        // never leave a torn file.
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = p.with_extension(format!("tmp{}_{seq}", std::process::id()));
        if std::fs::write(&tmp, &ptx).is_ok() {
            let _ = std::fs::rename(&tmp, p);
        }
    }
    Ok(ptx)
}

/// The NVRTC options of every generated kernel. `--fmad=false`: a
/// multiply is rounded before an add uses it, never contracted into an
/// FMA, so the kernels round as the CPU's (and fused kernels as unfused).
fn base_options(arch: &str) -> Vec<String> {
    vec![format!("--gpu-architecture={arch}"), "--fmad=false".to_string(), "-std=c++17".to_string()]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel, fused or not, compiles without FMA contraction.
    #[test]
    fn kernels_compile_without_fma_contraction() {
        assert!(base_options("compute_90").iter().any(|o| o == "--fmad=false"));
    }

    #[test]
    fn hash_is_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn arch_from_capability() {
        if std::env::var("XFORM_CUDA_ARCH").is_err() {
            assert_eq!(arch_for(Some((9, 0))), "compute_90");
            assert_eq!(arch_for(None), DEFAULT_ARCH);
        }
    }
}

#[cfg(test)]
mod nvrtc_tests {
    use super::*;

    /// Compiles every structural kernel (ignored unless asked for: it needs
    /// libnvrtc, and then fails without it).
    #[test]
    #[ignore = "needs libnvrtc; run with --include-ignored where it is installed"]
    fn builtin_kernels_compile() {
        assert!(nvrtc_available(), "libnvrtc not found: put it on LD_LIBRARY_PATH");
        let mut failures = Vec::new();
        for k in crate::cuda::source::builtin_catalog() {
            if let Err(e) = compile_ptx(&k, DEFAULT_ARCH) {
                failures.push(e.to_string());
            }
        }
        assert!(failures.is_empty(), "{} kernels failed:\n{}", failures.len(), failures.join("\n"));
    }
}

#[cfg(test)]
mod nvrtc_fused_tests {
    use super::*;
    use crate::cuda::source::{convert_map_op, fused_kernel, FusedArg, FusedKernelOp, MapOp};
    use crate::dtype::DType;

    fn op(expr: &str, helpers: &str, param: Option<i64>, args: &[FusedArg], out: DType) -> FusedKernelOp {
        let op = MapOp { tag: "t".into(), expr: expr.into(), helpers: helpers.into(), raw: false, param };
        FusedKernelOp { op, args: args.to_vec(), out }
    }

    /// Fused kernels compile: every dtype, two conversions sharing a
    /// source dtype (their helpers must not collide), a parameter, a raw
    /// select, two outputs (ignored unless asked for: needs libnvrtc).
    #[test]
    #[ignore = "needs libnvrtc; run with --include-ignored where it is installed"]
    fn fused_kernels_compile() {
        use FusedArg::{In, Op};
        assert!(nvrtc_available(), "libnvrtc not found: put it on LD_LIBRARY_PATH");
        let mut failures = Vec::new();
        for d in DType::ALL {
            let to = if d == DType::F64 { DType::F32 } else { DType::F64 };
            let conv = |from, to, arg| FusedKernelOp { op: convert_map_op(from, to), args: vec![arg], out: to };
            let ops = vec![
                op("x", "", None, &[In(0)], d),
                conv(d, to, Op(0)),
                conv(d, DType::Bool, In(1)),
                op("x == y", "", None, &[Op(0), In(1)], DType::Bool),
                FusedKernelOp {
                    op: MapOp {
                        tag: "select".into(),
                        expr: "x ? y : z".into(),
                        helpers: String::new(),
                        raw: true,
                        param: None,
                    },
                    args: vec![Op(2), Op(0), In(1)],
                    out: d,
                },
                op("x + (int)p", "", Some(3), &[Op(1)], to),
            ];
            let k = fused_kernel(&[d, d], &ops, &[4, 5, 3]);
            if let Err(e) = compile_ptx(&k, DEFAULT_ARCH) {
                failures.push(format!("{d}: {e}\n{}", k.source));
            }
        }
        assert!(failures.is_empty(), "{} fused kernels failed:\n{}", failures.len(), failures.join("\n"));
    }
}
