//! `__device__` and `__managed__` variables as typed views.

use crate::context::Context;
use crate::error::{Error, Result};
use crate::memory::{DeviceView, DeviceViewMut};
use crate::track::StreamUses;
use cuhost_driver_sys as sys;
use std::marker::PhantomData;
use std::sync::Mutex;

/// A global variable of loaded code, viewed as `len()` elements of `T`. It borrows the module
/// or library it is in.
///
/// **One handle per variable.** A module or library hands out at most one live `Global` for a
/// variable at a time ([`Module::global`](super::Module::global),
/// [`Library::global`](super::Library::global), [`Library::managed`](super::Library::managed));
/// asking again while it lives is an [`Error::InvalidArgument`], and dropping it lets the next
/// one be made. Through that one handle, reads take `&self` and writes `&mut self`, and the views
/// borrow it, so the usual borrow rules hold for the variable's memory: any number of readers,
/// or one writer. (Kernels of the module may still write the variable: a launch is `unsafe`,
/// and its contract covers that.)
///
/// Copies are synchronous: they return when the data has arrived. [`Global::as_view`] gives a
/// [`DeviceView`] for everything that takes device memory (async copies, kernel arguments).
///
/// An exclusive view lives no longer than the `&mut` borrow of the handle, so a second one
/// cannot exist beside it (F11 of the soundness review):
///
/// ```compile_fail,E0499
/// # fn main() -> cuhost::Result<()> {
/// use cuhost::{Context, Device, Module};
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let module = Module::from_ptx(&ctx, "")?;
/// let mut g = module.global::<u32>("x")?;
/// let (a, b) = (g.as_view_mut(), g.as_view_mut());
/// drop((a, b));
/// # Ok(()) }
/// ```
///
/// nor can a view outlive the handle (after which another handle could be made and written):
///
/// ```compile_fail,E0505
/// # fn main() -> cuhost::Result<()> {
/// use cuhost::{Context, Device, Module};
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let module = Module::from_ptx(&ctx, "")?;
/// let mut g = module.global::<u32>("x")?;
/// let view = g.as_view_mut();
/// drop(g);
/// let mut again = module.global::<u32>("x")?;
/// again.copy_from_host(&[1])?;
/// drop(view);
/// # Ok(()) }
/// ```
///
/// A second handle to the same variable is refused at run time:
///
/// ```no_run
/// # fn main() -> cuhost::Result<()> {
/// use cuhost::{Context, Device, Error, Module};
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let module = Module::from_ptx(&ctx, ".version 8.0\n.target sm_70\n.address_size 64\n.global .u32 x;\n")?;
/// let mut g = module.global::<u32>("x")?;
/// assert!(matches!(module.global::<u32>("x"), Err(Error::InvalidArgument { .. })));
/// g.copy_from_host(&[7])?;
/// g.as_view_mut().memset_d32(1)?;
/// assert_eq!(g.to_vec()?, [1]);
/// drop(g);
/// assert_eq!(module.global::<u32>("x")?.to_vec()?, [1]); // free again
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Global<'m, T> {
    ptr: sys::CUdeviceptr,
    len: usize,
    ctx: &'m Context,
    claims: &'m Claims,
    /// The streams work through the views was queued on, waited for on drop.
    uses: StreamUses,
    _element: PhantomData<T>,
}

/// The variables of a module or library that have a live [`Global`], by address.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    held: Mutex<Vec<sys::CUdeviceptr>>,
}

impl Claims {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<sys::CUdeviceptr>> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Claims the variable at `ptr`, or says that a `Global` of it is alive.
    fn claim(&self, operation: &'static str, name: &str, ptr: sys::CUdeviceptr) -> Result<()> {
        let mut held = self.lock();
        if held.contains(&ptr) {
            return Err(Error::invalid(
                operation,
                format!(
                    "a Global of the variable `{name}` is alive already; use that one, or drop it before asking again"
                ),
            ));
        }
        held.push(ptr);
        Ok(())
    }

    fn release(&self, ptr: sys::CUdeviceptr) {
        self.lock().retain(|&p| p != ptr);
    }
}

