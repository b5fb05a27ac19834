//! CUDA graph replay of a plan.
//!
//! NOTE: [cuda graph replay] A plan whose every value lives on one CUDA
//! device and whose every step can be recorded (elementwise, fused,
//! reductions, structural, matrix products, random bits, windows: no
//! gather or scatter, whose index check reads the device; no convolution,
//! whose cuDNN handle is bound to the device's stream; no control flow,
//! which reads its predicate) is replayed as a CUDA graph from its second
//! call (the first runs step by step: a signature called once never pays
//! for a capture):
//!
//! - Capture: the arguments are copied into buffers of the plan's own
//!   (*staged*), the steps run once step by step on them (whatever kernels
//!   their layouts take are compiled and loaded then, not while recorded),
//!   then again on the staged inputs inside
//!   `xform_kernels::cuda::graph::capture` (NOTE: [capture stream]), which
//!   records every launch, allocation and free rather than running it.
//!   The results are tensors over the graph's own memory.
//! - Replay: each argument is written into its staged buffer (a copy on
//!   the device's stream), the graph is launched there, and each result is
//!   copied out into a fresh buffer, which the caller gets: the graph's
//!   memory is reused by its next launch.
//! - A capture that fails (a step that synchronizes with the host after
//!   all, a driver without stream-ordered allocation), or a replay that
//!   fails, drops the graph; the plan then replays step by step for good
//!   (raising the error again if it was not the graph's) and
//!   [`GraphReplay::status`] says why. Replays are serialized per plan
//!   (one set of staged buffers).
//!
//! Results are those of the step-by-step replay: the same kernels on the
//! same operands (cuBLAS, through the capture stream's handle with its
//! fixed workspace, may choose another GEMM algorithm: equal within
//! rounding then). With `JitOptions::cuda_graphs` off, or without the
//! `cuda` feature, nothing here runs.

use super::plan::Plan;
use xform_ops::{Program, Result, Tensor};

/// Whether (and how) a plan replays as a CUDA graph.
#[derive(Debug)]
pub struct GraphReplay {
    /// The device every value of the plan is on, when every step can be
    /// captured and graphs are on (checked without the lock, so that a
    /// plan that never replays as a graph takes none).
    #[cfg(feature = "cuda")]
    device: Option<usize>,
    #[cfg(feature = "cuda")]
    state: std::sync::Mutex<imp::State>,
}

impl GraphReplay {
    /// Whether `p`'s plan of `steps` can be captured.
    pub fn new(p: &Program, steps: &[super::plan::Step]) -> GraphReplay {
        #[cfg(feature = "cuda")]
        {
            let (device, state) = match imp::capturable(p, steps) {
                Ok(Some(d)) => (Some(d), imp::State::Warmup),
                Ok(None) => (None, imp::State::NotCuda),
                Err(why) => (None, imp::State::Refused(why)),
            };
            GraphReplay { device, state: std::sync::Mutex::new(state) }
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (p, steps);
            GraphReplay {}
        }
    }

    /// Never replay as a graph.
    pub fn disable(&mut self) {
        #[cfg(feature = "cuda")]
        {
            self.device = None;
            *self.state.get_mut().unwrap_or_else(|e| e.into_inner()) = imp::State::Refused("disabled".into());
        }
    }

    /// `None` for a plan that is not on CUDA (or without the feature);
    /// else "captured", "not captured yet", or "not captured: " and why.
    pub fn status(&self) -> Option<String> {
        #[cfg(feature = "cuda")]
        {
            let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            match &*st {
                imp::State::NotCuda => None,
                imp::State::Refused(why) => Some(format!("not captured: {why}")),
                imp::State::Warmup | imp::State::Warm => Some("not captured yet".into()),
                imp::State::Captured(_) => Some("captured".into()),
            }
        }
        #[cfg(not(feature = "cuda"))]
        None
    }

    /// Runs `plan` on `args` through its graph (capturing it at the second
    /// call); `None` when the plan replays step by step instead.
    pub fn run(&self, plan: &Plan, args: &[Tensor]) -> Option<Result<Vec<Tensor>>> {
        #[cfg(feature = "cuda")]
        {
            imp::run(self.device?, &self.state, plan, args)
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (plan, args);
            None
        }
    }
}

#[cfg(feature = "cuda")]
mod imp {
    use super::super::plan::{copy_of, Plan, Step, StepOp};
    use std::sync::Mutex;
    use xform_kernels::cuda::graph::{capture, release, Captured, Graph};
    use xform_ops::{Device, Error, Program, Result, Tensor};

    #[derive(Debug)]
    pub(super) enum State {
        /// Not a program on one CUDA device.
        NotCuda,
        /// Not called yet.
        Warmup,
        /// Called once, step by step: the next call captures.
        Warm,
        Captured(Box<CapturedPlan>),
        Refused(String),
    }

