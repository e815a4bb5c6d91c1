//! The parameter count of each kernel of a module, by kernel name, where the PTX it came from
//! declares them ([`ptx_params`](super::ptx_params) reads them).
//!
//! They are kept as bytes, laid out as the compile cache stores them: for each kernel its name,
//! then its count as a little-endian `u64`, each after its length as a little-endian `u64`.
//! Counts read back from a cache entry are a copy of just their bytes, made once, and shared
//! from then on: a module loaded from them takes a reference, and keeps a few dozen bytes
//! alive, not the entry they were read from.

#![forbid(unsafe_code)]

use std::ops::Range;
use std::sync::Arc;

/// `(kernel name, parameter count)` pairs, shared; none when no count is known.
#[derive(Clone, Default)]
pub(crate) struct ParamCounts {
    /// The pairs (checked when made); `None` when there is none.
    pairs: Option<Arc<[u8]>>,
}

impl ParamCounts {
    /// The counts `pairs`, in order.
    pub(crate) fn new(pairs: &[(String, usize)]) -> ParamCounts {
        if pairs.is_empty() {
            return ParamCounts::default();
        }
        let mut bytes = Vec::new();
        for (name, count) in pairs {
            put_field(&mut bytes, name.as_bytes());
            put_field(&mut bytes, &(*count as u64).to_le_bytes());
        }
        ParamCounts { pairs: Some(bytes.into()) }
    }

    /// A copy of the `len` pairs stored in `bytes` from byte `start`, and where they end;
    /// `None` unless they are there, each name UTF-8 and each count one this machine's `usize`
    /// holds.
    #[cfg(feature = "compile")]
    pub(crate) fn read(bytes: &[u8], start: usize, len: usize) -> Option<(ParamCounts, usize)> {
        let mut end = start;
        for _ in 0..len {
            let (name, _, next) = pair_at(bytes, end)?;
            std::str::from_utf8(name).ok()?;
            end = next;
        }
        let pairs = if len > 0 { Some(Arc::from(bytes.get(start..end)?)) } else { None };
        Some((ParamCounts { pairs }, end))
    }

    /// The pairs as [`read`](Self::read) takes them.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.pairs.as_deref().unwrap_or_default()
    }

    /// How many pairs there are.
    #[cfg(feature = "compile")]
    pub(crate) fn len(&self) -> usize {
        self.pairs().count()
    }

    /// Whether no count is known.
    pub(crate) fn is_empty(&self) -> bool {
        self.pairs.is_none()
    }

    /// The count of the kernel `name`, if known.
    pub(crate) fn get(&self, name: &str) -> Option<usize> {
        self.pairs().find(|(n, _)| *n == name.as_bytes()).map(|(_, count)| count)
    }

    /// Every pair, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, usize)> {
        // The names were checked when the counts were made.
        self.pairs().filter_map(|(name, count)| Some((std::str::from_utf8(name).ok()?, count)))
    }

    /// Every pair, the name as its bytes.
    fn pairs(&self) -> impl Iterator<Item = (&[u8], usize)> {
        let bytes = self.as_bytes();
        let mut at = 0;
        std::iter::from_fn(move || {
            let (name, count, next) = pair_at(bytes, at)?;
            at = next;
            Some((name, count))
        })
    }
}

impl std::fmt::Debug for ParamCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl PartialEq for ParamCounts {
    fn eq(&self, other: &ParamCounts) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for ParamCounts {}

/// The name and count of the pair that starts at `at` in `bytes`, and where the next one starts.
fn pair_at(bytes: &[u8], at: usize) -> Option<(&[u8], usize, usize)> {
    let name = field_at(bytes, at)?;
    let count = field_at(bytes, name.end)?;
    let at = count.end;
    let count = usize::try_from(u64::from_le_bytes(bytes.get(count)?.try_into().ok()?)).ok()?;
    Some((bytes.get(name)?, count, at))
}

/// Appends `field` after its length as a little-endian `u64`: a field of a compile cache
/// entry, as the counts' names and counts are.
pub(crate) fn put_field(out: &mut Vec<u8>, field: &[u8]) {
    out.extend_from_slice(&(field.len() as u64).to_le_bytes());
    out.extend_from_slice(field);
}

/// Where the bytes of the field (as [`put_field`] writes it) that starts at `at` in `bytes`
/// are; the next field starts at the end of that range. `None` for a field past the end.
pub(crate) fn field_at(bytes: &[u8], at: usize) -> Option<Range<usize>> {
    let len = bytes.get(at..)?.first_chunk::<8>()?;
    let start = at + 8;
    let end = start.checked_add(usize::try_from(u64::from_le_bytes(*len)).ok()?)?;
    bytes.get(start..end).map(|_| start..end)
}

#[cfg(all(test, feature = "compile"))]
mod tests {
    use super::*;

    #[test]
    fn counts_read_back_from_their_bytes_and_clones_share_them() {
        let made = ParamCounts::new(&[("saxpy".into(), 4), ("_Z1fIiEvv".into(), 0)]);
        assert_eq!(made.iter().collect::<Vec<_>>(), [("saxpy", 4), ("_Z1fIiEvv", 0)]);
        assert_eq!((made.get("saxpy"), made.get("_Z1fIiEvv"), made.get("sax")), (Some(4), Some(0), None));
        let mut entry = b"head".to_vec();
        entry.extend_from_slice(made.as_bytes());
        entry.extend_from_slice(b"tail");
        let (read, end) = ParamCounts::read(&entry, 4, 2).expect("two pairs from byte 4");
        assert_eq!((read.len(), end, &entry[end..]), (2, entry.len() - 4, &b"tail"[..]));
        assert_eq!(read, made);
        let shared = read.clone();
        assert_eq!(shared.as_bytes().as_ptr(), read.as_bytes().as_ptr(), "a clone shares the bytes");
        assert!(ParamCounts::read(&entry, 4, 3).is_none(), "a third pair is not there");
        assert!(ParamCounts::read(&entry, 5, 1).is_none(), "not a pair's start");
        let (none, end) = ParamCounts::read(&entry, 4, 0).expect("no pair");
        assert!(none.is_empty() && none.as_bytes().is_empty() && end == 4);
        assert!(ParamCounts::new(&[]).is_empty());
    }

    #[test]
    fn a_name_that_is_not_utf8_is_refused() {
        let mut bytes = 1u64.to_le_bytes().to_vec();
        bytes.push(0xFF);
        bytes.extend_from_slice(&8u64.to_le_bytes());
        bytes.extend_from_slice(&3u64.to_le_bytes());
        assert!(ParamCounts::read(&bytes, 0, 1).is_none());
        bytes[8] = b'k';
        let (read, _) = ParamCounts::read(&bytes, 0, 1).expect("a pair");
        assert_eq!(read.get("k"), Some(3));
    }
}
