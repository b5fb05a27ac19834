//! Known answers for the non-partitionable streams
//! (`Key::with_partitionable(false)`), computed with JAX 0.10.2 on CPU after
//! `jax.config.update("jax_threefry_partitionable", False)` (and
//! `jax_enable_x64`, which changes no stream). As in `random.rs`, `k` is
//! `jax.random.key(1701)`, each constant names the call that produced it,
//! and floats are compared by their bits: bit for bit but f32 normal (2
//! ulps: XLA's f32 `log` inside erfinv) and the half types' normal (1 ulp).

use crate::harness::on_each_device;
use xform::core::kernels::half::{bf16, f16};
use xform::prelude::*;

fn u32s(t: &Tensor) -> Vec<u32> {
    t.to_vec::<u32>()
}

fn f32_bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>().iter().map(|x| x.to_bits()).collect()
}

fn f64_bits(t: &Tensor) -> Vec<u64> {
    t.to_vec::<f64>().iter().map(|x| x.to_bits()).collect()
}

fn f16_bits(t: &Tensor) -> Vec<u16> {
    t.to_vec::<f16>().iter().map(|x| x.to_bits()).collect()
}

fn bf16_bits(t: &Tensor) -> Vec<u16> {
    t.to_vec::<bf16>().iter().map(|x| x.to_bits()).collect()
}

/// `jax.random.key(seed)` under `jax_threefry_partitionable = False`.
fn key(seed: u64) -> Key {
    Key::new(seed).with_partitionable(false)
}

fn k() -> Key {
    key(1701)
}

/// Float bits (of `bits` bits) as integers ordered like the floats.
fn ordered(v: &[u64], bits: u32) -> Vec<i64> {
    let sign = 1u64 << (bits - 1);
    v.iter().map(|&b| if b & sign != 0 { -((b & (sign - 1)) as i64) } else { b as i64 }).collect()
}

/// Floats given by their `bits`-bit patterns at most `ulps` apart.
fn assert_within_ulps(got: &[u64], want: &[u64], bits: u32, ulps: i64, what: &str) {
    let (g, w) = (ordered(got, bits), ordered(want, bits));
    assert_eq!(g.len(), w.len(), "{what}: lengths");
    for (i, (g, w)) in g.iter().zip(&w).enumerate() {
        assert!((g - w).abs() <= ulps, "{what}[{i}]: {got:?}, JAX {want:?}");
    }
}

#[test]
fn the_layout_is_carried_by_the_key_and_its_descendants() {
    assert!(Key::new(0).is_partitionable());
    assert!(!k().is_partitionable());
    assert!(k().split(3).iter().all(|d| !d.is_partitionable()));
    assert!(!k().fold_in(4).is_partitionable());
    assert!(k().with_partitionable(true).is_partitionable());
    // the same words: only the streams differ
    assert_eq!(u32s(k().tensor()), [0, 1701]);
    assert_ne!(u32s(&k().bits([4])), u32s(&Key::new(1701).bits([4])));
}

#[test]
fn bits_hash_the_counters_in_two_halves() {
    on_each_device(|| {
        // jax.random.bits(k, (3,), jnp.uint32): the odd count padded with a 0 counter
        assert_eq!(u32s(&k().bits([3])), [56197195, 4200222568, 961309823]);
        // jax.random.bits(k, (1,), jnp.uint32)
        assert_eq!(u32s(&k().bits([1])), [741045208]);
        // jax.random.bits(jax.random.key(0), (2, 3), jnp.uint32)
        let b = key(0).bits([2, 3]);
        assert_eq!(b.shape(), Shape::from([2, 3]));
        assert_eq!(u32s(&b), [2467461003, 428148500, 3186719485, 3840466878, 2562233961, 1946702221]);
        // jax.random.bits(jax.random.key(0), (3,), jnp.uint32), and (5,)
        assert_eq!(u32s(&key(0).bits([3])), [4146024105, 1351547692, 2718843009]);
        assert_eq!(u32s(&key(0).bits([5])), [2467461003, 428148500, 1688610540, 3840466878, 2562233961]);
        assert_eq!(key(0).bits([0, 2]).numel(), 0);
    })
}

#[test]
fn split_and_fold_in_match_jax() {
    on_each_device(|| {
        // jax.random.key_data(jax.random.split(k, 3)): the words of bits(k, (6,)) in pairs
        let s = k().split_tensor(3);
        assert_eq!(u32s(&s), [927208350, 3916705582, 1835323421, 676898860, 3164047411, 4010691890]);
        assert_eq!(u32s(&key(0).split_tensor(3)), u32s(&key(0).bits([6])));
        // jax.random.key_data(jax.random.fold_in(k, 7)): fold_in is the same in both layouts
        assert_eq!(u32s(k().fold_in(7).tensor()), [33961628, 564353879]);
        assert_eq!(u32s(k().fold_in(7).tensor()), u32s(Key::new(1701).fold_in(7).tensor()));
        // key_data(fold_in(split(fold_in(key(42), 3), 4)[2], 5))
        let chain = key(42).fold_in(3).split(4)[2].fold_in(5);
        assert_eq!(u32s(chain.tensor()), [1184496892, 2246013728]);
    })
}

