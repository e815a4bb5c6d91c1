//! Typed kernel arguments without heap allocation: scalars and plain-data structs by
//! reference, device buffers and views by their device address.

use super::DeviceRepr;
use crate::error::Result;
use crate::memory::{DeviceBuffer, DeviceView, DeviceViewMut, MemorySpace};
use crate::stream::Stream;
use bytemuck::Pod;
use std::ffi::c_void;
use std::mem::size_of;

/// One argument of a kernel launch: something that can give the driver a pointer to the bytes
/// of one kernel parameter, and say how many bytes that parameter has.
///
/// Implemented for:
///
/// * `&T` where `T` is [`DeviceRepr`]: a scalar (`u32`, `f32`, a `u64` device address...), a
///   plain-data ([`Pod`]) struct, or a `#[repr(C)]` struct with padding declared with
///   [`kernel_arg_struct!`](crate::kernel_arg_struct), passed by value as its
///   `size_of::<T>()` bytes;
/// * `&DeviceBuffer<T>`, `&mut DeviceBuffer<T>`, `DeviceView<T>`, `&DeviceView<T>`,
///   `DeviceViewMut<T>`, `&DeviceViewMut<T>`, `&mut DeviceViewMut<T>`, and `vmm`'s
///   `&GrowableBuffer<T>` and `&mut GrowableBuffer<T>`: passed as the
///   8-byte device address of their first element, for a `T*` parameter. Pass a buffer by
///   `&mut` (or a [`DeviceViewMut`]) where the kernel writes through the pointer, so that the
///   borrow checker sees the write;
/// * `&TextureObject` and `&SurfaceObject` (of `texture`): their 64-bit handle,
///   for a `.u64` parameter;
/// * `&TensorMap`: its 128 bytes by value, for a `const __grid_constant__ CUtensorMap`
///   (`.param .align 64 .b8 name[128]`).
///
/// Launches read the argument where it is: nothing is copied or allocated. A buffer or view
/// launched on a stream other than its own notes that stream
/// ([`note_launch`](KernelArg::note_launch)), so its memory is not given back before the
/// kernel has run.
///
/// The bytes may include a struct's padding, which is uninitialised: they go to the driver as
/// they are, and no code may read them as Rust values (a `&[u8]` over them would be undefined
/// behaviour).
///
/// # Safety
///
/// [`arg_ptr`](KernelArg::arg_ptr) must return a pointer to [`arg_size`](KernelArg::arg_size)
/// readable bytes that stay valid and unchanged while `self` is neither moved nor dropped.
pub unsafe trait KernelArg {
    /// A pointer to the bytes of the parameter's value, as `cuLaunchKernelEx` reads them.
    fn arg_ptr(&self) -> *mut c_void;
    /// The number of bytes the parameter has; compared with the kernel's parameter layout
    /// before a launch, where the driver reports it.
    fn arg_size(&self) -> usize;

    /// Called before a launch on `stream`, with `stream`'s context current: memory the
    /// argument refers to notes the stream, so that its owner waits for the kernel before it
    /// gives the memory back. Nothing to do for plain values (the default), nor for a buffer
    /// on its own stream.
    ///
    /// Fails with an [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) where `stream`
    /// is a default stream that names another stream than the one meant (of another thread or
    /// context); the launch is then not made.
    #[inline]
    fn note_launch(&self, stream: &Stream) -> Result<()> {
        let _ = stream;
        Ok(())
    }
}

// SAFETY: the pointer is to the referenced value, which outlives the reference, and has
// `size_of::<T>()` bytes.
unsafe impl<T: DeviceRepr> KernelArg for &T {
    #[inline]
    fn arg_ptr(&self) -> *mut c_void {
        (*self as *const T).cast_mut().cast()
    }

    #[inline]
    fn arg_size(&self) -> usize {
        size_of::<T>()
    }
}

/// Implements [`KernelArg`] for buffers and views, by value and behind the given references:
/// the argument is their device address, the field `ptr` of the type, and a launch on another
/// stream than the buffer's own notes that stream (`used_on`), as a read for shared borrows and
/// a write for exclusive ones. The types of other modules
/// (`vmm`'s growable buffer) invoke it beside their definition.
macro_rules! address_arg {
    ($([$($generics:tt)*] $arg:ty => $access:ident),+ $(,)?) => {$(
        // SAFETY: the pointer is to the address field of the buffer or view: inside `self` for
        // a view held by value (valid while `self` stays where it is), inside the borrowed
        // buffer or view otherwise. Nothing changes the field while it is borrowed.
        unsafe impl<$($generics)*> $crate::launch::KernelArg for $arg {
            #[inline]
            fn arg_ptr(&self) -> *mut ::std::ffi::c_void {
                (&self.ptr as *const ::cuhost_driver_sys::CUdeviceptr).cast_mut().cast()
            }

            #[inline]
            fn arg_size(&self) -> usize {
                ::std::mem::size_of::<::cuhost_driver_sys::CUdeviceptr>()
            }

            #[inline]
            fn note_launch(&self, stream: &$crate::stream::Stream) -> $crate::error::Result<()> {
                self.used_on(stream.context(), stream, $crate::track::Access::$access)?;
                if $crate::track::Access::$access == $crate::track::Access::Read {
                    $crate::track::checker::launch_reads(self.ptr);
                }
                Ok(())
            }
        }
    )+};
}
pub(crate) use address_arg;

