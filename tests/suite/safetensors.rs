//! safetensors interop: files written by Python's `safetensors` (the
//! checked-in fixtures of scripts/safetensors_fixtures.py) load with exact
//! values, and files xform writes read back in xform (and in Python:
//! scripts/safetensors_check.sh runs `files_for_python` and checks them).

use half::{bf16, f16};
use std::collections::BTreeMap;
use std::path::PathBuf;
use xform::nn::{Linear, Mlp};
use xform::prelude::*;
use xform::{safetensors, tree, ErrorKind};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/safetensors").join(name)
}

/// The values of `dtype_values()` in scripts/safetensors_fixtures.py.
fn dtype_values() -> BTreeMap<String, Tensor> {
    let bf = |v: &[f32]| v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>();
    let hf = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
    [
        ("f32", Tensor::from_vec(vec![-1.5f32, 0.0, 0.25, 1e-3, f32::MAX, f32::NEG_INFINITY], [2, 3])),
        ("f64", Tensor::from_vec(vec![1.0f64 / 3.0, -2.5e-300, 1e300], [3])),
        ("f16", Tensor::from_vec(hf(&[0.5, -2.0, 65504.0, 2f32.powi(-14)]), [2, 2])),
        ("bf16", Tensor::from_vec(bf(&[1.0, -0.5, 2f32.powi(100), 2f32.powi(-7)]), [4])),
        ("i32", Tensor::from_vec(vec![i32::MIN, 0, i32::MAX], [3])),
        ("i64", Tensor::from_vec(vec![i64::MIN, i64::MAX], [2])),
        ("u32", Tensor::from_vec(vec![0u32, u32::MAX], [2])),
        ("bool", Tensor::from_vec(vec![true, false, false, true], [2, 2])),
        ("scalar", Tensor::scalar(7.0f32)),
        ("empty", Tensor::zeros([0, 3], DType::F32)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The bits of every element (so -0.0, infinities and NaN compare exactly).
fn bits(t: &Tensor) -> Vec<u64> {
    match t.dtype() {
        DType::F32 => t.to_vec::<f32>().iter().map(|x| x.to_bits() as u64).collect(),
        DType::F64 => t.to_vec::<f64>().iter().map(|x| x.to_bits()).collect(),
        DType::F16 => t.to_vec::<f16>().iter().map(|x| x.to_bits() as u64).collect(),
        DType::BF16 => t.to_vec::<bf16>().iter().map(|x| x.to_bits() as u64).collect(),
        DType::I32 => t.to_vec::<i32>().iter().map(|&x| x as u64).collect(),
        DType::I64 => t.to_vec::<i64>().iter().map(|&x| x as u64).collect(),
        DType::U32 => t.to_vec::<u32>().iter().map(|&x| x as u64).collect(),
        DType::Bool => t.to_vec::<bool>().iter().map(|&x| x as u64).collect(),
    }
}

fn assert_same(got: &BTreeMap<String, Tensor>, want: &BTreeMap<String, Tensor>) {
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for (k, w) in want {
        let g = &got[k];
        assert_eq!((g.dtype(), g.shape()), (w.dtype(), w.shape()), "{k}");
        assert_eq!(bits(g), bits(w), "{k}");
    }
}

/// The MLP of `mlp_values()` in the fixture script.
fn mlp_values() -> Mlp {
    let ar = |n: usize, div: f32, sub: f32| (0..n).map(|i| i as f32 / div - sub).collect::<Vec<_>>();
    Mlp {
        layers: vec![
            Linear {
                w: Tensor::from_vec(ar(12, 8.0, 0.5), [3, 4]),
                b: Tensor::from_vec(vec![0.1f32, 0.2, 0.3, 0.4], [4]),
            },
            Linear { w: Tensor::from_vec(ar(8, 4.0, 1.0), [4, 2]), b: Tensor::from_vec(vec![-1.0f32, 1.0], [2]) },
        ],
        activation: Default::default(),
    }
}

#[derive(Clone, Tree)]
struct Model {
    mlp: Mlp,
    extra: BTreeMap<String, Tensor>,
    #[tree(static)]
    tag: String,
}

fn model() -> Model {
    let mut extra = BTreeMap::new();
    extra.insert("norm.weight".to_string(), Tensor::from_vec(vec![1.0f64, 2.0], [2]));
    extra.insert("steps".to_string(), Tensor::scalar(12i64));
    Model { mlp: mlp_values(), extra, tag: "m".into() }
}

#[test]
fn loads_every_dtype_written_by_python() {
    let got = safetensors::load_all(fixture("dtypes.safetensors")).unwrap();
    assert_same(&got, &dtype_values());
    assert_eq!(got["f64"].to_vec::<f64>()[0], 1.0 / 3.0);
    assert_eq!(got["bf16"].to_vec::<bf16>()[2].to_f32(), 2f32.powi(100));
    let meta = safetensors::load_metadata(fixture("dtypes.safetensors")).unwrap();
    assert_eq!(meta.get("made_by").map(String::as_str), Some("safetensors_fixtures.py"));
    // A dtype xform lacks is an error naming the tensor.
    let e = safetensors::load_all(fixture("unsupported.safetensors")).unwrap_err();
    assert!(e.to_string().contains("\"u8\" is U8"), "{e}");
}

#[test]
fn loads_pytorch_style_names_into_a_template() {
    let template = Mlp::init(&Key::new(0), &[3, 4, 2], DType::F32).with_activation(xform::nn::Activation::Relu);
    let m = safetensors::load(fixture("mlp.safetensors"), &template).unwrap();
    assert!(tree::all_close(&m, &mlp_values(), 0.0, 0.0));
    assert_eq!(m.activation, xform::nn::Activation::Relu); // the template's settings are kept
    assert_eq!(m.layers[0].w.to_vec::<f32>()[11], 11.0 / 8.0 - 0.5);
    assert_eq!(safetensors::load_metadata(fixture("mlp.safetensors")).unwrap()["format"], "pt");

    // Each mismatch names the tensor and the leaf.
    let wider = Mlp::init(&Key::new(0), &[3, 5, 2], DType::F32);
    let e = safetensors::load(fixture("mlp.safetensors"), &wider).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Shape { .. }), "{e}");
    assert!(e.to_string().contains("\"layers.0.w\" (leaf .layers[0].w)"), "{e}");
    let f64s = Mlp::init(&Key::new(0), &[3, 4, 2], DType::F64);
    let e = safetensors::load(fixture("mlp.safetensors"), &f64s).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::DType { .. }) && e.to_string().contains("F32"), "{e}");
    let deeper = Mlp::init(&Key::new(0), &[3, 4, 2, 2], DType::F32);
    let e = safetensors::load(fixture("mlp.safetensors"), &deeper).unwrap_err();
    assert!(e.to_string().contains("no tensor \"layers.2.w\" for leaf .layers[2].w"), "{e}");
    let shallower = Mlp { layers: vec![template.layers[0].clone()], activation: template.activation };
    let e = safetensors::load(fixture("mlp.safetensors"), &shallower).unwrap_err();
    assert!(e.to_string().contains("does not: layers.1.b, layers.1.w"), "{e}");
    assert!(safetensors::load(fixture("missing.safetensors"), &template).is_err());
}