#[test]
fn uniform_matches_jax_in_every_float_type() {
    on_each_device(|| {
        // jax.random.uniform(k, (5,), jnp.float32)
        assert_eq!(
            f32_bits(&k().uniform([5], DType::F32)),
            [1046286408, 1063875630, 1063144318, 1042375328, 1060935560]
        );
        // jax.random.uniform(k, (3,), jnp.float64): 64 bits from words i and n + i
        assert_eq!(
            f64_bits(&k().uniform([3], DType::F64)),
            [4596946007674334288, 4606389146491523824, 4601369524287816592]
        );
        // jax.random.uniform(k, (5,), jnp.float16) and (4,): two 16-bit values a word
        assert_eq!(f16_bits(&k().uniform([5], DType::F16)), [14338, 8832, 13556, 15314, 14020]);
        assert_eq!(f16_bits(&k().uniform([4], DType::F16)), [14614, 9472, 15030, 14548]);
        // jax.random.uniform(k, (6,), jnp.bfloat16) and (2, 2): four 8-bit values a word
        assert_eq!(bf16_bits(&k().uniform([6], DType::BF16)), [16210, 16162, 15776, 15488, 16232, 16214]);
        assert_eq!(bf16_bits(&k().uniform([2, 2], DType::BF16)), [16216, 16100, 15912, 15920]);
        // jax.random.uniform(k, (), jnp.float32)
        assert_eq!(f32_bits(&k().uniform(Shape::scalar(), DType::F32)), [1043377608]);
        // jax.random.uniform(k, (4,), jnp.float32, -2., 3.), and (3,) float64 in [-1.5, 2.25)
        assert_eq!(
            f32_bits(&k().uniform_range([4], -2.0, 3.0, DType::F32)),
            [3220676672, 1036395520, 3210838500, 3162128768]
        );
        assert_eq!(
            f64_bits(&k().uniform_range([3], -1.5, 2.25, DType::F64)),
            [13827766192109852277, 4611324532755805058, 4592046595154933104]
        );
    })
}

#[test]
fn normal_randint_bernoulli_and_categorical_match_jax() {
    on_each_device(|| {
        // jax.random.normal(k, (3,), jnp.float64): bit for bit
        assert_eq!(
            f64_bits(&k().normal([3], DType::F64)),
            [13828628490294389196, 4608770974431689572, 13819140625841963402]
        );
        // jax.random.normal(k, (5,), jnp.float32)
        let wide = |v: Vec<u32>| v.into_iter().map(u64::from).collect::<Vec<_>>();
        let want = [3209249477, 1068312130, 1066347903, 3212873430, 1059198755];
        assert_within_ulps(&wide(f32_bits(&k().normal([5], DType::F32))), &want, 32, 2, "normal f32");
        // jax.random.normal(k, (3,), jnp.float16) and (4,) jnp.bfloat16, as uint16 bits
        let wide16 = |v: Vec<u16>| v.into_iter().map(u64::from).collect::<Vec<_>>();
        let h = wide16(f16_bits(&k().normal([3], DType::F16)));
        assert_within_ulps(&h, &[13712, 49181, 15341], 16, 1, "normal f16");
        let b = wide16(bf16_bits(&k().normal([4], DType::BF16)));
        assert_within_ulps(&b, &[16258, 48648, 49017, 49008], 16, 1, "normal bf16");
        // jax.random.randint(k, (5,), 0, 10, jnp.int32), (3,) uint32 in [5, 100000)
        assert_eq!(k().randint([5], 0, 10, DType::I32).to_vec::<i32>(), [5, 0, 5, 2, 4]);
        assert_eq!(k().randint([3], 5, 100000, DType::U32).to_vec::<u32>(), [88806, 9673, 41070]);
        // jax.random.randint(k, (3,), -2**62, 2**62 + 12345, jnp.int64): two split keys, 64 bits each
        assert_eq!(
            k().randint([3], -(1 << 62), (1 << 62) + 12345, DType::I64).to_vec::<i64>(),
            [-710230627464444189, 3339038851502774560, -3716108723590340157]
        );
        // jax.random.bernoulli(k, jnp.float32(0.3), (6,))
        let b = k().bernoulli(&Tensor::scalar(0.3f32), [6]);
        assert_eq!(b.to_vec::<bool>(), [true, false, false, true, false, false]);
        // lg = jnp.log(jnp.asarray([[.1, .2, .7], [.5, .25, .25]], jnp.float32))
        // jax.random.categorical(k, lg, axis=-1)
        let lg = Tensor::from_vec(vec![0.1f32, 0.2, 0.7, 0.5, 0.25, 0.25], [2, 3]).log();
        assert_eq!(k().categorical(&lg, -1).to_vec::<i64>(), [1, 2]);
    })
}

