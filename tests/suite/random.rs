//! Known answers for the random streams, computed with JAX 0.10.2 on CPU
//! (defaults: Threefry-2x32, `jax_threefry_partitionable = True`; the
//! streams of `False` are in `random_original.rs`). Each
//! constant names the call that produced it; `k` is `jax.random.key(1701)`
//! (the same words as `PRNGKey(1701)`), and calls with 64-bit dtypes ran
//! under `jax.config.update("jax_enable_x64", True)`, which changes no
//! stream. Floats are compared by their bits.
//!
//! Bit for bit: keys, split, fold_in, bits, uniform (every float type,
//! any range), randint, bernoulli, categorical, f64 normal. Within ulps:
//! f32 normal (2 ulps: XLA's f32 `log` inside erfinv is its own) and the
//! half types' normal (1 ulp).

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

fn k() -> Key {
    Key::new(1701)
}

/// Ulps between floats of one sign given as ordered bit patterns.
fn assert_within_ulps(got: &[i64], want: &[i64], ulps: i64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= ulps, "{what}[{i}]: bits {g:#x}, JAX {w:#x} (more than {ulps} ulps apart)");
    }
}

#[test]
fn keys_from_seeds_match_jax() {
    // jax.random.key_data(jax.random.key(1701)) and of key(2**40 + 17)
    assert_eq!(u32s(k().tensor()), [0, 1701]);
    assert_eq!(u32s(Key::new((1 << 40) + 17).tensor()), [256, 17]);
}

#[test]
fn bits_match_jax_for_odd_counts_and_matrices() {
    on_each_device(|| {
        // jax.random.bits(k, (3,), jnp.uint32). (The non-partitionable stream
        // pads the odd count: [56197195, 4200222568, 961309823], see
        // random_original.rs.)
        assert_eq!(u32s(&k().bits([3])), [1111271205, 2679469115, 974515252]);
        // jax.random.bits(jax.random.key(0), (2, 3), jnp.uint32)
        let b = Key::new(0).bits([2, 3]);
        assert_eq!(b.shape(), Shape::from([2, 3]));
        assert_eq!(u32s(&b), [4070199207, 4202968722, 1427181096, 2012915765, 2447653815, 710830403]);
    })
}

#[test]
fn split_and_fold_in_match_jax() {
    on_each_device(|| {
        // jax.random.key_data(jax.random.split(k, 3))
        assert_eq!(u32s(&k().split_tensor(3)), [741045208, 1847055613, 85238482, 2594297577, 56197195, 961309823]);
        // jax.random.key_data(jax.random.fold_in(k, 7))
        assert_eq!(u32s(k().fold_in(7).tensor()), [33961628, 564353879]);
        // key_data(fold_in(split(fold_in(key(42), 3), 4)[2], 5))
        let chain = Key::new(42).fold_in(3).split(4)[2].fold_in(5);
        assert_eq!(u32s(chain.tensor()), [1698819135, 1238454656]);
        // fold_in(i) is row i of split: both hash the counter (0, i).
        assert_eq!(u32s(k().fold_in(2).tensor()), u32s(&k().split_tensor(3).index(2)));
    })
}

