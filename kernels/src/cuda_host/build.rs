//! Compiling kernels for the host: the translation units (each kernel in a
//! namespace of its own, so that their shared struct and helper names do
//! not clash), the table of entry points, and the g++ invocations.

use super::{HostError, HostGpu, SHIM};
use crate::cuda_source::Kernel;
use std::collections::HashMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

const LAUNCH_H: &str = include_str!("launch.h");
const RUNNER: &str = include_str!("runner.cpp");

/// Units compiled in parallel (each g++ process takes one).
const UNITS: usize = 4;

/// Flags of every compilation: C++17 without optimization (compiling
/// dominates: the kernels run on small arrays), no contraction of `a * b +
/// c` into an FMA (the device kernels compile with `--fmad=false`), no
/// warnings (the kernels' NaN tests `x != x` are deliberate).
const FLAGS: &[&str] = &["-std=c++17", "-O0", "-ffp-contract=off", "-w"];

/// The sanitizers the executables are built with: addresses (an access
/// outside a buffer), array bounds (an index past a parameter struct's
/// array), signed overflow, shifts, integer division by zero and
/// float-to-integer overflow (the rest of `-fsanitize=undefined` checks
/// what the kernels do not do, and would cost half again the compile
/// time).
const SANITIZE: &[&str] = &[
    "-fsanitize=address,bounds,signed-integer-overflow,shift,integer-divide-by-zero,float-cast-overflow",
    "-fno-sanitize-recover=all",
];

/// The sanitizer flags if g++ can build and run a program with them here
/// (`libasan`/`libubsan` installed), else none (said once on stderr).
pub(super) fn sanitize_flags() -> &'static [&'static str] {
    static FLAGS_HERE: OnceLock<&'static [&'static str]> = OnceLock::new();
    FLAGS_HERE.get_or_init(|| {
        let dir = scratch_dir("probe");
        let mut compiler = true;
        let ok = std::fs::create_dir_all(&dir).is_ok() && std::fs::write(dir.join("p.cpp"), "int main() { return 0; }\n").is_ok() && {
            let exe = dir.join("p");
            let built = Command::new("g++").args(SANITIZE).arg("-o").arg(&exe).arg(dir.join("p.cpp")).output();
            compiler = built.is_ok();
            built.is_ok_and(|o| o.status.success())
                && Command::new(&exe).env("ASAN_OPTIONS", "detect_leaks=0").output().is_ok_and(|o| o.status.success())
        };
        let _ = std::fs::remove_dir_all(&dir);
        // (without g++ at all, the build says so)
        if !ok && compiler {
            eprintln!("note: g++ cannot build with the address and undefined-behaviour sanitizers here: the CUDA host emulation runs without them");
        }
        if ok {
            SANITIZE
        } else {
            &[]
        }
    })
}

/// A fresh directory name under the system's temporary directory.
pub(super) fn scratch_dir(what: &str) -> PathBuf {
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("xform-cuda-host-{}-{what}-{n}", std::process::id()))
}

/// The names a source `#define`s (undefined after its namespace, so that
/// the next kernel's include guards and macros start afresh).
fn defined_macros(source: &str) -> Vec<&str> {
    let mut v: Vec<&str> = source
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("#define "))
        .filter_map(|rest| rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next())
        .filter(|name| !name.is_empty())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// True if the kernel's threads cooperate (barriers, warp shuffles): the
/// runner then runs a block's threads as fibers.
fn cooperative(k: &Kernel) -> bool {
    k.source.contains("__syncthreads") || k.source.contains("__shfl")
}

/// The C++ source of unit `unit`: its kernels, each in a namespace of its
/// own, and the table of their entry points.
fn unit_source(unit: usize, kernels: &[&Kernel]) -> String {
    let mut s = String::from("#include \"shim.h\"\n#include \"launch.h\"\n");
    for (i, k) in kernels.iter().enumerate() {
        let _ = writeln!(s, "namespace xf_k{i} {{\n{}\n}}", k.source);
        for m in defined_macros(&k.source) {
            let _ = writeln!(s, "#undef {m}");
        }
    }
    let _ = writeln!(s, "extern const XfEmuKernel xf_emu_unit{unit}[] = {{");
    for (i, k) in kernels.iter().enumerate() {
        let f = format!("&xf_k{i}::{}", k.name);
        let _ = writeln!(s, "    {{\"{}\", xf_emu_arity({f}), {}, &xf_emu_call<{f}>}},", k.name, cooperative(k) as i32);
    }
    s.push_str("};\n");
    s
}

/// The table of every unit's kernels, in global id order.
fn table_source(units: &[Vec<&Kernel>]) -> String {
    let mut s = String::from("#include \"launch.h\"\n");
    for (u, _) in units.iter().enumerate() {
        let _ = writeln!(s, "extern const XfEmuKernel xf_emu_unit{u}[];");
    }
    s.push_str("extern const XfEmuKernel* const xf_emu_kernels[] = {\n");
    let mut count = 0;
    for (u, ks) in units.iter().enumerate() {
        for i in 0..ks.len() {
            let _ = writeln!(s, "    &xf_emu_unit{u}[{i}],");
            count += 1;
        }
    }
    if count == 0 {
        s.push_str("    nullptr,\n");
    }
    let _ = writeln!(s, "}};\nextern const unsigned xf_emu_kernel_count = {count};");
    s
}

