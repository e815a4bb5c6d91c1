//! [`ImportedTensor`]: a tensor lent by another library, returned to it on drop.

use super::TensorFlags;
use super::dtype::{DlpackDtype, size_matches};
use super::ffi::{
    DLDataType, DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned, DLPACK_MAJOR_VERSION,
    DLPackVersion, DLTensor,
};
use super::layout;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::memory::{DeviceView, DeviceViewMut};
use std::ffi::c_void;
use std::fmt;
use std::ptr::NonNull;

#[derive(Clone, Copy)]
enum Header {
    Versioned(NonNull<DLManagedTensorVersioned>),
    Legacy(NonNull<DLManagedTensor>),
}

/// A tensor received from a DLPack producer. It owns the producer's managed tensor: dropping it
/// calls the producer's deleter, once, after the work queued through its views on any stream
/// has completed (the producer may reuse the memory at once). If that wait fails (a faulted
/// context), the tensor is kept, not given back, and the error is printed to standard error
/// (the tensor has no context of its own to keep it in).
///
/// The getters read the tensor's fields as the producer wrote them. [`ImportedTensor::view`]
/// and [`ImportedTensor::view_mut`] lend it as a typed [`DeviceView`] / [`DeviceViewMut`] after
/// checking that it is CUDA memory of the context's device, of element type `T`, contiguous and
/// aligned.
pub struct ImportedTensor {
    header: Header,
    /// The streams work through the views was queued on: waited for before the deleter runs.
    uses: crate::track::StreamUses,
}

// SAFETY: `from_raw` and `from_raw_legacy` require a tensor that may be read and deleted from any
// thread.
unsafe impl Send for ImportedTensor {}
// SAFETY: shared access only reads the header.
unsafe impl Sync for ImportedTensor {}

/// Calls a producer's deleter and returns `error`: a tensor that cannot be imported is given back.
fn refuse<H>(header: *mut H, deleter: Option<unsafe extern "C" fn(*mut H)>, error: Error) -> Error {
    if let Some(deleter) = deleter {
        // SAFETY: the caller of `from_raw` handed over ownership; the deleter runs once.
        unsafe { deleter(header) }
    }
    error
}

/// Checks the fields that the getters rely on: a dimension count that is not negative, and a
/// shape to go with it.
fn check_tensor(operation: &'static str, t: &DLTensor) -> Result<()> {
    if t.ndim < 0 {
        return Err(Error::invalid(
            operation,
            format!("dl_tensor.ndim is {}; it must not be negative", t.ndim),
        ));
    }
    if t.ndim > 0 && t.shape.is_null() {
        return Err(Error::invalid(operation, format!("dl_tensor.shape is null but ndim is {}", t.ndim)));
    }
    Ok(())
}

impl ImportedTensor {
    /// Takes ownership of a `DLManagedTensorVersioned` (from a capsule named
    /// `"dltensor_versioned"`, or a C API).
    ///
    /// A null pointer, a major version other than 1 (whose layout this crate cannot read), a
    /// negative `ndim` or a null `shape` with `ndim > 0` is an [`Error::InvalidArgument`]; in
    /// all but the first case the producer's deleter has been called, as DLPack asks.
    ///
    /// # Safety
    ///
    /// `ptr` is null or a live managed tensor whose ownership passes to the returned value: the
    /// caller does not use or delete it afterwards. Its fields must be what DLPack says they are
    /// (`shape` and non-null `strides` with `ndim` entries, all unchanged until the deleter
    /// runs), and the deleter, if any, may be called from any thread.
    pub unsafe fn from_raw(ptr: *mut DLManagedTensorVersioned) -> Result<ImportedTensor> {
        const OP: &str = "ImportedTensor::from_raw";
        let Some(header) = NonNull::new(ptr) else {
            return Err(Error::invalid(OP, "the managed tensor pointer is null"));
        };
        // SAFETY: the caller passes a live managed tensor; the fields up to `flags` are where
        // they are in every version.
        let (version, deleter) = unsafe { ((*ptr).version, (*ptr).deleter) };
        if version.major != DLPACK_MAJOR_VERSION {
            let message = format!(
                "version.major is {} (version {version}); this crate reads DLPack {DLPACK_MAJOR_VERSION}.x",
                version.major
            );
            return Err(refuse(ptr, deleter, Error::invalid(OP, message)));
        }
        // SAFETY: a version 1.x tensor has this layout.
        if let Err(e) = check_tensor(OP, unsafe { &(*ptr).dl_tensor }) {
            return Err(refuse(ptr, deleter, e));
        }
        Ok(ImportedTensor { header: Header::Versioned(header), uses: crate::track::StreamUses::unretained() })
    }