address_arg!(
    [T: Pod, S: MemorySpace] &DeviceBuffer<T, S> => Read,
    [T: Pod, S: MemorySpace] &mut DeviceBuffer<T, S> => Write,
    [T: Pod] DeviceView<'_, T> => Read,
    [T: Pod] &DeviceView<'_, T> => Read,
    [T: Pod] DeviceViewMut<'_, T> => Write,
    [T: Pod] &DeviceViewMut<'_, T> => Read,
    [T: Pod] &mut DeviceViewMut<'_, T> => Write,
);

/// The arguments of a kernel launch: a tuple of up to 16 [`KernelArg`]s, one per parameter of
/// the kernel, in order, e.g. `(&n, &alpha, &x, &mut y)` with `x` and `y` device buffers, or
/// `(&n, &alpha, &x_ptr, &y_ptr)` with raw `u64` device addresses; `()` for none.
///
/// [`pointers`](KernelArgs::pointers) makes the array of pointers that `cuLaunchKernelEx`
/// reads and [`sizes`](KernelArgs::sizes) the sizes that are checked against the kernel's
/// parameter layout, both as fixed-size arrays on the stack.
///
/// # Safety
///
/// An implementation must return one pointer per parameter, each to as many readable bytes as
/// the size at the same index says, valid while `self` is neither moved nor dropped; the two
/// arrays must have the same length.
pub unsafe trait KernelArgs {
    /// The pointer array: `[*mut c_void; N]`.
    type Pointers: AsMut<[*mut c_void]>;
    /// The size array: `[usize; N]`.
    type Sizes: AsRef<[usize]>;
    /// The pointer to each argument's bytes, in order.
    fn pointers(&self) -> Self::Pointers;
    /// The size in bytes of each argument, in order.
    fn sizes(&self) -> Self::Sizes;

    /// Calls [`KernelArg::note_launch`] of each argument, in order; fails with the first
    /// argument's error (a default stream that names another stream than the one meant).
    #[inline]
    fn note_launch(&self, stream: &Stream) -> Result<()> {
        let _ = stream;
        Ok(())
    }
}

// SAFETY: no parameters, no pointers.
unsafe impl KernelArgs for () {
    type Pointers = [*mut c_void; 0];
    type Sizes = [usize; 0];

    #[inline]
    fn pointers(&self) -> [*mut c_void; 0] {
        []
    }

    #[inline]
    fn sizes(&self) -> [usize; 0] {
        []
    }
}

