//! [`PinnedBuffer`]: a buffer of a [`PinnedMemoryPool`].

use super::allocator::PinnedAllocation;
use super::pinned::PinnedMemoryPool;
use crate::{Error, Result, Stream};
use cuda_driver_sys as sys;
use std::mem::MaybeUninit;

/// Page-locked host memory from a [`PinnedMemoryPool`], given back when dropped.
pub struct PinnedBuffer<'p> {
    pub(super) pool: &'p PinnedMemoryPool,
    pub(super) allocation: PinnedAllocation,
    pub(super) size: usize,
    pub(super) recorded: Vec<Stream>,
}

// SAFETY: the buffer owns its host memory exclusively; the pool it borrows is Sync.
unsafe impl Send for PinnedBuffer<'_> {}
// SAFETY: shared references only read the memory.
unsafe impl Sync for PinnedBuffer<'_> {}

impl std::fmt::Debug for PinnedBuffer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuffer").field("ptr", &self.allocation.ptr).field("size", &self.size).finish()
    }
}

impl PinnedBuffer<'_> {
    /// The host address (null for an empty buffer).
    pub fn as_ptr(&self) -> *const u8 {
        self.allocation.ptr
    }

    /// The host address, for writing.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.allocation.ptr
    }

    /// The bytes asked for.
    pub fn len(&self) -> usize {
        self.size
    }

    /// Whether the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The bytes as possibly uninitialized memory, to fill.
    pub fn as_uninit_mut(&mut self) -> &mut [MaybeUninit<u8>] {
        if self.size == 0 {
            return &mut [];
        }
        // SAFETY: the buffer owns `size` bytes at `ptr` exclusively while `&mut self` lives.
        unsafe { std::slice::from_raw_parts_mut(self.allocation.ptr.cast(), self.size) }
    }

    /// Copies `data` into the start of the buffer; more bytes than fit is an error.
    pub fn write(&mut self, data: &[u8]) -> Result<()> {
        if data.len() > self.size {
            return Err(Error::invalid(
                "PinnedBuffer::write",
                format!("{} bytes do not fit in a buffer of {}", data.len(), self.size),
            ));
        }
        for (d, s) in self.as_uninit_mut().iter_mut().zip(data) {
            d.write(*s);
        }
        Ok(())
    }

    /// The bytes, read.
    ///
    /// # Safety
    ///
    /// The bytes were written (by [`write`](Self::write) or a completed copy), and no queued
    /// copy writes them now.
    pub unsafe fn as_slice(&self) -> &[u8] {
        if self.size == 0 {
            return &[];
        }
        // SAFETY: the caller guarantees the bytes are initialized and not being written.
        unsafe { std::slice::from_raw_parts(self.allocation.ptr, self.size) }
    }

    /// Marks the buffer as used by work queued on `stream` (an asynchronous copy): when it is
    /// dropped, it is kept from reuse until that work has completed.
    pub fn record_stream(&mut self, stream: &Stream) {
        if !self.recorded.iter().any(|s| s == stream) {
            self.recorded.push(stream.clone());
        }
    }
}

impl Drop for PinnedBuffer<'_> {
    #[track_caller]
    fn drop(&mut self) {
        // An error leaves the buffer out of reuse; there is no context to report it to. No
        // heap allocation for the usual cases of no or one recorded stream.
        let _ = match self.recorded.as_slice() {
            [] => self.pool.give_back(self.allocation, &[]),
            [one] => self.pool.give_back(self.allocation, &[one.as_raw()]),
            many => {
                let raws: Vec<sys::CUstream> = many.iter().map(Stream::as_raw).collect();
                self.pool.give_back(self.allocation, &raws)
            }
        };
    }
}
