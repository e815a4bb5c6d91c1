//! Sharing with other processes and APIs.
//!
//! Built with the `interop` feature, which is on by default.
//!
//! * [`ipc`]: device memory and events shared with other processes on the same host through
//!   the driver's legacy IPC handles (`cuIpc*`). Physical allocations of the virtual memory
//!   management calls are shared as file descriptors or fabric handles instead
//!   ([`crate::vmm::PhysicalMemory::export_fd`]), and stream-ordered pools through
//!   [`crate::mempool::ipc`].
//! * [`external`]: memory and semaphores another API exported (Vulkan, Direct3D, NvSci, or
//!   another CUDA process), imported as [`ExternalMemory`](external::ExternalMemory), mapped as
//!   buffers and mipmapped arrays, and [`ExternalSemaphore`](external::ExternalSemaphore)s
//!   signalled and waited on in stream order.
//! * [`graphics`]: OpenGL buffers and textures and EGL images and streams registered with CUDA
//!   as [`GraphicsResource`](graphics::GraphicsResource)s, mapped on a stream for as long as
//!   a guard lives.
//!
//! See the [Memory Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
//! [Event Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html),
//! [External Resource Interoperability](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXTRES__INTEROP.html)
//! and [Graphics Interoperability](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPHICS.html)
//! sections of the driver API.

pub mod external;
pub mod graphics;
pub mod ipc;

use crate::error::Error;

/// An import that was refused, with the handle given back: the caller keeps what it passed in
/// (a file descriptor stays open, a Windows handle stays the caller's to close).
///
/// Imports return it boxed, to keep their `Result` small. `?` turns it into the [`Error`] (dropping the handle, which closes a file descriptor);
/// [`into_parts`](Self::into_parts) keeps both.
#[derive(Debug)]
pub struct Refused<H> {
    error: Error,
    handle: H,
}

impl<H> Refused<H> {
    pub(crate) fn new(error: Error, handle: H) -> Box<Refused<H>> {
        Box::new(Refused { error, handle })
    }

    /// Why the import was refused.
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The handle that was passed in, still the caller's.
    pub fn into_handle(self) -> H {
        self.handle
    }

    /// The error and the handle.
    pub fn into_parts(self) -> (Error, H) {
        (self.error, self.handle)
    }
}

impl<H> std::fmt::Display for Refused<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (the handle was given back)", self.error)
    }
}

impl<H: std::fmt::Debug> std::error::Error for Refused<H> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<H> From<Refused<H>> for Error {
    fn from(refused: Refused<H>) -> Error {
        refused.error
    }
}

impl<H> From<Box<Refused<H>>> for Error {
    fn from(refused: Box<Refused<H>>) -> Error {
        refused.error
    }
}
