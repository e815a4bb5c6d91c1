//! [`Input`] and [`Output`]: the buffers and views NCCL calls read and write.

#![forbid(unsafe_code)]

use crate::context::Context;
use crate::error::Result;
use crate::memory::{DeviceBuffer, DeviceView, DeviceViewMut, MemorySpace};
use crate::stream::Stream;
use bytemuck::Pod;
use cuhost_driver_sys as sys;

pub(crate) mod sealed {
    use crate::context::Context;
    use crate::error::Result;
    use crate::memory::DeviceViewMut;
    use crate::stream::Stream;

    pub trait Sealed {
        /// Notes that an NCCL call on `stream`, with `current` current, uses the memory: its
        /// owner then waits for `stream` (and, inside a group, for the group's end) before it
        /// gives the memory back.
        fn note_use(&self, current: &Context, stream: &Stream) -> Result<()>;
        /// Notes that a call inside the open group `group` uses the memory.
        fn note_group(&self, group: u64);
    }

    /// Memory that can be lent on as an exclusive view with its owner's stream and tracking
    /// (a registration keeps it, so that work queued through it follows the stream rule).
    pub trait IntoView<T> {
        /// The exclusive view of the memory, for as long as the memory is borrowed.
        fn into_view_mut<'m>(self) -> DeviceViewMut<'m, T>
        where
            Self: 'm;
    }
}

/// Device memory an NCCL call reads: `&DeviceBuffer<T>` (of any memory space),
/// `DeviceView<T>`, `&DeviceView<T>` and `&DeviceViewMut<T>`.
pub trait Input<T>: sealed::Sealed {
    /// The device address of the first element.
    fn device_ptr(&self) -> sys::CUdeviceptr;
    /// The number of elements.
    fn count(&self) -> usize;
    /// The context the memory belongs to.
    fn memory_context(&self) -> &Context;
}

/// Device memory an NCCL call writes: `&mut DeviceBuffer<T>` (of any memory space),
/// `DeviceViewMut<T>` and `&mut DeviceViewMut<T>`. The exclusive borrow shows the borrow
/// checker that the call writes it.
pub trait Output<T>: Input<T> + sealed::IntoView<T> {}

macro_rules! memory {
    ($kind:ident: $([$($generics:tt)*] $ty:ty),+ $(,)?) => {$(
        impl<$($generics)*> sealed::Sealed for $ty {
            #[inline]
            fn note_use(&self, current: &Context, stream: &Stream) -> Result<()> {
                self.used_on(current, stream, memory!(@access $kind))
            }

            #[inline]
            fn note_group(&self, group: u64) {
                self.taken_by_group(group)
            }
        }
        impl<$($generics)*> Input<T> for $ty {
            #[inline]
            fn device_ptr(&self) -> sys::CUdeviceptr {
                self.as_raw()
            }

            #[inline]
            fn count(&self) -> usize {
                self.len()
            }

            #[inline]
            fn memory_context(&self) -> &Context {
                self.context()
            }
        }
        memory!(@$kind [$($generics)*] $ty);
    )+};
    (@access read) => { crate::track::Access::Read };
    (@access write) => { crate::track::Access::Write };
    (@read [$($generics:tt)*] $ty:ty) => {};
    (@write [$($generics:tt)*] $ty:ty) => {
        impl<$($generics)*> Output<T> for $ty {}
    };
}

memory!(read:
    [T: Pod, S: MemorySpace] &DeviceBuffer<T, S>,
    [T: Pod] DeviceView<'_, T>,
    [T: Pod] &DeviceView<'_, T>,
    [T: Pod] &DeviceViewMut<'_, T>,
);

impl<T: Pod, S: MemorySpace> sealed::IntoView<T> for &mut DeviceBuffer<T, S> {
    fn into_view_mut<'m>(self) -> DeviceViewMut<'m, T>
    where
        Self: 'm,
    {
        self.view_mut()
    }
}

impl<T: Pod> sealed::IntoView<T> for DeviceViewMut<'_, T> {
    fn into_view_mut<'m>(self) -> DeviceViewMut<'m, T>
    where
        Self: 'm,
    {
        self
    }
}

impl<T: Pod> sealed::IntoView<T> for &mut DeviceViewMut<'_, T> {
    fn into_view_mut<'m>(self) -> DeviceViewMut<'m, T>
    where
        Self: 'm,
    {
        self.reborrow()
    }
}

memory!(write:
    [T: Pod, S: MemorySpace] &mut DeviceBuffer<T, S>,
    [T: Pod] DeviceViewMut<'_, T>,
    [T: Pod] &mut DeviceViewMut<'_, T>,
);