#[test]
fn uniform_matches_jax_in_every_float_type() {
    on_each_device(|| {
        // jax.random.uniform(k, (5,), jnp.float32)
        assert_eq!(
            f32_bits(&k().uniform([5], DType::F32)),
            [1048869196, 1059042676, 1047025584, 1039721936, 1056808004]
        );
        // jax.random.uniform(jax.random.key(3), (2, 3), jnp.float32)
        assert_eq!(
            f32_bits(&Key::new(3).uniform([2, 3], DType::F32)),
            [1033349344, 1064315450, 1059463692, 1064944204, 1049528200, 1058356078]
        );
        // jax.random.uniform(k, (5,), jnp.float64)
        assert_eq!(
            f64_bits(&k().uniform([5], DType::F64)),
            [4595384358054333416, 4581377479145064256, 4578696281643967232, 4596946007674334288, 4606564147831903338]
        );
        // jax.random.uniform(k, (6,), jnp.float16) and jnp.bfloat16, as uint16 bits
        let h: Vec<u16> = k().uniform([6], DType::F16).to_vec::<f16>().iter().map(|x| x.to_bits()).collect();
        assert_eq!(h, [14648, 14144, 15200, 14812, 12360, 13904]);
        let b: Vec<u16> = k().uniform([6], DType::BF16).to_vec::<bf16>().iter().map(|x| x.to_bits()).collect();
        assert_eq!(b, [15888, 15976, 15952, 16178, 16092, 15984]);
    })
}

#[test]
fn uniform_range_matches_jax() {
    // jax.random.uniform(k, (7,), jnp.float32, -3.0, 5.5)
    assert_eq!(
        f32_bits(&k().uniform_range([7], -3.0, 5.5, DType::F32)),
        [3209493629, 1075011990, 3213435605, 3220948458, 1067117584, 1084552474, 3223259318]
    );
    // jax.random.uniform(k, (8,), jnp.float16, -0.3, 1.7) and jnp.bfloat16, as uint16 bits
    let h: Vec<u16> =
        k().uniform_range([8], -0.3, 1.7, DType::F16).to_vec::<f16>().iter().map(|x| x.to_bits()).collect();
    assert_eq!(h, [15365, 14554, 15917, 15529, 43048, 14291, 14466, 14454]);
    let b: Vec<u16> =
        k().uniform_range([8], -0.3, 1.7, DType::BF16).to_vec::<bf16>().iter().map(|x| x.to_bits()).collect();
    assert_eq!(b, [48288, 15900, 15832, 16268, 16143, 15916, 16219, 16292]);
    // jax.random.uniform(k, (7,), jnp.float64, -3.0, 5.5)
    assert_eq!(
        f64_bits(&k().uniform_range([7], -3.0, 5.5, DType::F64)),
        [
            13832956796035498842,
            13836929994230525189,
            13837059415217588150,
            13831297543314247915,
            4617221555011401137,
            4615002819451074485,
            4616686631174656736
        ]
    );
}

/// Float bits as integers ordered like the floats (for ulp distances).
fn ordered32(bits: &[u32]) -> Vec<i64> {
    bits.iter().map(|&b| if b >> 31 == 1 { -((b & 0x7fff_ffff) as i64) } else { b as i64 }).collect()
}

fn ordered16(bits: &[u16]) -> Vec<i64> {
    bits.iter().map(|&b| if b >> 15 == 1 { -((b & 0x7fff) as i64) } else { b as i64 }).collect()
}

#[test]
fn normal_matches_jax_within_ulps() {
    on_each_device(|| {
        // jax.random.normal(k, (7,), jnp.float32)
        let want = [3206918552u32, 1050778550, 3208627540, 3214240799, 3158289742, 1071592598, 3217448608];
        assert_within_ulps(&ordered32(&f32_bits(&k().normal([7], DType::F32))), &ordered32(&want), 2, "normal f32");
        // jax.random.normal(k, (5,), jnp.float64)
        let want = [
            13830051702139355655u64,
            13835186266588134655,
            13835561775440906850,
            13828628490294389196,
            4609371089696583111,
        ];
        assert_eq!(f64_bits(&k().normal([5], DType::F64)), want);
        // jax.random.normal(k, (6,), jnp.float16) and jnp.bfloat16, as uint16 bits
        let h: Vec<u16> = k().normal([6], DType::F16).to_vec::<f16>().iter().map(|x| x.to_bits()).collect();
        assert_within_ulps(&ordered16(&h), &ordered16(&[13894, 44927, 15790, 14583, 48238, 46149]), 1, "normal f16");
        let b: Vec<u16> = k().normal([6], DType::BF16).to_vec::<bf16>().iter().map(|x| x.to_bits()).collect();
        assert_within_ulps(&ordered16(&b), &ordered16(&[49032, 48959, 48979, 16132, 48688, 48952]), 1, "normal bf16");
    })
}