#[test]
fn names_follow_state_dict_keys() {
    assert_eq!(safetensors::name_of_path(".layers[0].w"), "layers.0.w");
    assert_eq!(safetensors::name_of_path(".0.b"), "0.b");
    assert_eq!(safetensors::name_of_path("[\"encoder.norm\"].weight"), "encoder.norm.weight");
    assert_eq!(safetensors::name_of_path("<root>"), "");
    assert_eq!(
        safetensors::leaf_names(&model()),
        vec![
            "mlp.layers.0.w",
            "mlp.layers.0.b",
            "mlp.layers.1.w",
            "mlp.layers.1.b",
            "extra.norm.weight",
            "extra.steps"
        ]
    );
    // Keys with quotes, brackets and escapes come back as they were.
    let mut odd = BTreeMap::new();
    for k in ["a\"b", "c]d", "e\\f", "g\nh", "[\"x\"]"] {
        odd.insert(k.to_string(), Tensor::scalar(1.0f32));
    }
    let names = safetensors::leaf_names(&odd);
    assert_eq!(names, odd.keys().cloned().collect::<Vec<_>>());
    let back = safetensors::all_from_bytes(&safetensors::to_bytes(&odd).unwrap()).unwrap();
    assert_eq!(back.keys().collect::<Vec<_>>(), odd.keys().collect::<Vec<_>>());
    // Two leaves with one name are refused.
    let mut clash: BTreeMap<String, BTreeMap<String, Tensor>> = BTreeMap::new();
    clash.entry("a".into()).or_default().insert("b.c".into(), Tensor::scalar(1.0f32));
    clash.entry("a.b".into()).or_default().insert("c".into(), Tensor::scalar(2.0f32));
    let e = safetensors::to_bytes(&clash).unwrap_err();
    assert!(e.to_string().contains("would both be saved as \"a.b.c\""), "{e}");
    // A lone tensor is the empty name.
    let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
    let bytes = safetensors::to_bytes(&x).unwrap();
    assert_eq!(safetensors::from_bytes(&bytes, &x.zeros_like()).unwrap().to_vec::<f64>(), vec![1.0, 2.0]);
    assert!(safetensors::all_from_bytes(&bytes).unwrap().contains_key(""));
}

/// Writes the files scripts/safetensors_check.sh verifies in Python, into
/// `$XFORM_ST_OUT` (a temporary directory when unset), and checks them here.
#[test]
fn files_for_python() {
    let dir = match std::env::var_os("XFORM_ST_OUT") {
        Some(d) => PathBuf::from(d),
        None => std::env::temp_dir().join(format!("xform-st-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).unwrap();
    safetensors::save(dir.join("dtypes.safetensors"), &dtype_values()).unwrap();
    let mut meta = BTreeMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    meta.insert("step".to_string(), "12".to_string());
    safetensors::save_with_metadata(dir.join("model.safetensors"), &model(), Some(&meta)).unwrap();

    // What xform wrote equals what Python wrote, bit for bit.
    let ours = safetensors::load_all(dir.join("dtypes.safetensors")).unwrap();
    assert_same(&ours, &safetensors::load_all(fixture("dtypes.safetensors")).unwrap());
    // The model reads back into a template of another tag and values.
    let mut template = model();
    template.tag = "template".into();
    template = tree::zeros_like(&template);
    let back = safetensors::load(dir.join("model.safetensors"), &template).unwrap();
    assert!(tree::all_close(&back, &model(), 0.0, 0.0));
    assert_eq!(back.tag, "template");
    assert_eq!(back.extra["steps"].item::<i64>(), 12);
    assert_eq!(safetensors::load_metadata(dir.join("model.safetensors")).unwrap(), meta);
    // Saving a tracer's values is an error value, not a panic.
    let refused = std::cell::Cell::new(None);
    vmap(|x: &Tensor| {
        refused.set(Some(safetensors::to_bytes(x).is_err()));
        x.clone()
    })(&Tensor::ones([2, 2], DType::F32));
    assert_eq!(refused.get(), Some(true));
    if std::env::var_os("XFORM_ST_OUT").is_none() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
