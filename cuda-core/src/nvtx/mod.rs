//! NVTX: annotate the program with ranges and marks that Nsight Systems, Nsight Compute and
//! other tools show on their timelines and filter by.
//!
//! Built with the `nvtx` feature, which is on by default.
//!
//! NVTX is spoken in pure Rust by [`cuhost_nvtx_sys`]: no library, no C compiler, no toolkit. With no
//! tool attached every call here costs one atomic load and does nothing. Tools attach by
//! setting `NVTX_INJECTION64_PATH`, which Nsight does for the programs it launches;
//! [`injection`] says whether one did.
//!
//! ```
//! use cuhost::nvtx::{self, Domain, EventAttributes};
//!
//! let _step = nvtx::push_range("training step"); // popped at the end of the scope
//! nvtx::mark("checkpoint written");
//!
//! let domain = Domain::new("my-library");
//! domain.name_category(1, "io");
//! let read = domain.register_string("read");
//! let attributes = EventAttributes::new().registered_message(read).category(1).payload(4096u64);
//! let _io = domain.push_range_with(&attributes);
//! ```
//!
//! Reference: [NVTX C API](https://nvidia.github.io/NVTX/doxygen/globals_func.html).

mod attributes;
mod domain;
mod naming;
mod range;
mod text;
#[cfg(feature = "tracing")]
pub mod tracing;

pub use attributes::{EventAttributes, Payload};
pub use cuhost_nvtx_sys::protocol::Injection;
pub use domain::{Domain, RegisteredString};
pub use naming::{name_context, name_device, name_event, name_stream};
pub use range::{
    DomainRange, DomainStartedRange, Range, StartedRange, push_range, push_range_with, start_range,
    start_range_with,
};
pub use text::Text;

use cuhost_nvtx_sys as sys;

/// Marks an instant named `message`
/// ([`nvtxMarkA`](https://nvidia.github.io/NVTX/doxygen/group___m_a_r_k_e_r_s___a_n_d___r_a_n_g_e_s.html)).
#[inline]
pub fn mark<T: Text + ?Sized>(message: &T) {
    if text::skip_copy::<T>(sys::protocol::Module::CORE, sys::NvtxCallbackIdCore::NVTX_CBID_CORE_MarkA.0) {
        return;
    }
    // SAFETY: a NUL-terminated string that lives through the call.
    message.with_c_str(|m| unsafe { sys::nvtxMarkA(m.as_ptr()) });
}

/// Marks an instant with attributes
/// ([`nvtxMarkEx`](https://nvidia.github.io/NVTX/doxygen/group___m_a_r_k_e_r_s___a_n_d___r_a_n_g_e_s.html)).
#[inline]
pub fn mark_with(attributes: &EventAttributes<'_>) {
    // SAFETY: valid version-3 attributes whose message outlives the call.
    unsafe { sys::nvtxMarkEx(attributes.as_raw()) };
}

/// Names a category of the default domain
/// ([`nvtxNameCategoryA`](https://nvidia.github.io/NVTX/doxygen/group___r_e_s_o_u_r_c_e___n_a_m_i_n_g.html)).
pub fn name_category(category: u32, name: &(impl Text + ?Sized)) {
    // SAFETY: a NUL-terminated string that lives through the call.
    name.with_c_str(|n| unsafe { sys::nvtxNameCategoryA(category, n.as_ptr()) });
}

/// Names the calling OS thread
/// ([`nvtxNameOsThreadA`](https://nvidia.github.io/NVTX/doxygen/group___r_e_s_o_u_r_c_e___n_a_m_i_n_g.html))
/// with its OS id ([`current_os_thread_id`]). Does nothing where that id is not known.
pub fn name_current_thread(name: &(impl Text + ?Sized)) {
    if let Some(id) = current_os_thread_id() {
        name_os_thread(id, name);
    }
}

/// Names the OS thread `thread_id` (a Linux tid, a Windows thread id)
/// ([`nvtxNameOsThreadA`](https://nvidia.github.io/NVTX/doxygen/group___r_e_s_o_u_r_c_e___n_a_m_i_n_g.html)).
pub fn name_os_thread(thread_id: u32, name: &(impl Text + ?Sized)) {
    // SAFETY: a NUL-terminated string that lives through the call.
    name.with_c_str(|n| unsafe { sys::nvtxNameOsThreadA(thread_id, n.as_ptr()) });
}

/// The calling thread's OS id, as NVTX tools know threads: `gettid()` on Linux,
/// `GetCurrentThreadId()` on Windows; `None` elsewhere.
pub fn current_os_thread_id() -> Option<u32> {
    #[cfg(target_os = "linux")]
    {
        // `/proc/thread-self` links to `<pid>/task/<tid>` for the calling thread.
        let link = std::fs::read_link("/proc/thread-self").ok()?;
        link.file_name()?.to_str()?.parse().ok()
    }
    #[cfg(windows)]
    {
        #[link(name = "kernel32")]
        unsafe extern "system" {
            fn GetCurrentThreadId() -> u32;
        }
        // SAFETY: takes no arguments and cannot fail.
        Some(unsafe { GetCurrentThreadId() })
    }
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        None
    }
}

/// Initialises NVTX now if no NVTX call has yet, and says whether a tool is attached and, if
/// not, why: `NVTX_INJECTION64_PATH` unset, the library missing, or its initialisation
/// failed.
pub fn injection() -> &'static Injection {
    sys::protocol::initialize();
    sys::protocol::injection().unwrap_or(&Injection::NoInjectionLibrary)
}
