//! Where memory can be reached from, as part of a buffer's type.
//!
//! A [`DeviceBuffer<T, S>`](super::DeviceBuffer) carries a memory space `S`: [`DeviceOnly`] memory
//! is reached by kernels and copies only, [`Managed`] memory by the host too. Methods that
//! touch the memory from the host exist only where the space allows it, so reading device-only
//! memory as a host slice does not compile:
//!
//! ```compile_fail
//! # fn f(buffer: &cuhost::DeviceBuffer<u32>) {
//! let host: &[u32] = unsafe { buffer.as_host_slice() }; // device memory: no such method
//! # }
//! ```
//!
//! ```no_run
//! # fn f(buffer: &cuhost::memory::ManagedBuffer<u32>) {
//! // SAFETY: nothing runs on the device in this sketch.
//! let host: &[u32] = unsafe { buffer.as_host_slice() }; // managed memory: reachable
//! # }
//! ```
//!
//! Pinned host memory has a type of its own, [`PinnedBuffer`](super::PinnedBuffer), which the
//! host reads and writes as a slice.

mod sealed {
    pub trait Sealed {}
}

/// A memory space: what a buffer's memory can be reached from. Implemented by [`DeviceOnly`] and
/// [`Managed`] only.
pub trait MemorySpace: sealed::Sealed + Send + Sync + 'static {
    /// A short name for messages: `"device"` or `"managed"`.
    const NAME: &'static str;
}

/// A memory space the host can read and write directly (through unified addressing).
pub trait HostAccessible: MemorySpace {}

/// Device memory: reached by kernels and copies of the device's context (and by peers that
/// were given access), never by the host directly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct DeviceOnly;

/// Managed (unified) memory: reached by the host and by every device that supports it; the
/// driver migrates pages on demand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Managed;

impl sealed::Sealed for DeviceOnly {}
impl sealed::Sealed for Managed {}

impl MemorySpace for DeviceOnly {
    const NAME: &'static str = "device";
}

impl MemorySpace for Managed {
    const NAME: &'static str = "managed";
}

impl HostAccessible for Managed {}
