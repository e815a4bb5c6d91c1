//! [`flags!`]: the typed sets of driver flag bits (`StreamFlags`, `EventFlags`, ...), each a
//! [`bitflags`] type over the integer the driver takes.
//!
//! Every flag type has what `bitflags` 2 gives: `empty`, `all`, `bits`, `from_bits`,
//! `from_bits_truncate`, `from_bits_retain`, `from_name`, `contains`, `intersects`, `insert`,
//! `remove`, `toggle`, `set`, `union`, `intersection`, `difference`, `complement`, the bit
//! operators, `iter` and `iter_names`, `FromIterator` and `Extend`, binary, octal and hex
//! formatting, the [`bitflags::Flags`] trait, and with the crate's `serde` feature `Serialize`
//! and `Deserialize` (as the flag names, or the bits in binary formats).

#![forbid(unsafe_code)]

/// Declares a flag type: `pub struct Name: u32 { const A = 0x1; ... }`, with attributes and
/// docs on the type and on each flag, as [`bitflags::bitflags!`] does, adding `Debug` (which
/// names the flags set: `StreamFlags(NON_BLOCKING)`) and, with the `serde` feature, serde's
/// traits. Derive the other traits on the type.
macro_rules! flags {
    (
        $(#[$($outer:tt)*])*
        pub struct $name:ident: $t:ty {
            $(
                $(#[$($inner:tt)*])*
                const $flag:ident = $value:expr;
            )*
        }
    ) => {
        ::bitflags::bitflags! {
            $(#[$($outer)*])*
            #[derive(Debug)]
            #[cfg_attr(feature = "serde", derive(::serde::Serialize, ::serde::Deserialize))]
            #[repr(transparent)]
            pub struct $name: $t {
                $(
                    $(#[$($inner)*])*
                    const $flag = $value;
                )*
            }
        }
    };
}
pub(crate) use flags;

#[cfg(test)]
// The macro makes a public type, as it does everywhere; here it lives in the tests.
#[allow(unreachable_pub)]
mod tests {
    flags! {
        /// Flags for the tests.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct Sample: u32 {
            /// One.
            const A = 0x1;
            /// Two.
            const B = 0x2;
            /// Both.
            const AB = Self::A.bits() | Self::B.bits();
        }
    }

    #[test]
    fn set_operations_follow_the_bits() {
        let mut f = Sample::A;
        assert!(f.contains(Sample::A) && !f.contains(Sample::AB) && f.intersects(Sample::AB));
        f |= Sample::B;
        assert_eq!(f, Sample::AB);
        assert!(f.is_all());
        f -= Sample::A;
        assert_eq!(f, Sample::B);
        f.set(Sample::A, true);
        f.toggle(Sample::B);
        assert_eq!(f.bits(), 0x1);
        assert_eq!(!Sample::A, Sample::B);
        assert_eq!(Sample::AB & Sample::B, Sample::B);
        assert_eq!(Sample::AB ^ Sample::B, Sample::A);
        assert!(Sample::empty().is_empty() && Sample::default().is_empty());
    }

    #[test]
    fn bits_from_outside_are_checked_truncated_or_kept() {
        assert_eq!(Sample::from_bits(0x3), Some(Sample::AB));
        assert_eq!(Sample::from_bits(0x7), None);
        assert_eq!(Sample::from_bits_truncate(0x7), Sample::AB);
        assert_eq!(Sample::from_bits_retain(0x7).bits(), 0x7);
        assert_eq!(Sample::from_bits_retain(0x4).complement(), Sample::AB);
    }

    #[test]
    fn debug_names_the_flags_and_shows_the_rest_in_hex() {
        assert_eq!(format!("{:?}", Sample::A), "Sample(A)");
        assert_eq!(format!("{:?}", Sample::AB), "Sample(A | B)");
        assert_eq!(format!("{:?}", Sample::from_bits_retain(0x41)), "Sample(A | 0x40)");
        assert_eq!(format!("{:?}", Sample::from_bits_retain(0x40)), "Sample(0x40)");
        assert_eq!(format!("{:?}", Sample::empty()), "Sample(0x0)");
    }

    #[test]
    fn flags_iterate_collect_format_and_parse_by_name() {
        let names: Vec<&str> = Sample::AB.iter_names().map(|(name, _)| name).collect();
        assert_eq!(names, ["A", "B"]);
        assert_eq!([Sample::A, Sample::B].into_iter().collect::<Sample>(), Sample::AB);
        assert_eq!(format!("{:#x} {:b}", Sample::AB, Sample::B), "0x3 10");
        assert_eq!(Sample::from_name("B"), Some(Sample::B));
        assert_eq!(bitflags::parser::from_str::<Sample>("A | B").ok(), Some(Sample::AB));
    }

    #[cfg(feature = "serde")]
    #[test]
    fn flags_round_trip_through_serde_as_names() {
        let text = serde_json::to_string(&Sample::AB).unwrap_or_default();
        assert_eq!(text, "\"A | B\"");
        assert_eq!(serde_json::from_str::<Sample>(&text).ok(), Some(Sample::AB));
    }
}
