//! [`Executable`]: a program compiled once (passes, replay plan, batch
//! split) and run many times.

use crate::plan::Plan;
use crate::split::SplitPlan;
use crate::{aliasing, passes};
use xform_ops::{Program, Result, Tensor};

/// How to compile a program.
#[derive(Copy, Clone, Debug)]
pub struct ExecOptions {
    /// Run the passes of the optimizer (constant folding, simplification,
    /// the diagonal rewrite, CSE, DCE); without them only dead equations
    /// are removed.
    pub optimize: bool,
    /// On CUDA, replay the plan as a captured CUDA graph from its second
    /// run, when every step can be captured (NOTE: [cuda graph replay] in
    /// `graph.rs`).
    pub cuda_graphs: bool,
    /// On the CPU, run sink steps on a helper thread and lend it to
    /// mid-sized kernels (NOTE: [parallel sinks] in `sinks.rs`).
    pub parallel_sinks: bool,
    /// On the CPU, replay a program that never mixes the rows of a batch as
    /// two halves (NOTE: [batch split] in `split.rs`; needs
    /// `parallel_sinks`).
    pub batch_split: bool,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions { optimize: true, cuda_graphs: true, parallel_sinks: true, batch_split: true }
    }
}

/// What the compiler made of a program (`Jitted::entries` shows it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// Steps of the replay plan (after elementwise fusion).
    pub plan_steps: usize,
    /// Fused steps among them (several equations as one loop or kernel).
    pub fused_steps: usize,
    /// Sink steps among them, which may run on the helper thread (NOTE:
    /// [parallel sinks]; 0 with `ExecOptions::parallel_sinks` off).
    pub sink_steps: usize,
    /// Results the step-by-step replays wrote over an operand's buffer
    /// (NOTE: [buffer planning]), over all runs (a captured CUDA graph's
    /// replays are not counted).
    pub in_place_writes: u64,
    /// On CUDA, whether the plan replays as a CUDA graph: "captured", "not
    /// captured yet" (before its second run), or "not captured: " and why
    /// (a step that cannot be captured, `ExecOptions::cuda_graphs` off, a
    /// failed capture); `None` off CUDA.
    pub cuda_graph: Option<String>,
    /// The rows of each half where the replay runs as two halves of its
    /// batch, one per core (NOTE: [batch split] in `split.rs`).
    pub batch_split: Option<(usize, usize)>,
}

/// A program compiled for replay: optimized, planned and, where that
/// pays, split over the batch.
pub struct Executable {
    traced_eqns: usize,
    /// The optimized program (evaluated through `bind` when the inputs are
    /// tracers of enclosing transforms).
    program: Program,
    /// The replay plan; `None` when the program holds a tracer of an
    /// enclosing transform, or collectives (then it is only evaluated,
    /// through `bind`, where the maps binding their names apply them).
    plan: Option<Plan>,
    /// It holds a tracer of an enclosing transform (and is used once).
    holds_tracers: bool,
    split: Option<SplitPlan>,
    /// Outputs to copy after a run (NOTE: [output aliasing] in
    /// `aliasing.rs`).
    copied: Vec<usize>,
}

