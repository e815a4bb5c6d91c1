//! Memory: the one device buffer type and its views, pinned and registered host memory,
//! managed memory, pitched 2D allocations, CUDA arrays, pointer attributes and address ranges.
//! The operations that move and set it (copies 1D, 2D and 3D, batches, memsets) are in
//! [`copy`](crate::copy); their methods on the types here (`DeviceView::copy_from_device_async`,
//! `memset_d32_async`, ...) show on each type.
//!
//! See the [Memory Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
//! section of the driver API.
//!
//! # The memory model
//!
//! * **One device buffer type**, [`DeviceBuffer<T, S>`](DeviceBuffer), typed over a
//!   [`bytemuck::Pod`] element, whose memory comes from an [`Allocator`](crate::alloc::Allocator):
//!   the thread's current one (by default the device's [`MemoryPool`](crate::pool::MemoryPool)),
//!   or one named with [`DeviceBuffer::new_in`] — plain `cuMemAlloc`, the driver's stream-ordered
//!   pools, a `MemoryPool`, managed memory, virtual memory management
//!   ([`VmmAllocator`](crate::vmm::VmmAllocator)), memory opened from another process
//!   ([`IpcMemHandle::open`](crate::interop::ipc::IpcMemHandle::open)), or your own. Every module takes and returns these
//!   buffers and their views ([`DeviceView`], [`DeviceViewMut`]).
//! * **Stream-ordered.** A buffer is allocated for a stream and given back in that stream's
//!   order, after every other stream that safe operations queued work touching it on (copies,
//!   memsets, prefetches, kernel launches, NCCL calls note those streams on the buffer by
//!   themselves; [`DeviceBuffer::record_stream`] notes one by hand for work queued elsewhere).
//! * **What the memory is reachable from is in the type**: `S` is [`DeviceOnly`] (the default)
//!   or [`Managed`] ([`ManagedBuffer`]); only the latter has host slices. Pinned host memory is
//!   [`PinnedBuffer`], read and written by the host as a slice.
//! * **Safe asynchronous host copies**: a [`PinnedBuffer`] records each stream-ordered copy
//!   that uses it and cannot be written, read (while a copy writes it) or freed before the copy
//!   is done. Copies from arbitrary host slices (`copy_from_host_async` on `&[T]`) stay
//!   `unsafe`: the borrow checker cannot see when the device is done with them.
//! * **Kernel arguments**: buffers and views pass to a launch directly; their device address
//!   is the argument.
//!
//! # What is checked
//!
//! Lengths, bounds and alignment are checked before every call: a zero-length or overflowing
//! allocation, a copy between views of different lengths, a view past the end of its buffer
//! and a cast to a type the address is not aligned for are [`crate::error::Error::InvalidArgument`]s.
//!
//! # Synchronous copies and memsets
//!
//! The forms without a stream (`copy_from`, `copy_to`, `to_vec`, `memset_d32`, ...) run in the
//! order of the stream the buffer is ordered on and return when they are done, so their result
//! is visible to work queued afterwards on any stream. A view made from a raw address
//! ([`DeviceView::from_raw`]) uses the default stream. The `_async` forms wait for nothing and
//! are ordered only on the stream they are given.
//!
//! # Example
//!
//! ```no_run
//! use cuhost::{Context, Device, DeviceBuffer, PinnedBuffer, Stream, StreamFlags};
//! # fn main() -> cuhost::Result<()> {
//! let ctx = Context::primary(&Device::get(0)?)?;
//! let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
//! let mut buf = DeviceBuffer::<u32>::from_slice(&stream, &[1, 2, 3, 4])?;
//! buf.slice_mut(2..)?.memset_d32_async(7, &stream)?;
//! let mut host = PinnedBuffer::<u32>::new(4)?;
//! buf.copy_to_pinned_async(&mut host, &stream)?; // safe: `host` waits for the copy
//! assert_eq!(host.as_slice()?, [1, 2, 7, 7]);
//! // Mistakes are caught before any call: lengths differ here.
//! assert!(buf.copy_from(&[0; 3]).is_err());
//! # Ok(()) }
//! ```

mod array;
mod buffer;
mod dma_buf;
mod host;
mod managed;
mod pinned;
pub(crate) mod pinned_chunk;
mod pinned_slice;
mod pitched;
mod pointer;
#[cfg(cuda_headers_13_4)]
mod residency;
mod source;
pub mod space;
pub(crate) mod view;

pub(crate) use crate::track::{HostAccess, begin_borrow, launch_tracked};
pub use array::{
    Array, ArrayDescriptor, ArrayFlags, ArrayMemoryRequirements, BorrowedArray, BorrowedMipmappedArray,
    MipmappedArray, SparseProperties,
};
pub use buffer::DeviceBuffer;
pub use dma_buf::DmaBufMapping;
pub use host::{HostAllocFlags, HostRegisterFlags, RegisteredHostMemory};
pub use managed::{ManagedBuffer, MemAdvice, MemLocation};
pub use pinned::PinnedBuffer;
pub use pinned_chunk::{PinnedChunk, PinnedHost};
pub use pinned_slice::{PinnedSlice, PinnedSliceMut};
pub use pitched::PitchedBuffer;
pub use pointer::{MemoryType, PointerAttributes, address_range, pointer_attributes, set_sync_memops};
pub use space::{DeviceOnly, HostAccessible, Managed, MemorySpace};
#[cfg(feature = "texture")]
pub(crate) use view::Track;
pub use view::{DeviceView, DeviceViewMut};
pub(crate) use view::{cast_check, range_of};

use crate::error::{Error, Result};

