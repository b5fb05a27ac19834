//! Eager views share storage with their base; in-place ops write through
//! them, and the base and sibling views see the writes (PyTorch semantics).

use xform::prelude::*;

fn arange(n: usize, shape: &[usize]) -> Tensor {
    Tensor::arange(0.0, n as f64, 1.0, DType::F32).reshape_to(shape.to_vec())
}

#[test]
fn view_methods_share_storage() {
    let x = arange(12, &[3, 4]);
    for v in [
        x.reshape(&[4, 3]),
        x.t(),
        x.permute(&[1, 0]),
        x.slice(s![1.., ..2]),
        x.select(0, 1),
        x.unsqueeze(0),
        x.flatten(),
        x.narrow(1, 1, 2),
        x.flip(&[0]),
        x.slice(s![.., 2]).broadcast_to([5, 3]),
    ] {
        assert!(v.shares_storage(&x), "{v:?}");
    }
    assert!(!x.copy().shares_storage(&x));
    assert!(!(&x + 1.0).shares_storage(&x));
    // reshape of a non-contiguous view copies (PyTorch's reshape)
    assert!(!x.t().reshape(&[12]).shares_storage(&x));
}

#[test]
fn writes_through_views_are_seen_by_base_and_siblings() {
    let x = arange(12, &[3, 4]);
    let row = x.select(0, 1); // [4, 5, 6, 7]
    let col = x.slice(s![.., 1]); // [1, 5, 9]
    row.add_scalar_(100.0);
    assert_eq!(x.to_vec::<f32>(), vec![0., 1., 2., 3., 104., 105., 106., 107., 8., 9., 10., 11.]);
    assert_eq!(col.to_vec::<f32>(), vec![1., 105., 9.]);
    // write through a transposed view
    let t = x.t();
    t.slice(s![0]).fill_(-1.0);
    assert_eq!(x.slice(s![.., 0]).to_vec::<f32>(), vec![-1., -1., -1.]);
    // strided and reversed views
    let y = arange(6, &[6]);
    y.slice(&[Idx::step(0..6, 2)]).mul_scalar_(10.0);
    assert_eq!(y.to_vec::<f32>(), vec![0., 1., 20., 3., 40., 5.]);
    y.flip(&[0]).slice(s![..2]).copy_(&Tensor::from_vec(vec![7.0f32, 8.0], [2]));
    assert_eq!(y.to_vec::<f32>(), vec![0., 1., 20., 3., 8., 7.]);
}

#[test]
fn in_place_ops_broadcast_cast_and_alias_clones() {
    let x = Tensor::zeros([2, 3], DType::F64);
    x.add_(&Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3]));
    x.mul_scalar_(2);
    x.sub_(&Tensor::from_vec(vec![1.0f32], [1])); // f32 into f64 is fine
    x.div_scalar_(0.5);
    assert_eq!(x.to_vec::<f64>(), vec![2., 6., 10., 2., 6., 10.]);
    // integers into a float tensor are fine
    x.copy_(&Tensor::from_vec(vec![1i32, 2, 3], [3]));
    assert_eq!(x.to_vec::<f64>(), vec![1., 2., 3., 1., 2., 3.]);
    // a handle clone is the same tensor (like Python assignment)
    let alias = x.clone();
    alias.fill_(5);
    assert_eq!(x.to_vec::<f64>(), vec![5.0; 6]);
    // assign through numpy-style indices
    x.assign(s![1, 1..], &Tensor::from_vec(vec![8.0f64, 9.0], [2]));
    assert_eq!(x.to_vec::<f64>(), vec![5., 5., 5., 5., 8., 9.]);
    // x += x is well defined
    x.add_(&x.clone());
    assert_eq!(x.to_vec::<f64>(), vec![10., 10., 10., 10., 16., 18.]);
    // disjoint views of one storage can be copied into each other
    let z = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [4]);
    z.slice(s![0..2]).copy_(&z.slice(s![2..4]));
    assert_eq!(z.to_vec::<f32>(), vec![3., 4., 3., 4.]);
}

/// Making a view is O(1) in the length of the view chain: 20,000 successive
/// views take well under a second (they took 25 s when every view copied
/// its chain), give the right values, and still write through to the base.
#[test]
fn long_view_chains_are_linear() {
    let start = std::time::Instant::now();
    let x = arange(6, &[2, 3]);
    let mut t = x.clone();
    for _ in 0..20_000 {
        t = t.t();
    }
    assert_eq!(t.shape().dims(), &[2, 3]);
    assert_eq!(t.to_vec::<f32>(), x.to_vec::<f32>());
    t.slice(s![1, 2]).fill_(-5.0);
    assert_eq!(x.to_vec::<f32>()[5], -5.0);
    let n = 20_001;
    let y = Tensor::arange(0.0, n as f64, 1.0, DType::F64);
    let mut s = y.clone();
    for _ in 0..n - 1 {
        s = s.slice(s![1..]);
    }
    assert_eq!(s.to_vec::<f64>(), vec![20_000.0]);
    s.mul_scalar_(2.0);
    assert_eq!(y.to_vec::<f64>()[n - 1], 40_000.0);
    drop((s, t)); // dropping a long chain must not recurse per view
    let secs = start.elapsed().as_secs_f64();
    assert!(secs < 2.0, "40,000 views took {secs:.2} s");
}

/// Two threads copying between the same two arrays in opposite directions
/// finish (the locks are taken in a global order), with the right values.
/// The threads start together and report over a channel with a deadline, so
/// a deadlock fails the test instead of hanging it. (A stress test: whether
/// the inverted orders meet depends on scheduling; the deterministic check
/// of the lock order is `copy_takes_its_locks_in_address_order` in
/// xform-ops.)
#[test]
fn opposite_copies_on_two_threads_do_not_deadlock() {
    let a = Tensor::full([16], 1.5, DType::F32).array().expect("concrete");
    let b = Tensor::full([16], 1.5, DType::F32).array().expect("concrete");
    let (tx, rx) = std::sync::mpsc::channel();
    let start = std::sync::Arc::new(std::sync::Barrier::new(2));
    for dir in 0..2 {
        let (src, dst) = if dir == 0 { (a.clone(), b.clone()) } else { (b.clone(), a.clone()) };
        let (tx, start) = (tx.clone(), start.clone());
        std::thread::spawn(move || {
            let (src, dst) = (Tensor::from_array(src), Tensor::from_array(dst));
            start.wait();
            // short copies: the gap between taking the two locks is then a
            // large part of each copy, where the inverted orders meet
            for _ in 0..200_000 {
                dst.copy_(&src);
            }
            tx.send(dir).expect("the test is waiting");
        });
    }
    for _ in 0..2 {
        rx.recv_timeout(std::time::Duration::from_secs(30)).expect("a copy_ thread deadlocked");
    }
    for arr in [a, b] {
        assert!(Tensor::from_array(arr).to_vec::<f32>().iter().all(|&e| e == 1.5));
    }
}
