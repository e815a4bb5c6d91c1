//! Copies and sets of memory: linear copies between host slices, pinned memory and device
//! views (synchronous and stream-ordered, and between contexts), 2D and 3D copies between
//! device memory, pitched buffers and CUDA arrays, batched copies ([`CopyBatch`],
//! [`CopyBatch3D`]), batched prefetches and discards of managed memory, and memsets.
//!
//! The memory comes from [`memory`](crate::memory): its owning types and views are what these
//! operations take. Work queued on a stream other than a buffer's own follows the crate's
//! stream rule by itself (see the guide's memory chapter): nothing is declared by hand.

mod batch;
mod batch3d;
mod copy3d;
mod linear;
mod managed_batch;
mod memset;
mod operand3d;

pub use batch::{BatchDestination, BatchSource, CopyBatch, CopyRegion};
pub use batch3d::CopyBatch3D;
pub use copy3d::{
    memcpy_2d, memcpy_2d_async, memcpy_3d, memcpy_3d_async, memcpy_3d_peer, memcpy_3d_peer_async,
};
pub use managed_batch::{DiscardBatch, DiscardPrefetchBatch, PrefetchBatch};
pub use operand3d::{CopyRegion3D, Destination3D, Source3D, Volume};
