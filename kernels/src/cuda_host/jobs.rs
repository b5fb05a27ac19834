//! The job and result files of the runner (protocol in `runner.cpp`), and
//! running them.

use super::{HostError, HostGpu, Job, Outcome, GRID_STRIDE_BLOCKS};
use crate::cuda_launch::{Arg, Buf, Step, Temp};
use crate::dtype::CpuBuffer;
use crate::dtype::DType;
use half::{bf16, f16};
use std::process::Command;
use std::sync::atomic::Ordering;

/// The storage bytes of a buffer, as the device holds it (bool as a byte).
pub(super) fn to_bytes(b: &CpuBuffer) -> Vec<u8> {
    match b {
        CpuBuffer::F32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        CpuBuffer::F64(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        CpuBuffer::F16(v) => v.iter().flat_map(|x| x.to_bits().to_ne_bytes()).collect(),
        CpuBuffer::BF16(v) => v.iter().flat_map(|x| x.to_bits().to_ne_bytes()).collect(),
        CpuBuffer::I32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        CpuBuffer::I64(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        CpuBuffer::U32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        CpuBuffer::Bool(v) => v.iter().map(|&x| x as u8).collect(),
    }
}

/// A buffer of `d` from its storage bytes; a bool byte other than 0 or 1
/// (which no kernel stores) is an error.
pub(super) fn from_bytes(d: DType, bytes: &[u8]) -> Result<CpuBuffer, String> {
    fn words<const N: usize, T>(bytes: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
        bytes.chunks_exact(N).map(|c| f(c.try_into().expect("N bytes"))).collect()
    }
    if !bytes.len().is_multiple_of(d.size_bytes()) {
        return Err(format!("{} bytes of {d}", bytes.len()));
    }
    Ok(match d {
        DType::F32 => CpuBuffer::F32(words(bytes, f32::from_ne_bytes)),
        DType::F64 => CpuBuffer::F64(words(bytes, f64::from_ne_bytes)),
        DType::F16 => CpuBuffer::F16(words(bytes, |b| f16::from_bits(u16::from_ne_bytes(b)))),
        DType::BF16 => CpuBuffer::BF16(words(bytes, |b| bf16::from_bits(u16::from_ne_bytes(b)))),
        DType::I32 => CpuBuffer::I32(words(bytes, i32::from_ne_bytes)),
        DType::I64 => CpuBuffer::I64(words(bytes, i64::from_ne_bytes)),
        DType::U32 => CpuBuffer::U32(words(bytes, u32::from_ne_bytes)),
        DType::Bool => CpuBuffer::Bool(
            bytes
                .iter()
                .enumerate()
                .map(|(i, &b)| match b {
                    0 => Ok(false),
                    1 => Ok(true),
                    b => Err(format!("bool element {i} holds the byte {b:#04x}")),
                })
                .collect::<Result<_, _>>()?,
        ),
    })
}

fn word(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_ne_bytes());
}

fn block(out: &mut Vec<u8>, bytes: &[u8]) {
    word(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
    out.resize(out.len().next_multiple_of(8), 0);
}

/// The runner's buffer table of a job: inputs, then the destination, then
/// the temporaries; per entry its element size.
struct Table {
    inputs: usize,
    dest: bool,
    sizes: Vec<usize>,
}

impl Table {
    fn new(job: &Job<'_>) -> Table {
        let mut sizes: Vec<usize> = job.inputs.iter().map(|b| b.dtype().size_bytes()).collect();
        sizes.extend(job.dest.map(|d| d.dtype().size_bytes()));
        sizes.extend(job.plan.temps.iter().map(|t| match t {
            Temp::Array { dtype, .. } => dtype.size_bytes(),
            Temp::Flag => 8,
        }));
        Table { inputs: job.inputs.len(), dest: job.dest.is_some(), sizes }
    }

    fn index(&self, b: Buf) -> Result<usize, HostError> {
        let i = match b {
            Buf::Input(k) if k < self.inputs => k,
            Buf::Dest if self.dest => self.inputs,
            Buf::Temp(t) => self.inputs + self.dest as usize + t,
            b => return Err(HostError::Invalid(format!("a plan uses {b:?}, which its job lacks"))),
        };
        if i >= self.sizes.len() {
            return Err(HostError::Invalid(format!("a plan uses {b:?}, which it does not allocate")));
        }
        Ok(i)
    }
}

/// Appends `job` to the job file.
fn encode(gpu: &HostGpu, job: &Job<'_>, out: &mut Vec<u8>) -> Result<(), HostError> {
    let t = Table::new(job);
    word(out, t.sizes.len() as u64);
    for b in job.inputs.iter().chain(job.dest.iter()) {
        word(out, (b.len() * b.dtype().size_bytes()) as u64);
        word(out, 0);
        let bytes = to_bytes(b);
        out.extend_from_slice(&bytes);
        out.resize(out.len().next_multiple_of(8), 0);
    }
    for tmp in &job.plan.temps {
        match *tmp {
            Temp::Array { dtype, len } => {
                word(out, (len * dtype.size_bytes()) as u64);
                word(out, 1);
            }
            Temp::Flag => {
                word(out, 8);
                word(out, 2);
            }
        }
    }
    word(out, job.plan.steps.len() as u64);
    for step in &job.plan.steps {
        match step {
            Step::Launch(l) => {
                word(out, 0);
                let id = gpu.ids.get(&l.kernel.name).ok_or_else(|| {
                    HostError::Invalid(format!("{} is not in the emulation's executable", l.kernel.name))
                })?;
                word(out, *id);
                let mut grid = l.grid;
                if l.grid_stride {
                    grid[0] = grid[0].min(GRID_STRIDE_BLOCKS);
                }
                for g in grid.into_iter().chain(l.block) {
                    word(out, g as u64);
                }
                word(out, l.args.len() as u64);
                for a in &l.args {
                    match (a, a.value_bytes()) {
                        (Arg::Ptr(p), _) => {
                            let i = t.index(p.buf)?;
                            word(out, 0);
                            word(out, i as u64);
                            word(out, (p.offset * t.sizes[i]) as u64);
                        }
                        (_, Some(bytes)) => {
                            word(out, 1);
                            block(out, &bytes);
                        }
                        (_, None) => unreachable!("only pointers have no value bytes"),
                    }
                }
            }
            Step::CheckIndices { flag, indices, size } => {
                word(out, 1);
                word(out, t.index(Buf::Temp(*flag))? as u64);
                word(out, t.index(*indices)? as u64);
                word(out, *size as u64);
            }
        }
    }
    let returned: Vec<usize> = job
        .plan
        .outputs
        .iter()
        .map(|&o| t.index(Buf::Temp(o)))
        .chain(job.dest.map(|_| t.index(Buf::Dest)))
        .collect::<Result<_, _>>()?;
    word(out, returned.len() as u64);
    for r in returned {
        word(out, r as u64);
    }
    Ok(())
}

/// A reader of the result file.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// The next `n` bytes (then padding to 8), if the file holds them.
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n.next_multiple_of(8);
        Some(s)
    }

    fn word(&mut self) -> Option<u64> {
        self.take(8).map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
    }
}