#[test]
fn vmap_over_keys_matches_jax_and_a_loop() {
    // ks = jax.random.split(jax.random.key(9), 4)
    let ks = Key::new(9).split_tensor(4);
    // jax.vmap(lambda kk: jax.random.uniform(kk, (3,), jnp.float32))(ks)
    let u = vmap(|kt: &Tensor| Key::from_tensor(kt.clone()).uniform([3], DType::F32))(&ks);
    assert_eq!(u.shape(), Shape::from([4, 3]));
    assert_eq!(
        f32_bits(&u),
        [
            1057665374, 1062717512, 1064978438, 1040962032, 1047456216, 1058636356, 1060265924, 1058338998, 1059877846,
            1050605472, 1059784422, 1063322306
        ]
    );
    // jax.vmap(lambda kk: jax.random.normal(kk, (3,), jnp.float32))(ks)
    let n = vmap(|kt: &Tensor| Key::from_tensor(kt.clone()).normal([3], DType::F32))(&ks);
    let want = [
        1037488437u32,
        1065407301,
        1073774050,
        3213642029,
        3208273069,
        1048657393,
        1057218683,
        1045677427,
        1055286680,
        3204263095,
        1054770189,
        1066777148,
    ];
    assert_within_ulps(&ordered32(&f32_bits(&n)), &ordered32(&want), 2, "vmap normal");
    // and exactly the per-key loop
    let looped: Vec<u32> = Key::new(9).split(4).iter().flat_map(|k| f32_bits(&k.normal([3], DType::F32))).collect();
    assert_eq!(f32_bits(&n), looped);
}

#[test]
fn randint_matches_jax_and_honours_the_whole_range() {
    on_each_device(|| {
        // jax.random.randint(k, (7,), -5, 17, jnp.int32)
        assert_eq!(k().randint([7], -5, 17, DType::I32).to_vec::<i32>(), [1, 5, 14, 9, 15, 2, 12]);
        // jax.random.randint(k, (5,), -2**40, 2**40, jnp.int32): clipped to every int32
        assert_eq!(
            k().randint([5], -(1 << 40), 1 << 40, DType::I32).to_vec::<i32>(),
            [1344773876, -692612290, 1666829977, 1975938582, 1123755432]
        );
        // jax.random.randint(k, (5,), 3, 2**32 + 9, jnp.uint32)
        assert_eq!(
            k().randint([5], 3, (1 << 32) + 9, DType::U32).to_vec::<u32>(),
            [3492257527, 1454871361, 3814313628, 4123422233, 3271239083]
        );
        // jax.random.randint(k, (5,), -1000, 10**15, jnp.int64)
        assert_eq!(
            k().randint([5], -1000, 1_000_000_000_000_000, DType::I64).to_vec::<i64>(),
            [543390183597022, 655244473303186, 82845699565297, 742378589023699, 838029716659669]
        );
        // jax.random.randint(k, (6,), -2**63, 2**63 - 1, jnp.int64)
        assert_eq!(
            k().randint([6], i64::MIN, i64::MAX, DType::I64).to_vec::<i64>(),
            [
                7218171353345263214,
                4570283207632321378,
                -1496289191147482511,
                641370341744112891,
                -7145534007136038139,
                -2459667687445724516
            ]
        );
        // jax.random.randint(k, (6,), -2**62, 2**62 + 12345, jnp.int64): a span above 2^63
        assert_eq!(
            k().randint([6], -(1 << 62), (1 << 62) + 12345, DType::I64).to_vec::<i64>(),
            [
                2606485334917862965,
                -41402810795078871,
                3115396827279905393,
                -3970315676683287358,
                -2533847988708650235,
                2152018330981663388
            ]
        );
    })
}

