//! CUDA arrays made by the runtime and their element formats.

use super::defer;
use crate::error::{Error, Result, check_runtime};
use cuhost_cudart_sys as rt;

/// The kind of an array channel (`cudaChannelFormatKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChannelFormatKind {
    /// Signed integers.
    Signed,
    /// Unsigned integers.
    Unsigned,
    /// Floating point.
    Float,
}

/// The element format of a CUDA array: bits of up to four channels and their kind
/// (`cudaChannelFormatDesc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChannelFormatDesc {
    /// Bits per channel, x to w; unused channels are 0.
    pub bits: [u8; 4],
    /// The channels' kind.
    pub kind: ChannelFormatKind,
}

impl ChannelFormatDesc {
    /// `channels` channels of `bits` bits each.
    pub fn new(channels: usize, bits: u8, kind: ChannelFormatKind) -> ChannelFormatDesc {
        let mut b = [0; 4];
        for slot in b.iter_mut().take(channels.min(4)) {
            *slot = bits;
        }
        ChannelFormatDesc { bits: b, kind }
    }

    /// Bytes per element.
    pub fn element_size(&self) -> usize {
        self.bits.iter().map(|b| usize::from(*b)).sum::<usize>() / 8
    }

    fn to_raw(self) -> rt::cudaChannelFormatDesc {
        let kind = match self.kind {
            ChannelFormatKind::Signed => rt::cudaChannelFormatKind::cudaChannelFormatKindSigned,
            ChannelFormatKind::Unsigned => rt::cudaChannelFormatKind::cudaChannelFormatKindUnsigned,
            ChannelFormatKind::Float => rt::cudaChannelFormatKind::cudaChannelFormatKindFloat,
        };
        let [x, y, z, w] = self.bits.map(i32::from);
        rt::cudaChannelFormatDesc { x, y, z, w, f: kind, ..Default::default() }
    }
}

/// A CUDA array (1D, 2D or 3D) from `cudaMallocArray` or `cudaMalloc3DArray`, freed with
/// `cudaFreeArray` on drop.
#[derive(Debug)]
pub struct Array {
    raw: rt::cudaArray_t,
    desc: ChannelFormatDesc,
    extent: (usize, usize, usize),
    /// The streams copies of it were queued on: waited for before it is freed.
    uses: crate::track::StreamUses,
}

// SAFETY: an array handle may be used from any thread.
unsafe impl Send for Array {}
// SAFETY: `&Array` only reads the handle.
unsafe impl Sync for Array {}

impl Array {
    /// A 1D (`height` 0) or 2D array of `width` x `height` elements
    /// ([`cudaMallocArray`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
    ///
    /// A format with no channel or a channel that is not whole bytes, or a width of 0, is an
    /// [`Error::InvalidArgument`]; a size the device cannot hold fails with the runtime's
    /// status.
    pub fn malloc(desc: ChannelFormatDesc, width: usize, height: usize) -> Result<Array> {
        Array::check_desc("Array::malloc", desc, width)?;
        let raw_desc = desc.to_raw();
        let mut raw = std::ptr::null_mut();
        // SAFETY: a live descriptor and one out-parameter.
        check_runtime("cudaMallocArray", unsafe {
            rt::cudaMallocArray(&mut raw, &raw_desc, width, height, rt::cudaArrayDefault)
        })?;
        Ok(Array { raw, desc, extent: (width, height, 0), uses: crate::track::StreamUses::unretained() })
    }

    /// A 1D, 2D or 3D array; 0 in `height` or `depth` drops that dimension
    /// ([`cudaMalloc3DArray`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
    ///
    /// Fails as [`malloc`](Self::malloc) does, for the same format and width checks.
    pub fn malloc_3d(desc: ChannelFormatDesc, width: usize, height: usize, depth: usize) -> Result<Array> {
        Array::check_desc("Array::malloc_3d", desc, width)?;
        let raw_desc = desc.to_raw();
        let mut raw = std::ptr::null_mut();
        let extent = rt::cudaExtent { width, height, depth, ..Default::default() };
        // SAFETY: a live descriptor and one out-parameter.
        check_runtime("cudaMalloc3DArray", unsafe {
            rt::cudaMalloc3DArray(&mut raw, &raw_desc, extent, rt::cudaArrayDefault)
        })?;
        Ok(Array { raw, desc, extent: (width, height, depth), uses: crate::track::StreamUses::unretained() })
    }

    fn check_desc(operation: &'static str, desc: ChannelFormatDesc, width: usize) -> Result<()> {
        if desc.element_size() == 0 || desc.bits.iter().any(|b| b % 8 != 0) {
            return Err(Error::invalid(
                operation,
                "channels must be whole bytes and at least one must be set",
            ));
        }
        if width == 0 {
            return Err(Error::invalid(operation, "an array needs a width of at least one element"));
        }
        Ok(())
    }

    /// The raw `cudaArray_t`.
    pub fn as_raw(&self) -> rt::cudaArray_t {
        self.raw
    }

    /// The element format.
    pub fn desc(&self) -> ChannelFormatDesc {
        self.desc
    }

    /// Width, height and depth in elements as allocated (0 for an absent dimension).
    pub fn extent(&self) -> (usize, usize, usize) {
        self.extent
    }

    /// Bytes in one row.
    pub fn row_bytes(&self) -> usize {
        self.extent.0 * self.desc.element_size()
    }

    /// Rows per slice and slices, counting an absent dimension as 1.
    pub(crate) fn rows_and_slices(&self) -> (usize, usize) {
        (self.extent.1.max(1), self.extent.2.max(1))
    }
}

impl Array {
    /// Notes that a copy of the array is about to be queued on `stream`: the array is freed
    /// only after it.
    pub(crate) fn used_on(&self, stream: &crate::stream::Stream, access: crate::track::Access) -> Result<()> {
        self.uses.note(stream.context(), None, stream, access)
    }
}

impl Drop for Array {
    fn drop(&mut self) {
        // Copies queued on streams may still use it: wait for them, and keep the array (a
        // leak, not a free under running work) when that wait fails.
        if let Err(e) = self.uses.synchronize_for_release() {
            return defer(e);
        }
        // SAFETY: this value owns the array, and no queued copy uses it any more.
        if let Err(e) = check_runtime("cudaFreeArray", unsafe { rt::cudaFreeArray(self.raw) }) {
            defer(e);
        }
    }
}
