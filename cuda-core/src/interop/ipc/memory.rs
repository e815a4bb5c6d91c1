//! [`IpcMemHandle`]: device memory named for another process, with its offset into the
//! allocation the driver's handle names.

use super::{handle_bytes, handle_chars, strip_magic};
use crate::alloc::{Allocator, DeviceAllocation, StreamRef};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::memory::DeviceBuffer;
use crate::memory::{DeviceView, address_range, checked_bytes};
use crate::stream::Stream;
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::sync::Arc;

/// Marks the bytes of an [`IpcMemHandle`] (format version 1).
const MAGIC: &[u8; 8] = b"cuIPCm01";

/// Device memory of one process, named for another: the driver's IPC handle of the whole
/// allocation (`CUipcMemHandle`), the offset of the shared bytes into it, and their number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpcMemHandle {
    handle: [u8; 64],
    offset: u64,
    size: u64,
}

impl IpcMemHandle {
    /// The length of [`to_bytes`](Self::to_bytes): a marker, the handle, offset and size.
    pub const ENCODED_LEN: usize = 8 + 64 + 8 + 8;

    /// Names the memory of `view` (of any buffer: `buffer.view()`, or a slice of it) for
    /// another process ([`cuIpcGetMemHandle`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// of the allocation holding it, found with `cuMemGetAddressRange`).
    ///
    /// The memory must come from `cuMemAlloc` (directly, or as a block of a
    /// [`MemoryPool`](crate::pool::MemoryPool) over it); memory of the stream-ordered
    /// allocator or of the VMM calls is shared through [`crate::mempool::ipc`] or
    /// [`crate::vmm::PhysicalMemory::export_fd`] instead, and the driver refuses it here.
    pub fn export<T: Pod>(view: &DeviceView<'_, T>) -> Result<IpcMemHandle> {
        view.context().enter()?;
        let (base, _) = address_range(view.as_raw())?;
        let mut raw = sys::CUipcMemHandle { reserved: [0; 64], ..Default::default() };
        // SAFETY: one out-parameter; the driver checks that `base` starts an allocation.
        unsafe { driver!(cuIpcGetMemHandle(&mut raw, base)) }?;
        Ok(IpcMemHandle {
            handle: handle_bytes(&raw.reserved),
            offset: view.as_raw() - base,
            size: view.size_in_bytes() as u64,
        })
    }

    /// A handle from its parts: the driver's 64 handle bytes (from another library, e.g.
    /// CuPy's `ipcGetMemHandle`), the offset of the shared bytes into that allocation and
    /// their number.
    pub fn from_parts(handle: [u8; 64], offset: u64, size: u64) -> IpcMemHandle {
        IpcMemHandle { handle, offset, size }
    }

    /// The driver's handle (`CUipcMemHandle`), which names the whole allocation: what
    /// another library's `cuIpcOpenMemHandle` takes.
    pub fn handle(&self) -> [u8; 64] {
        self.handle
    }

    /// The offset in bytes of the shared memory into the allocation the handle names.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The number of bytes shared.
    pub fn size_in_bytes(&self) -> u64 {
        self.size
    }

    /// The handle as [`ENCODED_LEN`](Self::ENCODED_LEN) bytes, for any transport.
    pub fn to_bytes(&self) -> [u8; IpcMemHandle::ENCODED_LEN] {
        let mut out = [0u8; IpcMemHandle::ENCODED_LEN];
        out[..8].copy_from_slice(MAGIC);
        out[8..72].copy_from_slice(&self.handle);
        out[72..80].copy_from_slice(&self.offset.to_le_bytes());
        out[80..].copy_from_slice(&self.size.to_le_bytes());
        out
    }

    /// The bytes of [`to_bytes`](Self::to_bytes) as lowercase hexadecimal text, for
    /// transports that carry text (a command line, a line on a pipe).
    pub fn to_hex(&self) -> String {
        crate::hex::encode(&self.to_bytes())
    }

