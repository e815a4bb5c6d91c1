//! Text handed to NVTX: C strings as they are, Rust strings NUL-terminated on the stack.

use std::ffi::{CStr, CString};
use std::mem::MaybeUninit;

/// Strings up to this many bytes are terminated on the stack; longer ones on the heap.
const STACK_BYTES: usize = 256;

/// Text NVTX can take: `&CStr` and `CString` as they are (no copy), `&str` and `String`
/// copied once into a NUL-terminated buffer on the stack (on the heap past 255 bytes).
///
/// NVTX messages are C strings: a Rust string with an interior NUL is cut at that NUL.
pub trait Text {
    /// Whether [`with_c_str`](Self::with_c_str) copies the text. Calls taking copying text
    /// first check that a tool implements the function, so that without a tool they copy
    /// nothing.
    const COPIES: bool;

    /// Calls `f` with the text as a C string.
    fn with_c_str<R>(&self, f: impl FnOnce(&CStr) -> R) -> R;
}

impl Text for CStr {
    const COPIES: bool = false;

    #[inline]
    fn with_c_str<R>(&self, f: impl FnOnce(&CStr) -> R) -> R {
        f(self)
    }
}

impl Text for CString {
    const COPIES: bool = false;

    #[inline]
    fn with_c_str<R>(&self, f: impl FnOnce(&CStr) -> R) -> R {
        f(self.as_c_str())
    }
}

impl Text for str {
    const COPIES: bool = true;

    #[inline]
    fn with_c_str<R>(&self, f: impl FnOnce(&CStr) -> R) -> R {
        let bytes = self.as_bytes();
        let bytes = match bytes.iter().position(|&b| b == 0) {
            Some(nul) => &bytes[..nul],
            None => bytes,
        };
        if bytes.len() < STACK_BYTES {
            let mut buffer = [MaybeUninit::<u8>::uninit(); STACK_BYTES];
            let start = buffer.as_mut_ptr().cast::<u8>();
            // SAFETY: `bytes.len() + 1 <= STACK_BYTES`, so the copy and the NUL fit; source
            // and buffer do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), start, bytes.len());
                start.add(bytes.len()).write(0);
            }
            // SAFETY: the first `bytes.len() + 1` bytes were written just above.
            let written = unsafe { std::slice::from_raw_parts(start, bytes.len() + 1) };
            // SAFETY: `bytes` holds no NUL (it was cut at the first) and is followed by one.
            f(unsafe { CStr::from_bytes_with_nul_unchecked(written) })
        } else {
            match CString::new(bytes) {
                Ok(c) => f(&c),
                Err(_) => f(c""),
            }
        }
    }
}

impl Text for String {
    const COPIES: bool = true;

    #[inline]
    fn with_c_str<R>(&self, f: impl FnOnce(&CStr) -> R) -> R {
        self.as_str().with_c_str(f)
    }
}

impl<T: Text + ?Sized> Text for &T {
    const COPIES: bool = T::COPIES;

    #[inline]
    fn with_c_str<R>(&self, f: impl FnOnce(&CStr) -> R) -> R {
        (**self).with_c_str(f)
    }
}

/// True when `T` would be copied for a function no tool implements: the call can be skipped.
#[inline(always)]
pub(super) fn skip_copy<T: Text + ?Sized>(module: cuhost_nvtx_sys::protocol::Module, id: u32) -> bool {
    T::COPIES && cuhost_nvtx_sys::protocol::slot(module, id).is_none()
}

#[cfg(test)]
mod tests {
    use super::Text;

    fn owned(t: &(impl Text + ?Sized)) -> Vec<u8> {
        t.with_c_str(|c| c.to_bytes().to_vec())
    }

    #[test]
    fn rust_strings_are_terminated_and_cut_at_nul() {
        assert_eq!(owned("kernel"), b"kernel");
        assert_eq!(owned("a\0b"), b"a");
        assert_eq!(owned(c"c string"), b"c string");
        let long = "x".repeat(1000);
        assert_eq!(owned(&long), long.as_bytes());
        let edge = "y".repeat(255);
        assert_eq!(owned(edge.as_str()), edge.as_bytes());
        let edge = "z".repeat(256);
        assert_eq!(owned(&edge), edge.as_bytes());
    }
}
