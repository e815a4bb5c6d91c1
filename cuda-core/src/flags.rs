//! [`flags!`]: the typed sets of driver flag bits (`StreamFlags`, `EventFlags`, ...), each a
//! newtype over the integer the driver takes, with the usual set operations.
//!
//! A plain macro rather than a dependency: each flag type is a handful of `const fn`s and
//! operator impls, and its `Debug` text comes from one shared function, so the crate's flag
//! types add little to its build.

#![forbid(unsafe_code)]

use std::fmt;

/// Declares a flag type: `pub struct Name: u32 { const A = 0x1; ... }`, with attributes and
/// docs on the type and on each flag. The type gets `empty`, `all`, `bits`, `from_bits`,
/// `from_bits_truncate`, `from_bits_retain`, `is_empty`, `is_all`, `contains`, `intersects`,
/// `insert`, `remove`, `toggle`, `set`, `union`, `intersection`, `difference`, `complement`,
/// the bit operators (`|`, `&`, `^`, `-`, `!` and their assignments) and a `Debug` that names
/// the flags set (`StreamFlags(NON_BLOCKING)`). Derive the other traits on the type.
macro_rules! flags {
    (
        $(#[$outer:meta])*
        pub struct $name:ident: $t:ty {
            $(
                $(#[$inner:meta])*
                const $flag:ident = $value:expr;
            )*
        }
    ) => {
        $(#[$outer])*
        #[repr(transparent)]
        pub struct $name($t);

        impl $name {
            $(
                $(#[$inner])*
                pub const $flag: Self = Self($value);
            )*

            /// No flag set.
            #[inline]
            pub const fn empty() -> Self {
                Self(0)
            }

            /// Every flag this type names.
            #[inline]
            pub const fn all() -> Self {
                Self(0 $(| $value)*)
            }

            /// The bits, as the driver takes them.
            #[inline]
            pub const fn bits(&self) -> $t {
                self.0
            }

            /// The flags of `bits`; `None` when a bit is set that this type does not name.
            #[inline]
            pub const fn from_bits(bits: $t) -> Option<Self> {
                if bits & !Self::all().0 == 0 { Some(Self(bits)) } else { None }
            }

            /// The flags of `bits` that this type names; the other bits are dropped.
            #[inline]
            pub const fn from_bits_truncate(bits: $t) -> Self {
                Self(bits & Self::all().0)
            }

            /// The flags of `bits`, every bit kept, named or not (as the driver answered).
            #[inline]
            pub const fn from_bits_retain(bits: $t) -> Self {
                Self(bits)
            }

            /// Whether no bit is set.
            #[inline]
            pub const fn is_empty(&self) -> bool {
                self.0 == 0
            }

            /// Whether every flag this type names is set.
            #[inline]
            pub const fn is_all(&self) -> bool {
                self.0 & Self::all().0 == Self::all().0
            }

            /// Whether every bit of `other` is set here.
            #[inline]
            pub const fn contains(&self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }

            /// Whether a bit of `other` is set here.
            #[inline]
            pub const fn intersects(&self, other: Self) -> bool {
                self.0 & other.0 != 0
            }

            /// Sets the bits of `other`.
            #[inline]
            pub fn insert(&mut self, other: Self) {
                self.0 |= other.0;
            }

            /// Clears the bits of `other`.
            #[inline]
            pub fn remove(&mut self, other: Self) {
                self.0 &= !other.0;
            }

            /// Flips the bits of `other`.
            #[inline]
            pub fn toggle(&mut self, other: Self) {
                self.0 ^= other.0;
            }

            /// Sets the bits of `other` when `value`, clears them otherwise.
            #[inline]
            pub fn set(&mut self, other: Self, value: bool) {
                if value { self.insert(other) } else { self.remove(other) }
            }

            /// The bits set here or in `other`.
            #[inline]
            #[must_use]
            pub const fn union(self, other: Self) -> Self {
                Self(self.0 | other.0)
            }

            /// The bits set both here and in `other`.
            #[inline]
            #[must_use]
            pub const fn intersection(self, other: Self) -> Self {
                Self(self.0 & other.0)
            }

            /// The bits set here and not in `other`.
            #[inline]
            #[must_use]
            pub const fn difference(self, other: Self) -> Self {
                Self(self.0 & !other.0)
            }

            /// The flags this type names that are not set here.
            #[inline]
            #[must_use]
            pub const fn complement(self) -> Self {
                Self(!self.0 & Self::all().0)
            }
        }

        impl ::std::ops::BitOr for $name {
            type Output = Self;
            #[inline]
            fn bitor(self, other: Self) -> Self {
                self.union(other)
            }
        }

        impl ::std::ops::BitOrAssign for $name {
            #[inline]
            fn bitor_assign(&mut self, other: Self) {
                self.insert(other);
            }
        }

        impl ::std::ops::BitAnd for $name {
            type Output = Self;
            #[inline]
            fn bitand(self, other: Self) -> Self {
                self.intersection(other)
            }
        }

        impl ::std::ops::BitAndAssign for $name {
            #[inline]
            fn bitand_assign(&mut self, other: Self) {
                self.0 &= other.0;
            }
        }

        impl ::std::ops::BitXor for $name {
            type Output = Self;
            #[inline]
            fn bitxor(self, other: Self) -> Self {
                Self(self.0 ^ other.0)
            }
        }

        impl ::std::ops::BitXorAssign for $name {
            #[inline]
            fn bitxor_assign(&mut self, other: Self) {
                self.toggle(other);
            }
        }

        impl ::std::ops::Sub for $name {
            type Output = Self;
            #[inline]
            fn sub(self, other: Self) -> Self {
                self.difference(other)
            }
        }

        impl ::std::ops::SubAssign for $name {
            #[inline]
            fn sub_assign(&mut self, other: Self) {
                self.remove(other);
            }
        }

        impl ::std::ops::Not for $name {
            type Output = Self;
            #[inline]
            fn not(self) -> Self {
                self.complement()
            }
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                $crate::flags::debug(
                    f,
                    stringify!($name),
                    self.0 as u64,
                    &[$((stringify!($flag), Self::$flag.0 as u64)),*],
                )
            }
        }
    };
}
pub(crate) use flags;

/// The `Debug` text of a flag type: `Name(A | B)`, the bits no flag names in hex after the
/// names (`Name(A | 0x40)`), and `Name(empty)` when none is set.
pub(crate) fn debug(f: &mut fmt::Formatter<'_>, name: &str, bits: u64, named: &[(&str, u64)]) -> fmt::Result {
    write!(f, "{name}(")?;
    if bits == 0 {
        return f.write_str("empty)");
    }
    let mut left = bits;
    let mut first = true;
    for &(flag, value) in named {
        if value != 0 && bits & value == value && left & value != 0 {
            if !first {
                f.write_str(" | ")?;
            }
            f.write_str(flag)?;
            first = false;
            left &= !value;
        }
    }
    if left != 0 {
        if !first {
            f.write_str(" | ")?;
        }
        write!(f, "{left:#x}")?;
    }
    f.write_str(")")
}

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
        assert_eq!(format!("{:?}", Sample::empty()), "Sample(empty)");
    }
}