#[test]
fn randint_of_an_empty_range_is_an_error() {
    let e = k().try_randint([3], 5, 5, DType::I32).unwrap_err();
    assert!(e.to_string().contains("randint"), "{e}");
    // no int32 lies in [2^40, 2^41)
    assert!(k().try_randint([3], 1 << 40, 1 << 41, DType::I32).is_err());
    assert!(k().try_randint([3], -10, 0, DType::U32).is_err());
    assert!(k().try_randint([3], 0, 10, DType::F32).is_err());
    // the highest value alone
    assert_eq!(k().randint([2], i32::MAX as i64, 1 << 40, DType::I32).to_vec::<i32>(), [i32::MAX, i32::MAX]);
}

#[test]
fn bernoulli_matches_jax() {
    on_each_device(|| {
        // jax.random.bernoulli(k, jnp.float32(0.3), (9,))
        let b = k().bernoulli(&Tensor::scalar(0.3f32), [9]);
        assert_eq!(b.dtype(), DType::Bool);
        assert_eq!(b.to_vec::<bool>(), [true, false, true, true, false, false, true, true, false]);
        // jax.random.bernoulli(k, jnp.asarray([0.1, 0.5, 0.9], jnp.float64), (2, 3))
        let p = Tensor::from_vec(vec![0.1f64, 0.5, 0.9], [3]);
        assert_eq!(k().bernoulli(&p, [2, 3]).to_vec::<bool>(), [false, true, true, false, false, true]);
        assert!(k().try_bernoulli(&Tensor::scalar(1i32), [2]).is_err());
    })
}

#[test]
fn categorical_matches_jax() {
    on_each_device(|| {
        // lg = jnp.log(jnp.asarray([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]], jnp.float32))
        let lg = Tensor::from_vec(vec![0.1f32, 0.2, 0.7, 0.5, 0.25, 0.25], [2, 3]).log();
        // jax.random.categorical(k, lg, axis=-1)
        assert_eq!(k().categorical(&lg, -1).to_vec::<i64>(), [2, 2]);
        // jax.random.categorical(k, lg, axis=0)
        assert_eq!(k().categorical(&lg, 0).to_vec::<i64>(), [1, 0, 1]);
        // jax.random.categorical(k, lg, axis=-1, shape=(4, 2))
        let c = k().try_categorical(&lg, -1, Some(Shape::from([4, 2]))).unwrap();
        assert_eq!(c.shape(), Shape::from([4, 2]));
        assert_eq!(c.to_vec::<i64>(), [2, 2, 2, 0, 1, 0, 2, 0]);
        assert!(k().try_categorical(&lg, -1, Some(Shape::from([3]))).is_err());
    })
}

#[test]
fn randint_full_i64_range_spreads() {
    // Before the fix every draw was i64::MIN.
    let v = k().randint([1000], i64::MIN, i64::MAX, DType::I64).to_vec::<i64>();
    let neg = v.iter().filter(|&&x| x < 0).count();
    assert!((400..600).contains(&neg), "{neg} of 1000 negative");
    assert!(v.iter().all(|&x| x != i64::MIN));
}

