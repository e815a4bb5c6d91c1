//! [`UniqueId`]: what every rank of a new clique must be given.

use crate::error::{Error, Result, check_nccl};
use cuhost_nccl_sys as nccl;

/// The id of a clique being made
/// ([`ncclUniqueId`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/types.html)):
/// one rank makes it with [`UniqueId::new`], and every rank passes the same id to
/// [`Communicator::init_rank`](super::Communicator::init_rank).
///
/// It is [`UniqueId::BYTES`] opaque bytes: send them to the other ranks over any transport
/// ([`as_bytes`](Self::as_bytes) / [`from_bytes`](Self::from_bytes), or as text with
/// [`to_hex`](Self::to_hex) / [`from_hex`](Self::from_hex)).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId {
    bytes: [u8; UniqueId::BYTES],
}

impl UniqueId {
    /// The size of an id in bytes (`NCCL_UNIQUE_ID_BYTES`).
    pub const BYTES: usize = nccl::NCCL_UNIQUE_ID_BYTES as usize;

    /// Makes a new id
    /// ([`ncclGetUniqueId`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclgetuniqueid)).
    /// It names a listening socket of this process that the ranks meet at while they connect:
    /// make one per clique, and keep this process alive until every rank has joined.
    ///
    /// NCCL's status is returned when it cannot open that socket (no usable network
    /// interface, for instance; `NCCL_DEBUG=INFO` says why), and an
    /// [`Error::Load`](crate::error::Error::Load) when no NCCL is installed.
    pub fn new() -> Result<UniqueId> {
        let mut raw = nccl::ncclUniqueId::default();
        // SAFETY: one out-parameter of the type NCCL writes.
        check_nccl("ncclGetUniqueId", unsafe { nccl::ncclGetUniqueId(&mut raw) })?;
        Ok(UniqueId::from_raw(raw))
    }

    /// An id from the bytes another rank sent; a length other than [`UniqueId::BYTES`] is an
    /// [`Error::InvalidArgument`]. The bytes are not otherwise checked: NCCL reports a bad id
    /// when the communicator is made.
    pub fn from_bytes(bytes: &[u8]) -> Result<UniqueId> {
        let bytes = <[u8; UniqueId::BYTES]>::try_from(bytes).map_err(|_| {
            Error::invalid(
                "UniqueId::from_bytes",
                format!(
                    "an NCCL unique id has {} bytes, not {}; send the whole id",
                    UniqueId::BYTES,
                    bytes.len()
                ),
            )
        })?;
        Ok(UniqueId { bytes })
    }

    /// The id's bytes, to send to the other ranks.
    pub fn as_bytes(&self) -> &[u8; UniqueId::BYTES] {
        &self.bytes
    }

    /// The id as lowercase hexadecimal text (256 characters).
    pub fn to_hex(&self) -> String {
        crate::hex::encode(&self.bytes)
    }

    /// An id from the text [`to_hex`](Self::to_hex) wrote; anything else is an
    /// [`Error::InvalidArgument`].
    pub fn from_hex(text: &str) -> Result<UniqueId> {
        let bytes = crate::hex::decode("UniqueId::from_hex", "an NCCL unique id", text, UniqueId::BYTES)?;
        let bytes = bytes.try_into().map_err(|_| Error::invalid("UniqueId::from_hex", "a truncated id"))?;
        Ok(UniqueId { bytes })
    }

    /// Wraps a raw id.
    pub fn from_raw(raw: nccl::ncclUniqueId) -> UniqueId {
        UniqueId { bytes: raw.internal.map(|c| c as u8) }
    }

    /// The raw id, for the `-sys` functions.
    pub fn as_raw(&self) -> nccl::ncclUniqueId {
        nccl::ncclUniqueId { internal: self.bytes.map(|b| b as std::ffi::c_char), ..Default::default() }
    }
}

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UniqueId({})", self.to_hex())
    }
}

impl From<nccl::ncclUniqueId> for UniqueId {
    fn from(raw: nccl::ncclUniqueId) -> UniqueId {
        UniqueId::from_raw(raw)
    }
}