    /// Takes ownership of an unversioned `DLManagedTensor` (from a capsule named `"dltensor"`).
    ///
    /// Checked as [`ImportedTensor::from_raw`] is, without the version; it has no flags. A null
    /// pointer, a negative `ndim` or a null `shape` with `ndim > 0` is an
    /// [`Error::InvalidArgument`], and in the last two cases the producer's deleter has been
    /// called.
    ///
    /// # Safety
    ///
    /// As for [`ImportedTensor::from_raw`].
    pub unsafe fn from_raw_legacy(ptr: *mut DLManagedTensor) -> Result<ImportedTensor> {
        const OP: &str = "ImportedTensor::from_raw_legacy";
        let Some(header) = NonNull::new(ptr) else {
            return Err(Error::invalid(OP, "the managed tensor pointer is null"));
        };
        // SAFETY: the caller passes a live managed tensor.
        let (deleter, check) = unsafe { ((*ptr).deleter, check_tensor(OP, &(*ptr).dl_tensor)) };
        if let Err(e) = check {
            return Err(refuse(ptr, deleter, e));
        }
        Ok(ImportedTensor { header: Header::Legacy(header), uses: crate::track::StreamUses::unretained() })
    }

    /// The tensor's fields, as the producer wrote them.
    pub fn dl_tensor(&self) -> &DLTensor {
        // SAFETY: the header stays alive until `drop` calls the deleter.
        unsafe {
            match self.header {
                Header::Versioned(p) => &p.as_ref().dl_tensor,
                Header::Legacy(p) => &p.as_ref().dl_tensor,
            }
        }
    }

    /// The DLPack version the producer wrote; `None` for an unversioned tensor.
    pub fn version(&self) -> Option<DLPackVersion> {
        match self.header {
            // SAFETY: as in `dl_tensor`.
            Header::Versioned(p) => Some(unsafe { p.as_ref() }.version),
            Header::Legacy(_) => None,
        }
    }

    /// The producer's flags; empty for an unversioned tensor.
    pub fn flags(&self) -> TensorFlags {
        match self.header {
            // SAFETY: as in `dl_tensor`.
            Header::Versioned(p) => TensorFlags::from_bits_retain(unsafe { p.as_ref() }.flags),
            Header::Legacy(_) => TensorFlags::empty(),
        }
    }

    /// Whether the producer asked consumers not to write ([`TensorFlags::READ_ONLY`]).
    pub fn is_read_only(&self) -> bool {
        self.flags().contains(TensorFlags::READ_ONLY)
    }

    /// Where the data lives.
    pub fn device(&self) -> DLDevice {
        self.dl_tensor().device
    }

    /// The element type.
    pub fn dtype(&self) -> DLDataType {
        self.dl_tensor().dtype
    }

    /// The number of dimensions.
    pub fn ndim(&self) -> usize {
        usize::try_from(self.dl_tensor().ndim).unwrap_or(0)
    }

    /// The extents (not checked: they may be negative if the producer wrote so).
    pub fn shape(&self) -> &[i64] {
        let n = self.ndim();
        if n == 0 {
            return &[];
        }
        // SAFETY: `from_raw` checked that `shape` is not null; the producer keeps `ndim`
        // entries there until the deleter runs.
        unsafe { std::slice::from_raw_parts(self.dl_tensor().shape, n) }
    }

