//! Runtime copies: 1D and peer, synchronous and on a stream; the traits every copy takes.
//! 2D, array and 3D copies are in `copy_2d`.
//!
//! Directions are found by the runtime (`cudaMemcpyDefault`, unified addressing). Lengths and
//! pitches are checked against both sides before any call.
//!
//! A copy takes the crate's memory: device buffers of any memory space
//! ([`DeviceBuffer`], [`ManagedBuffer`](crate::memory::ManagedBuffer)) and their views
//! ([`DeviceView`], [`DeviceViewMut`]), pinned host buffers ([`PinnedBuffer`]), registered host
//! memory ([`HostRegistration`]) and host slices.
//!
//! A stream-ordered copy returns before the data has moved. It is safe between device memory
//! (given back in its stream's order after the other streams it was used on, which every copy
//! here notes on it) and [`PinnedBuffer`]s, which record the copy: the host cannot write one (nor, when the copy writes it, read it) or
//! free it until the copy is done. With a plain host slice the host could touch the memory while
//! the copy runs, so that form is [`memcpy_async_unchecked`], which is `unsafe`.

use super::HostRegistration;
use crate::context::Context;
use crate::error::{Result, check_runtime};
use crate::memory::{DeviceBuffer, DeviceView, DeviceViewMut, MemorySpace, PinnedBuffer, same_len};
use bytemuck::Pod;
use cuhost_cudart_sys as rt;
use std::ffi::c_void;

/// Memory a copy can read: host slices, pinned and registered host memory, device buffers and
/// views.
///
/// # Safety
///
/// `source_ptr` must return the address of `source_len()` elements of `T` that stay allocated,
/// and that nothing writes, while `self` is borrowed.
pub unsafe trait CopySource<T: Pod> {
    /// The number of elements.
    fn source_len(&self) -> usize;
    /// The first element's address, once the memory may be read: a [`PinnedBuffer`] first
    /// waits for the stream-ordered copies in flight that write it, and fails when that wait
    /// does (a failed copy). Other memory does not fail.
    fn source_ptr(&self) -> Result<*const c_void>;
}

/// Memory a copy can write: host slices, pinned and registered host memory, device buffers and
/// exclusive views.
///
/// # Safety
///
/// `destination_ptr` must return the address of `destination_len()` elements of `T` that stay
/// allocated, and that nothing else reads or writes, while `self` is mutably borrowed.
pub unsafe trait CopyDestination<T: Pod> {
    /// The number of elements.
    fn destination_len(&self) -> usize;
    /// The first element's address, once the memory may be written: a [`PinnedBuffer`] first
    /// waits for every stream-ordered copy in flight that uses it, and fails when that wait
    /// does. Other memory does not fail.
    fn destination_ptr(&mut self) -> Result<*mut c_void>;
}

/// Device memory of one context ([`DeviceBuffer`] of any memory space, [`DeviceView`],
/// [`DeviceViewMut`]): given back in its stream's order, after the other streams that work on
/// it was queued on ([`note_stream`](Self::note_stream)), so stream-ordered work on it never
/// touches memory given back.
///
/// # Safety
///
/// The memory is device (or managed) memory of `resident_context()`, and giving it back waits
/// for, or is ordered after, the device work queued on its own stream and on every stream
/// given to `note_stream` before that work was queued.
pub unsafe trait DeviceResident {
    /// The context the memory belongs to.
    fn resident_context(&self) -> &Context;

    /// Notes that work touching the memory is about to be queued on `stream`, with `stream`'s
    /// context current, so that giving the memory back waits for it.
    ///
    /// Fails with an [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a default
    /// stream that would name another stream than the one meant (a per-thread default stream of
    /// another thread, a default stream of another context than the memory's).
    fn note_stream(&self, stream: &crate::stream::Stream) -> Result<()>;
}