/// The element-count accessors every buffer and view has: `len`, `is_empty` and
/// `size_in_bytes`, from a `len` field and the element type `T`.
macro_rules! element_count {
    () => {
        /// The number of elements.
        #[inline]
        pub fn len(&self) -> usize {
            self.len
        }

        /// Whether there are no elements (never, for an owning buffer).
        #[inline]
        pub fn is_empty(&self) -> bool {
            self.len == 0
        }

        /// The size in bytes.
        #[inline]
        pub fn size_in_bytes(&self) -> usize {
            self.len * std::mem::size_of::<T>()
        }
    };
}
pub(crate) use element_count;

/// The view accessors of an owning type of device memory (`view`, `view_mut`, `slice`,
/// `slice_mut`), for a type with fields `ptr` (the first element's address), `len`, `stream`
/// (the stream its views are ordered on) and `uses` (a [`StreamUses`](crate::track::StreamUses)
/// where the views note the other streams they are used on); `$name` names the type in errors.
macro_rules! device_views {
    ($name:literal) => {
        /// A shared view of the whole buffer.
        #[inline]
        pub fn view(&self) -> $crate::memory::DeviceView<'_, T> {
            $crate::memory::DeviceView::tracked(
                self.ptr,
                self.len,
                &self.stream,
                $crate::track::OwnStream::own(&self.stream),
                &self.uses,
            )
        }

        /// An exclusive view of the whole buffer.
        #[inline]
        pub fn view_mut(&mut self) -> $crate::memory::DeviceViewMut<'_, T> {
            $crate::memory::DeviceViewMut::tracked(
                self.ptr,
                self.len,
                &self.stream,
                $crate::track::OwnStream::own(&self.stream),
                &self.uses,
            )
        }

        /// A shared view of `range`; past the end is an
        /// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument).
        pub fn slice(
            &self,
            range: impl std::ops::RangeBounds<usize>,
        ) -> $crate::error::Result<$crate::memory::DeviceView<'_, T>> {
            let (start, end) = $crate::memory::range_of(concat!($name, "::slice"), range, self.len)?;
            Ok($crate::memory::DeviceView::tracked(
                self.element(start),
                end - start,
                &self.stream,
                $crate::track::OwnStream::own(&self.stream),
                &self.uses,
            ))
        }

        /// An exclusive view of `range`; past the end is an
        /// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument).
        pub fn slice_mut(
            &mut self,
            range: impl std::ops::RangeBounds<usize>,
        ) -> $crate::error::Result<$crate::memory::DeviceViewMut<'_, T>> {
            let (start, end) = $crate::memory::range_of(concat!($name, "::slice_mut"), range, self.len)?;
            Ok($crate::memory::DeviceViewMut::tracked(
                self.element(start),
                end - start,
                &self.stream,
                $crate::track::OwnStream::own(&self.stream),
                &self.uses,
            ))
        }

        fn element(&self, index: usize) -> cuhost_driver_sys::CUdeviceptr {
            self.ptr + (index * std::mem::size_of::<T>()) as u64
        }
    };
}
pub(crate) use device_views;

/// Completes a synchronous copy or memset: the driver may return from those before the data has
/// landed (a copy from pageable memory once it is staged, a memset or a device-to-device copy
/// once it is queued), so wait for the default stream they ran on. Afterwards every stream sees
/// the result.
pub(crate) fn finished(queued: Result<()>) -> Result<()> {
    queued?;
    // SAFETY: the default-stream handles are always valid in the current context.
    unsafe { driver!(cuStreamSynchronize(crate::stream::synchronous_handle())) }
}

/// Bytes of `len` elements of `T`, or an [`Error::InvalidArgument`] for zero and overflow.
pub(crate) fn checked_bytes<T>(operation: &'static str, len: usize) -> Result<usize> {
    let size = std::mem::size_of::<T>();
    match len.checked_mul(size) {
        Some(bytes) if size != 0 && len != 0 && bytes <= isize::MAX as usize => Ok(bytes),
        _ => Err(bad_length(operation, len, size)),
    }
}

/// The refusal of `len` elements of `size` bytes: none, of a zero-sized type, or more than the
/// address space holds.
#[cold]
#[inline(never)]
fn bad_length(operation: &'static str, len: usize, size: usize) -> Error {
    if size == 0 {
        return Error::invalid(operation, "zero-sized element types cannot live in device memory");
    }
    if len == 0 {
        return Error::invalid(operation, "a length of 0 elements was requested; ask for at least one");
    }
    Error::invalid(
        operation,
        format!("{len} elements of {size} bytes overflow the address space; no device has that much memory"),
    )
}

/// An [`Error::InvalidArgument`] unless the two lengths match.
#[inline]
pub(crate) fn same_len(operation: &'static str, dst: usize, src: usize) -> Result<()> {
    if dst == src { Ok(()) } else { Err(len_mismatch(operation, dst, src)) }
}

#[cold]
fn len_mismatch(operation: &'static str, dst: usize, src: usize) -> Error {
    Error::refused(
        crate::error::Reason::LENGTH_MISMATCH,
        operation,
        format!("the destination holds {dst} elements but the source {src}; slice them to the same length"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_overflow_and_zero_sized_types_are_refused() {
        assert_eq!(checked_bytes::<u32>("t", 10).ok(), Some(40));
        assert!(matches!(checked_bytes::<u32>("t", 0), Err(Error::InvalidArgument { .. })));
        assert!(matches!(checked_bytes::<u64>("t", usize::MAX / 4), Err(Error::InvalidArgument { .. })));
        assert!(matches!(checked_bytes::<()>("t", 1), Err(Error::InvalidArgument { .. })));
    }

    #[test]
    fn length_mismatch_names_both_lengths() {
        assert!(same_len("t", 3, 3).is_ok());
        let e = same_len("copy", 3, 4).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains('3') && e.contains('4') && e.starts_with("copy"), "{e}");
    }
}
