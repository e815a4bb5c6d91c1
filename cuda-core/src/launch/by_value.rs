//! Structs passed to a kernel by value: [`DeviceRepr`], which plain data ([`Pod`]) has, and
//! which [`kernel_arg_struct!`](crate::kernel_arg_struct) gives a `#[repr(C)]` struct with
//! padding, without an `unsafe` line.

use bytemuck::Pod;

/// A type a kernel takes by value (a kernel parameter `T p`), passed as `&value`: its
/// `size_of::<T>()` bytes are copied into the launch's parameter space as they are.
///
/// Every [`Pod`] type has it: numbers, arrays of numbers, device addresses as `u64`, and
/// structs that derive `Pod` (which have no padding). A `#[repr(C)]` struct *with* padding (a
/// `u8` before a `u64`, as C++ structs often have) is not `Pod`; declare it with
/// [`kernel_arg_struct!`](crate::kernel_arg_struct), which checks its fields and implements
/// this trait, or implement it by hand.
///
/// ```
/// use cuhost::launch::DeviceRepr;
///
/// cuhost::kernel_arg_struct! {
///     /// The C++ kernel's `struct Params { float scale; unsigned long long n; unsigned char flags; }`:
///     /// 4 bytes of padding after `scale` and 7 at the end, 24 bytes in all.
///     #[derive(Debug, Default)]
///     pub struct Params {
///         pub scale: f32,
///         pub n: u64,
///         pub flags: u8,
///     }
/// }
///
/// fn by_value<T: DeviceRepr>(_: &T) {}
/// by_value(&Params { scale: 2.0, n: 1 << 20, flags: 1 });
/// assert_eq!(std::mem::size_of::<Params>(), 24);
/// ```
///
/// A struct with a field that is not plain data (a reference, a buffer, a view, a `String`) is
/// refused at compile time:
///
/// ```compile_fail,E0277
/// cuhost::kernel_arg_struct! {
///     pub struct Bad {
///         pub x: &'static f32,
///     }
/// }
/// ```
///
/// # Safety
///
/// The implementer promises that a value's bytes are what the kernel's parameter holds:
///
/// * the layout is fixed and is the kernel's: `#[repr(C)]` (or `#[repr(transparent)]` over
///   such a type), with the same fields in the same order as the C++ struct, so that sizes,
///   alignments and offsets agree;
/// * no field is a reference, a Rust pointer to host memory, or a value that stands for a host
///   object (a buffer, a view, a stream, a `Vec`): the kernel receives only bytes, and cannot
///   follow a host address; device memory is passed as its `u64` address;
/// * `Copy`: the bytes are copied and the value is not dropped on the device.
///
/// Padding is allowed: its bytes are uninitialised and are handed to the driver as they are.
/// No code of this crate reads them as Rust values (see [`KernelArg`](super::KernelArg)).
///
/// The launch stays `unsafe`: the crate compares each argument's size with the parameter's
/// where the driver reports the layout, and nothing more.
pub unsafe trait DeviceRepr: Copy {}

// SAFETY: `Pod` types are `Copy`, have a fixed layout with no padding, and hold no references
// (bytemuck's contract); their bytes are their value.
unsafe impl<T: Pod> DeviceRepr for T {}

/// Declares a `#[repr(C)]` struct that kernels take by value, padding included, and implements
/// [`DeviceRepr`] for it, with no `unsafe` in the caller's code.
///
/// The struct gets `#[repr(C)]` and `#[derive(Clone, Copy)]`; other attributes (doc comments,
/// more derives) are kept. Each field's type must itself be [`DeviceRepr`] (numbers, arrays of
/// numbers, `u64` device addresses, other structs declared with this macro): a field of any
/// other type (a reference, a buffer, a view) is a compile error (`E0277`), which is what makes
/// the generated implementation sound. Generic structs are not accepted; implement
/// [`DeviceRepr`] by hand for those.
///
/// ```no_run
/// # fn main() -> cuhost::Result<()> {
/// use cuhost::{Context, Device, DeviceBuffer, LaunchConfig, Stream, StreamFlags, module::Module};
///
/// cuhost::kernel_arg_struct! {
///     /// `struct Affine { float a; double b; unsigned char clamp; }` in the kernel's source.
///     pub struct Affine {
///         pub a: f32,
///         pub b: f64,
///         pub clamp: u8,
///     }
/// }
///
/// # let ptx = "";
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let module = Module::from_ptx(&ctx, ptx)?;
/// let apply = module.function("apply")?;
/// let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
/// let mut x = DeviceBuffer::<f32>::zeroed(&stream, 1024)?;
/// let params = Affine { a: 2.0, b: 0.5, clamp: 1 };
/// let n = 1024u32;
/// // SAFETY: apply takes (Affine, float*, unsigned) and x holds n floats.
/// unsafe { apply.launch(&stream, &LaunchConfig::for_elements(n, 256), (&params, &mut x, &n))? };
/// # Ok(()) }
/// ```
#[macro_export]
macro_rules! kernel_arg_struct {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($(#[$field_meta:meta])* $field_vis:vis $field:ident : $ty:ty),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy)]
        $vis struct $name {
            $($(#[$field_meta])* $field_vis $field: $ty),+
        }

        // Every field is itself `DeviceRepr`: checked here, at compile time.
        const _: fn() = || {
            fn field_is_device_repr<T: $crate::launch::DeviceRepr>() {}
            $(field_is_device_repr::<$ty>();)+
        };

        // SAFETY: `#[repr(C)]` and `Copy` above, and every field is `DeviceRepr` (checked
        // above), so the struct holds no reference and no host object; padding is allowed by
        // the trait's contract.
        unsafe impl $crate::launch::DeviceRepr for $name {}
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::kernel_arg_struct! {
        /// Padding after `a` (4 bytes) and at the end (7 bytes).
        #[derive(Debug, PartialEq)]
        struct Padded {
            a: f32,
            b: u64,
            c: u8,
        }
    }

    crate::kernel_arg_struct! {
        struct Nested {
            inner: Padded,
            more: [u32; 3],
        }
    }

    fn is_device_repr<T: DeviceRepr>() {}

    #[test]
    fn padded_structs_keep_the_c_layout() {
        is_device_repr::<Padded>();
        is_device_repr::<Nested>();
        is_device_repr::<[f64; 4]>();
        assert_eq!((std::mem::size_of::<Padded>(), std::mem::align_of::<Padded>()), (24, 8));
        assert_eq!(std::mem::offset_of!(Padded, b), 8);
        assert_eq!(std::mem::offset_of!(Padded, c), 16);
        assert_eq!(std::mem::size_of::<Nested>(), 40);
        let p = Padded { a: 1.0, b: 2, c: 3 };
        let copy = p;
        assert_eq!(p, copy);
    }
}