/// Memory a safe stream-ordered copy can read: device memory, or a [`PinnedBuffer`], which
/// records the copy so that the host cannot write or free it until the copy is done.
///
/// # Safety
///
/// `read_on` calls `enqueue` at most once, with the address of `source_len()` elements that
/// stay allocated, and unwritten by the host, until `stream` has passed the work `enqueue`
/// queued on it.
pub unsafe trait AsyncSource<T: Pod>: CopySource<T> {
    /// Calls `enqueue` (which queues work on `stream` that reads the memory) with the memory's
    /// address, and records that work where the memory needs it.
    ///
    /// Returns `enqueue`'s error, or the driver's status when the work cannot be recorded (an
    /// event that cannot be made or recorded).
    fn read_on(
        &self,
        stream: &crate::stream::Stream,
        enqueue: impl FnOnce(*const c_void) -> Result<()>,
    ) -> Result<()>;
}

/// Memory a safe stream-ordered copy can write: device memory, or a [`PinnedBuffer`], which
/// records the copy so that the host cannot read, write or free it until the copy is done.
///
/// # Safety
///
/// `write_on` calls `enqueue` at most once, with the address of `destination_len()` elements
/// that stay allocated, and untouched by the host, until `stream` has passed the work `enqueue`
/// queued on it.
pub unsafe trait AsyncDestination<T: Pod>: CopyDestination<T> {
    /// Calls `enqueue` (which queues work on `stream` that writes the memory) with the memory's
    /// address, and records that work where the memory needs it.
    ///
    /// Returns `enqueue`'s error, or the driver's status when the work cannot be recorded.
    fn write_on(
        &mut self,
        stream: &crate::stream::Stream,
        enqueue: impl FnOnce(*mut c_void) -> Result<()>,
    ) -> Result<()>;
}

// SAFETY: a slice is its elements, borrowed.
unsafe impl<T: Pod> CopySource<T> for [T] {
    fn source_len(&self) -> usize {
        self.len()
    }
    fn source_ptr(&self) -> Result<*const c_void> {
        Ok(self.as_ptr().cast())
    }
}

// SAFETY: as above, exclusively.
unsafe impl<T: Pod> CopyDestination<T> for [T] {
    fn destination_len(&self) -> usize {
        self.len()
    }
    fn destination_ptr(&mut self) -> Result<*mut c_void> {
        Ok(self.as_mut_ptr().cast())
    }
}

// SAFETY: the registration dereferences to its borrowed elements.
unsafe impl<T: Pod> CopySource<T> for HostRegistration<'_, T> {
    fn source_len(&self) -> usize {
        self.len()
    }
    fn source_ptr(&self) -> Result<*const c_void> {
        Ok(self.as_ptr().cast())
    }
}

// SAFETY: as above, exclusively.
unsafe impl<T: Pod> CopyDestination<T> for HostRegistration<'_, T> {
    fn destination_len(&self) -> usize {
        self.len()
    }
    fn destination_ptr(&mut self) -> Result<*mut c_void> {
        Ok(self.as_mut_ptr().cast())
    }
}

/// Refuses a pinned buffer that captured copies use: a launch of their graph could use the
/// memory during the copy, which holds no guard (copy through the guard of `as_slice` or
/// `as_mut_slice` instead, which keeps such launches out).
fn refuse_graph_shared<T: Pod>(buffer: &PinnedBuffer<T>) -> Result<()> {
    if buffer.uses()?.is_shared() {
        return Err(crate::error::Error::invalid(
            "runtime copy",
            "copies captured into a graph use this pinned buffer, and a launch of the graph could use it \
             during this copy; copy from `&*buffer.as_slice()?` or to `&mut *buffer.as_mut_slice()?`, \
             whose guards keep such launches out",
        ));
    }
    Ok(())
}

// SAFETY: `as_slice` waits for the copies in flight that write the buffer, new ones need
// `&mut self`, and a buffer that graph launches may use is refused.
unsafe impl<T: Pod> CopySource<T> for PinnedBuffer<T> {
    fn source_len(&self) -> usize {
        self.len()
    }
    fn source_ptr(&self) -> Result<*const c_void> {
        refuse_graph_shared(self)?;
        Ok(self.as_slice()?.as_ptr().cast())
    }
}

// SAFETY: `as_mut_slice` waits for every copy in flight that uses the buffer, new ones need a
// borrow of it, and a buffer that graph launches may use is refused.
unsafe impl<T: Pod> CopyDestination<T> for PinnedBuffer<T> {
    fn destination_len(&self) -> usize {
        self.len()
    }
    fn destination_ptr(&mut self) -> Result<*mut c_void> {
        refuse_graph_shared(self)?;
        Ok(self.as_mut_slice()?.as_mut_ptr().cast())
    }
}