impl Executable {
    /// Compiles `traced`, whose first `n_out` outputs are results (the
    /// rest are final values of mutated arguments, which may share storage
    /// with them).
    ///
    /// # Errors
    /// What the passes or the plan's compilation raise.
    pub fn compile(traced: &Program, n_out: usize, opts: &ExecOptions) -> Result<Executable> {
        let program = if opts.optimize { passes::optimize(traced)? } else { passes::dce::run(traced)? };
        let holds_tracers = program.consts.iter().any(Tensor::is_tracer);
        // collectives over named axes are the maps' to apply (NOTE: [named
        // axes] in xform-ops): such a program is evaluated, not replayed
        let plan = if holds_tracers || !program.axis_names().is_empty() {
            None
        } else {
            let mut plan = Plan::compile(&program)?;
            if !opts.parallel_sinks {
                plan.disable_sinks();
            }
            if !opts.cuda_graphs {
                plan.disable_cuda_graph();
            }
            Some(plan)
        };
        // a split that cannot be built (a constant that cannot be cut; even
        // a panic of the analysis) is only a replay not taken
        let split = match &plan {
            Some(_) if opts.parallel_sinks && opts.batch_split && !aliasing::outputs_share_storage(traced, n_out) => {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| SplitPlan::new(&program)))
                    .ok()
                    .and_then(|r| r.ok().flatten())
            }
            _ => None,
        };
        let copied = aliasing::outputs_to_copy(traced, &program, n_out);
        Ok(Executable { traced_eqns: traced.eqns.len(), program, plan, holds_tracers, split, copied })
    }

    /// The optimized program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Equations of the program as it was given to [`Executable::compile`].
    pub fn traced_eqns(&self) -> usize {
        self.traced_eqns
    }

    /// True if it may be kept for later calls: it holds no tracer of an
    /// enclosing transform.
    pub fn cacheable(&self) -> bool {
        !self.holds_tracers
    }

    /// Outputs among the first `n_out` that the passes made share storage
    /// with an argument or another output where eager results would not:
    /// the caller copies them after a run (or replaces them by what eager
    /// execution returns there).
    pub fn outputs_to_copy(&self) -> &[usize] {
        &self.copied
    }

    /// What the compiler made of the program.
    pub fn stats(&self) -> PlanStats {
        let plan = self.plan.as_ref();
        PlanStats {
            plan_steps: plan.map_or(0, |p| p.steps.len()),
            fused_steps: plan.map_or(0, Plan::fused_steps),
            sink_steps: plan.map_or(0, Plan::sink_steps),
            in_place_writes: plan.map_or(0, Plan::in_place_writes),
            cuda_graph: plan.and_then(Plan::cuda_graph),
            batch_split: self.split.as_ref().map(SplitPlan::rows),
        }
    }

    /// Runs the program on `inputs`: the plan (or its split) on concrete
    /// values, the program through `bind` on tracers of enclosing
    /// transforms. The outputs may share storage as
    /// [`Executable::outputs_to_copy`] says.
    ///
    /// # Errors
    /// A captured constant written in place since the trace
    /// (`Program::check_consts`), or what a step raises.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        match &self.plan {
            Some(plan) if inputs.iter().all(|l| !l.is_tracer()) => {
                self.program.check_consts("jit")?;
                let outs = match self.split_now() {
                    Some(s) => s.run(inputs)?,
                    None => plan.run(inputs)?,
                };
                // replayed while another program is staged: its results were
                // computed from the arguments and from what this program
                // captured (NOTE: [trace-time values] in xform_ops::provenance;
                // `eval` records per equation through `bind`)
                if xform_ops::provenance::recording() {
                    xform_ops::interp::note_computed(inputs, &outs, &self.program.version_guards());
                }
                Ok(outs)
            }
            _ => self.program.eval(inputs),
        }
    }

    /// [`Executable::run`] on inputs handed over: the plan may write over
    /// those no one else holds.
    ///
    /// # Errors
    /// As [`Executable::run`].
    pub fn run_donated(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        match &self.plan {
            // (while another program is staged, `run` records what the
            // results were computed from)
            Some(plan) if !xform_ops::provenance::recording() && inputs.iter().all(|l| !l.is_tracer()) => {
                self.program.check_consts("jit")?;
                match self.split_now() {
                    Some(s) => s.run(&inputs),
                    None => plan.run_donated(inputs),
                }
            }
            _ => self.run(&inputs),
        }
    }

    /// The split replay if there is one and this thread may hand half of
    /// it to the helper (another thread exists, and this is not one of
    /// rayon's: see NOTE: [parallel sinks]).
    fn split_now(&self) -> Option<&SplitPlan> {
        self.split.as_ref().filter(|_| xform_kernels::cpu::threads() > 1 && !xform_kernels::cpu::on_pool_thread())
    }
}