    /// The handle [`to_hex`](Self::to_hex) wrote; other text is an [`Error::InvalidArgument`].
    pub fn from_hex(text: &str) -> Result<IpcMemHandle> {
        let bytes =
            crate::hex::decode("IpcMemHandle::from_hex", "a handle", text, IpcMemHandle::ENCODED_LEN)?;
        IpcMemHandle::from_bytes(&bytes)
    }

    /// The handle [`to_bytes`](Self::to_bytes) made; bytes of another length or without its
    /// marker are an [`Error::InvalidArgument`].
    pub fn from_bytes(bytes: &[u8]) -> Result<IpcMemHandle> {
        let rest = strip_magic("IpcMemHandle::from_bytes", bytes, MAGIC, IpcMemHandle::ENCODED_LEN)?;
        let (handle, numbers) = rest.split_at(64);
        let (offset, size) = numbers.split_at(8);
        let word = |b: &[u8]| -> Result<u64> {
            b.try_into()
                .map(u64::from_le_bytes)
                .map_err(|_| Error::invalid("IpcMemHandle::from_bytes", "a truncated number"))
        };
        let handle: [u8; 64] = handle
            .try_into()
            .map_err(|_| Error::invalid("IpcMemHandle::from_bytes", "a truncated driver handle"))?;
        Ok(IpcMemHandle { handle, offset: word(offset)?, size: word(size)? })
    }

    /// Opens the memory in this process as a buffer of `T` ordered on `stream`, at the
    /// exported offset, as many elements as the exported bytes hold
    /// ([`cuIpcOpenMemHandle`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
    /// with `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`). Dropping the buffer waits for its stream and
    /// closes the handle (`cuIpcCloseMemHandle`).
    ///
    /// Exported bytes that are not a whole number of `T`s, an offset and size that do not lie
    /// inside the opened allocation, or an address not aligned for `T`, are an
    /// [`Error::InvalidArgument`] (the handle is closed again). A handle the driver cannot open (memory that
    /// is freed, bytes that name nothing; the driver may also refuse a handle opened in the
    /// process that exported it) is the driver's error.
    ///
    /// # Safety
    ///
    /// The exporting process keeps the memory allocated until the buffer is dropped here
    /// (send a message back when done), and nothing else writes it while the buffer's views
    /// read or write it unless the two sides order their work (with an [`IpcEventHandle`]
    /// for instance).
    ///
    /// [`IpcEventHandle`]: super::IpcEventHandle
    pub unsafe fn open<T: Pod>(&self, stream: &Stream) -> Result<DeviceBuffer<T>> {
        const OP: &str = "IpcMemHandle::open";
        let element = std::mem::size_of::<T>() as u64;
        if element == 0 || self.size % element != 0 {
            return Err(Error::invalid(
                OP,
                format!("{} shared bytes are not a whole number of {element}-byte elements", self.size),
            ));
        }
        let bytes = usize::try_from(self.size).map_err(|_| Error::invalid(OP, "the size overflows"))?;
        let len = bytes / element as usize;
        checked_bytes::<T>(OP, len)?;
        let context = stream.context();
        context.enter()?;
        let mut base = 0;
        let raw = sys::CUipcMemHandle { reserved: handle_chars(&self.handle), ..Default::default() };
        let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS.0;
        // SAFETY: one out-parameter; the driver validates the handle.
        unsafe { driver!(cuIpcOpenMemHandle(&mut base, raw, flags)) }?;
        let allocator = Arc::new(OpenedMemory { context: context.clone() });
        let ptr = base.wrapping_add(self.offset);
        let allocation = DeviceAllocation { ptr, size: bytes, token: base };
        let inside = match address_range(base) {
            Ok((_, size)) => self.offset.checked_add(self.size).is_some_and(|end| end <= size as u64),
            Err(_) => false,
        };
        let adopted = if !inside {
            Err(Error::invalid(
                OP,
                format!(
                    "{} bytes at offset {} are not inside the allocation the handle names",
                    self.size, self.offset
                ),
            ))
        } else if ptr % std::mem::align_of::<T>() as u64 == 0 {
            let shared: Arc<dyn Allocator> = allocator.clone();
            // SAFETY: the opened memory is device memory usable in the stream's context,
            // owned by nothing else in this process, aligned for `T`; the caller vouches that
            // the exported bytes (`len` elements from `ptr`) stay allocated; `shared` closes it.
            unsafe { DeviceBuffer::from_allocation(stream, shared, allocation, len) }
        } else {
            Err(Error::invalid(
                OP,
                format!("the opened address {ptr:#x} is not aligned for the element type"),
            ))
        };
        if adopted.is_err() {
            // SAFETY: the memory was opened above and nothing used it.
            let _ = unsafe { allocator.deallocate(allocation, StreamRef::from(stream)) };
        }
        adopted
    }
}

