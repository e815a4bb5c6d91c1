//! Device ordinals as users hold them: any primitive integer, checked before it reaches the
//! driver's `int`.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};

/// An integer that can name a device in [`Device::get`](super::Device::get): `i8` to `i64`,
/// `u8` to `u64`, `isize` and `usize`, so that an ordinal kept as CUDA's `int`, as a `u32` or as a
/// `usize` index passes as it is, and a literal (`Device::get(0)`) is an `i32`.
///
/// The trait is sealed: only those types implement it. The value is checked, never cast: a
/// negative ordinal, or one the driver's `int` cannot hold, is an
/// [`Error::InvalidArgument`] before any call.
pub trait DeviceOrdinal: sealed::Sealed {}

mod sealed {
    /// Widens an ordinal losslessly, so that one check covers every type.
    pub trait Sealed: Copy {
        /// The value, unchanged.
        fn widen(self) -> i128;
    }
}

macro_rules! device_ordinal {
    ($($t:ty)*) => {$(
        impl sealed::Sealed for $t {
            fn widen(self) -> i128 {
                // Every integer of 64 bits or fewer fits in an i128.
                self as i128
            }
        }
        impl DeviceOrdinal for $t {}
    )*};
}

device_ordinal!(i8 i16 i32 i64 isize u8 u16 u32 u64 usize);

/// The operation named by the errors of this module.
const OPERATION: &str = "Device::get";

/// `ordinal` as the driver's `int`, or why no device can have it; checked before the driver
/// is asked how many devices there are.
pub(super) fn as_int(ordinal: impl DeviceOrdinal) -> Result<i32> {
    let wide = sealed::Sealed::widen(ordinal);
    if wide < 0 {
        return Err(Error::invalid(
            OPERATION,
            format!(
                "device ordinal {wide} is out of range: ordinals count from 0 (the first device) to \
                 Device::count() - 1"
            ),
        ));
    }
    i32::try_from(wide).map_err(|_| {
        Error::invalid(
            OPERATION,
            format!(
                "device ordinal {wide} is out of range: the driver numbers devices with an int, so \
                 no ordinal exceeds {}; use one below Device::count()",
                i32::MAX
            ),
        )
    })
}

/// `ordinal` (already an `int`) if a device has it when `count` devices are visible.
pub(super) fn within(ordinal: i32, count: usize) -> Result<i32> {
    if usize::try_from(ordinal).is_ok_and(|o| o < count) {
        return Ok(ordinal);
    }
    let message = if count == 0 {
        format!(
            "device ordinal {ordinal} is out of range: this process sees no CUDA device \
             (Device::count() is 0; check the driver and CUDA_VISIBLE_DEVICES)"
        )
    } else {
        format!(
            "device ordinal {ordinal} is out of range: {count} device(s) present (ordinals 0..{count}); \
             use one below Device::count()"
        )
    };
    Err(Error::invalid(OPERATION, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(r: Result<i32>) -> String {
        match r {
            Err(Error::InvalidArgument { operation, message, .. }) => format!("{operation}: {message}"),
            other => format!("not a refusal: {other:?}"),
        }
    }

    #[test]
    fn every_integer_type_passes_its_value_unchanged() {
        assert_eq!(as_int(0).ok(), Some(0));
        assert_eq!(as_int(3i8).ok(), Some(3));
        assert_eq!(as_int(3u8).ok(), Some(3));
        assert_eq!(as_int(3i16).ok(), Some(3));
        assert_eq!(as_int(3u16).ok(), Some(3));
        assert_eq!(as_int(3i32).ok(), Some(3));
        assert_eq!(as_int(3u32).ok(), Some(3));
        assert_eq!(as_int(3i64).ok(), Some(3));
        assert_eq!(as_int(3u64).ok(), Some(3));
        assert_eq!(as_int(3isize).ok(), Some(3));
        assert_eq!(as_int(3usize).ok(), Some(3));
        assert_eq!(as_int(i32::MAX).ok(), Some(i32::MAX));
    }

    #[test]
    fn negative_and_oversized_ordinals_are_refused_with_their_value() {
        let negative = refusal(as_int(-1));
        assert!(negative.starts_with("Device::get: device ordinal -1 is out of range"), "{negative}");
        assert!(negative.contains("count from 0"), "{negative}");
        assert!(refusal(as_int(i64::MIN)).contains(&i64::MIN.to_string()));
        let big = refusal(as_int(u64::MAX));
        assert!(big.contains(&u64::MAX.to_string()) && big.contains("Device::count()"), "{big}");
        assert!(as_int(i64::from(i32::MAX) + 1).is_err());
        assert!(as_int(u32::MAX).is_err());
    }

    #[test]
    fn an_ordinal_past_the_last_device_is_refused_with_the_count() {
        assert_eq!(within(0, 1).ok(), Some(0));
        assert_eq!(within(1, 2).ok(), Some(1));
        assert_eq!(
            refusal(within(2, 2)),
            "Device::get: device ordinal 2 is out of range: 2 device(s) present (ordinals 0..2); \
             use one below Device::count()"
        );
        let none = refusal(within(0, 0));
        assert!(none.contains("sees no CUDA device") && none.contains("CUDA_VISIBLE_DEVICES"), "{none}");
        assert!(within(-1, 4).is_err());
    }

    #[test]
    fn the_guide_shows_the_refusals() {
        let chapter = include_str!("../../../docs/src/errors.md");
        for text in [refusal(as_int(-1)), refusal(within(2, 2))] {
            assert!(chapter.contains(&text), "docs/src/errors.md does not show `{text}`");
        }
    }
}
