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
