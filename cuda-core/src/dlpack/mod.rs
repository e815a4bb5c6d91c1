//! DLPack 1.x: lending tensors to and borrowing them from other libraries (PyTorch, CuPy, JAX,
//! NumPy, ...) in the same process, without copying.
//!
//! Built with the `dlpack` feature, which is on by default.
//!
//! See the [DLPack specification](https://dmlc.github.io/dlpack/latest/) and its
//! [Python protocol](https://dmlc.github.io/dlpack/latest/python_spec.html).
//!
//! * The C ABI of `dlpack.h` is here as plain `#[repr(C)]` types of the same names:
//!   [`DLManagedTensorVersioned`] (DLPack 1.x), the unversioned [`DLManagedTensor`] that older
//!   consumers take, [`DLTensor`], [`DLDevice`], [`DLDataType`], [`DLPackVersion`].
//! * [`DlpackDtype`] maps element types to their [`DLDataType`].
//! * **Export.** [`ManagedTensor::from_buffer`] (or [`ManagedTensor::from_buffer_with_shape`])
//!   moves a [`DeviceBuffer`](crate::memory::DeviceBuffer) into a managed tensor on `kDLCUDA`; the shape
//!   and strides are checked against the buffer's length first. `into_raw()` hands the
//!   `*mut DLManagedTensorVersioned` (or, with `into_raw_legacy()`, a `*mut DLManagedTensor`)
//!   to the consumer, which calls the deleter when done; the deleter drops the buffer, freeing
//!   its memory, and never unwinds into the caller. Dropped without being handed over, the
//!   tensor frees itself.
//! * **Import.** [`ImportedTensor::from_raw`] (or [`ImportedTensor::from_raw_legacy`]) takes a
//!   producer's tensor; its getters read the shape, strides, data type and device, and
//!   [`ImportedTensor::view`] lends it as a [`DeviceView`](crate::memory::DeviceView) once the device,
//!   data type, contiguity and alignment are checked. Dropping it calls the producer's deleter.
//!
//! # Why only owned buffers are exported
//!
//! A consumer keeps a DLPack tensor as long as it likes (a PyTorch tensor lives until Python
//! collects it) and tells the producer only through the deleter, at a time no Rust lifetime can
//! describe. A borrowed [`DeviceView`](crate::memory::DeviceView) could be freed under the consumer, so
//! exporting one safely is not possible; the owned buffer moves into the tensor instead and is
//! freed when the consumer lets go. (To keep using the memory on the Rust side, import the
//! tensor back, or take a view before handing it over and stop using it when the deleter runs.)
//!
//! # Streams
//!
//! A raw managed tensor carries no stream. Finish the work that writes the buffer (or
//! synchronize its stream) before handing it over; a consumer's results are ordered on the
//! consumer's stream.
//!
//! # Python capsules
//!
//! In Python a managed tensor travels in a `PyCapsule` named `"dltensor_versioned"` (versioned)
//! or `"dltensor"` (unversioned). A consumer that takes the tensor renames the capsule to
//! `"used_dltensor_versioned"` / `"used_dltensor"` and calls the deleter itself later; a capsule
//! destructor must call the deleter only if the name is still the unused one.
//!
//! # Example
//!
//! ```no_run
//! use cuhost::dlpack::{ImportedTensor, ManagedTensor};
//! use cuhost::{Context, Device, DeviceBuffer, Stream};
//! # fn main() -> cuhost::Result<()> {
//! let ctx = Context::primary(&Device::get(0)?)?;
//! let buf = DeviceBuffer::from_slice(&Stream::legacy(&ctx), &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! let tensor = ManagedTensor::from_buffer_with_shape(buf, &[2, 3], None)?;
//! let raw = tensor.into_raw(); // e.g. put into a "dltensor_versioned" capsule
//! // ... and on the consumer's side:
//! // SAFETY: `raw` is a live managed tensor, handed over once.
//! let imported = unsafe { ImportedTensor::from_raw(raw)? };
//! assert_eq!(imported.shape(), [2, 3]);
//! assert_eq!(imported.view::<f32>(&ctx)?.to_vec()?, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
//! drop(imported); // calls the deleter: the buffer is freed
//! # Ok(()) }
//! ```

mod dtype;
mod export;
mod ffi;
mod import;
mod layout;
#[cfg(test)]
mod tests;

pub use dtype::DlpackDtype;
pub use export::ManagedTensor;
pub use ffi::{
    DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned,
    DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, DLPACK_FLAG_BITMASK_READ_ONLY,
    DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION, DLPackVersion, DLTensor,
};
pub use import::ImportedTensor;

use crate::error::Result;
use crate::flags::flags;

/// Checks a layout as [`ManagedTensor::from_buffer_with_shape`] does, without a buffer: that
/// `shape` (with `strides`, in elements, if given) stays within `len` elements, with no negative
/// extent or stride and as many strides as extents. A mismatch is an
/// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) that names it.
pub fn check_layout(shape: &[i64], strides: Option<&[i64]>, len: usize) -> Result<()> {
    layout::check_fits("dlpack::check_layout", shape, strides, len)
}

flags! {
    /// The flags of a [`DLManagedTensorVersioned`] (`DLPACK_FLAG_BITMASK_*`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct TensorFlags: u64 {
        /// `DLPACK_FLAG_BITMASK_READ_ONLY`: consumers must not write to the data.
        const READ_ONLY = DLPACK_FLAG_BITMASK_READ_ONLY;
        /// `DLPACK_FLAG_BITMASK_IS_COPIED`: the data is a copy the consumer owns alone.
        const IS_COPIED = DLPACK_FLAG_BITMASK_IS_COPIED;
        /// `DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED`: sub-byte elements are padded to a byte.
        const IS_SUBBYTE_TYPE_PADDED = DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
    }
}