    /// The strides in elements; `None` when the producer left them null (compact row-major).
    pub fn strides(&self) -> Option<&[i64]> {
        let t = self.dl_tensor();
        if t.strides.is_null() {
            return None;
        }
        let n = self.ndim();
        if n == 0 {
            return Some(&[]);
        }
        // SAFETY: non-null strides have `ndim` entries, alive until the deleter runs.
        Some(unsafe { std::slice::from_raw_parts(t.strides, n) })
    }

    /// Bytes from [`ImportedTensor::data`] to the first element.
    pub fn byte_offset(&self) -> u64 {
        self.dl_tensor().byte_offset
    }

    /// The base address, without the byte offset (a device address for CUDA memory).
    pub fn data(&self) -> *mut c_void {
        self.dl_tensor().data
    }

    /// The number of elements; a negative extent or an overflowing product is an
    /// [`Error::InvalidArgument`].
    pub fn num_elements(&self) -> Result<usize> {
        layout::element_count("ImportedTensor::num_elements", self.shape())
    }

    /// Whether the tensor is compact row-major: null strides, or strides equal to those of
    /// that layout (ignoring extents of 1, whose stride is never used).
    pub fn is_contiguous(&self) -> bool {
        layout::is_compact(self.shape(), self.strides())
    }

    /// Lends the tensor as a shared view of `T` in `ctx`.
    ///
    /// Checked: the device type is `kDLCUDA` (of `ctx`'s device) or `kDLCUDAManaged`; the data
    /// type is `T::DTYPE` and has `T`'s size; the tensor is contiguous; `data + byte_offset` does
    /// not overflow, is not null unless the tensor is empty, and is aligned for `T`. A failed
    /// check is an [`Error::InvalidArgument`] that names the field.
    ///
    /// `ctx` should be the context the memory was allocated in: for PyTorch and CuPy, the
    /// device's primary context ([`Context::primary`]). The view does not order anything with
    /// the producer's streams: synchronize with the producer (as its `__dlpack__(stream=...)`
    /// protocol does) before reading. Work queued through the view on any stream is waited for
    /// before the tensor goes back to its producer (when `self` is dropped).
    pub fn view<'a, T: DlpackDtype>(&'a self, ctx: &'a Context) -> Result<DeviceView<'a, T>> {
        let plan = plan_view::<T>("ImportedTensor::view", self, ctx.device().ordinal(), false)?;
        // Checked to be `len` elements of `T` of device memory of `ctx`'s device, lent by the
        // producer until `self` is dropped, which waits for the work queued through the view.
        Ok(DeviceView::unordered(ctx, plan.address, plan.len, None, &self.uses))
    }

    /// Lends the tensor as an exclusive view of `T` in `ctx`: checked as [`ImportedTensor::view`]
    /// is, and refused when the producer marked the tensor read-only.
    ///
    /// The producer (and whatever else it lent the tensor to) may still hold the same memory;
    /// `&mut self` only excludes other views made from this value.
    pub fn view_mut<'a, T: DlpackDtype>(&'a mut self, ctx: &'a Context) -> Result<DeviceViewMut<'a, T>> {
        let plan = plan_view::<T>("ImportedTensor::view_mut", self, ctx.device().ordinal(), true)?;
        // As in `view`; `&mut self` excludes other views of this tensor.
        Ok(DeviceViewMut::unordered(ctx, plan.address, plan.len, None, &self.uses))
    }
}

/// Where a view of an imported tensor starts and how many elements it has.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ViewPlan {
    pub(crate) address: u64,
    pub(crate) len: usize,
}

