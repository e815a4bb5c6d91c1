//! [`IpcEventHandle`]: an event named for another process.

use super::{handle_bytes, handle_chars, strip_magic};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::event::{Event, EventFlags};
use cuhost_driver_sys as sys;

/// Marks the bytes of an [`IpcEventHandle`] (format version 1).
const MAGIC: &[u8; 8] = b"cuIPCe01";

/// An event of one process named for another (`CUipcEventHandle`): the other process opens
/// it and records it or makes its streams wait on it, which orders work across the two.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpcEventHandle([u8; 64]);

impl IpcEventHandle {
    /// The length of [`to_bytes`](Self::to_bytes): a marker and the handle.
    pub const ENCODED_LEN: usize = 8 + 64;

    /// Names `event` for another process
    /// ([`cuIpcGetEventHandle`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    /// An event made without [`EventFlags::INTERPROCESS`] is an [`Error::InvalidArgument`].
    pub fn export(event: &Event) -> Result<IpcEventHandle> {
        if !event.flags().contains(EventFlags::INTERPROCESS) {
            return Err(Error::invalid(
                "IpcEventHandle::export",
                "the event was created without EventFlags::INTERPROCESS; create it with INTERPROCESS | \
                 DISABLE_TIMING",
            ));
        }
        event.context().enter()?;
        let mut raw = sys::CUipcEventHandle { reserved: [0; 64], ..Default::default() };
        // SAFETY: one out-parameter; the event is alive.
        unsafe { driver!(cuIpcGetEventHandle(&mut raw, event.as_raw())) }?;
        Ok(IpcEventHandle(handle_bytes(&raw.reserved)))
    }

    /// Opens the event in `context` of this process
    /// ([`cuIpcOpenEventHandle`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)):
    /// it can be waited on, queried and synchronized, not timed. A handle the driver cannot
    /// open is the driver's error.
    pub fn open(&self, context: &Context) -> Result<Event> {
        context.enter()?;
        let raw = sys::CUipcEventHandle { reserved: handle_chars(&self.0), ..Default::default() };
        let mut event = std::ptr::null_mut();
        // SAFETY: one out-parameter; the driver validates the handle.
        unsafe { driver!(cuIpcOpenEventHandle(&mut event, raw)) }?;
        // SAFETY: the opened event is new, of `context`, and owned by the returned value.
        Ok(unsafe { Event::from_raw(context, event, EventFlags::INTERPROCESS | EventFlags::DISABLE_TIMING) })
    }

    /// The driver's 64 handle bytes.
    pub fn handle(&self) -> [u8; 64] {
        self.0
    }

    /// A handle from the driver's 64 bytes (from another library).
    pub fn from_handle(handle: [u8; 64]) -> IpcEventHandle {
        IpcEventHandle(handle)
    }

    /// The handle as [`ENCODED_LEN`](Self::ENCODED_LEN) bytes, for any transport.
    pub fn to_bytes(&self) -> [u8; IpcEventHandle::ENCODED_LEN] {
        let mut out = [0u8; IpcEventHandle::ENCODED_LEN];
        out[..8].copy_from_slice(MAGIC);
        out[8..].copy_from_slice(&self.0);
        out
    }

    /// The bytes of [`to_bytes`](Self::to_bytes) as lowercase hexadecimal text, for
    /// transports that carry text (a command line, a line on a pipe).
    pub fn to_hex(&self) -> String {
        crate::hex::encode(&self.to_bytes())
    }

    /// The handle [`to_hex`](Self::to_hex) wrote; other text is an [`Error::InvalidArgument`].
    pub fn from_hex(text: &str) -> Result<IpcEventHandle> {
        let bytes =
            crate::hex::decode("IpcEventHandle::from_hex", "a handle", text, IpcEventHandle::ENCODED_LEN)?;
        IpcEventHandle::from_bytes(&bytes)
    }

    /// The handle [`to_bytes`](Self::to_bytes) made; bytes of another length or without its
    /// marker are an [`Error::InvalidArgument`].
    pub fn from_bytes(bytes: &[u8]) -> Result<IpcEventHandle> {
        let rest = strip_magic("IpcEventHandle::from_bytes", bytes, MAGIC, IpcEventHandle::ENCODED_LEN)?;
        let handle: [u8; 64] = rest
            .try_into()
            .map_err(|_| Error::invalid("IpcEventHandle::from_bytes", "a truncated driver handle"))?;
        Ok(IpcEventHandle(handle))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_handles_round_trip_and_refuse_memory_handles() {
        let h = IpcEventHandle::from_handle([9; 64]);
        assert_eq!(IpcEventHandle::from_bytes(&h.to_bytes()).ok(), Some(h));
        assert_eq!(IpcEventHandle::from_hex(&h.to_hex()).ok(), Some(h));
        let memory = super::super::IpcMemHandle::from_parts([9; 64], 0, 8).to_bytes();
        assert!(matches!(IpcEventHandle::from_bytes(&memory), Err(Error::InvalidArgument { .. })));
        assert!(matches!(
            IpcEventHandle::from_bytes(&memory[..IpcEventHandle::ENCODED_LEN]),
            Err(Error::InvalidArgument { .. })
        ));
    }
}
