//! SHA-256 (FIPS 180-4, section 6.2), for the compile cache's keys.
//!
//! Written from the standard's description; the crate takes no hashing dependency for one
//! 100-line function. It is not constant-time, and nothing here needs it to be. On x86-64
//! processors with the SHA extensions the rounds run on them ([`super::sha256_ni`]).

#![forbid(unsafe_code)]

/// The first 32 bits of the fractional parts of the cube roots of the first 64 primes
/// (FIPS 180-4, 4.2.2).
const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// The first 32 bits of the fractional parts of the square roots of the first 8 primes
/// (FIPS 180-4, 5.3.3).
const H0: [u32; 8] =
    [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

/// An incremental SHA-256: [`update`](Self::update) with the message in any number of pieces,
/// then [`finish`](Self::finish).
#[derive(Clone)]
pub(crate) struct Sha256 {
    state: [u32; 8],
    /// The start of a block that is not complete yet; `buffered` bytes of it are set.
    buffer: [u8; 64],
    buffered: usize,
    /// The message's length so far, in bytes.
    length: u64,
}

impl Sha256 {
    /// A hasher of the empty message.
    pub(crate) fn new() -> Self {
        Sha256 { state: H0, buffer: [0; 64], buffered: 0, length: 0 }
    }

    /// Appends `data` to the message.
    pub(crate) fn update(&mut self, mut data: &[u8]) {
        self.length = self.length.wrapping_add(data.len() as u64);
        if self.buffered > 0 {
            let take = data.len().min(64 - self.buffered);
            let (head, rest) = data.split_at(take);
            self.buffer[self.buffered..self.buffered + take].copy_from_slice(head);
            self.buffered += take;
            data = rest;
            if self.buffered < 64 {
                return;
            }
            compress(&mut self.state, &self.buffer);
            self.buffered = 0;
        }
        let mut blocks = data.chunks_exact(64);
        for block in &mut blocks {
            compress(&mut self.state, block);
        }
        let rest = blocks.remainder();
        self.buffer[..rest.len()].copy_from_slice(rest);
        self.buffered = rest.len();
    }

    /// The digest of the message (5.1.1: a one bit, zeros, the length in bits as 64 bits).
    pub(crate) fn finish(mut self) -> [u8; 32] {
        let bits = self.length.wrapping_mul(8);
        let mut padding = [0u8; 72];
        padding[0] = 0x80;
        let zeros_to = if self.buffered < 56 { 56 } else { 120 };
        self.update(&padding[..zeros_to - self.buffered]);
        self.update(&bits.to_be_bytes());
        let mut digest = [0u8; 32];
        for (out, word) in digest.chunks_exact_mut(4).zip(self.state) {
            out.copy_from_slice(&word.to_be_bytes());
        }
        digest
    }
}

/// The digest of the concatenation of `parts`.
#[cfg(test)]
pub(crate) fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finish()
}

/// The compression function (6.2.2) over a 64-byte block: on the processor's SHA extensions
/// where it has them, else [`compress_portable`].
fn compress(state: &mut [u32; 8], block: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if let Ok(block) = <&[u8; 64]>::try_from(block) {
        if super::sha256_ni::compress(state, block, &K) {
            return;
        }
    }
    compress_portable(state, block);
}

/// The compression function (6.2.2) over a 64-byte block, in portable Rust.
fn compress_portable(state: &mut [u32; 8], block: &[u8]) {
    let mut w = [0u32; 64];
    for (word, bytes) in w.iter_mut().zip(block.chunks_exact(4)) {
        *word = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    }
    for t in 16..64 {
        let s0 = w[t - 15].rotate_right(7) ^ w[t - 15].rotate_right(18) ^ (w[t - 15] >> 3);
        let s1 = w[t - 2].rotate_right(17) ^ w[t - 2].rotate_right(19) ^ (w[t - 2] >> 10);
        w[t] = s1.wrapping_add(w[t - 7]).wrapping_add(s0).wrapping_add(w[t - 16]);
    }
    let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = *state;
    for (k, w) in K.iter().zip(w) {
        let big_s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
        let ch = (e & f) ^ (!e & g);
        let t1 = h.wrapping_add(big_s1).wrapping_add(ch).wrapping_add(*k).wrapping_add(w);
        let big_s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
        let maj = (a & b) ^ (a & c) ^ (b & c);
        let t2 = big_s0.wrapping_add(maj);
        (h, g, f, e, d, c, b, a) = (g, f, e, d.wrapping_add(t1), c, b, a, t1.wrapping_add(t2));
    }
    for (s, v) in state.iter_mut().zip([a, b, c, d, e, f, g, h]) {
        *s = s.wrapping_add(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(digest: [u8; 32]) -> String {
        crate::hex::encode(&digest)
    }

    #[test]
    fn standard_test_vectors() {
        // FIPS 180-4 examples (NIST CSRC "SHA256.pdf") and the empty message.
        let cases: [(&[u8], &str); 3] = [
            (b"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
            (b"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
            (
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
            ),
        ];
        for (message, expected) in cases {
            assert_eq!(hex(sha256(&[message])), expected, "{:?}", String::from_utf8_lossy(message));
        }
    }

    #[test]
    fn one_million_a_in_uneven_pieces() {
        let expected = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
        let mut hasher = Sha256::new();
        let piece = [b'a'; 997];
        let mut left = 1_000_000usize;
        while left > 0 {
            let n = left.min(piece.len());
            hasher.update(&piece[..n]);
            left -= n;
        }
        assert_eq!(hex(hasher.finish()), expected);
        assert_eq!(hex(sha256(&[&vec![b'a'; 1_000_000]])), expected);
    }

    #[test]
    fn padding_edges_agree_whatever_the_split() {
        // 55, 56 and 64 bytes are where the padding needs one block or two.
        let message: Vec<u8> = (0..200u8).collect();
        for len in [0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 200] {
            let whole = sha256(&[&message[..len]]);
            for split in 0..=len {
                assert_eq!(sha256(&[&message[..split], &message[split..len]]), whole, "{len} split {split}");
            }
        }
        assert_ne!(sha256(&[&message[..55]]), sha256(&[&message[..56]]));
    }

    /// The rounds on the SHA extensions (where this processor has them) and the portable ones
    /// agree, block by block, from any state.
    #[test]
    fn both_compression_functions_agree() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..500 {
            let state: [u32; 8] = std::array::from_fn(|_| next() as u32);
            let block: [u8; 64] = std::array::from_fn(|_| next() as u8);
            let mut portable = state;
            compress_portable(&mut portable, &block);
            let mut dispatched = state;
            compress(&mut dispatched, &block);
            assert_eq!(dispatched, portable);
            #[cfg(target_arch = "x86_64")]
            {
                let mut ni = state;
                if crate::compile::sha256_ni::compress(&mut ni, &block, &K) {
                    assert_eq!(ni, portable, "the SHA extensions' rounds");
                } else {
                    assert_eq!(ni, state, "left alone without the extensions");
                }
            }
        }
    }

    #[test]
    fn constants_are_the_roots_of_the_first_primes() {
        let primes: Vec<u32> = (2u32..).filter(|n| (2..*n).all(|d| n % d != 0)).take(64).collect();
        let fraction_bits = |x: f64| ((x - x.floor()) * 4_294_967_296.0) as u32;
        for (k, p) in K.iter().zip(&primes) {
            assert_eq!(*k, fraction_bits(f64::from(*p).cbrt()), "cube root of {p}");
        }
        for (h, p) in H0.iter().zip(&primes) {
            assert_eq!(*h, fraction_bits(f64::from(*p).sqrt()), "square root of {p}");
        }
    }
}
