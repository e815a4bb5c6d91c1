//! [`GrowableBuffer`]: a typed device buffer that grows in place by mapping more physical
//! memory behind a fixed reservation, and shrinks by unmapping it.

#![forbid(unsafe_code)]

use super::mapping::{AccessGrant, Mapping};
use super::physical::{PhysicalMemory, round_up};
use super::properties::{AllocationProperties, Granularity};
use super::range::AddressRange;
use crate::error::{Error, Result};
use crate::memory::{MemLocation, checked_bytes};
use crate::mempool::Access;
use crate::stream::Stream;
use crate::track::StreamUses;
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::marker::PhantomData;

/// `len` elements of `T` at an address that never changes, in a virtual range reserved once
/// for up to [`max_len`](Self::max_len) elements.
///
/// * **Growing never copies.** [`resize`](Self::resize) to a larger length maps one new
///   physical chunk behind the elements already there (its size rounded up to the recommended
///   granularity); the elements keep their address and contents, and views and kernel
///   arguments made later see one contiguous buffer. New elements hold whatever the memory
///   held.
/// * **Shrinking gives memory back**, in the chunks it was mapped in: every chunk wholly past
///   the new length is unmapped and released, after the work queued on the buffer's stream is
///   done.
/// * **Like any buffer** it has views ([`view`](Self::view), [`slice`](Self::slice), ...)
///   for copies and memsets, and it passes to a kernel as an argument directly (its device
///   address). Its synchronous copies run in its stream's order.
///
/// Dropping it waits for the work queued on its stream, and on the other streams its views
/// were used on, then unmaps and releases everything; if that wait fails the memory stays
/// mapped (leaked) rather than unmapped under running work. Errors there are kept in the
/// context (see
/// [`Context::take_deferred_errors`](crate::context::Context::take_deferred_errors)).
///
/// ```no_run
/// use cuhost::vmm::GrowableBuffer;
/// use cuhost::{Context, Device, Stream, StreamFlags};
/// # fn main() -> cuhost::Result<()> {
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
/// let mut log = GrowableBuffer::<u32>::new(&stream, 1 << 30)?; // up to 4 GiB, none mapped yet
/// log.extend_from_slice(&[1, 2, 3])?;
/// let address = log.as_raw();
/// log.resize(100 << 20)?; // 400 MiB, no copy
/// assert_eq!(log.as_raw(), address);
/// assert_eq!(log.slice(..3)?.to_vec()?, [1, 2, 3]);
/// log.resize(3)?; // the chunks past the first element's go back
/// # Ok(()) }
/// ```
pub struct GrowableBuffer<T: Pod> {
    /// The device address of the first element; a kernel argument points at this field.
    pub(crate) ptr: sys::CUdeviceptr,
    len: usize,
    /// Bytes mapped from the start of the range.
    mapped: usize,
    chunks: Vec<Mapping>,
    chunk_granularity: usize,
    props: AllocationProperties,
    grants: Vec<AccessGrant>,
    range: AddressRange,
    stream: Stream,
    /// The other streams its views were used on.
    uses: StreamUses,
    _marker: PhantomData<T>,
}

impl<T: Pod> std::fmt::Debug for GrowableBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrowableBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("mapped_bytes", &self.mapped)
            .field("reserved_bytes", &self.range.size())
            .field("chunks", &self.chunks.len())
            .finish()
    }
}

impl<T: Pod> GrowableBuffer<T> {
    /// An empty buffer on `stream` that can grow to `max_len` elements: the addresses are
    /// reserved now, memory of the stream's device is mapped as it grows, readable and
    /// writable by that device.
    ///
    /// A `max_len` of 0, or one whose byte size overflows, is an [`Error::InvalidArgument`].
    pub fn new(stream: &Stream, max_len: usize) -> Result<GrowableBuffer<T>> {
        let device = stream.context().device();
        GrowableBuffer::with_properties(
            stream,
            max_len,
            AllocationProperties::device(device),
            &[AccessGrant::device(device, Access::ReadWrite)],
        )
    }

