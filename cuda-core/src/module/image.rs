//! Recognising and checking code images before the driver reads them.
//!
//! The driver finds the end of a cubin or fat binary from its headers, so a truncated or
//! corrupt image would make it read past the slice. These checks make sure the headers describe
//! bytes that are really there.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use std::ffi::CString;

/// What an image is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Cubin,
    Fatbin,
    Ptx,
}

const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
const FATBIN_MAGIC: u32 = 0xBA55_ED50;

pub(crate) fn kind(image: &[u8]) -> Kind {
    if image.starts_with(&ELF_MAGIC) {
        Kind::Cubin
    } else if read_u32(image, 0) == Some(FATBIN_MAGIC) {
        Kind::Fatbin
    } else {
        Kind::Ptx
    }
}

fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Checks that `cubin` is a 64-bit little-endian ELF whose section and program header tables
/// lie inside the slice.
pub(crate) fn check_cubin(operation: &'static str, cubin: &[u8]) -> Result<()> {
    let bad = |why: &str| Err(Error::invalid(operation, format!("not a valid cubin: {why}")));
    if !cubin.starts_with(&ELF_MAGIC) {
        return bad("it does not start with the ELF magic number");
    }
    if cubin.len() < 64 {
        return bad("it is shorter than an ELF header");
    }
    if cubin[4] != 2 || cubin[5] != 1 {
        return bad("it is not a 64-bit little-endian ELF file");
    }
    let len = cubin.len() as u64;
    let table_end = |offset: Option<u64>, entry: Option<u16>, count: Option<u16>| -> Option<u64> {
        offset?.checked_add(u64::from(entry?) * u64::from(count?))
    };
    let sections = table_end(read_u64(cubin, 0x28), read_u16(cubin, 0x3A), read_u16(cubin, 0x3C));
    let programs = table_end(read_u64(cubin, 0x20), read_u16(cubin, 0x36), read_u16(cubin, 0x38));
    match (sections, programs) {
        (Some(s), Some(p)) if s <= len && p <= len => Ok(()),
        _ => bad(&format!("its headers describe more than the {len} bytes given; was it truncated?")),
    }
}

/// Checks that `fatbin` starts with a fat binary header whose size fits in the slice.
pub(crate) fn check_fatbin(operation: &'static str, fatbin: &[u8]) -> Result<()> {
    let bad = |why: String| Err(Error::invalid(operation, format!("not a valid fat binary: {why}")));
    if read_u32(fatbin, 0) != Some(FATBIN_MAGIC) {
        return bad("it does not start with the fat binary magic number 0xBA55ED50".into());
    }
    let header = read_u16(fatbin, 6).map(u64::from);
    let body = read_u64(fatbin, 8);
    match header.zip(body).and_then(|(h, b)| h.checked_add(b)) {
        Some(total) if total <= fatbin.len() as u64 => Ok(()),
        Some(total) => {
            bad(format!("its header says {total} bytes but {} were given; was it truncated?", fatbin.len()))
        }
        None => bad("its header is incomplete".into()),
    }
}

/// PTX text with the NUL terminator the driver needs. PTX must be text: an interior NUL byte
/// would silently cut it short.
pub(crate) fn ptx_cstring(operation: &'static str, ptx: &[u8]) -> Result<CString> {
    let ptx = ptx.strip_suffix(&[0]).unwrap_or(ptx);
    if ptx.is_empty() {
        return Err(Error::invalid(operation, "the PTX text is empty"));
    }
    CString::new(ptx).map_err(|e| {
        Error::invalid(
            operation,
            format!(
                "PTX is text, but byte {} is NUL; is this a binary image given as PTX?",
                e.nul_position()
            ),
        )
    })
}

/// A binary image in storage aligned to 8 bytes. The driver reads cubin and fat binary headers
/// as aligned structures; a slice that is not aligned (bytes from `include_bytes!`, a slice into
/// a larger buffer) is copied into aligned storage first. Loading is not a hot path.
pub(crate) struct Aligned<'a> {
    borrowed: &'a [u8],
    owned: Vec<u64>,
}

impl<'a> Aligned<'a> {
    pub(crate) fn new(image: &'a [u8]) -> Aligned<'a> {
        if (image.as_ptr() as usize) % 8 == 0 {
            return Aligned { borrowed: image, owned: Vec::new() };
        }
        let mut owned = vec![0u64; image.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut owned)[..image.len()].copy_from_slice(image);
        Aligned { borrowed: &[], owned }
    }

    pub(crate) fn as_ptr(&self) -> *const std::ffi::c_void {
        if self.owned.is_empty() { self.borrowed.as_ptr().cast() } else { self.owned.as_ptr().cast() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf(len: usize, shoff: u64, shentsize: u16, shnum: u16) -> Vec<u8> {
        let mut b = vec![0u8; len];
        b[..4].copy_from_slice(&ELF_MAGIC);
        b[4] = 2;
        b[5] = 1;
        b[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        b[0x3A..0x3C].copy_from_slice(&shentsize.to_le_bytes());
        b[0x3C..0x3E].copy_from_slice(&shnum.to_le_bytes());
        b
    }

    #[test]
    fn cubins_are_checked_against_their_headers() {
        assert!(check_cubin("t", &elf(256, 128, 64, 2)).is_ok());
        assert!(check_cubin("t", &elf(256, 128, 64, 3)).is_err(), "section table past the end");
        assert!(check_cubin("t", &elf(256, u64::MAX, 64, 3)).is_err(), "overflowing offset");
        assert!(check_cubin("t", &ELF_MAGIC).is_err(), "truncated header");
        assert!(
            check_cubin("t", b"garbage that is long enough to be a header but is not an ELF file at all....")
                .is_err()
        );
        assert_eq!(kind(&elf(256, 0, 0, 0)), Kind::Cubin);
    }

    #[test]
    fn fat_binaries_are_checked_against_their_size() {
        let mut f = vec![0u8; 64];
        f[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
        f[6..8].copy_from_slice(&16u16.to_le_bytes());
        f[8..16].copy_from_slice(&48u64.to_le_bytes());
        assert!(check_fatbin("t", &f).is_ok());
        assert_eq!(kind(&f), Kind::Fatbin);
        f[8..16].copy_from_slice(&49u64.to_le_bytes());
        let e = check_fatbin("t", &f).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("truncated"), "{e}");
        assert!(check_fatbin("t", &f[..10]).is_err());
    }

    #[test]
    fn ptx_gets_a_terminator_and_rejects_nul() {
        assert_eq!(
            ptx_cstring("t", b".version 8.0").ok().map(|c| c.into_bytes()),
            Some(b".version 8.0".to_vec())
        );
        assert!(ptx_cstring("t", b".version 8.0\0").is_ok(), "one trailing NUL is accepted");
        assert!(ptx_cstring("t", b"a\0b").is_err());
        assert!(ptx_cstring("t", b"").is_err());
        assert_eq!(kind(b".version 8.0"), Kind::Ptx);
    }

    #[test]
    fn misaligned_images_are_copied_into_aligned_storage() {
        let storage = [0u64; 4];
        let bytes: &[u8] = bytemuck::cast_slice(&storage);
        let aligned = Aligned::new(&bytes[..16]);
        assert_eq!(aligned.as_ptr(), bytes.as_ptr().cast());
        let shifted = Aligned::new(&bytes[1..17]);
        assert_eq!(shifted.as_ptr() as usize % 8, 0);
        assert_ne!(shifted.as_ptr(), bytes[1..].as_ptr().cast());
    }
}