/// Wrapping sums of the bits of long draws: every element must match.
#[test]
fn long_draws_match_jax_checksums() {
    let s32 = |v: Vec<u32>| v.iter().map(|&x| x as u64).sum::<u64>();
    let s64 = |v: Vec<u64>| v.iter().fold(0u64, |a, &x| a.wrapping_add(x));
    // sum(jax.random.bits(k, (101, 99), jnp.uint32))
    assert_eq!(s32(u32s(&k().bits([101, 99]))), 21535846196526);
    // bit sums of jax.random.uniform(k, (10007,), jnp.float32) and jnp.float64
    assert_eq!(s32(f32_bits(&k().uniform([10007], DType::F32))), 10536121652494);
    assert_eq!(s64(f64_bits(&k().uniform([10007], DType::F64))), 12948692330914248808);
    // ... with minval=-0.3, maxval=1.7 (a span that rounds: the fused multiply-add)
    assert_eq!(s32(f32_bits(&k().uniform_range([10007], -0.3, 1.7, DType::F32))), 13763353982381);
    assert_eq!(s64(f64_bits(&k().uniform_range([10007], -0.3, 1.7, DType::F64))), 11337912025119420652);
    // jax.random.normal(k, (10007,), jnp.float64): bit for bit
    assert_eq!(s64(f64_bits(&k().normal([10007], DType::F64))), 16441543755154348792);
    // jax.random.randint(k, (10007,), -2**62, 2**62 + 12345, jnp.int64)
    let ri: Vec<u64> = k()
        .randint([10007], -(1 << 62), (1 << 62) + 12345, DType::I64)
        .to_vec::<i64>()
        .iter()
        .map(|&x| x as u64)
        .collect();
    assert_eq!(s64(ri), 8782185542054538217);
    // sum(jax.random.randint(k, (10007,), -7, 1000003, jnp.int32))
    let ri: i64 = k().randint([10007], -7, 1000003, DType::I32).to_vec::<i32>().iter().map(|&x| x as i64).sum();
    assert_eq!(ri, 4999294331);
}

#[test]
fn scalar_and_empty_draws() {
    // jax.random.uniform(k, (), jnp.float32): element 0 of every draw
    let u = k().uniform(Shape::scalar(), DType::F32);
    assert_eq!(u.rank(), 0);
    assert_eq!(f32_bits(&u), [1048869196]);
    assert_eq!(k().bits([0, 3]).numel(), 0);
    assert_eq!(k().normal([2, 0], DType::F64).numel(), 0);
}

#[test]
fn vmap_over_keys_of_every_sampler_matches_jax() {
    // ks = jax.random.split(jax.random.key(9), 3)
    let ks = Key::new(9).split_tensor(3);
    let key = |kt: &Tensor| Key::from_tensor(kt.clone());
    // jax.vmap(lambda kk: jax.random.randint(kk, (2,), -2**62, 2**62 + 12345, jnp.int64))(ks)
    let r = vmap(|kt: &Tensor| key(kt).randint([2], -(1 << 62), (1 << 62) + 12345, DType::I64))(&ks);
    assert_eq!(
        r.to_vec::<i64>(),
        [
            1864858557056412762,
            2515954322126394466,
            -2819093208495755626,
            2626005401312165539,
            935605116928880273,
            1443989114896418939
        ]
    );
    // jax.vmap(lambda kk: jax.random.bernoulli(kk, jnp.float32(0.5), (4,)))(ks)
    let b = vmap(|kt: &Tensor| key(kt).bernoulli(&Tensor::scalar(0.5f32), [4]))(&ks);
    assert_eq!(b.to_vec::<bool>(), [false, false, false, true, true, true, false, true, false, false, false, true]);
    // lg = jnp.log(jnp.asarray([[.1, .2, .7], [.5, .25, .25], [.3, .3, .4]], jnp.float32))
    // jax.vmap(lambda kk, l: jax.random.categorical(kk, l, shape=(5,)))(ks, lg)
    let lg = Tensor::from_vec(vec![0.1f32, 0.2, 0.7, 0.5, 0.25, 0.25, 0.3, 0.3, 0.4], [3, 3]).log();
    let c = vmap(|(kt, l): &(Tensor, Tensor)| key(kt).try_categorical(l, -1, Some(Shape::from([5]))).unwrap())(&(
        ks.clone(),
        lg,
    ));
    assert_eq!(c.to_vec::<i64>(), [2, 1, 0, 2, 2, 2, 2, 1, 0, 2, 2, 2, 1, 2, 0]);
}
