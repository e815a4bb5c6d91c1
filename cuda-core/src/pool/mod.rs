//! Memory pools and allocators, as CuPy's `cupy.cuda` offers them.
//!
//! Buffers ([`DeviceBuffer`](crate::DeviceBuffer), [`PinnedBuffer`](crate::memory::PinnedBuffer))
//! get their memory from the allocators of this module:
//!
//! * [`MemoryPool`]: a per-device cache of device memory, the default allocator of
//!   `DeviceBuffer::new`. Requests are rounded up to 512 bytes and served best fit from the
//!   arena of the stream they are made on; freed blocks merge with free neighbours and are
//!   reused by the same stream at once. A block used on another stream is kept from reuse until
//!   that stream has passed the point of use
//!   ([`DeviceBuffer::record_stream`](crate::DeviceBuffer::record_stream)).
//! * [`PinnedMemoryPool`]: page-locked host memory in power-of-two size classes, the default
//!   allocator of `PinnedBuffer::new`.
//! * [`Allocator`] / [`PinnedAllocator`]: where memory comes from; the upstream allocators
//!   ([`DeviceAllocator`], [`ManagedAllocator`], [`AsyncAllocator`], [`HostAllocator`]), the
//!   pools, or a type of yours. [`set_allocator`], [`get_allocator`] and [`using_allocator`]
//!   choose the current allocator per thread (CuPy's names); `DeviceBuffer::new` allocates
//!   through it, `DeviceBuffer::new_in` through a given one.
//! * [`hooks`]: callbacks around every upstream allocation, pool allocation and free, of
//!   device and pinned pools alike ([`hooks::MemoryKind`]); [`DebugPrintHook`] and
//!   [`LineProfileHook`].
//! * [`capi`]: a C interface to the current allocator, declared for C and C++ in the header
//!   `cuda-core/include/cuda_core_memory.h` (get a handle, malloc, free, destroy the handle,
//!   and the last error), with its rules on ownership, threads and errors.
//!
//! ```no_run
//! use cuda_core::pool::{MemoryPool, PoolLimit, using_allocator};
//! use cuda_core::{Context, Device, DeviceBuffer, Stream, StreamFlags};
//! use std::sync::Arc;
//!
//! # fn main() -> cuda_core::Result<()> {
//! let ctx = Context::primary(&Device::get(0)?)?;
//! let pool = Arc::new(MemoryPool::new(&ctx)?);
//! pool.set_limit(PoolLimit::Fraction(0.5))?;
//! let compute = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
//! let copies = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
//!
//! let _scope = using_allocator(pool.clone());
//! let mut buffer = DeviceBuffer::<f32>::new(&compute, 1 << 18)?; // 1 MiB from `pool`
//! // ... queue work on `compute`, then a copy of `buffer` on `copies` ...
//! buffer.record_stream(&copies)?; // not reused until `copies` has passed this point
//! drop(buffer); // held back until `compute` and `copies` pass this point
//! assert_eq!(pool.used_bytes(), 1 << 20); // still held for `copies`
//! # Ok(())
//! # }
//! ```

mod allocator;
pub mod capi;
mod core;
mod current;
pub mod hooks;
mod memory_pool;
mod pinned;
mod report_hooks;
mod shard;
mod spin;
mod upstream;

pub use self::core::ALLOCATION_UNIT;
pub use allocator::{
    Allocator, DeviceAllocation, PinnedAllocation, PinnedAllocator, StreamEvents, StreamRef,
};
pub use current::{
    AllocatorGuard, default_pinned_memory_pool, get_allocator, release_default_pools, set_allocator,
    set_pinned_memory_allocator, using_allocator,
};
pub(crate) use current::{current_pinned_allocator, thread_allocator};
pub(crate) use memory_pool::default_pool_of;
pub use memory_pool::{GPU_MEMORY_LIMIT_ENV, MemoryPool, PoolLimit, default_memory_pool};
pub use pinned::PinnedMemoryPool;
pub use report_hooks::{DebugPrintHook, LineProfileHook, LineUsage};
pub use upstream::{AsyncAllocator, DeviceAllocator, HostAllocator, ManagedAllocator};

#[cfg(test)]
mod tests;