// SAFETY: the buffer's copy tracker records the work (reading the memory) after `enqueue`
// queued it, and keeps the host from writing or freeing the memory until it is done.
unsafe impl<T: Pod> AsyncSource<T> for PinnedBuffer<T> {
    fn read_on(
        &self,
        stream: &crate::stream::Stream,
        enqueue: impl FnOnce(*const c_void) -> Result<()>,
    ) -> Result<()> {
        let ptr = self.as_ptr().cast::<c_void>();
        self.uses()?.around(stream, false, || enqueue(ptr))
    }
}

// SAFETY: as above, for work that writes the memory: the host can neither read, write nor
// free it until the work is done.
unsafe impl<T: Pod> AsyncDestination<T> for PinnedBuffer<T> {
    fn write_on(
        &mut self,
        stream: &crate::stream::Stream,
        enqueue: impl FnOnce(*mut c_void) -> Result<()>,
    ) -> Result<()> {
        let ptr = self.as_mut_ptr_unchecked().cast::<c_void>();
        self.uses()?.around(stream, true, || enqueue(ptr))
    }
}

/// Device memory as the runtime takes it: an address (unified addressing).
#[inline]
fn device_address(ptr: u64) -> *mut c_void {
    ptr as usize as *mut c_void
}

macro_rules! device_source {
    ($ty:ty, $($generics:tt)*) => {
        // SAFETY: the buffer or view holds `len()` elements of device memory of its context,
        // alive while it is borrowed.
        unsafe impl<$($generics)*> CopySource<T> for $ty {
            fn source_len(&self) -> usize {
                self.len()
            }
            fn source_ptr(&self) -> Result<*const c_void> {
                Ok(device_address(self.as_raw()).cast_const())
            }
        }

        // SAFETY: device memory, given back in its stream's order after the streams noted on it.
        unsafe impl<$($generics)*> DeviceResident for $ty {
            fn resident_context(&self) -> &Context {
                self.context()
            }

            fn note_stream(&self, stream: &crate::stream::Stream) -> Result<()> {
                self.used_on(stream.context(), stream, crate::track::Access::Write)
            }
        }

        // SAFETY: device memory, given back after the streams noted on it, and `stream` is
        // noted before the work is queued, so queued work never reads memory given back; the
        // host does not touch it.
        unsafe impl<$($generics)*> AsyncSource<T> for $ty {
            fn read_on(
                &self,
                stream: &crate::stream::Stream,
                enqueue: impl FnOnce(*const c_void) -> Result<()>,
            ) -> Result<()> {
                self.used_on(stream.context(), stream, crate::track::Access::Read)?;
                enqueue(device_address(self.as_raw()).cast_const())
            }
        }
    };
}

macro_rules! device_destination {
    ($ty:ty, $($generics:tt)*) => {
        // SAFETY: as for the source, exclusively borrowed.
        unsafe impl<$($generics)*> CopyDestination<T> for $ty {
            fn destination_len(&self) -> usize {
                self.len()
            }
            fn destination_ptr(&mut self) -> Result<*mut c_void> {
                Ok(device_address(self.as_raw()))
            }
        }

        // SAFETY: as for the source.
        unsafe impl<$($generics)*> AsyncDestination<T> for $ty {
            fn write_on(
                &mut self,
                stream: &crate::stream::Stream,
                enqueue: impl FnOnce(*mut c_void) -> Result<()>,
            ) -> Result<()> {
                self.note_stream(stream)?;
                enqueue(device_address(self.as_raw()))
            }
        }
    };
}

