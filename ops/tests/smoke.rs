use xform_ops::{s, DType, Key, Tensor};

#[test]
fn smoke() {
    let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
    let b = Tensor::from_vec(vec![10.0f32, 20.0, 30.0], [3]);
    let c = &a + &b;
    assert_eq!(c.to_vec::<f32>(), vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
    let d = a.matmul(&a.t());
    assert_eq!(d.to_vec::<f32>(), vec![14.0, 32.0, 32.0, 77.0]);
    println!("{}", d);
    println!("{}", a.sum_axis(0, false));
    println!("{}", a.softmax(-1));
    let v = a.slice(s![.., 1..]);
    v.add_scalar_(100.0);
    println!("{a}");
    let k = Key::new(0);
    println!("{}", k.uniform([5], DType::F32));
    println!("{}", k.normal([3, 3], DType::F64));
    println!("{}", k.split_tensor(2));
    println!("{}", Tensor::arange(0.0, 2000.0, 1.0, DType::I32).reshape(&[40, 50]));
    let e = xform_ops::catch(|| &a + &Tensor::zeros([4], DType::F32)).unwrap_err();
    println!("{e}");
}
