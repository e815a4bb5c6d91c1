//! [`ManagedTensor`]: an owned value lent to a DLPack consumer.

use super::TensorFlags;
use super::dtype::{DlpackDtype, size_matches};
use super::ffi::{
    DLDataType, DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
};
use super::layout;
use crate::error::{Error, Result};
use crate::memory::DeviceBuffer;
use std::ffi::c_void;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

/// The manager context: one heap block that holds the owner of the memory, the shape and
/// strides the tensor points to, and both C headers (only one of them is handed out).
struct Holder<P> {
    versioned: DLManagedTensorVersioned,
    legacy: DLManagedTensor,
    shape: Box<[i64]>,
    strides: Box<[i64]>,
    /// Never read: it is here to be dropped when the deleter frees the holder.
    #[allow(dead_code)]
    owner: P,
}

/// Frees the holder at `ctx`, dropping the owner. A panic while dropping is caught here: it
/// must not unwind into the consumer's C code.
///
/// # Safety
///
/// `ctx` is null or the manager context of a live tensor made by [`ManagedTensor::from_owner`]
/// with owner type `P`, and is not used afterwards.
unsafe fn free_holder<P>(ctx: *mut c_void) {
    if ctx.is_null() {
        return;
    }
    let holder = ctx.cast::<Holder<P>>();
    // SAFETY: the caller passes the pointer `Box::into_raw` gave in `from_owner`, once.
    let freed = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(holder) })));
    if let Err(payload) = freed {
        // Dropping the panic's payload could panic too; only then is something leaked.
        if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            std::mem::forget(again);
        }
    }
}

/// The deleter of the versioned header.
unsafe extern "C" fn delete_versioned<P>(tensor: *mut DLManagedTensorVersioned) {
    if tensor.is_null() {
        return;
    }
    // SAFETY: the consumer passes the header it was given, which lives in its holder.
    let ctx = unsafe { (*tensor).manager_ctx };
    // SAFETY: the header's manager context is its holder, and a deleter runs once.
    unsafe { free_holder::<P>(ctx) }
}

/// The deleter of the unversioned header.
unsafe extern "C" fn delete_legacy<P>(tensor: *mut DLManagedTensor) {
    if tensor.is_null() {
        return;
    }
    // SAFETY: as in `delete_versioned`.
    let ctx = unsafe { (*tensor).manager_ctx };
    // SAFETY: as in `delete_versioned`.
    unsafe { free_holder::<P>(ctx) }
}

/// An owned tensor ready to be lent to a DLPack consumer (PyTorch, CuPy, JAX, ...).
///
/// It holds a `DLManagedTensorVersioned` whose manager context owns the memory (for
/// [`ManagedTensor::from_buffer`], the [`DeviceBuffer`]). Dropping it calls the deleter, which
/// frees everything. [`ManagedTensor::into_raw`] (or [`ManagedTensor::into_raw_legacy`] for a
/// consumer that takes the unversioned `DLManagedTensor`) hands it over: from then on the
/// consumer calls the deleter, once, when it is done, from any thread.
///
/// The deleter never unwinds into the consumer: a panic while dropping the owner is caught.
pub struct ManagedTensor {
    versioned: NonNull<DLManagedTensorVersioned>,
    legacy: NonNull<DLManagedTensor>,
}

// SAFETY: the holder's owner is `Send` (required by `from_owner`) and nothing else in it is
// tied to a thread; the deleter may run on any thread.
unsafe impl Send for ManagedTensor {}
// SAFETY: a shared `ManagedTensor` only reads its header.
unsafe impl Sync for ManagedTensor {}

impl ManagedTensor {
    /// Lends a device buffer as a one-dimensional tensor of `buf.len()` elements, on device
    /// type `kDLCUDA` with the device ordinal of the buffer's context.
    ///
    /// The buffer moves into the tensor and is dropped (its memory freed) by the deleter.
    /// A length past DLPack's `int64_t` is an [`Error::InvalidArgument`] (the buffer is then
    /// dropped); otherwise it fails as [`from_buffer_with_shape`](Self::from_buffer_with_shape)
    /// does.
    pub fn from_buffer<T: DlpackDtype>(buf: DeviceBuffer<T>) -> Result<ManagedTensor> {
        let len = i64::try_from(buf.len()).map_err(|_| {
            Error::invalid(
                "ManagedTensor::from_buffer",
                format!("{} elements do not fit DLPack's int64_t", buf.len()),
            )
        })?;
        Self::from_buffer_with_shape(buf, &[len], None)
    }