    /// As [`new`](Self::new), with the physical memory made with `props` (exportable handle
    /// types, compression, another device) and the access of every chunk set to `grants`
    /// (add other devices here to let them use the buffer). `grants` must not be empty.
    ///
    /// A `max_len` of 0 or one whose size overflows, or no grant, is an
    /// [`Error::InvalidArgument`]; properties the device does not support, or addresses that
    /// cannot be reserved, fail with the driver's status.
    pub fn with_properties(
        stream: &Stream,
        max_len: usize,
        props: AllocationProperties,
        grants: &[AccessGrant],
    ) -> Result<GrowableBuffer<T>> {
        const OP: &str = "GrowableBuffer::with_properties";
        let max_bytes = checked_bytes::<T>(OP, max_len)?;
        if grants.is_empty() {
            return Err(Error::invalid(OP, "no access grant was given; grant the stream's device access"));
        }
        let chunk_granularity = props.granularity(Granularity::Recommended)?;
        let reserved = round_up(max_bytes, chunk_granularity).ok_or_else(|| {
            Error::invalid(OP, format!("{max_bytes} bytes overflow when rounded up to the granularity"))
        })?;
        let range = AddressRange::reserve(stream.context(), reserved, 0)?;
        Ok(GrowableBuffer {
            ptr: range.as_raw(),
            len: 0,
            mapped: 0,
            chunks: Vec::new(),
            chunk_granularity,
            props,
            grants: grants.to_vec(),
            range,
            stream: stream.clone(),
            uses: StreamUses::unretained(),
            _marker: PhantomData,
        })
    }

    /// Changes the length to `new_len` elements. Growing maps one more physical chunk where
    /// the mapped memory does not reach; shrinking unmaps and releases the chunks wholly past
    /// the new end, once the work queued on the buffer's stream is done. The address never
    /// changes.
    ///
    /// More than [`max_len`](Self::max_len) elements is an [`Error::InvalidArgument`]; a
    /// device out of memory is the driver's error, and leaves the buffer as it was.
    pub fn resize(&mut self, new_len: usize) -> Result<()> {
        let bytes = match new_len.checked_mul(std::mem::size_of::<T>()) {
            Some(b) if b <= self.range.size() => b,
            _ => {
                return Err(Error::invalid(
                    "GrowableBuffer::resize",
                    format!(
                        "{new_len} elements exceed the {} reserved for this buffer; create it with a \
                         larger max_len",
                        self.max_len()
                    ),
                ));
            }
        };
        if bytes > self.mapped {
            self.grow_mapping(bytes)?;
        } else {
            self.release_past(bytes)?;
        }
        self.len = new_len;
        Ok(())
    }

    /// Maps one chunk so that at least `bytes` are mapped.
    fn grow_mapping(&mut self, bytes: usize) -> Result<()> {
        let size = chunk_for(bytes, self.mapped, self.chunk_granularity, self.range.size());
        let physical = PhysicalMemory::new(self.range.context(), size, &self.props)?;
        let mapping = self.range.map(self.mapped, &physical)?;
        // The buffer's own memory: no second mapping of it may be made.
        physical.seal();
        mapping.set_access(&self.grants)?;
        self.chunks.push(mapping);
        self.mapped += size;
        Ok(())
    }

    /// Waits for the work queued so far on the buffer's stream and on every other stream its
    /// views were used on: unmapping is not stream-ordered. Release paths use it, so a deferred
    /// error from elsewhere does not skip the wait.
    fn wait_for_users(&mut self) -> Result<()> {
        let own = self.stream.synchronize_for_release();
        self.uses.synchronize_for_release().and(own)
    }

    /// Unmaps the chunks that start at or past `bytes`.
    fn release_past(&mut self, bytes: usize) -> Result<()> {
        let base = self.ptr;
        let past = move |m: &Mapping| (m.as_raw() - base) as usize >= bytes;
        if !self.chunks.last().is_some_and(past) {
            return Ok(());
        }
        self.wait_for_users()?;
        while self.chunks.last().is_some_and(past) {
            if let Some(last) = self.chunks.pop() {
                self.mapped -= last.size();
            }
        }
        self.stream.context().take_deferred()
    }

