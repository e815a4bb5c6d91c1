//! Allocation: the contract between buffers and the allocators they get memory from, the
//! allocators of the driver's plain, managed and pinned memory, and the allocator each thread
//! has chosen.
//!
//! * [`Allocator`] / [`PinnedAllocator`]: where device (or page-locked host) memory comes from,
//!   with the promises a buffer trusts; [`DeviceAllocation`] / [`PinnedAllocation`] are what they
//!   hand out, [`StreamRef`] the stream they are asked on, and [`StreamEvents`] the events a
//!   pool defers reuse on.
//! * The upstream allocators: [`DeviceAllocator`] (`cuMemAlloc`), [`ManagedAllocator`]
//!   (`cuMemAllocManaged`, attached as [`MemAttach`] says) and [`HostAllocator`]
//!   (`cuMemHostAlloc`). The stream-ordered one, `AsyncAllocator`, sits beside the driver's
//!   pools in `mempool`; the caching pools that build on all of them are in `pool`.
//! * [`set_allocator`] and [`using_allocator`] choose the current allocator of a thread (CuPy's
//!   names), [`set_pinned_memory_allocator`] its pinned one; `DeviceBuffer::new` allocates
//!   through it, `DeviceBuffer::new_in` through a given one. A thread that chose none gets the
//!   default pool of the stream's device (`pool::get_allocator` answers which).
//!
//! ```no_run
//! use cuhost::alloc::{DeviceAllocator, using_allocator};
//! use cuhost::{Context, Device, DeviceBuffer, Stream, StreamFlags};
//! use std::sync::Arc;
//!
//! # fn main() -> cuhost::Result<()> {
//! let ctx = Context::primary(&Device::get(0)?)?;
//! let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
//! let _scope = using_allocator(Arc::new(DeviceAllocator::new(&ctx)));
//! let buffer = DeviceBuffer::<f32>::new(&stream, 1 << 10)?; // cuMemAlloc, freed with cuMemFree
//! # Ok(())
//! # }
//! ```

mod allocator;
mod current;
mod upstream;

pub use allocator::{
    Allocator, DeviceAllocation, PinnedAllocation, PinnedAllocator, StreamEvents, StreamRef,
};
pub use current::{AllocatorGuard, set_allocator, set_pinned_memory_allocator, using_allocator};
pub(crate) use current::{current_pinned_allocator, thread_allocator};
pub use upstream::{DeviceAllocator, HostAllocator, ManagedAllocator, MemAttach};
pub(crate) use upstream::{DriverEvents, recorded_work_is_over};
