//! Memory pools and allocators, as CuPy's `cupy.cuda` offers them.
//!
//! * [`MemoryPool`]: a per-device cache of device memory. Requests are rounded up to 512
//!   bytes and served best fit from the arena of the stream they are made on; freed blocks
//!   merge with free neighbours and are reused by the same stream at once. A block used on
//!   another stream is kept from reuse until that stream has passed the point of use
//!   ([`PoolBuffer::record_stream`]).
//! * [`PinnedMemoryPool`]: page-locked host memory in power-of-two size classes.
//! * [`Allocator`] / [`PinnedAllocator`]: where memory comes from; the upstream allocators in
//!   [`upstream`], the pools, or a type of yours. [`set_allocator`], [`get_allocator`] and
//!   [`using_allocator`] choose the current allocator per thread.
//! * [`hooks`]: callbacks around every upstream allocation, pool allocation and free.
//! * [`capi`]: a C interface to the current allocator.

mod allocator;
#[cfg_attr(not(test), allow(dead_code))]
mod core;
#[cfg_attr(not(test), allow(dead_code))]
mod shard;

pub use self::core::ALLOCATION_UNIT;
pub use allocator::{Allocator, DeviceAllocation, PinnedAllocation, PinnedAllocator, StreamEvents};

#[cfg(test)]
mod fake;
#[cfg(test)]
mod property;
#[cfg(test)]
mod tests;