    /// Appends `src`, growing the buffer, and returns when the copy is done.
    ///
    /// Growing past [`max_len`](Self::max_len) is an [`Error::InvalidArgument`], and fails as
    /// [`resize`](Self::resize) does otherwise; the copy's failure is returned after the buffer
    /// has grown.
    pub fn extend_from_slice(&mut self, src: &[T]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let start = self.len;
        let end = start
            .checked_add(src.len())
            .ok_or_else(|| Error::invalid("GrowableBuffer::extend_from_slice", "the new length overflows"))?;
        self.resize(end)?;
        self.slice_mut(start..)?.copy_from_host(src)
    }

    /// The device address of the first element; the same for the buffer's whole life.
    #[inline]
    pub fn as_raw(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    crate::memory::element_count!();

    /// The most elements the buffer can grow to.
    #[inline]
    pub fn max_len(&self) -> usize {
        self.range.size() / std::mem::size_of::<T>()
    }

    /// The elements the mapped memory holds: the buffer grows to this without mapping more.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.mapped / std::mem::size_of::<T>()
    }

    /// The physical chunks mapped, in address order.
    #[inline]
    pub fn chunks(&self) -> &[Mapping] {
        &self.chunks
    }

    /// The stream the buffer is ordered on.
    #[inline]
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Notes that work touching the buffer is about to be queued on `stream` with `current`
    /// made current; nothing to do on the buffer's own stream.
    #[inline]
    pub(crate) fn used_on(
        &self,
        current: &crate::context::Context,
        stream: &Stream,
        access: crate::track::Access,
    ) -> Result<()> {
        self.uses.note(current, Some(&self.stream), stream, access)
    }

    crate::memory::device_views!("GrowableBuffer");

    /// Copies the buffer into a new `Vec`, in the buffer's stream's order, and returns when it
    /// is done (an empty buffer gives an empty `Vec` without a call). A failed copy, or a fault
    /// of earlier work on the stream, is the driver's error.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.view().to_vec()
    }

    /// Where the physical memory lives.
    pub fn location(&self) -> MemLocation {
        self.props.location
    }
}

/// The size of the one chunk that makes at least `bytes` mapped when `mapped` are: the
/// shortfall rounded up to `granularity`, but no more than is left of the `reserved` bytes
/// (a multiple of `granularity`, and at least `bytes`).
fn chunk_for(bytes: usize, mapped: usize, granularity: usize, reserved: usize) -> usize {
    let wanted = round_up(bytes.saturating_sub(mapped), granularity).unwrap_or(usize::MAX);
    wanted.min(reserved.saturating_sub(mapped))
}

impl<T: Pod> Drop for GrowableBuffer<T> {
    fn drop(&mut self) {
        if self.chunks.is_empty() {
            return;
        }
        // Work queued on the stream (or on others, through views) may still use the memory,
        // and unmapping is not ordered: wait, and if the wait fails, keep the memory mapped (a
        // leak, not an unmap under running work).
        if let Err(e) = self.wait_for_users() {
            self.stream.context().defer(e.dropping("GrowableBuffer", None));
            // Each chunk holds the range, so the addresses stay reserved too.
            std::mem::forget(std::mem::take(&mut self.chunks));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::chunk_for;

    const G: usize = 2 << 20;

    #[test]
    fn one_chunk_covers_the_shortfall_in_whole_granules() {
        assert_eq!(chunk_for(4000, 0, G, 64 * G), G);
        assert_eq!(chunk_for(G + 4, G, G, 64 * G), G);
        assert_eq!(chunk_for(3 * G + 20, G, G, 64 * G), 3 * G);
        assert_eq!(chunk_for(1024 * G, 512 * G, G, 1024 * G), 512 * G);
    }

    #[test]
    fn chunks_stop_at_the_reservation() {
        assert_eq!(chunk_for(8 * G, 6 * G, 4 * G, 8 * G), 2 * G);
        assert_eq!(chunk_for(G, 0, G, G), G);
    }
}
