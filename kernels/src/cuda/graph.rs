//! CUDA graphs: a run of launches recorded once and replayed with one
//! driver call (`jit`'s replay on CUDA, NOTE: [cuda graph replay] in
//! `xform_exec`'s `graph.rs`).
//!
//! [`capture`] runs a closure with this thread's work on one device
//! recorded on the device's capture stream (NOTE: [capture stream]) in the
//! driver's thread-local capture mode: a call that would synchronize with
//! the host (a download, a synchronous allocation) fails inside the
//! capture, which is then discarded, rather than running. Allocations made
//! while captured are the graph's own (memory nodes): their addresses are
//! fixed, valid while the graph's last launch is, and the graph is
//! instantiated to free them again when it is launched anew, so a caller
//! copies what it keeps out of them after each launch.

use super::device::{device, CudaDevice};
use super::error::{CudaError, Result};
use cudarc::driver::sys;
use std::sync::Arc;

/// An instantiated CUDA graph, launched on its device's stream.
pub struct Graph {
    exec: sys::CUgraphExec,
    graph: sys::CUgraph,
    device: Arc<CudaDevice>,
}

// SAFETY: graph handles may be used from any thread when calls on one
// graph are serialized; `Graph` is not `Sync`, so a shared one sits behind
// a lock (the jit plan's), and launching takes `&self` only there.
unsafe impl Send for Graph {}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Graph(cuda:{})", self.device.ordinal())
    }
}

impl Graph {
    /// Launches the graph on the device's stream (after the work queued
    /// there, before the work queued next).
    ///
    /// # Errors
    /// A driver failure.
    pub fn launch(&self) -> Result<()> {
        let stream = self.device.main_stream();
        self.device.context().bind_to_thread().map_err(|e| CudaError::driver("binding the context", e))?;
        // SAFETY: `exec` is a live instantiated graph of this context and
        // the stream is the device's live stream.
        unsafe { cudarc::driver::result::graph::launch(self.exec, stream.cu_stream()) }
            .map_err(|e| CudaError::driver("launching a CUDA graph", e))
    }

    /// The device the graph runs on.
    pub fn ordinal(&self) -> usize {
        self.device.ordinal()
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: both handles are live and owned by this value; destroying
        // an executable graph waits for nothing but is legal while a launch
        // of it is queued (the driver keeps what the launch needs).
        unsafe {
            let _ = cudarc::driver::result::graph::exec_destroy(self.exec);
            let _ = cudarc::driver::result::graph::destroy(self.graph);
            // give the graph memory pool's unused memory back to the device
            let _ = sys::cuDeviceGraphMemTrim(self.device.context().cu_device());
        }
    }
}

/// What [`capture`] made.
pub enum Captured<T, E> {
    /// The graph, and what the closure returned (its device buffers are
    /// the graph's: valid after a launch, until the next).
    Graph(Graph, T),
    /// The closure failed; its error (nothing was captured).
    Failed(E),
    /// The capture (or its instantiation) failed: why. What the closure
    /// returned was leaked, not dropped: its buffers never existed.
    Refused(CudaError),
}

/// Ends the capture of this thread on `dev` however the closure leaves
/// (a panic included), and clears the errors the abandoned work recorded.
struct CaptureScope<'d> {
    dev: &'d CudaDevice,
    stream: sys::CUstream,
    open: bool,
}

impl CaptureScope<'_> {
    /// Ends the capture: the captured graph (null if nothing was captured).
    fn end(&mut self) -> Result<sys::CUgraph> {
        self.open = false;
        CudaDevice::set_capturing(None);
        // SAFETY: the stream is the capture stream, capturing since
        // `capture` began it on this thread.
        let graph = unsafe { cudarc::driver::result::stream::end_capture(self.stream) };
        graph.map_err(|e| CudaError::driver("ending a CUDA graph capture", e))
    }
}

