//! The collectives across MPI processes (feature `mpi`), run by
//! `mpirun -np 2` (`.ci/run`; a plain `cargo test` builds it but runs it as
//! one process, which checks the same identities over one position).
//! Every process computes its value and, locally, the `vmap` of the same
//! function over every process's value (each rank can draw any rank's
//! value from its key): the process axis's result must equal that `vmap`'s
//! row for this rank, bit for bit.

use xform::lax::{all_gather, axis_index, pmax, pmean, ppermute, psum, psum_scatter};
use xform::prelude::*;

fn value(rank: usize) -> Tensor {
    Key::new(rank as u64).normal([4], DType::F64)
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64().iter().map(|v| v.to_bits()).collect()
}

fn main() {
    let procs = xform::distributed::initialize().expect("MPI");
    let (rank, n) = (procs.rank(), procs.size());
    let xs = Tensor::stack(&(0..n).map(value).collect::<Vec<_>>(), 0);
    let x = value(rank);
    let shift: Vec<(usize, usize)> = (0..n).map(|k| (k, (k + 1) % n)).collect();
    let fs: Vec<(&str, Box<dyn Fn(&Tensor) -> Tensor>)> = vec![
        ("psum", Box::new(|x: &Tensor| psum(&x.sin(), "p").or_raise() * x)),
        ("pmean", Box::new(|x: &Tensor| x - pmean(x, "p").or_raise())),
        ("pmax", Box::new(|x: &Tensor| pmax(x, "p").or_raise())),
        ("all_gather", Box::new(|x: &Tensor| all_gather(x, "p", 0, false).or_raise())),
        (
            "psum_scatter",
            Box::new(move |x: &Tensor| {
                psum_scatter(&x.reshape(&[1, 4]).broadcast_to([n, 4]), "p", 0, false).or_raise()
            }),
        ),
        ("ppermute", Box::new(move |x: &Tensor| ppermute(x, "p", &shift).or_raise())),
        ("axis_index", Box::new(|x: &Tensor| x * axis_index("p").or_raise().cast(DType::F64))),
        ("grad", Box::new(|x: &Tensor| grad(|x: &Tensor| (x - pmean(x, "p").or_raise()).powi(2).sum())(x))),
        ("jit", Box::new(|x: &Tensor| jit(|x: &Tensor| psum(x, "p").or_raise().exp())(x))),
    ];
    for (name, f) in &fs {
        let got = procs.run("p", || f(&x));
        let want = vmap_with(|x: &Tensor| f(x), VmapOptions::new().axis_name("p"))(&xs).select(0, rank as isize);
        assert_eq!(got.shape(), want.shape(), "{name} on rank {rank}");
        assert_eq!(bits(&got), bits(&want), "{name} on rank {rank}: {got} vs {want}");
    }
    // a broadcast gives every process rank 0's values
    let mine = Key::new(100 + rank as u64).normal([3], DType::F32);
    let shared = procs.broadcast(&mine, 0).expect("broadcast");
    assert_eq!(shared.to_vec::<f32>(), Key::new(100).normal([3], DType::F32).to_vec::<f32>());
    // processes that run different collectives get an error, not a hang
    let e = xform::catch(|| procs.run("p", || if rank == 0 { pmax(&x, "p") } else { psum(&x, "p") }.or_raise()));
    if n > 1 {
        assert!(e.unwrap_err().to_string().contains("different collectives"));
    }
    // the process axis is bound on the thread that runs `run`: on a pmap
    // device's thread a collective over it is an unbound name, not a hang
    xform::set_cpu_device_count(2);
    let pair = Tensor::stack(&[x.clone(), x.clone()], 0);
    let e = procs
        .run("p", || xform::try_pmap_call(&|x: &Tensor| psum(x, "p").or_raise(), &xform::PmapOptions::new(), &pair));
    assert!(matches!(e.unwrap_err().kind, xform::ErrorKind::UnboundAxis { .. }));
    println!("rank {rank} of {n}: {} collectives across processes equal vmap's", fs.len());
}
