//! `wire_enum!`: a `#[repr(u8)]` enum whose discriminants are codes on the wire,
//! declared once. The macro derives `from_u8` (code → variant, `None` for a code
//! the format does not define) and `ALL` from the same list of `Variant = code`,
//! so the two directions of a format's table can never drift apart.

macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $code:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[repr(u8)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant = $code, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [$name; [$($code),+].len()] = [$($name::$variant),+];

            /// The variant whose code is `v`, if the format defines one.
            pub fn from_u8(v: u8) -> Option<Self> {
                match v {
                    $( $code => Some($name::$variant), )+
                    _ => None,
                }
            }
        }
    };
}
