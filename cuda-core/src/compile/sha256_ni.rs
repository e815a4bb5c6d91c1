//! The SHA-256 compression function on the x86 SHA extensions (`sha256rnds2`, `sha256msg1`,
//! `sha256msg2`), used by [`super::sha256`] when the processor has them (checked at run time;
//! the check is one atomic load after the first). The compile cache hashes every key with
//! SHA-256, and the portable rounds cost about 1.5 µs for the key of a small kernel, a tenth
//! of the disk hit it names; these cost a tenth of that.
//!
//! The state is kept as the extensions want it: one register holds A, B, E, F and the other
//! C, D, G, H. Each `sha256rnds2` runs two rounds, with the message words plus round
//! constants in the low half of its third operand; each group of four message words past the
//! first sixteen comes from the four groups before it through `sha256msg1`, an add of the
//! words seven back, and `sha256msg2` (FIPS 180-4, 6.2.2, step 1).

use std::arch::x86_64::{
    __m128i, _mm_add_epi32, _mm_alignr_epi8, _mm_blend_epi16, _mm_loadu_si128, _mm_set_epi64x,
    _mm_sha256msg1_epu32, _mm_sha256msg2_epu32, _mm_sha256rnds2_epu32, _mm_shuffle_epi8, _mm_shuffle_epi32,
    _mm_storeu_si128,
};

/// Compresses the 64-byte `block` into `state` with the round constants `k`, and says whether
/// it did: `false`, with `state` untouched, on a processor without the extensions.
pub(crate) fn compress(state: &mut [u32; 8], block: &[u8; 64], k: &[u32; 64]) -> bool {
    let available = std::arch::is_x86_feature_detected!("sha")
        && std::arch::is_x86_feature_detected!("sse4.1")
        && std::arch::is_x86_feature_detected!("ssse3");
    if available {
        // SAFETY: the processor has every feature `rounds` is compiled for.
        unsafe { rounds(state, block, k) };
    }
    available
}

/// The 64 rounds of one block.
///
/// # Safety
///
/// The processor must have the SHA extensions, SSSE3 and SSE4.1.
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
unsafe fn rounds(state: &mut [u32; 8], block: &[u8; 64], k: &[u32; 64]) {
    // SAFETY: the loads and stores are unaligned ones of 16 bytes, each inside `state` (8
    // words), `block` (64 bytes) or `k` (64 words); the rest are register operations the
    // caller guarantees the processor has.
    unsafe {
        // Each 32-bit word of the message is big-endian.
        let swap = _mm_set_epi64x(0x0c0d_0e0f_0809_0a0b, 0x0405_0607_0001_0203);
        let dcba = _mm_loadu_si128(state.as_ptr().cast());
        let hgfe = _mm_loadu_si128(state.as_ptr().add(4).cast());
        let cdab = _mm_shuffle_epi32(dcba, 0xB1);
        let efgh = _mm_shuffle_epi32(hgfe, 0x1B);
        let mut abef = _mm_alignr_epi8(cdab, efgh, 8);
        let mut cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
        let (abef_in, cdgh_in) = (abef, cdgh);

        let words = block.as_ptr().cast::<__m128i>();
        let mut w = [0, 1, 2, 3].map(|i| _mm_shuffle_epi8(_mm_loadu_si128(words.add(i)), swap));
        for i in 0..16 {
            let m = _mm_add_epi32(w[i % 4], _mm_loadu_si128(k.as_ptr().add(4 * i).cast()));
            // Two rounds: the new A, B, E, F; the old ones are now C, D, G, H.
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, m);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(m, 0x0E));
            if i < 12 {
                // W[t] for the group four on: W[t-16] + σ0(W[t-15]), + W[t-7], + σ1(W[t-2]).
                let partial = _mm_sha256msg1_epu32(w[i % 4], w[(i + 1) % 4]);
                let seven_back = _mm_alignr_epi8(w[(i + 3) % 4], w[(i + 2) % 4], 4);
                w[i % 4] = _mm_sha256msg2_epu32(_mm_add_epi32(partial, seven_back), w[(i + 3) % 4]);
            }
        }

        abef = _mm_add_epi32(abef, abef_in);
        cdgh = _mm_add_epi32(cdgh, cdgh_in);
        let feba = _mm_shuffle_epi32(abef, 0x1B);
        let dchg = _mm_shuffle_epi32(cdgh, 0xB1);
        _mm_storeu_si128(state.as_mut_ptr().cast(), _mm_blend_epi16(feba, dchg, 0xF0));
        _mm_storeu_si128(state.as_mut_ptr().add(4).cast(), _mm_alignr_epi8(dchg, feba, 8));
    }
}
