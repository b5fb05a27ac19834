//! Devices: where an array's elements live, and the thread's default one.

/// Where an array's elements live.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// Host memory.
    #[default]
    Cpu,
    /// The CUDA device with this ordinal (needs the `cuda` feature).
    Cuda(usize),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl std::str::FromStr for Device {
    type Err = String;
    /// Parses "cpu", "cuda" (device 0) or "cuda:N".
    fn from_str(s: &str) -> std::result::Result<Device, String> {
        match s.trim() {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            t => t
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| format!("unknown device {t:?} (expected cpu, cuda or cuda:N)")),
        }
    }
}

thread_local! {
    static DEFAULT_DEVICE: std::cell::Cell<Option<Device>> = const { std::cell::Cell::new(None) };
}

/// The device that constructors (`Tensor::from_vec`, `zeros`, `Key::new`,
/// ...) place new tensors on: the one set on this thread with
/// [`set_default_device`], else the `XFORM_DEFAULT_DEVICE` environment
/// variable (`cpu`, `cuda`, `cuda:N`), else the CPU. Running the test suite
/// with `XFORM_DEFAULT_DEVICE=cuda:0` runs every test body on the GPU.
pub fn default_device() -> Device {
    if let Some(d) = DEFAULT_DEVICE.with(|d| d.get()) {
        return d;
    }
    static FROM_ENV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    *FROM_ENV
        .get_or_init(|| std::env::var("XFORM_DEFAULT_DEVICE").ok().and_then(|v| v.parse().ok()).unwrap_or(Device::Cpu))
}

/// Sets this thread's default device (see [`default_device`]).
pub fn set_default_device(device: Device) {
    DEFAULT_DEVICE.with(|d| d.set(Some(device)));
}