#[test]
fn vmap_and_jit_over_keys_match_jax_and_a_loop() {
    // ks = jax.random.split(jax.random.key(9), 4)
    let ks = key(9).split_tensor(4);
    assert_eq!(
        u32s(&ks),
        [3339921199, 1108815483, 243656039, 1386538103, 4267639851, 2931404173, 3771258131, 3977782773]
    );
    let wrap = |kt: &Tensor| Key::from_tensor(kt.clone()).with_partitionable(false);
    // jax.vmap(lambda kk: jax.random.uniform(kk, (3,), jnp.float32))(ks)
    let u = vmap(|kt: &Tensor| wrap(kt).uniform([3], DType::F32))(&ks);
    #[rustfmt::skip]
    assert_eq!(f32_bits(&u), [
        1060866346, 1058589376, 1039574352, 1048647864, 1050582628, 1064140328,
        1059597640, 1034768352, 1057238964, 1050984932, 1060540884, 1052738696,
    ]);
    // jax.vmap(lambda kk: jax.random.normal(kk, (2,), jnp.float64))(ks)
    let n = vmap(|kt: &Tensor| wrap(kt).normal([2], DType::F64))(&ks);
    #[rustfmt::skip]
    assert_eq!(f64_bits(&n), [
        4603764902374364675, 4603545188228290980, 13827561949291834950, 4603232055891618616,
        4600951757405239081, 13834515307495137218, 13825378811082770477, 13832084391820549150,
    ]);
    // jax.vmap(lambda kk: jax.random.bits(kk, (2,), jnp.uint32))(ks), and the loop over split
    let b = vmap(|kt: &Tensor| wrap(kt).bits([2]))(&ks);
    #[rustfmt::skip]
    assert_eq!(u32s(&b), [
        3552794267, 2909285515, 497544039, 1856689466, 1271398176, 990704742, 348156574, 2731283788,
    ]);
    let looped: Vec<u32> = key(9).split(4).iter().flat_map(|kk| u32s(&kk.bits([2]))).collect();
    assert_eq!(u32s(&b), looped);
    // a Key argument keeps its layout through vmap's and jit's rebuilding of trees
    let xs = Tensor::from_vec(vec![1.0f32, 2.0, 4.0], [3]);
    let scaled =
        vmap_axes(|(kk, x): &(Key, Tensor)| x * &kk.uniform(Shape::scalar(), DType::F32), (None, 0), 0)(&(k(), xs));
    // jax.random.uniform(k, (), jnp.float32), times 1, 2, 4
    let u = f32::from_bits(1043377608);
    assert_eq!(scaled.to_vec::<f32>(), [u, 2.0 * u, 4.0 * u]);
    let draw = jit(|kk: &Key| kk.uniform([5], DType::F32));
    // jax.jit(lambda kk: jax.random.uniform(kk, (5,), jnp.float32))(k)
    assert_eq!(f32_bits(&draw(&k())), [1046286408, 1063875630, 1063144318, 1042375328, 1060935560]);
    // the other layout is another trace, not the cached one
    assert_eq!(f32_bits(&draw(&Key::new(1701))), f32_bits(&Key::new(1701).uniform([5], DType::F32)));
    assert_eq!(f32_bits(&draw(&k())), f32_bits(&k().uniform([5], DType::F32)));
}

/// Wrapping sums of the bits of long draws: every element must match.
#[test]
fn long_draws_match_jax_checksums() {
    let s32 = |v: Vec<u32>| v.iter().map(|&x| x as u64).sum::<u64>();
    let s16 = |v: Vec<u16>| v.iter().map(|&x| x as u64).sum::<u64>();
    let s64 = |v: Vec<u64>| v.iter().fold(0u64, |a, &x| a.wrapping_add(x));
    // sum(jax.random.bits(k, (101, 99), jnp.uint32))
    assert_eq!(s32(u32s(&k().bits([101, 99]))), 21471090650438);
    // bit sums of jax.random.uniform(k, (10007,), dtype) for float32, float64, float16, bfloat16
    assert_eq!(s32(f32_bits(&k().uniform([10007], DType::F32))), 10534496860270);
    assert_eq!(s64(f64_bits(&k().uniform([10007], DType::F64))), 12256537565800015940);
    assert_eq!(s16(f16_bits(&k().uniform([10007], DType::F16))), 138342078);
    assert_eq!(s16(bf16_bits(&k().uniform([10007], DType::BF16))), 159535884);
    // jax.random.normal(k, (10007,), jnp.float64)
    assert_eq!(s64(f64_bits(&k().normal([10007], DType::F64))), 22217675393126247);
    // jax.random.randint(k, (10007,), -2**62, 2**62 + 12345, jnp.int64)
    let ri: Vec<u64> = k()
        .randint([10007], -(1 << 62), (1 << 62) + 12345, DType::I64)
        .to_vec::<i64>()
        .iter()
        .map(|&x| x as u64)
        .collect();
    assert_eq!(s64(ri), 5938789149703084331);
    // sum(jax.random.randint(k, (10007,), -7, 1000003, jnp.int32))
    let ri: i64 = k().randint([10007], -7, 1000003, DType::I32).to_vec::<i32>().iter().map(|&x| x as i64).sum();
    assert_eq!(ri, 5004152451);
}
