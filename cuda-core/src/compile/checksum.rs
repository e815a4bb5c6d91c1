//! A fast 64-bit checksum of cache files: it catches a flipped or missing byte, not deliberate
//! tampering (the cache key, a SHA-256, already names what the file must hold). SHA-256 of the
//! payload cost about 20 µs per 4 KiB CUBIN read back; this costs well under one.

#![forbid(unsafe_code)]

/// Multipliers with many bits set in every byte, so that each input bit reaches the high bits.
const K1: u64 = 0x9E37_79B9_7F4A_7C15;
const K2: u64 = 0xC2B2_AE3D_27D4_EB4F;

/// Mixes one 64-bit value into all bits of the result (a multiply-xorshift finaliser).
fn finish(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(K2);
    h ^= h >> 29;
    h = h.wrapping_mul(K1);
    h ^ (h >> 32)
}

/// The checksum of `bytes`: each 8-byte word, then the tail, is folded into a running state
/// with a multiply and a rotation; the length is mixed in, so that zero bytes appended change it.
pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    let mut h = K1 ^ (bytes.len() as u64).wrapping_mul(K2);
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        h = (h ^ u64::from_le_bytes(w).wrapping_mul(K2)).rotate_left(31).wrapping_mul(K1);
    }
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    h = (h ^ u64::from_le_bytes(tail).wrapping_mul(K2)).rotate_left(31).wrapping_mul(K1);
    finish(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_single_bit_flip_and_every_truncation_changes_it() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 37 % 251) as u8).collect();
        let base = checksum(&data);
        for i in 0..data.len() {
            for bit in 0..8 {
                let mut d = data.clone();
                d[i] ^= 1 << bit;
                assert_ne!(checksum(&d), base, "byte {i} bit {bit}");
            }
        }
        for len in 0..data.len() {
            assert_ne!(checksum(&data[..len]), base, "truncated to {len}");
        }
        let mut longer = data.clone();
        longer.push(0);
        assert_ne!(checksum(&longer), base, "a zero byte appended");
        assert_eq!(checksum(&data), base, "deterministic");
    }
}