    /// Lends a device buffer as a tensor of `shape`, compact row-major when `strides` is `None`,
    /// otherwise with the given strides, counted in elements.
    ///
    /// The layout is checked against the buffer: the elements of `shape` (with strides, the
    /// largest index they reach, plus one) must fit in `buf.len()`, extents and strides must not
    /// be negative and there must be as many strides as extents; otherwise this is an
    /// [`Error::InvalidArgument`] naming the mismatch. On any error the buffer has been dropped
    /// (its memory freed); to keep it, check first with [`check_layout`](super::check_layout).
    /// The tensor's `strides` are always filled in, also when `None` is given (some consumers
    /// want them).
    pub fn from_buffer_with_shape<T: DlpackDtype>(
        buf: DeviceBuffer<T>,
        shape: &[i64],
        strides: Option<&[i64]>,
    ) -> Result<ManagedTensor> {
        const OP: &str = "ManagedTensor::from_buffer";
        if buf.is_graph_memory() {
            return Err(Error::refused(
                crate::error::Reason::DURING_CAPTURE,
                OP,
                "the buffer was allocated in a stream capture: its memory exists only inside that graph's \
                 launches and cannot be lent to another framework",
            ));
        }
        if !size_matches::<T>() {
            return Err(Error::invalid(
                OP,
                format!(
                    "the element type's DTYPE is {} ({} bits) but the type is {} bytes",
                    T::DTYPE,
                    T::DTYPE.size_in_bits(),
                    std::mem::size_of::<T>()
                ),
            ));
        }
        let ordinal = buf.context().device().ordinal();
        let device_id = i32::try_from(ordinal).map_err(|_| {
            Error::invalid(OP, format!("device ordinal {ordinal} does not fit DLPack's device_id"))
        })?;
        let device = DLDevice { device_type: DLDeviceType::kDLCUDA, device_id };
        let address = usize::try_from(buf.as_raw()).map_err(|_| {
            Error::invalid(OP, format!("device address {:#x} does not fit a host pointer", buf.as_raw()))
        })?;
        // A device address: not host memory, so it carries no provenance.
        let data = std::ptr::without_provenance_mut::<c_void>(address);
        let len = buf.len();
        // SAFETY: the buffer owns `len` elements of `T` (whose size DTYPE matches) at `data` on
        // that device, and it lives in the tensor until the deleter drops it.
        unsafe { Self::from_owner(buf, data, len, device, T::DTYPE, shape, strides) }
    }