fn io(what: &str, e: std::io::Error) -> HostError {
    HostError::Invalid(format!("{what}: {e}"))
}

/// Runs g++ with `args`; a failure becomes [`HostError::Compile`] for `what`.
fn check(what: &str, out: std::io::Result<Output>) -> Result<(), HostError> {
    match out {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(HostError::NoCompiler(e.to_string())),
        Err(e) => Err(io("running g++", e)),
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(HostError::Compile {
            what: what.to_string(),
            log: format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
        }),
    }
}

/// Compiles `src` (written to `dir/name.cpp`) to an object, in a child
/// process started now.
fn spawn_compile(dir: &Path, name: &str, src: &str) -> Result<(String, std::process::Child), HostError> {
    let cpp = dir.join(format!("{name}.cpp"));
    std::fs::write(&cpp, src).map_err(|e| io("writing a unit", e))?;
    let child = Command::new("g++")
        .args(FLAGS)
        .args(sanitize_flags())
        .arg("-I")
        .arg(dir)
        .arg("-c")
        .arg(&cpp)
        .arg("-o")
        .arg(dir.join(format!("{name}.o")))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    match child {
        Ok(c) => Ok((name.to_string(), c)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(HostError::NoCompiler(e.to_string())),
        Err(e) => Err(io("running g++", e)),
    }
}

pub(super) fn build<'a>(kernels: impl IntoIterator<Item = &'a Kernel>) -> Result<HostGpu, HostError> {
    // the distinct kernels, in first-seen order
    let mut seen: HashMap<&str, &Kernel> = HashMap::new();
    let mut all: Vec<&Kernel> = Vec::new();
    for k in kernels {
        match seen.get(k.name.as_str()) {
            Some(prev) if prev.source != k.source => {
                return Err(HostError::Invalid(format!("two kernels named {} with different sources", k.name)));
            }
            Some(_) => {}
            None => {
                seen.insert(&k.name, k);
                all.push(k);
            }
        }
    }
    // units balanced by source length
    let n_units = UNITS.min(all.len()).max(1);
    let mut units: Vec<Vec<&Kernel>> = vec![Vec::new(); n_units];
    let mut sizes = vec![0usize; n_units];
    let mut by_size = all.clone();
    by_size.sort_by_key(|k| std::cmp::Reverse(k.source.len()));
    for k in by_size {
        let u = (0..n_units).min_by_key(|&u| sizes[u]).expect("a unit");
        sizes[u] += k.source.len();
        units[u].push(k);
    }
    let dir = scratch_dir("build");
    std::fs::create_dir_all(&dir).map_err(|e| io("creating the build directory", e))?;
    let gpu = HostGpu { dir: dir.clone(), exe: dir.join("runner"), ids: HashMap::new(), runs: AtomicUsize::new(0) };
    for (name, text) in [("shim.h", SHIM), ("launch.h", LAUNCH_H), ("cuda_fp16.h", ""), ("cuda_bf16.h", "")] {
        std::fs::write(dir.join(name), text).map_err(|e| io("writing a header", e))?;
    }
    // the half headers are empty: the shim defines their types
    let mut children = Vec::new();
    for (u, ks) in units.iter().enumerate() {
        children.push(spawn_compile(&dir, &format!("unit{u}"), &unit_source(u, ks))?);
    }
    children.push(spawn_compile(&dir, "table", &table_source(&units))?);
    children.push(spawn_compile(&dir, "runner", RUNNER)?);
    let mut objects = Vec::new();
    let mut failure = None;
    for (name, child) in children {
        let r = check(&format!("{name}.cpp in {}", dir.display()), child.wait_with_output());
        if failure.is_none() {
            failure = r.err();
        }
        objects.push(dir.join(format!("{name}.o")));
    }
    if let Some(e) = failure {
        // keep the sources of a failed build for reading
        std::mem::forget(gpu);
        return Err(e);
    }
    let linked = Command::new("g++").args(sanitize_flags()).args(&objects).arg("-o").arg(&gpu.exe).output();
    check("linking the runner", linked)?;
    let mut gpu = gpu;
    let mut id = 0u64;
    for ks in &units {
        for k in ks {
            gpu.ids.insert(k.name.clone(), id);
            id += 1;
        }
    }
    Ok(gpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macros_of_a_source() {
        let src = "#define XF_MAXD 16\n#define XF_GRID_LOOP(i, n) for (;;)\n  #define XF_MAXD 16\n#ifdef X\n";
        assert_eq!(defined_macros(src), ["XF_GRID_LOOP", "XF_MAXD"]);
    }
}
