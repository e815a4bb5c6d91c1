//! Buffer registration ([`Registration`]) and symmetric windows ([`Window`]).

use super::buffers::Output;
use super::collective::address;
use super::comm::Communicator;
use super::version::{require, since};
use crate::error::{Error, Result};
use crate::flags::flags;
use crate::memory::{DeviceView, DeviceViewMut};
use bytemuck::Pod;
use cuhost_nccl_sys as nccl;
use std::ffi::c_void;

/// Memory registered with a communicator, so that collectives on it can skip NCCL's staging
/// copies
/// ([`ncclCommRegister`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclcommregister),
/// NCCL 2.19); deregistered (`ncclCommDeregister`) when dropped, before the memory can be.
///
/// It holds the exclusive borrow of the memory it was made from, so the memory outlives it;
/// collectives use the memory through [`view`](Self::view) and [`view_mut`](Self::view_mut).
/// Registration pays off for memory from [`NcclAllocator`](super::NcclAllocator) (or other
/// memory made with the driver's virtual memory calls); other memory is accepted and used as
/// it is.
#[derive(Debug)]
pub struct Registration<'a, T> {
    handle: *mut c_void,
    comm: &'a Communicator,
    memory: Registered<'a, T>,
}

/// The memory of a registration or window: the exclusive view it was made from, which keeps
/// the memory borrowed and, lent out again, notes work on other streams with the memory's
/// owner as the view itself does (the stream rule).
#[derive(Debug)]
struct Registered<'a, T> {
    memory: DeviceViewMut<'a, T>,
}

impl<'a, T: Pod> Registered<'a, T> {
    fn new(memory: impl Output<T> + 'a) -> Registered<'a, T> {
        Registered { memory: memory.into_view_mut() }
    }

    fn view(&self) -> DeviceView<'_, T> {
        self.memory.as_view()
    }

    fn view_mut(&mut self) -> DeviceViewMut<'_, T> {
        self.memory.reborrow()
    }
}

impl Communicator {
    /// Registers `memory` with the communicator while the returned value lives; see
    /// [`Registration`]. Memory of another device is an [`Error::InvalidArgument`].
    pub fn register<'a, T: Pod>(&'a self, memory: impl Output<T> + 'a) -> Result<Registration<'a, T>> {
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
        Ok(Registration { handle, comm: self, memory: Registered::new(memory) })
    }

    /// Registers `memory` as this rank's part of a window that every rank registers together
    /// (a collective call,
    /// [`ncclCommWindowRegister`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclcommwindowregister),
    /// NCCL 2.27); with [`WindowFlags::COLL_SYMMETRIC`] every rank passes memory of the same
    /// size, and collectives on it can use symmetric kernels. Deregistered when dropped.
    ///
    /// The address must be aligned to 4096 bytes (NCCL's requirement), and the call must not be
    /// inside a [`Group`](super::Group) (NCCL would hand the window over only when it ends);
    /// otherwise this is an [`Error::InvalidArgument`]. One rank per thread or process.
    pub fn register_window<'a, T: Pod>(
        &'a self,
        memory: impl Output<T> + 'a,
        flags: WindowFlags,
    ) -> Result<Window<'a, T>> {
        const OP: &str = "Communicator::register_window";
        require("ncclCommWindowRegister", since::WINDOW)?;
        super::comm::refuse_in_group(OP)?;
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
        if !self.is_blocking() {
            self.wait_until_done(OP)?;
        }
        Ok(Window { raw, comm: self, memory: Registered::new(memory) })
    }
}

impl<T: Pod> Registration<'_, T> {
    /// The raw registration handle.
    pub fn as_raw(&self) -> *mut c_void {
        self.handle
    }

    /// The registered memory, for reading.
    pub fn view(&self) -> DeviceView<'_, T> {
        self.memory.view()
    }

    /// The registered memory, for writing.
    pub fn view_mut(&mut self) -> DeviceViewMut<'_, T> {
        self.memory.view_mut()
    }
}

impl<T> Drop for Registration<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the handle came from this communicator and is deregistered once.
        let status = unsafe { nccl::ncclCommDeregister(self.comm.as_raw(), self.handle) };
        if let Err(e) = self.comm.status("ncclCommDeregister", status) {
            self.comm.context().defer(e.dropping("Registration", None));
        }
    }
}

flags! {
    /// How a window is registered (`NCCL_WIN_*`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash)]
    pub struct WindowFlags: u32 {
        /// `NCCL_WIN_COLL_SYMMETRIC`: every rank registers memory of the same size, for
        /// symmetric collective kernels.
        const COLL_SYMMETRIC = nccl::NCCL_WIN_COLL_SYMMETRIC;
    }
}

/// This rank's part of a window registered by every rank
/// ([`Communicator::register_window`]); deregistered (`ncclCommWindowDeregister`) when
/// dropped. Like a [`Registration`], it holds the memory's borrow and lends it out through
/// [`view`](Self::view) and [`view_mut`](Self::view_mut).
#[derive(Debug)]
pub struct Window<'a, T> {
    raw: nccl::ncclWindow_t,
    comm: &'a Communicator,
    memory: Registered<'a, T>,
}

impl<T: Pod> Window<'_, T> {
    /// The raw window.
    pub fn as_raw(&self) -> nccl::ncclWindow_t {
        self.raw
    }

    /// The window's memory, for reading.
    pub fn view(&self) -> DeviceView<'_, T> {
        self.memory.view()
    }

    /// The window's memory, for writing.
    pub fn view_mut(&mut self) -> DeviceViewMut<'_, T> {
        self.memory.view_mut()
    }
}

impl<T> Drop for Window<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the window came from this communicator and is deregistered once.
        let status = unsafe { nccl::ncclCommWindowDeregister(self.comm.as_raw(), self.raw) };
        if let Err(e) = self.comm.status("ncclCommWindowDeregister", status) {
            self.comm.context().defer(e.dropping("Window", None));
        }
    }
}
