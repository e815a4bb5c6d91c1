//! Kernels: a loaded "image" is a short text that names built-in kernels, written like PTX
//! entry points so that `cuda-core` reads their parameter counts as it does for PTX:
//!
//! ```text
//! .entry fill_u32(.param .u64 dst, .param .u32 n, .param .u32 value)
//! .entry add_u32(.param .u64 dst, .param .u64 src, .param .u32 n)
//! ```
//!
//! Each built-in kernel is a Rust function over the simulator's memory, run late like every
//! other queued operation. For the checker, a launch counts every pointer-sized argument that
//! falls inside a live allocation as read, of the bytes the kernel's element count covers from
//! there (clipped to the allocation), and the first one (the destination, the only memory a
//! built-in kernel writes) as written too.

use crate::checker::Range;
use crate::memory::Memory;
use std::ffi::CStr;

/// One built-in kernel: its name and the size of each parameter.
#[derive(Debug)]
pub struct Builtin {
    /// The entry name.
    pub name: &'static CStr,
    /// The parameter sizes, in order.
    pub params: &'static [usize],
    /// Which parameter is the element count (a `u32`).
    count: usize,
}

/// Every kernel an image may name.
pub const BUILTINS: [Builtin; 2] = [
    // fill_u32(dst: *mut u32, n: u32, value: u32): dst[i] = value.
    Builtin { name: c"fill_u32", params: &[8, 4, 4], count: 1 },
    // add_u32(dst: *mut u32, src: *const u32, n: u32): dst[i] += src[i].
    Builtin { name: c"add_u32", params: &[8, 8, 4], count: 2 },
];

/// The most parameters a built-in kernel has.
pub const MAX_PARAMS: usize = 3;

/// The built-in kernels an image names, by index in [`BUILTINS`]; `None` when it names a
/// kernel that is not built in, or is not text.
pub fn parse_image(image: &[u8]) -> Option<Vec<usize>> {
    let text = std::str::from_utf8(image).ok()?;
    let mut kernels = Vec::new();
    for (i, _) in text.match_indices(".entry") {
        let rest = text[i + ".entry".len()..].trim_start();
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        let name = &rest[..end];
        let index = BUILTINS.iter().position(|b| b.name.to_bytes() == name.as_bytes())?;
        if !kernels.contains(&index) {
            kernels.push(index);
        }
    }
    Some(kernels)
}

/// A launch of a built-in kernel: which one and its arguments (each widened to 64 bits).
#[derive(Clone, Copy, Debug)]
pub struct Launch {
    /// The index in [`BUILTINS`].
    pub kernel: usize,
    /// The function handle launched (a graph launch checks that its module is still loaded).
    pub function: u64,
    /// The arguments, in order.
    pub args: [u64; MAX_PARAMS],
}

impl Launch {
    fn builtin(&self) -> &'static Builtin {
        &BUILTINS[self.kernel]
    }

    fn count(&self) -> u64 {
        self.args[self.builtin().count] & 0xFFFF_FFFF
    }

    /// The ranges the launch reads and those it writes: from each pointer-sized argument
    /// inside a live allocation, the bytes of `n` `u32`s, clipped to the allocation; the first
    /// argument's are written too.
    pub fn ranges(&self, memory: &Memory) -> (Vec<Range>, Vec<Range>) {
        let bytes = self.count() * 4;
        let (mut reads, mut writes) = (Vec::new(), Vec::new());
        let pointers =
            self.builtin().params.iter().zip(self.args).enumerate().filter(|&(_, (&size, _))| size == 8);
        for (i, (_, ptr)) in pointers {
            let Some(end) = memory.live_end(ptr) else { continue };
            let range = Range { start: ptr, end: ptr.saturating_add(bytes).min(end) };
            reads.push(range);
            if i == 0 {
                writes.push(range);
            }
        }
        (reads, writes)
    }

    /// Runs the kernel on `memory`; pointers outside every allocation are skipped (a real
    /// kernel would fault; the checker reports what matters).
    pub fn run(&self, memory: &mut Memory) {
        let n = self.count();
        let bytes = n * 4;
        match self.builtin().name.to_bytes() {
            b"fill_u32" => {
                let value = (self.args[2] as u32).to_le_bytes();
                if let Some(dst) = memory.locate(self.args[0], bytes) {
                    for i in 0..n as usize {
                        // SAFETY: `locate` found `n * 4` bytes at `dst`.
                        unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), dst.add(i * 4), 4) };
                    }
                }
            }
            _ => {
                let src: Vec<u8> = match memory.locate(self.args[1], bytes) {
                    // SAFETY: `locate` found `n * 4` bytes at `p`; copied out before `dst` is
                    // written, so the two may overlap.
                    Some(p) => unsafe { std::slice::from_raw_parts(p, bytes as usize) }.to_vec(),
                    None => return,
                };
                if let Some(dst) = memory.locate(self.args[0], bytes) {
                    for (i, s) in src.chunks_exact(4).enumerate() {
                        // SAFETY: as above, `n * 4` bytes at `dst`; unaligned reads and writes.
                        unsafe {
                            let d = dst.add(i * 4).cast::<u32>();
                            let add = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                            d.write_unaligned(d.read_unaligned().wrapping_add(add));
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_names_built_in_kernels_and_nothing_else() {
        let image = b".entry fill_u32(.param .u64 a, .param .u32 n, .param .u32 v)\n.entry add_u32()";
        assert_eq!(parse_image(image), Some(vec![0, 1]));
        assert_eq!(parse_image(b"// nothing"), Some(vec![]));
        assert_eq!(parse_image(b".entry saxpy()"), None);
    }

    #[test]
    fn a_launch_reads_pointer_arguments_inside_live_allocations_clipped_and_writes_the_first() {
        let mut memory = Memory::default();
        let a = memory.alloc_device(64);
        let b = memory.alloc_device(16);
        let fill = Launch { kernel: 0, function: 0, args: [a + 8, 4, 7] };
        assert_eq!(fill.ranges(&memory), (vec![Range::new(a + 8, 16)], vec![Range::new(a + 8, 16)]));
        fill.run(&mut memory);
        let add = Launch { kernel: 1, function: 0, args: [b, a + 8, 8] };
        assert_eq!(
            add.ranges(&memory),
            (vec![Range::new(b, 16), Range::new(a + 8, 32)], vec![Range::new(b, 16)])
        );
        let scalar_like = Launch { kernel: 0, function: 0, args: [12345, 4, 7] };
        assert_eq!(scalar_like.ranges(&memory), (vec![], vec![]));
        Launch { kernel: 1, function: 0, args: [b, a + 8, 4] }.run(&mut memory);
        let p = memory.locate(b, 16).unwrap();
        // SAFETY: 16 bytes at `p`.
        let got = unsafe { std::slice::from_raw_parts(p, 16) };
        assert_eq!(got, [7, 0, 0, 0].repeat(4));
    }
}