/// Destroys a captured graph that will not be instantiated (null: none).
fn discard(graph: Result<sys::CUgraph>) {
    if let Ok(g) = graph {
        if !g.is_null() {
            // SAFETY: a graph the driver returned from a capture, owned by
            // the caller and destroyed once.
            let _ = unsafe { cudarc::driver::result::graph::destroy(g) };
        }
    }
}

impl Drop for CaptureScope<'_> {
    fn drop(&mut self) {
        if self.open {
            discard(self.end());
            // frees of buffers allocated in the abandoned capture failed;
            // their recorded error must not fail the next call
            let _ = self.dev.context().check_err();
        }
    }
}

/// Runs `f` with this thread's work on CUDA device `ordinal` recorded into
/// a graph (and not run), then instantiates the graph.
///
/// # Errors
/// Returned as [`Captured::Refused`]: no device, the capture stream could
/// not be made, this thread already captures, or the driver rejected the
/// capture (a call in `f` that synchronizes with the host, a synchronous
/// allocation on a device without stream-ordered ones).
pub fn capture<T, E>(ordinal: usize, f: impl FnOnce() -> std::result::Result<T, E>) -> Captured<T, E> {
    let dev = match device(ordinal) {
        Ok(d) => d,
        Err(e) => return Captured::Refused(e),
    };
    if CudaDevice::capturing_ordinal().is_some() {
        return Captured::Refused(CudaError::unsupported("a CUDA graph capture inside another"));
    }
    let cap = match dev.capture_stream() {
        Ok(c) => c,
        Err(why) => return Captured::Refused(CudaError::unsupported(format!("no capture stream: {why}"))),
    };
    let _busy = cap.busy.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = dev.context().bind_to_thread() {
        return Captured::Refused(CudaError::driver("binding the context", e));
    }
    CudaDevice::set_capturing(Some(ordinal));
    let stream = dev.stream().cu_stream();
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: the capture stream is live and not capturing (captures of a
    // device are serialized by `busy`).
    if let Err(e) = unsafe { cudarc::driver::result::stream::begin_capture(stream, mode) } {
        CudaDevice::set_capturing(None);
        return Captured::Refused(CudaError::driver("beginning a CUDA graph capture", e));
    }
    let mut scope = CaptureScope { dev: &dev, stream, open: true };
    let out = f();
    let graph = scope.end();
    let _ = dev.context().check_err();
    let out = match out {
        Ok(t) => t,
        Err(e) => {
            discard(graph);
            return Captured::Failed(e);
        }
    };
    let graph = match graph {
        Ok(g) if !g.is_null() => g,
        Ok(_) => {
            std::mem::forget(out);
            return Captured::Refused(CudaError::unsupported("the capture recorded nothing"));
        }
        Err(e) => {
            std::mem::forget(out);
            return Captured::Refused(e);
        }
    };
    let flags = sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
    // SAFETY: `graph` is the live graph the capture returned.
    match unsafe { cudarc::driver::result::graph::instantiate(graph, flags) } {
        Ok(exec) => Captured::Graph(Graph { exec, graph, device: dev.clone() }, out),
        Err(e) => {
            discard(Ok(graph));
            std::mem::forget(out);
            Captured::Refused(CudaError::driver("instantiating a CUDA graph", e))
        }
    }
}

/// Drops `value`, which holds buffers a graph of device `ordinal` made
/// (freed on the capture stream), after the work queued on the device's
/// stream (the graph's launches, the copies out of its memory) and while
/// no other thread captures there (its capture would record the frees).
/// Inside a capture of this thread the value is leaked instead.
pub fn release<T>(ordinal: usize, value: T) {
    let Ok(dev) = device(ordinal) else {
        std::mem::forget(value);
        return;
    };
    if CudaDevice::capturing_ordinal().is_some() {
        std::mem::forget(value);
        return;
    }
    let _ = dev.main_stream().synchronize();
    match dev.capture_stream() {
        Ok(cap) => {
            let _busy = cap.busy.lock().unwrap_or_else(|e| e.into_inner());
            drop(value);
        }
        Err(_) => drop(value),
    }
}