device_source!(DeviceBuffer<T, S>, T: Pod, S: MemorySpace);
device_destination!(DeviceBuffer<T, S>, T: Pod, S: MemorySpace);
device_source!(DeviceView<'_, T>, T: Pod);
device_source!(DeviceViewMut<'_, T>, T: Pod);
device_destination!(DeviceViewMut<'_, T>, T: Pod);

/// Completes a synchronous runtime copy or memset: the runtime may return from those before the
/// data has landed (a copy from pageable memory once it is staged, a memset or a peer copy once
/// it is queued), so wait for the default stream they ran on (`cudaStreamSynchronize` of the
/// null stream, which is the per-thread one when the runtime was loaded that way). Afterwards
/// work queued on any stream sees the result.
pub(crate) fn finished(queued: Result<()>) -> Result<()> {
    queued?;
    // SAFETY: the null stream is always valid.
    check_runtime("cudaStreamSynchronize", unsafe { rt::cudaStreamSynchronize(std::ptr::null_mut()) })
}

/// Copies all of `src` into `dst`, which must have the same length, and returns when it is
/// done ([`cudaMemcpy`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// Like `cudaMemcpy`, it runs on the default stream: work queued on non-blocking streams that
/// uses either side must be waited for first. It then waits for the default stream (the C call
/// may return once a copy from pageable memory is staged), so the result is visible to work
/// queued afterwards on any stream. A [`PinnedBuffer`] side first waits for its own
/// stream-ordered copies in flight.
///
/// Lengths that differ are an [`Error::InvalidArgument`](crate::Error::InvalidArgument),
/// checked before any call.
pub fn memcpy<T: Pod, D: CopyDestination<T> + ?Sized, S: CopySource<T> + ?Sized>(
    dst: &mut D,
    src: &S,
) -> Result<()> {
    same_len("runtime::memcpy", dst.destination_len(), src.source_len())?;
    let bytes = src.source_len() * std::mem::size_of::<T>();
    let (d, s) = (dst.destination_ptr()?, src.source_ptr()?);
    // SAFETY: both sides hold `bytes` bytes (trait contracts and the check above) and stay
    // borrowed until the copy is done.
    finished(check_runtime("cudaMemcpy", unsafe {
        rt::cudaMemcpy(d, s, bytes, rt::cudaMemcpyKind::cudaMemcpyDefault)
    }))
}

/// Queues a copy of all of `src` into `dst` (same length) on `stream`
/// ([`cudaMemcpyAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// Safe because each side is device memory or a [`PinnedBuffer`]: a pinned buffer records the
/// copy, so the host waits for it before writing the buffer (or, when the copy writes it,
/// reading it) and the memory is not reused before it is done; device memory notes `stream`
/// when it is not its own, and is not given back before `stream` has passed the copy. For
/// plain host slices, see [`memcpy_async_unchecked`].
///
/// `stream` may be a runtime [`Stream`](super::Stream) or any [`crate::stream::Stream`].
///
/// Lengths that differ are an [`Error::InvalidArgument`](crate::Error::InvalidArgument),
/// checked before any call.
pub fn memcpy_async<T, D, S>(dst: &mut D, src: &S, stream: &crate::stream::Stream) -> Result<()>
where
    T: Pod,
    D: AsyncDestination<T> + ?Sized,
    S: AsyncSource<T> + ?Sized,
{
    same_len("runtime::memcpy_async", dst.destination_len(), src.source_len())?;
    let bytes = src.source_len() * std::mem::size_of::<T>();
    stream.context().enter()?;
    src.read_on(stream, |s| {
        dst.write_on(stream, |d| {
            // SAFETY: both sides hold `bytes` bytes and stay allocated, and untouched by the
            // host, until the copy has run (the traits' contracts).
            check_runtime("cudaMemcpyAsync", unsafe {
                rt::cudaMemcpyAsync(
                    d,
                    s,
                    bytes,
                    rt::cudaMemcpyKind::cudaMemcpyDefault,
                    stream.as_raw().cast(),
                )
            })
        })
    })
}

/// Queues a copy between any two kinds of memory on `stream`
/// ([`cudaMemcpyAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// # Safety
///
/// The copy may still run after this returns: until `stream` has passed it, host memory on
/// either side must stay allocated and must not be written (nor, for the destination, read)
/// by the host. A [`PinnedBuffer`] does not record this copy (use [`memcpy_async`] for that).
/// Pageable host memory is staged by the runtime, which makes the call partly synchronous, but
/// the rule above is what is guaranteed. Lengths that differ are an
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument), checked before any call.
pub unsafe fn memcpy_async_unchecked<T, D, S>(
    dst: &mut D,
    src: &S,
    stream: &crate::stream::Stream,
) -> Result<()>
where
    T: Pod,
    D: CopyDestination<T> + ?Sized,
    S: CopySource<T> + ?Sized,
{
    same_len("runtime::memcpy_async", dst.destination_len(), src.source_len())?;
    let bytes = src.source_len() * std::mem::size_of::<T>();
    stream.context().enter()?;
    let (d, s) = (dst.destination_ptr()?, src.source_ptr()?);
    // SAFETY: both sides hold `bytes` bytes; the caller keeps them alive until it completes.
    check_runtime("cudaMemcpyAsync", unsafe {
        rt::cudaMemcpyAsync(d, s, bytes, rt::cudaMemcpyKind::cudaMemcpyDefault, stream.as_raw().cast())
    })
}

/// The device ordinal of a context, as the runtime's `int`.
fn device_of(operation: &'static str, ctx: &Context) -> Result<std::ffi::c_int> {
    super::ordinal(operation, ctx.device().ordinal())
}

/// Copies between device memory of two devices (named by the devices of their contexts) and
/// returns when it is done; the lengths must match
/// ([`cudaMemcpyPeer`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
/// Works without peer access (staged through the host). The C call may return before the copy
/// is done; this waits for the default stream, so the result is visible to any stream.
pub fn memcpy_peer<T, D, S>(dst: &mut D, src: &S) -> Result<()>
where
    T: Pod,
    D: CopyDestination<T> + DeviceResident + ?Sized,
    S: CopySource<T> + DeviceResident + ?Sized,
{
    let op = "runtime::memcpy_peer";
    same_len(op, dst.destination_len(), src.source_len())?;
    let (dd, sd) = (device_of(op, dst.resident_context())?, device_of(op, src.resident_context())?);
    let bytes = src.source_len() * std::mem::size_of::<T>();
    let (d, s) = (dst.destination_ptr()?, src.source_ptr()?);
    // SAFETY: both sides hold `bytes` bytes of device memory on their devices.
    finished(check_runtime("cudaMemcpyPeer", unsafe { rt::cudaMemcpyPeer(d, dd, s, sd, bytes) }))
}

/// [`memcpy_peer`] queued on `stream`
/// ([`cudaMemcpyPeerAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
pub fn memcpy_peer_async<T, D, S>(dst: &mut D, src: &S, stream: &crate::stream::Stream) -> Result<()>
where
    T: Pod,
    D: CopyDestination<T> + DeviceResident + ?Sized,
    S: CopySource<T> + DeviceResident + ?Sized,
{
    let op = "runtime::memcpy_peer_async";
    same_len(op, dst.destination_len(), src.source_len())?;
    let (dd, sd) = (device_of(op, dst.resident_context())?, device_of(op, src.resident_context())?);
    let bytes = src.source_len() * std::mem::size_of::<T>();
    stream.context().enter()?;
    dst.note_stream(stream)?;
    src.note_stream(stream)?;
    let (d, s) = (dst.destination_ptr()?, src.source_ptr()?);
    // SAFETY: as above; both sides noted `stream`, so they are not given back before the copy
    // has run.
    check_runtime("cudaMemcpyPeerAsync", unsafe {
        rt::cudaMemcpyPeerAsync(d, dd, s, sd, bytes, stream.as_raw().cast())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_must_match() {
        assert!(same_len("t", 3, 4).is_err());
        assert!(same_len("t", 4, 4).is_ok());
    }

    #[test]
    fn host_slices_are_sources_and_destinations() {
        let mut host = [1u32, 2, 3];
        assert_eq!(CopySource::<u32>::source_len(&host[..]), 3);
        assert_eq!(CopySource::<u32>::source_ptr(&host[..]).ok(), Some(host.as_ptr().cast()));
        let expected = host.as_mut_ptr().cast::<c_void>();
        assert_eq!(CopyDestination::<u32>::destination_ptr(&mut host[..]).ok(), Some(expected));
    }

    #[test]
    fn device_addresses_are_passed_through() {
        assert_eq!(device_address(0x7f00_0000_1000) as usize, 0x7f00_0000_1000);
    }
}
