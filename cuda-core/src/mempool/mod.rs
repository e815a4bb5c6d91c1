//! The stream-ordered allocator: memory pools of the driver (`cuMemPool*`).