impl<T> Drop for Global<'_, T> {
    fn drop(&mut self) {
        // Work queued through a view (an `_async` copy or memset, a kernel argument) may still
        // use the variable: finish it before the next handle, or the unload, can touch it.
        match self.uses.synchronize_for_release() {
            Ok(()) => self.claims.release(self.ptr),
            // Not waited for: the variable stays claimed, so no new handle reaches it.
            Err(e) => self.ctx.defer(e.dropping("Global", None)),
        }
    }
}

impl<'m, T: bytemuck::Pod> Global<'m, T> {
    /// Checks the variable's size and alignment for `T` and claims it in `claims`.
    pub(crate) fn new(
        operation: &'static str,
        name: &str,
        ctx: &'m Context,
        claims: &'m Claims,
        ptr: sys::CUdeviceptr,
        bytes: usize,
    ) -> Result<Global<'m, T>> {
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
        claims.claim(operation, name, ptr)?;
        Ok(Global {
            ptr,
            len: bytes / size,
            ctx,
            claims,
            uses: StreamUses::unretained(),
            _element: PhantomData,
        })
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
            Err(Error::refused(
                crate::error::Reason::LENGTH_MISMATCH,
                operation,
                format!(
                    "the variable has {} elements but the host slice has {other}; give a slice of the same length",
                    self.len
                ),
            ))
        }
    }

    /// The variable as a device view, which borrows this handle: no exclusive view or write
    /// can be made while it lives.
    ///
    /// Dropping the handle waits on the host for the streams that work through its views was
    /// queued on (`_async` copies and memsets, kernel arguments), since that work may still
    /// use the variable. Synchronous copies through a view run on the default stream.
    pub fn as_view(&self) -> DeviceView<'_, T> {
        // The variable holds `len` elements of T in `ctx` and lives as long as the module or
        // library that `'m` borrows, which outlives `self`; this is the only handle to it
        // (`Claims`), writes through it need `&mut self`, and its drop waits for `uses`.
        DeviceView::unordered(self.ctx, self.ptr, self.len, None, &self.uses)
    }

    /// The variable as an exclusive device view, which borrows this handle mutably: it is the
    /// only way to the variable's memory while it lives.
    ///
    /// Dropping the handle waits for the work queued through its views, as for
    /// [`as_view`](Self::as_view).
    pub fn as_view_mut(&mut self) -> DeviceViewMut<'_, T> {
        // As for `as_view`; the view borrows `self` mutably and this is the only handle to the
        // variable, so nothing else reaches its memory while the view lives.
        DeviceViewMut::unordered(self.ctx, self.ptr, self.len, None, &self.uses)
    }

    /// Writes `data` into the variable
    /// ([`cuMemcpyHtoD`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// A slice of another length is an [`Error::InvalidArgument`]. A write needs the handle
    /// exclusively:
    ///
    /// ```compile_fail,E0596
    /// # fn main() -> cuhost::Result<()> {
    /// use cuhost::{Context, Device, Module};
    /// let ctx = Context::primary(&Device::get(0)?)?;
    /// let module = Module::from_ptx(&ctx, "")?;
    /// let g = module.global::<u32>("x")?; // not `mut`
    /// g.copy_from_host(&[1])?;
    /// # Ok(()) }
    /// ```
    pub fn copy_from_host(&mut self, data: &[T]) -> Result<()> {
        self.check_len("Global::copy_from_host", data.len())?;
        self.ctx.enter()?;
        // SAFETY: the variable and the slice both hold `size_bytes()` bytes.
        unsafe { driver!(cuMemcpyHtoD(self.ptr, data.as_ptr().cast(), self.size_bytes())) }
    }

    /// Reads the variable into `data`
    /// ([`cuMemcpyDtoH`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_to_host(&self, data: &mut [T]) -> Result<()> {
        self.check_len("Global::copy_to_host", data.len())?;
        self.ctx.enter()?;
        // SAFETY: the variable and the slice both hold `size_bytes()` bytes; T is Pod, so any
        // bytes the device holds are a valid T.
        unsafe { driver!(cuMemcpyDtoH(data.as_mut_ptr().cast(), self.ptr, self.size_bytes())) }
    }

    /// Reads the variable into a new vector; fails as [`copy_to_host`](Self::copy_to_host)
    /// does.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }
}
