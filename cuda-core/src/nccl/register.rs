//! Buffer registration ([`Registration`]) and symmetric windows ([`Window`]).

use super::buffers::Input;
use super::collective::address;
use super::comm::Communicator;
use super::version::{require, since};
use crate::error::{Error, Result};
use bitflags::bitflags;
use nccl_sys as nccl;
use std::ffi::c_void;
use std::marker::PhantomData;

/// Memory registered with a communicator, so that collectives on it can skip NCCL's staging
/// copies
/// ([`ncclCommRegister`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclcommregister),
/// NCCL 2.19); deregistered (`ncclCommDeregister`) when dropped, before the memory can be.
///
/// Registration pays off for memory from [`NcclAllocator`](super::NcclAllocator) (or other
/// memory made with the driver's virtual memory calls); other memory is accepted and used as
/// it is.
#[derive(Debug)]
pub struct Registration<'a> {
    handle: *mut c_void,
    comm: &'a Communicator,
    _memory: PhantomData<&'a ()>,
}

impl Communicator {
    /// Registers `memory` with the communicator while the returned value lives; see
    /// [`Registration`]. Memory of another device is an [`Error::InvalidArgument`].
    pub fn register<'a, T>(&'a self, memory: impl Input<T> + 'a) -> Result<Registration<'a>> {
        const OP: &str = "Communicator::register";
        require("ncclCommRegister", since::REGISTER)?;
        self.context().take_deferred()?;
        self.on_device(OP, &memory)?;
        let bytes = memory.count() * std::mem::size_of::<T>();
        let mut handle = std::ptr::null_mut();
        // SAFETY: device memory of the communicator's device, `bytes` long, which the borrow in
        // the returned value keeps alive until it is deregistered.
        let status = unsafe { nccl::ncclCommRegister(self.as_raw(), address(&memory), bytes, &mut handle) };
        self.status("ncclCommRegister", status)?;
        Ok(Registration { handle, comm: self, _memory: PhantomData })
    }

    /// Registers `memory` as this rank's part of a window that every rank registers together
    /// (a collective call,
    /// [`ncclCommWindowRegister`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclcommwindowregister),
    /// NCCL 2.27); with [`WindowFlags::COLL_SYMMETRIC`] every rank passes memory of the same
    /// size, and collectives on it can use symmetric kernels. Deregistered when dropped.
    ///
    /// The address must be aligned to 4096 bytes (NCCL's requirement), else this is an
    /// [`Error::InvalidArgument`].
    pub fn register_window<'a, T>(
        &'a self,
        memory: impl Input<T> + 'a,
        flags: WindowFlags,
    ) -> Result<Window<'a>> {
        const OP: &str = "Communicator::register_window";
        require("ncclCommWindowRegister", since::WINDOW)?;
        self.context().take_deferred()?;
        self.on_device(OP, &memory)?;
        let align = u64::from(nccl::NCCL_WIN_REQUIRED_ALIGNMENT);
        if memory.device_ptr() % align != 0 {
            return Err(Error::invalid(
                OP,
                format!(
                    "address {:#x} is not aligned to {align} bytes; use memory from NcclAllocator",
                    memory.device_ptr()
                ),
            ));
        }
        let bytes = memory.count() * std::mem::size_of::<T>();
        let mut raw = std::ptr::null_mut();
        let flags = i32::try_from(flags.bits()).unwrap_or(0);
        // SAFETY: as in `register`.
        let status =
            unsafe { nccl::ncclCommWindowRegister(self.as_raw(), address(&memory), bytes, &mut raw, flags) };
        self.status("ncclCommWindowRegister", status)?;
        Ok(Window { raw, comm: self, _memory: PhantomData })
    }
}

impl Registration<'_> {
    /// The raw registration handle.
    pub fn as_raw(&self) -> *mut c_void {
        self.handle
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle came from this communicator and is deregistered once.
        let status = unsafe { nccl::ncclCommDeregister(self.comm.as_raw(), self.handle) };
        if let Err(e) = self.comm.status("ncclCommDeregister", status) {
            self.comm.context().defer(e);
        }
    }
}

bitflags! {
    /// How a window is registered (`NCCL_WIN_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct WindowFlags: u32 {
        /// `NCCL_WIN_COLL_SYMMETRIC`: every rank registers memory of the same size, for
        /// symmetric collective kernels.
        const COLL_SYMMETRIC = nccl::NCCL_WIN_COLL_SYMMETRIC;
    }
}

/// This rank's part of a window registered by every rank
/// ([`Communicator::register_window`]); deregistered (`ncclCommWindowDeregister`) when
/// dropped.
#[derive(Debug)]
pub struct Window<'a> {
    raw: nccl::ncclWindow_t,
    comm: &'a Communicator,
    _memory: PhantomData<&'a ()>,
}

impl Window<'_> {
    /// The raw window.
    pub fn as_raw(&self) -> nccl::ncclWindow_t {
        self.raw
    }
}

impl Drop for Window<'_> {
    fn drop(&mut self) {
        // SAFETY: the window came from this communicator and is deregistered once.
        let status = unsafe { nccl::ncclCommWindowDeregister(self.comm.as_raw(), self.raw) };
        if let Err(e) = self.comm.status("ncclCommWindowDeregister", status) {
            self.comm.context().defer(e);
        }
    }
}
