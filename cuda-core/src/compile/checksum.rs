//! A fast 64-bit checksum of cache files: it catches a flipped or missing byte, not deliberate
//! tampering (the cache key, a SHA-256, already names what the file must hold). SHA-256 of the
//! payload cost about 20 µs per 4 KiB CUBIN read back; this costs under two tenths of one.

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

/// Folds one 8-byte word (or the last, shorter one) into a running state with two multiplies
/// and a rotation; a bijection of the state for each word, and of the word for each state.
fn fold(h: u64, word: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..word.len()].copy_from_slice(word);
    (h ^ u64::from_le_bytes(w).wrapping_mul(K2)).rotate_left(31).wrapping_mul(K1)
}

/// The checksum of `bytes`: 64-byte blocks go to eight running states, one word each, with one
/// multiply a word, so that the eight chains overlap in the processor; then the states, the
/// tail (word by word) and the length are folded together, so that zero bytes appended change
/// it. Each step is a bijection of its state, so a change within one word always changes the
/// result.
pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    let seed = K1 ^ (bytes.len() as u64).wrapping_mul(K2);
    let mut lanes: [u64; 8] = std::array::from_fn(|i| seed.rotate_left(8 * i as u32));
    let mut blocks = bytes.chunks_exact(64);
    for block in &mut blocks {
        for (lane, word) in lanes.iter_mut().zip(block.chunks_exact(8)) {
            let word = <[u8; 8]>::try_from(word).map_or(0, u64::from_le_bytes);
            *lane = (*lane ^ word).wrapping_mul(K1).rotate_left(29);
        }
    }
    let mut h = lanes.iter().fold(seed, |h, &lane| fold(h, &lane.to_le_bytes()));
    for word in blocks.remainder().chunks(8) {
        h = fold(h, word);
    }
    finish(fold(h, &(bytes.len() as u64).to_le_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_single_bit_flip_and_every_truncation_changes_it() {
        let data: Vec<u8> = (0..301u32).map(|i| (i * 37 % 251) as u8).collect();
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
