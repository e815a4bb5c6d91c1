//! Memory pools, as CuPy's `cupy.cuda` offers them: caches of device and pinned memory on top
//! of the allocators of [`alloc`](crate::alloc).
//!
//! Buffers ([`DeviceBuffer`](crate::memory::DeviceBuffer), [`PinnedBuffer`](crate::memory::PinnedBuffer))
//! get their memory from these pools unless they are given another allocator:
//!
//! * [`MemoryPool`]: a per-device cache of device memory, the default allocator of
//!   `DeviceBuffer::new`. Requests are rounded up to 512 bytes and served best fit from the
//!   arena of the stream they are made on; freed blocks merge with free neighbours and are
//!   reused by the same stream at once. A block used on another stream is kept from reuse until
//!   that stream has passed the point of use
//!   ([`DeviceBuffer::record_stream`](crate::memory::DeviceBuffer::record_stream)).
//! * [`PinnedMemoryPool`]: page-locked host memory in power-of-two size classes, the default
//!   allocator of `PinnedBuffer::new`.
//! * The default pools, one [`MemoryPool`] per device ([`default_memory_pool`]) and one
//!   [`PinnedMemoryPool`] ([`default_pinned_memory_pool`]), made on first use;
//!   [`release_default_pools`] gives back what they cache. [`get_allocator`] answers a thread's
//!   allocator: the one it chose ([`alloc::set_allocator`](crate::alloc::set_allocator)) or its
//!   device's default pool.
//! * [`hooks`]: callbacks around every upstream allocation, pool allocation and free, of
//!   device and pinned pools alike ([`hooks::MemoryKind`]); [`DebugPrintHook`] and
//!   [`LineProfileHook`].
//! * [`capi`]: a C interface to the current allocator, declared for C and C++ in the header
//!   `cuda-core/include/cuda_core_memory.h` (get a handle, malloc, free, destroy the handle,
//!   and the last error), with its rules on ownership, threads and errors.
//!
//! ```no_run
//! use cuhost::alloc::using_allocator;
//! use cuhost::pool::{MemoryPool, PoolLimit};
//! use cuhost::{Context, Device, DeviceBuffer, Stream, StreamFlags};
//! use std::sync::Arc;
//!
//! # fn main() -> cuhost::Result<()> {
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

pub mod capi;
mod core;
mod default;
pub mod hooks;
mod memory_pool;
mod pinned;
mod report_hooks;
mod shard;
mod spin;

pub use self::core::ALLOCATION_UNIT;
pub(crate) use default::default_pool_of;
pub use default::{default_memory_pool, default_pinned_memory_pool, get_allocator, release_default_pools};
pub use memory_pool::{GPU_MEMORY_LIMIT_ENV, MemoryPool, PoolLimit};
pub use pinned::PinnedMemoryPool;
pub use report_hooks::{DebugPrintHook, LineProfileHook, LineUsage};

#[cfg(test)]
mod tests;
