//! Lowercase hexadecimal text for the handles that travel between processes (NCCL ids, IPC
//! handles), for transports that carry text.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};

/// `bytes` as lowercase hexadecimal digits, two a byte.
pub(crate) fn encode(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut text = String::with_capacity(2 * bytes.len());
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(text, "{b:02x}");
    }
    text
}

/// The `len` bytes that `text` (surrounding whitespace ignored) spells in hexadecimal digits;
/// anything else is an [`Error::InvalidArgument`] of `operation` that names `what` was read.
pub(crate) fn decode(operation: &'static str, what: &str, text: &str, len: usize) -> Result<Vec<u8>> {
    let text = text.trim();
    if text.len() != 2 * len {
        return Err(Error::invalid(
            operation,
            format!("{what} is {} hexadecimal digits, not {}", 2 * len, text.len()),
        ));
    }
    (0..len)
        .map(|i| {
            let pair = text.get(2 * i..2 * i + 2).unwrap_or("");
            u8::from_str_radix(pair, 16).map_err(|_| {
                Error::invalid(operation, format!("{pair:?} at offset {} is not a hexadecimal byte", 2 * i))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_and_bad_text_is_refused() {
        let bytes = [0x00, 0x7f, 0xa5, 0xff];
        assert_eq!(encode(&bytes), "007fa5ff");
        assert_eq!(decode("t", "x", " 007fa5ff\n", 4).ok(), Some(bytes.to_vec()));
        assert!(decode("t", "x", "007fa5f", 4).is_err());
        assert!(decode("t", "x", "007fa5fg", 4).is_err());
        assert!(decode("t", "x", "é07fa5f", 4).is_err());
    }
}
