//! The collectives across MPI processes (feature `mpi`), run by
//! `mpirun -np 2` (`.ci/run`; a plain `cargo test` builds it but runs it as
//! one process, which checks the same identities over one position).
//! Every process computes its value and, locally, the `vmap` of the same
//! function over every process's value (each rank can draw any rank's
//! value from its key): the process axis's result must equal that `vmap`'s
//! row for this rank, bit for bit.

use xform::lax::{all_gather, all_to_all, axis_index, pmax, pmean, ppermute, psum, psum_scatter};
use xform::prelude::*;

fn value(rank: usize) -> Tensor {
    Key::new(rank as u64).normal([4], DType::F64)
}

/// `n` different rows made from `x`: a chunk per rank.
fn rows(x: &Tensor, n: usize) -> Tensor {
    Tensor::stack(&(0..n).map(|k| (x * (k as f64 + 1.0)).sin()).collect::<Vec<_>>(), 0)
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64().iter().map(|v| v.to_bits()).collect()
}

fn main() {
    // before initialize, the group is a clear error
    let e = xform::distributed::current().err().expect("no group before initialize");
    assert!(e.to_string().contains("not initialized"), "{e}");
    let procs = xform::distributed::initialize().expect("MPI");
    assert_eq!(xform::distributed::current().expect("the group").rank(), procs.rank());
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
        // each rank sends every other only the chunk it keeps
        ("psum_scatter rows", Box::new(move |x: &Tensor| psum_scatter(&rows(x, n), "p", 0, false).or_raise())),
        (
            "psum_scatter tiled",
            Box::new(move |x: &Tensor| psum_scatter(&rows(x, n).reshape(&[-1]), "p", 0, true).or_raise()),
        ),
        ("all_to_all", Box::new(move |x: &Tensor| all_to_all(&rows(x, n), "p", 0, 1, false).or_raise())),
        ("all_to_all tiled", Box::new(move |x: &Tensor| all_to_all(&rows(x, n), "p", 0, 1, true).or_raise())),
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
    spanning_pmap(&procs, &fs_spanning(n));
    faults(&procs, &x);
    println!("rank {rank} of {n}: {} collectives across processes equal vmap's; faults reported", fs.len());
}

/// Functions of one axis spanning every process's devices.
fn fs_spanning(n: usize) -> Vec<(&'static str, Box<dyn Fn(&Tensor) -> Tensor + Sync>)> {
    let total = 2 * n;
    let shift: Vec<(usize, usize)> = (0..total).map(|k| (k, (k + 3) % total)).collect();
    vec![
        ("psum", Box::new(|x: &Tensor| psum(&x.sin(), "g").or_raise() * x)),
        ("all_gather", Box::new(|x: &Tensor| all_gather(x, "g", 0, false).or_raise())),
        ("ppermute", Box::new(move |x: &Tensor| ppermute(x, "g", &shift).or_raise())),
        ("axis_index", Box::new(|x: &Tensor| x * axis_index("g").or_raise().cast(DType::F64))),
        ("grad", Box::new(|x: &Tensor| grad(|x: &Tensor| (x - pmean(x, "g").or_raise()).powi(2).sum())(x))),
    ]
}

/// One pmap axis over 2 CPU devices of every process (position
/// `rank * 2 + device`) equals vmap over all the positions' values.
fn spanning_pmap(procs: &xform::distributed::Processes, fs: &[(&str, Box<dyn Fn(&Tensor) -> Tensor + Sync>)]) {
    let (rank, n) = (procs.rank(), procs.size());
    xform::set_cpu_device_count(2);
    let everyone = Tensor::stack(&(0..2 * n).map(value).collect::<Vec<_>>(), 0);
    let mine = Tensor::stack(&[value(2 * rank), value(2 * rank + 1)], 0);
    let opts = xform::PmapOptions::new().axis_name("g");
    for (name, f) in fs {
        let got = procs.try_pmap(&|x: &Tensor| f(x), &opts, &mine).expect(name);
        let all = vmap_with(|x: &Tensor| f(x), VmapOptions::new().axis_name("g"))(&everyone);
        let want = all.narrow(0, 2 * rank, 2);
        assert_eq!(got.shape(), want.shape(), "spanning {name} on rank {rank}");
        assert_eq!(bits(&got), bits(&want), "spanning {name} on rank {rank}: {got} vs {want}");
    }
}

/// Bad input and failures across processes: errors naming the ranks, never
/// a hang.
fn faults(procs: &xform::distributed::Processes, x: &Tensor) {
    let (rank, n) = (procs.rank(), procs.size());
    if n < 2 {
        return;
    }
    // operands of different shapes: every rank gets an error naming each's
    let e = procs.try_run("p", || psum(&x.narrow(0, 0, 1 + rank), "p"));
    let msg = e.unwrap_err().to_string();
    assert!(msg.contains("different shapes or dtypes") && msg.contains("rank 1: f64[2]"), "{msg}");
    // a rank that fails before a collective: the others' collective fails
    // naming it and its error
    let e = procs.try_run("p", || {
        if rank == 1 {
            return Err(xform::Error::invalid("user", "rank 1 gives up"));
        }
        psum(x, "p")
    });
    let msg = e.unwrap_err().to_string();
    if rank == 0 {
        assert!(msg.contains("rank 1 failed") && msg.contains("rank 1 gives up"), "{msg}");
    }
    // a rank that panics
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        xform::catch(|| {
            procs.run("p", || {
                if rank == 1 {
                    panic!("rank 1 panics");
                }
                psum(x, "p").or_raise()
            })
        })
    }));
    if rank == 0 {
        let msg = r.expect("rank 0 raises an xform error").unwrap_err().to_string();
        assert!(msg.contains("rank 1 failed") && msg.contains("rank 1 panics"), "{msg}");
    } else {
        assert!(r.is_err(), "rank 1's panic is resumed");
    }
    // a rank that does not arrive in time: the others fail at the timeout
    // naming it (the late rank then finds rank 0's contribution sent)
    let before = procs.timeout();
    procs.set_timeout(std::time::Duration::from_millis(300));
    let e = procs.try_run("p", || {
        if rank == 1 {
            std::thread::sleep(std::time::Duration::from_millis(1500));
            // the round rank 0 gave up on completes here (its operand was
            // sent); at the next, rank 1 learns that rank 0 timed out
            psum(x, "p")?;
        }
        psum(x, "p")
    });
    let msg = e.unwrap_err().to_string();
    if rank == 0 {
        assert!(msg.contains("timed out after 0.3 s waiting for rank(s) 1"), "{msg}");
    } else {
        assert!(msg.contains("rank 0 failed") && msg.contains("timed out"), "{msg}");
    }
    procs.set_timeout(before);
    // a collective that fails among one process's devices in a spanning
    // pmap (its devices run different collectives) fails on every process
    // at that round, rather than pairing its next round with the others'
    xform::set_cpu_device_count(2);
    let pair = Tensor::stack(&[x.clone(), x.clone()], 0);
    let f = |v: &Tensor| {
        let k = axis_index("g").or_raise().item::<i32>();
        if k == 3 { pmax(v, "g") } else { psum(v, "g") }.or_raise()
    };
    let e = procs.try_pmap(&f, &xform::PmapOptions::new().axis_name("g"), &pair);
    let msg = e.unwrap_err().to_string();
    assert!(msg.contains("different collectives"), "{msg}");
    // and the group works again in the next run
    let total = procs.run("p", || psum(&Tensor::scalar(1.0f64), "p").or_raise());
    assert_eq!(total.item::<f64>(), n as f64);
}