/// The allocator of opened IPC memory: nothing can be allocated from it; giving memory back
/// waits for the stream and closes the handle of the allocation (`cuIpcCloseMemHandle`).
#[derive(Debug)]
struct OpenedMemory {
    context: Context,
}

// SAFETY: `allocate` never returns memory; `deallocate` waits for the work on the stream
// before it closes the handle, so the memory is not given up while that work may use it.
unsafe impl Allocator for OpenedMemory {
    fn context(&self) -> Option<&Context> {
        Some(&self.context)
    }

    fn allocate(&self, _size: usize, _stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        Err(Error::invalid(
            "IpcMemHandle::open",
            "memory opened from an IPC handle cannot be allocated here; the exporting process allocates it",
        ))
    }

    unsafe fn deallocate(&self, allocation: DeviceAllocation, stream: StreamRef<'_>) -> Result<()> {
        // A release path: a deferred error kept from elsewhere neither skips the wait and the
        // close nor is consumed here. On failure the handle stays open (leaked), never closed
        // under work that may use it.
        self.context.make_current()?;
        // Closing is not stream-ordered: wait for the work that may use the memory.
        stream.wait_for_users(&self.context)?;
        // SAFETY: the token is the base address `cuIpcOpenMemHandle` returned, closed once.
        unsafe { driver!(cuIpcCloseMemHandle(allocation.token)) }
    }

    fn name(&self) -> &'static str {
        "cuIpcOpenMemHandle"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_through_bytes() {
        let mut driver = [0u8; 64];
        driver.iter_mut().enumerate().for_each(|(i, b)| *b = (i * 7) as u8 ^ 0xa5);
        let h = IpcMemHandle::from_parts(driver, 1 << 20, 4096);
        let bytes = h.to_bytes();
        assert_eq!(bytes.len(), IpcMemHandle::ENCODED_LEN);
        assert_eq!(IpcMemHandle::from_bytes(&bytes).ok(), Some(h));
        assert_eq!(IpcMemHandle::from_hex(&h.to_hex()).ok(), Some(h));
        assert!(IpcMemHandle::from_hex(&h.to_hex()[2..]).is_err());
        assert_eq!(h.handle(), driver);
        assert_eq!((h.offset(), h.size_in_bytes()), (1 << 20, 4096));
    }

    #[test]
    fn garbage_bytes_are_refused() {
        let bytes = IpcMemHandle::from_parts([1; 64], 0, 4).to_bytes();
        assert!(matches!(IpcMemHandle::from_bytes(&bytes[..87]), Err(Error::InvalidArgument { .. })));
        let mut bad = bytes;
        bad[0] ^= 0xff;
        let e = IpcMemHandle::from_bytes(&bad).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("marker"), "{e}");
        assert!(IpcMemHandle::from_bytes(&[0u8; 200]).is_err());
        assert!(IpcMemHandle::from_bytes(&[]).is_err());
    }

    #[test]
    fn driver_chars_and_bytes_convert_losslessly() {
        let bytes: [u8; 64] = std::array::from_fn(|i| (i * 4) as u8);
        assert_eq!(handle_bytes(&handle_chars(&bytes)), bytes);
    }
}