/// Reads the results of `jobs` from `bytes`: the outcomes of the jobs
/// that finished (all of them, unless the run stopped).
fn decode(jobs: &[Job<'_>], bytes: &[u8]) -> Result<Vec<Outcome>, String> {
    let mut c = Cursor { bytes, at: 0 };
    let mut outcomes = Vec::new();
    'jobs: for job in jobs {
        let Some(status) = c.word() else { break };
        if status == 1 {
            let (Some(index), Some(size)) = (c.word(), c.word()) else { break };
            outcomes.push(Outcome::IndexOutOfRange { index: index as i64, size: size as usize });
            continue;
        }
        let mut dtypes: Vec<DType> = job
            .plan
            .outputs
            .iter()
            .map(|&o| match job.plan.temps.get(o) {
                Some(Temp::Array { dtype, .. }) => Ok(*dtype),
                _ => Err(format!("plan result {o} is not an array temporary")),
            })
            .collect::<Result<_, _>>()?;
        dtypes.extend(job.dest.map(|d| d.dtype()));
        let mut bufs = Vec::new();
        for d in dtypes {
            let Some(n) = c.word() else { break 'jobs };
            let Some(data) = c.take(n as usize) else { break 'jobs };
            bufs.push(from_bytes(d, data)?);
        }
        let dest = if job.dest.is_some() { bufs.pop() } else { None };
        outcomes.push(Outcome::Done { outputs: bufs, dest });
    }
    Ok(outcomes)
}

/// Runs `jobs` in one runner process.
fn run_chunk(gpu: &HostGpu, jobs: &[Job<'_>], first: usize) -> Result<Vec<Outcome>, HostError> {
    let mut file = b"XFJOBS01".to_vec();
    word(&mut file, jobs.len() as u64);
    for j in jobs {
        encode(gpu, j, &mut file)?;
    }
    let n = gpu.runs.fetch_add(1, Ordering::Relaxed);
    let (input, output) = (gpu.dir().join(format!("jobs{n}.bin")), gpu.dir().join(format!("results{n}.bin")));
    std::fs::write(&input, &file).map_err(|e| HostError::Invalid(format!("writing the jobs: {e}")))?;
    let run = Command::new(&gpu.exe)
        .arg(&input)
        .arg(&output)
        .env("ASAN_OPTIONS", "detect_leaks=0:allocator_may_return_null=1")
        .env("UBSAN_OPTIONS", "print_stacktrace=1")
        .output()
        .map_err(|e| HostError::Invalid(format!("running the emulation: {e}")))?;
    let results = std::fs::read(&output).unwrap_or_default();
    if std::env::var_os("XFORM_CUDA_HOST_KEEP").is_none() {
        let _ = std::fs::remove_file(&input);
        let _ = std::fs::remove_file(&output);
    }
    let outcomes = decode(jobs, &results).map_err(|e| HostError::Run { job: None, log: e })?;
    if !run.status.success() || outcomes.len() != jobs.len() {
        return Err(HostError::Run {
            job: Some(first + outcomes.len()),
            log: format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr)),
        });
    }
    Ok(outcomes)
}

pub(super) fn run(gpu: &HostGpu, jobs: &[Job<'_>]) -> Result<Vec<Outcome>, HostError> {
    const PER_PROCESS: usize = 64;
    let procs = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
    if jobs.len() <= PER_PROCESS || procs == 1 {
        return run_chunk(gpu, jobs, 0);
    }
    let chunk = jobs.len().div_ceil(procs);
    let results: Vec<Result<Vec<Outcome>, HostError>> = std::thread::scope(|s| {
        let handles: Vec<_> =
            jobs.chunks(chunk).enumerate().map(|(c, part)| s.spawn(move || run_chunk(gpu, part, c * chunk))).collect();
        handles.into_iter().map(|h| h.join().expect("a runner thread")).collect()
    });
    let mut all = Vec::with_capacity(jobs.len());
    for r in results {
        all.extend(r?);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_and_bool_bytes_are_checked() {
        let bufs = [
            CpuBuffer::F32(vec![1.5, -0.0, f32::INFINITY]),
            CpuBuffer::F16(vec![f16::from_f32(0.1), f16::NAN]),
            CpuBuffer::BF16(vec![bf16::from_f32(-3.0)]),
            CpuBuffer::I64(vec![i64::MIN, 7]),
            CpuBuffer::U32(vec![u32::MAX]),
            CpuBuffer::Bool(vec![true, false]),
        ];
        for b in &bufs {
            let back = from_bytes(b.dtype(), &to_bytes(b)).unwrap();
            assert_eq!(to_bytes(&back), to_bytes(b), "{:?}", b.dtype());
        }
        assert!(from_bytes(DType::Bool, &[0, 2]).unwrap_err().contains("element 1"));
        assert!(from_bytes(DType::F32, &[0; 6]).is_err());
    }
}
