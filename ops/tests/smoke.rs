use xform_ops::{s, DType, ErrorKind, Key, Tensor};

#[track_caller]
fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol, "{got:?} vs {want:?}");
    }
}

#[test]
fn smoke() {
    let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
    let b = Tensor::from_vec(vec![10.0f32, 20.0, 30.0], [3]);
    let c = &a + &b;
    assert_eq!(c.to_vec::<f32>(), vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
    let d = a.matmul(&a.t());
    assert_eq!(d.to_vec::<f32>(), vec![14.0, 32.0, 32.0, 77.0]);
    assert_eq!(d.to_string(), "tensor([[14., 32.],\n        [32., 77.]], dtype=float32)");
    let s0 = a.sum_axis(0, false);
    assert_eq!(s0.to_vec::<f32>(), vec![5.0, 7.0, 9.0]);
    assert_eq!(s0.to_string(), "tensor([5., 7., 9.], dtype=float32)");
    let sm = a.softmax(-1);
    let row: Vec<f32> = {
        let e: Vec<f32> = [1.0f32, 2.0, 3.0].iter().map(|v| (v - 3.0).exp()).collect();
        let z: f32 = e.iter().sum();
        e.iter().map(|v| v / z).collect()
    };
    assert_close(&sm.to_vec::<f32>(), &[row.clone(), row].concat(), 1e-6);
    assert_eq!(sm.to_string(), "tensor([[0.0900, 0.2447, 0.6652],\n        [0.0900, 0.2447, 0.6652]], dtype=float32)");
    // An in-place write through a view changes its base.
    let v = a.slice(s![.., 1..]);
    v.add_scalar_(100.0);
    assert_eq!(a.to_vec::<f32>(), vec![1.0, 102.0, 103.0, 4.0, 105.0, 106.0]);
    assert_eq!(a.to_string(), "tensor([[  1., 102., 103.],\n        [  4., 105., 106.]], dtype=float32)");
    // Random values: shapes, dtypes and ranges here (the streams' known
    // answers are tested with the random module).
    let k = Key::new(0);
    let u = k.uniform([5], DType::F32);
    assert_eq!((u.shape().dims(), u.dtype()), (&[5][..], DType::F32));
    assert!(u.to_vec::<f32>().iter().all(|x| (0.0..1.0).contains(x)), "{u}");
    assert_eq!(u.to_vec::<f32>(), k.uniform([5], DType::F32).to_vec::<f32>(), "a key gives one stream");
    let n = k.normal([3, 3], DType::F64);
    assert_eq!((n.shape().dims(), n.dtype()), (&[3, 3][..], DType::F64));
    let nv = n.to_vec::<f64>();
    assert!(nv.iter().all(|x| x.is_finite() && x.abs() < 10.0), "{n}");
    assert!(nv.windows(2).any(|w| w[0] != w[1]), "{n}");
    let ks = k.split_tensor(2);
    assert_eq!((ks.shape().dims(), ks.dtype()), (&[2, 2][..], DType::U32));
    let kv = ks.to_vec::<u32>();
    assert_ne!(kv[..2], kv[2..], "split keys differ");
    let big = Tensor::arange(0.0, 2000.0, 1.0, DType::I32).reshape(&[40, 50]);
    assert_eq!(big.to_vec::<i32>(), (0..2000).collect::<Vec<i32>>());
    let shown = big.to_string();
    assert!(shown.starts_with("tensor([[   0,    1,    2, ...,   47,   48,   49],\n"), "{shown}");
    assert!(shown.ends_with("[1950, 1951, 1952, ..., 1997, 1998, 1999]], dtype=int32)"), "{shown}");
    let e = xform_ops::catch(|| &a + &Tensor::zeros([4], DType::F32)).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Shape { .. }));
    assert_eq!(e.to_string(), "add: shapes cannot be broadcast together (shapes [2, 3], [4])");
}
