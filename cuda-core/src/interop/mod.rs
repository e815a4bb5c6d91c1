//! Sharing with other processes and APIs.
//!
//! * [`ipc`]: device memory and events shared with other processes on the same host through
//!   the driver's legacy IPC handles (`cuIpc*`). Physical allocations of the virtual memory
//!   management calls are shared as file descriptors or fabric handles instead
//!   ([`crate::vmm::PhysicalMemory::export_fd`]), and stream-ordered pools through
//!   [`crate::mempool::ipc`].
//!
//! See the [Memory Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
//! and [Event Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html)
//! sections of the driver API.

pub mod ipc;
