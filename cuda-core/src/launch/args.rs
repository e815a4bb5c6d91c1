//! Typed kernel arguments without heap allocation.

use std::ffi::c_void;

/// Kernel arguments: a tuple of references to the values of the kernel's parameters, in
/// order, e.g. `(&n, &alpha, &x_ptr, &y_ptr)`; `()` for none.
///
/// [`pointers`](KernelArgs::pointers) makes the array of pointers to them that
/// `cuLaunchKernelEx` reads, as a fixed-size array on the stack. Implemented for tuples of up
/// to 16 references to `Copy` values.
///
/// # Safety
///
/// An implementation must return one pointer per parameter, each to a value that lives as long
/// as `self`'s borrows.
pub unsafe trait KernelArgs {
    /// The pointer array: `[*mut c_void; N]`.
    type Pointers: AsMut<[*mut c_void]>;
    /// The pointer to each argument, in order.
    fn pointers(&self) -> Self::Pointers;
}

// SAFETY: no parameters, no pointers.
unsafe impl KernelArgs for () {
    type Pointers = [*mut c_void; 0];
    #[inline]
    fn pointers(&self) -> [*mut c_void; 0] {
        []
    }
}

macro_rules! kernel_args {
    ($n:literal: $($name:ident $index:tt),+) => {
        // SAFETY: one pointer per tuple element, each to the referenced value, which outlives
        // the tuple's borrow.
        unsafe impl<'a, $($name: Copy),+> KernelArgs for ($(&'a $name,)+) {
            type Pointers = [*mut c_void; $n];
            #[inline]
            fn pointers(&self) -> [*mut c_void; $n] {
                [$((self.$index as *const $name).cast_mut().cast()),+]
            }
        }
    };
}

kernel_args!(1: A 0);
kernel_args!(2: A 0, B 1);
kernel_args!(3: A 0, B 1, C 2);
kernel_args!(4: A 0, B 1, C 2, D 3);
kernel_args!(5: A 0, B 1, C 2, D 3, E 4);
kernel_args!(6: A 0, B 1, C 2, D 3, E 4, F 5);
kernel_args!(7: A 0, B 1, C 2, D 3, E 4, F 5, G 6);
kernel_args!(8: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
kernel_args!(9: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
kernel_args!(10: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
kernel_args!(11: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
kernel_args!(12: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
kernel_args!(13: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12);
kernel_args!(14: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13);
kernel_args!(15: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14);
kernel_args!(16: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_point_at_the_values_in_order() {
        let (a, b, c) = (1u32, 2.5f64, 7u64);
        let p = (&a, &b, &c).pointers();
        assert_eq!(p.len(), 3);
        assert_eq!(p[0] as *const u32, &a as *const u32);
        assert_eq!(p[1] as *const f64, &b as *const f64);
        assert_eq!(p[2] as *const u64, &c as *const u64);
        assert_eq!(().pointers().len(), 0);
    }
}
