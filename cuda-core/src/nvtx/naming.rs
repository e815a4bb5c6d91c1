//! Naming CUDA objects so that tools show names instead of handles.
//!
//! See NVIDIA's [Resource Naming](https://nvidia.github.io/NVTX/doxygen/group___r_e_s_o_u_r_c_e___n_a_m_i_n_g.html)
//! (`nvToolsExtCuda.h`).

use super::Text;
use crate::context::Context;
use crate::device::Device;
use crate::event::Event;
use crate::stream::Stream;
use cuhost_nvtx_sys as sys;

/// Names a device (`nvtxNameCuDeviceA`).
pub fn name_device(device: &Device, name: &(impl Text + ?Sized)) {
    // SAFETY: a device ordinal and a NUL-terminated string; the tool only records them.
    name.with_c_str(|n| unsafe { sys::nvtxNameCuDeviceA(device.as_raw(), n.as_ptr()) });
}

/// Names a context (`nvtxNameCuContextA`).
pub fn name_context(context: &Context, name: &(impl Text + ?Sized)) {
    // SAFETY: a live context handle and a NUL-terminated string.
    name.with_c_str(|n| unsafe { sys::nvtxNameCuContextA(context.as_raw().cast(), n.as_ptr()) });
}

/// Names a stream (`nvtxNameCuStreamA`).
pub fn name_stream(stream: &Stream, name: &(impl Text + ?Sized)) {
    // SAFETY: a live stream handle and a NUL-terminated string.
    name.with_c_str(|n| unsafe { sys::nvtxNameCuStreamA(stream.as_raw().cast(), n.as_ptr()) });
}

/// Names an event (`nvtxNameCuEventA`).
pub fn name_event(event: &Event, name: &(impl Text + ?Sized)) {
    // SAFETY: a live event handle and a NUL-terminated string.
    name.with_c_str(|n| unsafe { sys::nvtxNameCuEventA(event.as_raw().cast(), n.as_ptr()) });
}