    /// A captured plan: its graph, the staged inputs the graph reads, and
    /// the results it writes.
    #[derive(Debug)]
    pub(super) struct CapturedPlan {
        /// Per input: its staged buffer (`None`: an input no step reads).
        staged: Vec<Option<Tensor>>,
        /// The results, over the graph's memory (or staged inputs or
        /// constants).
        outs: Vec<Tensor>,
        launched: bool,
        graph: Graph,
    }

    impl Drop for CapturedPlan {
        fn drop(&mut self) {
            let outs = std::mem::take(&mut self.outs);
            if self.launched {
                // the graph's memory is freed on the capture stream, after
                // the last launch and the copies out of it, and not while
                // another thread captures there
                release(self.graph.ordinal(), outs);
            } else {
                // never launched: the graph's buffers never existed, and
                // freeing them would fail
                std::mem::forget(outs);
            }
        }
    }

    /// The CUDA device `p` runs on when its plan can be captured (`None`:
    /// not a program on one CUDA device), or why it cannot.
    pub(super) fn capturable(p: &Program, steps: &[Step]) -> std::result::Result<Option<usize>, String> {
        let mut devices = p.avals.iter().map(|a| a.device).chain(p.consts.iter().map(|c| c.device()));
        let ordinal = match devices.next() {
            Some(Device::Cuda(k)) => k,
            _ => return Ok(None),
        };
        if devices.any(|d| d != Device::Cuda(ordinal)) {
            return Ok(None);
        }
        if steps.is_empty() {
            return Err("no steps".into());
        }
        for s in steps {
            if let StepOp::Prim(prim) = &s.op {
                if !prim.jit_props().graph_capture {
                    return Err(format!("{} cannot be captured", prim.name()));
                }
            }
        }
        Ok(Some(ordinal))
    }

    pub(super) fn run(
        ordinal: usize,
        state: &Mutex<State>,
        plan: &Plan,
        args: &[Tensor],
    ) -> Option<Result<Vec<Tensor>>> {
        let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *st {
            State::NotCuda | State::Refused(_) => None,
            State::Warmup => {
                *st = State::Warm;
                None
            }
            State::Warm => match capture_plan(ordinal, plan, args) {
                Ok(mut c) => match c.replay(args) {
                    Ok(outs) => {
                        *st = State::Captured(Box::new(c));
                        Some(Ok(outs))
                    }
                    Err(e) => {
                        *st = State::Refused(format!("the first replay failed: {e}"));
                        None
                    }
                },
                Err(why) => {
                    *st = State::Refused(why);
                    None
                }
            },
            State::Captured(c) => match c.replay(args) {
                Ok(outs) => Some(Ok(outs)),
                // a launch or staging failure: step by step from now on
                // (which raises the error again if it is not the graph's)
                Err(e) => {
                    *st = State::Refused(format!("a replay failed: {e}"));
                    None
                }
            },
        }
    }

    fn capture_plan(ordinal: usize, plan: &Plan, args: &[Tensor]) -> std::result::Result<CapturedPlan, String> {
        let staged: Vec<Option<Tensor>> = args
            .iter()
            .zip(&plan.unused_inputs)
            .map(|(a, unused)| if *unused { Ok(None) } else { copy_of(a).map(Some) })
            .collect::<Result<_>>()
            .map_err(|e| format!("staging the inputs: {e}"))?;
        let inputs: Vec<Tensor> =
            staged.iter().zip(args).map(|(s, a)| s.clone().unwrap_or_else(|| a.clone())).collect();
        // once more step by step on the staged (contiguous) inputs, which
        // may take other kernels than the first call's arguments did: what
        // they compile and load is then loaded before the capture
        plan.run_raw(inputs.iter().cloned()).map_err(|e| format!("the run before the capture: {e}"))?;
        match capture(ordinal, || plan.run_raw(inputs)) {
            Captured::Graph(graph, outs) => Ok(CapturedPlan { staged, outs, launched: false, graph }),
            Captured::Failed(e) => Err(e.to_string()),
            Captured::Refused(e) => Err(e.to_string()),
        }
    }

    impl CapturedPlan {
        fn replay(&mut self, args: &[Tensor]) -> Result<Vec<Tensor>> {
            for (staged, arg) in self.staged.iter().zip(args) {
                if let Some(s) = staged {
                    // into the staged array itself (a tensor write would be
                    // functionalized under an active transform)
                    let (Some(dst), Some(src)) = (s.array(), arg.array()) else {
                        return Err(Error::invalid("jit", "a CUDA graph replay of a tracer (internal error)"));
                    };
                    dst.overwrite_with(&src)?;
                }
            }
            self.graph.launch().map_err(|e| Error::device("jit", e.to_string()))?;
            self.launched = true;
            self.outs.iter().map(copy_of).collect()
        }
    }
}
