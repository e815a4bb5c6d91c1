//! Device memory exported as a Linux dma-buf file descriptor, for the drivers of other devices
//! (network cards doing GPUDirect RDMA, video and display engines) to import.

use super::view::DeviceView;
use crate::error::Result;
use cuhost_driver_sys as sys;
use std::os::fd::{FromRawFd, OwnedFd};

/// How the exported dma-buf maps the memory for its importers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DmaBufMapping {
    /// The driver's choice.
    #[default]
    Default,
    /// Force a mapping over PCIe, even where the devices share a faster link
    /// (`CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`; CUDA 12.8 drivers and later).
    Pcie,
}

impl DmaBufMapping {
    fn flags(self) -> u64 {
        match self {
            DmaBufMapping::Default => 0,
            // `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`, by value: not every supported
            // header names it.
            DmaBufMapping::Pcie => 1,
        }
    }
}

impl<T> DeviceView<'_, T> {
    /// The viewed memory as a new dma-buf file descriptor
    /// ([`cuMemGetHandleForAddressRange`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// with `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`), owned by the caller and closed when dropped.
    ///
    /// The device must support dma-buf
    /// ([`Device::dma_buf_supported`](crate::device::Device::dma_buf_supported)), and the view must
    /// start and end on host page boundaries; otherwise the driver refuses with its status
    /// (`CUDA_ERROR_NOT_SUPPORTED`, `CUDA_ERROR_INVALID_VALUE`).
    ///
    /// The descriptor names the memory, not the buffer. Nothing in this crate or in safe Rust
    /// reaches memory through it: importing it (`mmap`, an RDMA registration, a Vulkan or
    /// EGL import) takes another API's `unsafe` call, whose contract is where the memory's
    /// lifetime is promised: keep the buffer for as long as an importer uses the memory.
    pub fn export_dma_buf(&self, mapping: DmaBufMapping) -> Result<OwnedFd> {
        self.ctx.enter()?;
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: the out-parameter is a live `int`, as the dma-buf handle type writes; the
        // range is the view's, live while it is borrowed.
        unsafe {
            driver!(cuMemGetHandleForAddressRange(
                (&mut fd as *mut std::ffi::c_int).cast(),
                self.ptr,
                self.len * std::mem::size_of::<T>(),
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                mapping.flags(),
            ))
        }?;
        if fd < 0 {
            return Err(crate::error::Error::invalid(
                "DeviceView::export_dma_buf",
                format!("the driver reported success with descriptor {fd}"),
            ));
        }
        // SAFETY: a new descriptor the driver opened for the caller, owned by nothing else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}