    /// Lends memory that `owner` keeps alive: `data` is the first element, `len` the number of
    /// elements of `dtype` there, `shape` and `strides` (in elements; compact row-major when
    /// `None`) the layout, checked against `len` as in [`ManagedTensor::from_buffer_with_shape`].
    /// `byte_offset` is 0 and the flags are empty.
    ///
    /// This is the general form: it lends any owned memory (pinned host memory as
    /// `kDLCUDAHost`, managed memory as `kDLCUDAManaged`, another crate's buffers). The owner is
    /// dropped by the deleter, on whichever thread the consumer calls it from; a panic in its
    /// `Drop` is caught there. On error, `owner` is dropped.
    ///
    /// # Safety
    ///
    /// `data` must be the address of `len` elements of `dtype` in the memory `device` names,
    /// valid and not freed while `owner` lives, and not accessed through anything else in a way
    /// the consumer does not expect.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn from_owner<P: Send + 'static>(
        owner: P,
        data: *mut c_void,
        len: usize,
        device: DLDevice,
        dtype: DLDataType,
        shape: &[i64],
        strides: Option<&[i64]>,
    ) -> Result<ManagedTensor> {
        const OP: &str = "ManagedTensor::from_owner";
        layout::check_fits(OP, shape, strides, len)?;
        let ndim = i32::try_from(shape.len()).map_err(|_| {
            Error::invalid(OP, format!("{} dimensions do not fit DLPack's ndim", shape.len()))
        })?;
        let strides: Box<[i64]> = match strides {
            Some(s) => s.into(),
            None => layout::compact_strides(OP, shape)?.into(),
        };
        let tensor = DLTensor {
            data,
            device,
            ndim,
            dtype,
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        };
        let holder = Box::into_raw(Box::new(Holder {
            versioned: DLManagedTensorVersioned {
                version: DLPackVersion::CURRENT,
                manager_ctx: std::ptr::null_mut(),
                deleter: None,
                flags: 0,
                dl_tensor: tensor,
            },
            legacy: DLManagedTensor { dl_tensor: tensor, manager_ctx: std::ptr::null_mut(), deleter: None },
            shape: shape.into(),
            strides,
            owner,
        }));
        // SAFETY: `holder` is a fresh, unaliased allocation; the header fields are plain data
        // without drop glue, and the shape and strides are heap slices that stay where they are
        // until the holder is freed.
        unsafe {
            let ctx = holder.cast::<c_void>();
            let shape_ptr = (*holder).shape.as_mut_ptr();
            let strides_ptr = (*holder).strides.as_mut_ptr();
            let v = &raw mut (*holder).versioned;
            (*v).manager_ctx = ctx;
            (*v).deleter = Some(delete_versioned::<P>);
            (*v).dl_tensor.shape = shape_ptr;
            (*v).dl_tensor.strides = strides_ptr;
            let l = &raw mut (*holder).legacy;
            (*l).manager_ctx = ctx;
            (*l).deleter = Some(delete_legacy::<P>);
            (*l).dl_tensor.shape = shape_ptr;
            (*l).dl_tensor.strides = strides_ptr;
            Ok(ManagedTensor { versioned: NonNull::new_unchecked(v), legacy: NonNull::new_unchecked(l) })
        }
    }

    fn header(&self) -> &DLManagedTensorVersioned {
        // SAFETY: the header lives in the holder until the deleter runs, which only `drop` (or
        // the consumer, after `into_raw`) does.
        unsafe { self.versioned.as_ref() }
    }

    /// The tensor as consumers will see it.
    pub fn dl_tensor(&self) -> &DLTensor {
        &self.header().dl_tensor
    }

    /// The extents.
    pub fn shape(&self) -> &[i64] {
        let t = self.dl_tensor();
        // SAFETY: the holder's shape slice has `ndim` entries and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(t.shape, usize::try_from(t.ndim).unwrap_or(0)) }
    }

    /// The strides, in elements (always filled in).
    pub fn strides(&self) -> &[i64] {
        let t = self.dl_tensor();
        // SAFETY: as for the shape.
        unsafe { std::slice::from_raw_parts(t.strides, usize::try_from(t.ndim).unwrap_or(0)) }
    }

    /// The element type.
    pub fn dtype(&self) -> DLDataType {
        self.dl_tensor().dtype
    }

    /// Where the data lives.
    pub fn device(&self) -> DLDevice {
        self.dl_tensor().device
    }

    /// The flags of the versioned header (empty unless set).
    pub fn flags(&self) -> TensorFlags {
        TensorFlags::from_bits_retain(self.header().flags)
    }

    /// Sets the flags of the versioned header, e.g. [`TensorFlags::READ_ONLY`] to ask consumers
    /// not to write. The unversioned header has no flags: [`ManagedTensor::into_raw_legacy`]
    /// drops them.
    pub fn set_flags(&mut self, flags: TensorFlags) {
        // SAFETY: `&mut self` is the only access to the header.
        unsafe { self.versioned.as_mut().flags = flags.bits() }
    }

    /// The versioned header, still owned by `self`.
    pub fn as_raw(&self) -> *const DLManagedTensorVersioned {
        self.versioned.as_ptr()
    }

    /// Hands the tensor over as a `DLManagedTensorVersioned` (a capsule named
    /// `"dltensor_versioned"` in Python). The receiver must call its deleter exactly once.
    pub fn into_raw(self) -> *mut DLManagedTensorVersioned {
        let p = self.versioned.as_ptr();
        std::mem::forget(self);
        p
    }

    /// Hands the tensor over as an unversioned `DLManagedTensor` (a capsule named `"dltensor"`)
    /// for consumers from before DLPack 1.0. The receiver must call its deleter exactly once.
    /// The flags are not carried over.
    pub fn into_raw_legacy(self) -> *mut DLManagedTensor {
        let p = self.legacy.as_ptr();
        std::mem::forget(self);
        p
    }
}

impl Drop for ManagedTensor {
    fn drop(&mut self) {
        let p = self.versioned.as_ptr();
        // SAFETY: the tensor was not handed over, so its deleter has not run; it runs once here.
        unsafe {
            if let Some(deleter) = (*p).deleter {
                deleter(p);
            }
        }
    }
}

impl fmt::Debug for ManagedTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedTensor")
            .field("device", &self.device())
            .field("dtype", &format_args!("{}", self.dtype()))
            .field("shape", &self.shape())
            .field("strides", &self.strides())
            .field("flags", &self.flags())
            .finish()
    }
}
