//! Device memory and events shared between processes through IPC handles
//! ([`cuIpcGetMemHandle`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
//! [`cuIpcGetEventHandle`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
//!
//! * [`IpcMemHandle`] names any device buffer or view made by `cuMemAlloc`, also one that is
//!   a block inside a larger allocation (a buffer of a [`MemoryPool`](crate::pool::MemoryPool)):
//!   the driver's handle names the whole allocation, and the handle carries the view's offset
//!   into it and its size. [`IpcMemHandle::open`] in another process gives a
//!   [`DeviceBuffer`](crate::memory::DeviceBuffer) at the same bytes; dropping it closes the handle.
//! * [`IpcEventHandle`] names an event made with
//!   [`EventFlags::INTERPROCESS`](crate::event::EventFlags::INTERPROCESS); the other process records
//!   it or waits on it.
//!
//! Both turn into bytes and back ([`IpcMemHandle::to_bytes`], [`IpcMemHandle::from_bytes`]),
//! to travel by any means (a pipe, a socket, a file). Bytes that are not a handle of this
//! crate are refused before any call; a well-formed handle of memory that is gone is the
//! driver's error.
//!
//! ```no_run
//! use cuhost::interop::ipc::IpcMemHandle;
//! use cuhost::{DeviceBuffer, Result, Stream};
//!
//! /// In the exporting process: the bytes to send for the buffer's elements from 2 on.
//! fn export(buffer: &DeviceBuffer<u32>) -> Result<[u8; IpcMemHandle::ENCODED_LEN]> {
//!     Ok(IpcMemHandle::export(&buffer.slice(2..)?)?.to_bytes())
//! }
//!
//! /// In the importing process: the same elements, read.
//! fn import(bytes: &[u8], stream: &Stream) -> Result<Vec<u32>> {
//!     let handle = IpcMemHandle::from_bytes(bytes)?;
//!     // SAFETY: the exporter keeps its buffer until this process says it is done.
//!     let shared = unsafe { handle.open::<u32>(stream)? };
//!     shared.to_vec() // dropping `shared` closes the handle
//! }
//! ```

mod event;
mod memory;

pub use event::IpcEventHandle;
pub use memory::IpcMemHandle;

use crate::error::{Error, Result};

/// Checks that `bytes` are `expected` long and start with `magic`; returns the rest.
fn strip_magic<'a>(
    operation: &'static str,
    bytes: &'a [u8],
    magic: &[u8; 8],
    expected: usize,
) -> Result<&'a [u8]> {
    if bytes.len() != expected {
        return Err(Error::invalid(
            operation,
            format!("{} bytes are not a handle, which has {expected}", bytes.len()),
        ));
    }
    match bytes.strip_prefix(magic.as_slice()) {
        Some(rest) => Ok(rest),
        None => Err(Error::invalid(
            operation,
            "the bytes do not start with the handle's marker; they were not made by to_bytes",
        )),
    }
}

/// The 64 bytes of a driver handle, which the headers declare as `char`s.
fn handle_bytes(reserved: &[std::ffi::c_char; 64]) -> [u8; 64] {
    reserved.map(|c| c as u8)
}

/// The driver's `char`s of 64 handle bytes.
fn handle_chars(bytes: &[u8; 64]) -> [std::ffi::c_char; 64] {
    bytes.map(|b| b as std::ffi::c_char)
}