macro_rules! kernel_args {
    ($n:literal: $($name:ident $index:tt),+) => {
        // SAFETY: one pointer and one size per tuple element, each from that element's
        // `KernelArg` implementation, whose contract gives the validity.
        unsafe impl<$($name: KernelArg),+> KernelArgs for ($($name,)+) {
            type Pointers = [*mut c_void; $n];
            type Sizes = [usize; $n];

            #[inline]
            fn pointers(&self) -> [*mut c_void; $n] {
                [$(self.$index.arg_ptr()),+]
            }

            #[inline]
            fn sizes(&self) -> [usize; $n] {
                [$(self.$index.arg_size()),+]
            }

            #[inline]
            fn note_launch(&self, stream: &Stream) -> Result<()> {
                $(self.$index.note_launch(stream)?;)+
                Ok(())
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
    use crate::context::Context;

    /// Hands out nothing and takes back anything: for buffers around made-up addresses.
    struct NoMemory;

    // SAFETY: test-only; `allocate` never returns memory, and buffers adopted around made-up
    // addresses are never read or written (dropping them calls no driver).
    unsafe impl crate::alloc::Allocator for NoMemory {
        fn allocate(
            &self,
            size: usize,
            _: crate::alloc::StreamRef<'_>,
        ) -> crate::error::Result<crate::alloc::DeviceAllocation> {
            Err(crate::error::Error::invalid("NoMemory", format!("{size} bytes: this allocator has none")))
        }

        unsafe fn deallocate(
            &self,
            _: crate::alloc::DeviceAllocation,
            _: crate::alloc::StreamRef<'_>,
        ) -> crate::error::Result<()> {
            Ok(())
        }
    }

    /// A buffer around a made-up address, on the default stream of a detached context; dropping
    /// it calls no driver.
    fn fake_buffer<T: Pod>(ctx: &Context, address: u64, len: usize) -> DeviceBuffer<T> {
        let stream = crate::stream::Stream::legacy(ctx);
        let allocation =
            crate::alloc::DeviceAllocation { ptr: address, size: len * size_of::<T>(), token: 0 };
        // SAFETY: the buffer is never used for memory access; its allocator frees nothing.
        let b =
            unsafe { DeviceBuffer::from_allocation(&stream, std::sync::Arc::new(NoMemory), allocation, len) };
        b.unwrap()
    }

    fn address_at(p: *mut c_void) -> u64 {
        // SAFETY: the tests only call this on pointers to device-address fields.
        unsafe { p.cast::<u64>().read() }
    }

    #[test]
    fn scalar_arguments_point_at_the_values_in_order() {
        let (a, b, c) = (1u32, 2.5f64, 7u64);
        let args = (&a, &b, &c);
        let p = args.pointers();
        assert_eq!(p.len(), 3);
        assert_eq!(p[0] as *const u32, &a as *const u32);
        assert_eq!(p[1] as *const f64, &b as *const f64);
        assert_eq!(p[2] as *const u64, &c as *const u64);
        assert_eq!(args.sizes(), [4, 8, 8]);
        assert_eq!(().pointers().len(), 0);
        assert_eq!(().sizes().len(), 0);
    }

    #[test]
    fn plain_data_structs_pass_by_value_with_their_size() {
        #[derive(Clone, Copy)]
        #[repr(C)]
        struct Params {
            scale: f32,
            count: u32,
            offset: [u64; 2],
        }
        // SAFETY: plain numbers, laid out without padding (4 + 4 + 16 bytes).
        unsafe impl bytemuck::Zeroable for Params {}
        unsafe impl bytemuck::Pod for Params {}
        let params = Params { scale: 2.0, count: 3, offset: [4, 5] };
        let small = 9u8;
        let args = (&params, &small);
        assert_eq!(args.sizes(), [24, 1]);
        assert_eq!(args.pointers()[0] as *const Params, &params as *const Params);
        assert_eq!(args.pointers()[1] as *const u8, &small as *const u8);
    }

    #[test]
    fn buffers_pass_the_address_field_they_hold() {
        let ctx = Context::detached_for_tests();
        let x = fake_buffer::<f32>(&ctx, 0x7000_0000, 16);
        let mut y = fake_buffer::<f32>(&ctx, 0x7000_1000, 16);
        let (n, a) = (16u32, 2.0f32);
        {
            let args = (&n, &a, &x, &mut y);
            let p = args.pointers();
            assert_eq!(args.sizes(), [4, 4, 8, 8]);
            assert_eq!(p[2] as *const u64, &x.ptr as *const u64, "the field inside the buffer");
            assert_eq!(address_at(p[2]), 0x7000_0000);
            assert_eq!(address_at(p[3]), 0x7000_1000);
            assert_eq!(p[3] as *const u64, &args.3.ptr as *const u64);
        }
        assert_eq!((x.as_raw(), y.as_raw()), (0x7000_0000, 0x7000_1000));
    }

    #[test]
    fn views_pass_the_address_field_they_hold() {
        let ctx = Context::detached_for_tests();
        let mut buffer = fake_buffer::<u32>(&ctx, 0x9000_0000, 64);
        {
            // A view of elements 4.. starts 16 bytes in. Held by value, its pointer is to the
            // field inside the argument tuple; by reference, to the field of the view.
            let view = buffer.slice(4..).unwrap();
            let args = (view, &view);
            let p = args.pointers();
            assert_eq!(p[0] as *const u64, &args.0.ptr as *const u64);
            assert_eq!(p[1] as *const u64, &view.ptr as *const u64);
            assert_eq!(address_at(p[0]), 0x9000_0010);
            assert_eq!(address_at(p[1]), 0x9000_0010);
            assert_eq!(args.sizes(), [8, 8]);
        }
        {
            let mut view = buffer.slice_mut(2..10).unwrap();
            let field = &view.ptr as *const u64;
            let shared = (&view,);
            assert_eq!(shared.pointers()[0] as *const u64, field);
            assert_eq!(address_at(shared.pointers()[0]), 0x9000_0008);
            assert_eq!(shared.sizes(), [8]);
            let exclusive = (&mut view,);
            assert_eq!(exclusive.pointers()[0] as *const u64, field);
            assert_eq!(exclusive.sizes(), [8]);
            let owned = (view,);
            assert_eq!(owned.pointers()[0] as *const u64, &owned.0.ptr as *const u64);
            assert_eq!(address_at(owned.pointers()[0]), 0x9000_0008);
            assert_eq!(owned.sizes(), [8]);
        }
        assert_eq!(buffer.as_raw(), 0x9000_0000);
    }

    #[test]
    fn sixteen_arguments_fit() {
        let v: [u16; 16] = std::array::from_fn(|i| i as u16);
        let args = (
            &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11], &v[12],
            &v[13], &v[14], &v[15],
        );
        let p = args.pointers();
        for (i, pointer) in p.iter().enumerate() {
            assert_eq!(*pointer as *const u16, &v[i] as *const u16);
        }
        assert_eq!(args.sizes(), [2; 16]);
    }
}