/// The checks of [`ImportedTensor::view`], without a context: `ordinal` is the context's device.
pub(crate) fn plan_view<T: DlpackDtype>(
    operation: &'static str,
    tensor: &ImportedTensor,
    ordinal: usize,
    writable: bool,
) -> Result<ViewPlan> {
    let device = tensor.device();
    match device.device_type {
        DLDeviceType::kDLCUDA => {
            if usize::try_from(device.device_id).ok() != Some(ordinal) {
                return Err(Error::invalid(
                    operation,
                    format!(
                        "device.device_id is {} but the context is on device {ordinal}",
                        device.device_id
                    ),
                ));
            }
        }
        DLDeviceType::kDLCUDAManaged => {}
        other => {
            return Err(Error::invalid(
                operation,
                format!(
                    "device.device_type is {other}; a device view needs {} or {}",
                    DLDeviceType::kDLCUDA,
                    DLDeviceType::kDLCUDAManaged
                ),
            ));
        }
    }
    let dtype = tensor.dtype();
    if dtype != T::DTYPE {
        return Err(Error::invalid(
            operation,
            format!("dtype is {dtype} but the view's element type is {}", T::DTYPE),
        ));
    }
    if !size_matches::<T>() {
        return Err(Error::invalid(
            operation,
            format!(
                "dtype {dtype} has {} bits but the view's element type is {} bytes",
                dtype.size_in_bits(),
                std::mem::size_of::<T>()
            ),
        ));
    }
    if writable && tensor.is_read_only() {
        return Err(Error::invalid(
            operation,
            "flags has DLPACK_FLAG_BITMASK_READ_ONLY: the producer forbids writes",
        ));
    }
    let len = tensor.num_elements()?;
    if !tensor.is_contiguous() {
        return Err(Error::invalid(
            operation,
            format!(
                "strides {:?} over shape {:?} are not compact row-major; only contiguous tensors can be viewed",
                tensor.strides().unwrap_or_default(),
                tensor.shape()
            ),
        ));
    }
    if len.checked_mul(std::mem::size_of::<T>()).is_none_or(|b| isize::try_from(b).is_err()) {
        return Err(Error::invalid(
            operation,
            format!("{len} elements of {dtype} overflow the address space"),
        ));
    }
    let base = tensor.data().addr() as u64;
    let offset = tensor.byte_offset();
    let Some(address) = base.checked_add(offset) else {
        return Err(Error::invalid(
            operation,
            format!("data ({base:#x}) + byte_offset ({offset}) overflows a 64-bit address"),
        ));
    };
    if address == 0 && len > 0 {
        return Err(Error::invalid(
            operation,
            format!("data + byte_offset is null but the tensor has {len} elements"),
        ));
    }
    let align = std::mem::align_of::<T>() as u64;
    if address % align != 0 {
        return Err(Error::invalid(
            operation,
            format!(
                "data + byte_offset ({base:#x} + {offset} = {address:#x}) is not aligned to {align} bytes, as {dtype} \
                 needs"
            ),
        ));
    }
    Ok(ViewPlan { address, len })
}

impl Drop for ImportedTensor {
    fn drop(&mut self) {
        // The producer may reuse the memory once its deleter runs: wait for the work queued
        // through the views first. If that wait fails (a broken context), keep the tensor (a
        // leak) rather than hand it back under running work.
        if let Err(e) = self.uses.synchronize_for_release() {
            eprintln!("cuda-core: ImportedTensor kept, not given back to its producer: {e}");
            return;
        }
        // SAFETY: `self` owns the tensor; its deleter runs once, here.
        unsafe {
            match self.header {
                Header::Versioned(p) => {
                    if let Some(deleter) = (*p.as_ptr()).deleter {
                        deleter(p.as_ptr());
                    }
                }
                Header::Legacy(p) => {
                    if let Some(deleter) = (*p.as_ptr()).deleter {
                        deleter(p.as_ptr());
                    }
                }
            }
        }
    }
}

impl fmt::Debug for ImportedTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImportedTensor")
            .field("version", &self.version())
            .field("device", &self.device())
            .field("dtype", &format_args!("{}", self.dtype()))
            .field("shape", &self.shape())
            .field("strides", &self.strides())
            .field("byte_offset", &self.byte_offset())
            .field("flags", &self.flags())
            .finish()
    }
}
