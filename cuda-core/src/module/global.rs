//! `__device__` and `__managed__` variables as typed views.

use crate::context::Context;
use crate::error::{Error, Result, check};
use crate::memory::{DeviceView, DeviceViewMut};
use cuda_driver_sys as sys;
use std::marker::PhantomData;

/// A global variable of loaded code, viewed as `len()` elements of `T`. It borrows the module
/// or library it is in.
///
/// Copies are synchronous: they return when the data has arrived. [`Global::as_view`] gives a
/// [`DeviceView`] for everything that takes device memory (async copies, kernel arguments).
#[derive(Debug)]
pub struct Global<'m, T> {
    ptr: sys::CUdeviceptr,
    len: usize,
    ctx: &'m Context,
    _element: PhantomData<T>,
}

impl<'m, T: bytemuck::Pod> Global<'m, T> {
    pub(crate) fn new(ctx: &'m Context, ptr: sys::CUdeviceptr, bytes: usize) -> Result<Global<'m, T>> {
        let size = std::mem::size_of::<T>();
        if size == 0 || bytes % size != 0 {
            return Err(Error::invalid(
                "Global",
                format!(
                    "the variable holds {bytes} bytes, not a whole number of {size}-byte elements; view it with an element type whose size divides {bytes}"
                ),
            ));
        }
        if ptr % std::mem::align_of::<T>() as u64 != 0 {
            return Err(Error::invalid(
                "Global",
                format!(
                    "the variable at {ptr:#x} is not aligned to {} bytes, as the element type needs",
                    std::mem::align_of::<T>()
                ),
            ));
        }
        Ok(Global { ptr, len: bytes / size, ctx, _element: PhantomData })
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the variable has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The variable's device address, e.g. to pass to a kernel.
    pub fn device_ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    fn check_len(&self, operation: &'static str, other: usize) -> Result<()> {
        if other == self.len {
            Ok(())
        } else {
            Err(Error::invalid(
                operation,
                format!(
                    "the variable has {} elements but the host slice has {other}; give a slice of the same length",
                    self.len
                ),
            ))
        }
    }

    /// The variable as a device view.
    pub fn as_view(&self) -> DeviceView<'m, T> {
        // SAFETY: the variable holds `len` elements of T in `ctx` and lives as long as the
        // module or library that `'m` borrows.
        unsafe { DeviceView::from_raw(self.ctx, self.ptr, self.len) }
    }

    /// The variable as a mutable device view.
    pub fn as_view_mut(&mut self) -> DeviceViewMut<'m, T> {
        // SAFETY: as for `as_view`; `&mut self` keeps this handle from making a second view.
        unsafe { DeviceViewMut::from_raw(self.ctx, self.ptr, self.len) }
    }

    /// Writes `data` into the variable
    /// ([`cuMemcpyHtoD`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_from_host(&self, data: &[T]) -> Result<()> {
        self.check_len("Global::copy_from_host", data.len())?;
        self.ctx.enter()?;
        // SAFETY: the variable and the slice both hold `size_bytes()` bytes.
        check("cuMemcpyHtoD", unsafe { sys::cuMemcpyHtoD(self.ptr, data.as_ptr().cast(), self.size_bytes()) })
    }

    /// Reads the variable into `data`
    /// ([`cuMemcpyDtoH`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_to_host(&self, data: &mut [T]) -> Result<()> {
        self.check_len("Global::copy_to_host", data.len())?;
        self.ctx.enter()?;
        // SAFETY: the variable and the slice both hold `size_bytes()` bytes; T is Pod, so any
        // bytes the device holds are a valid T.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH(data.as_mut_ptr().cast(), self.ptr, self.size_bytes())
        })
    }

    /// Reads the variable into a new vector; fails as [`copy_to_host`](Self::copy_to_host)
    /// does.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }
}
