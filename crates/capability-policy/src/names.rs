//! String-named enumerations: one macro so that every closed vocabulary (kinds, risks,
//! stages, decisions, ...) parses, prints and serializes the same way.

/// A value outside a closed vocabulary (defined beside `IsolationTier` in `capability-exec`,
/// whose `parse` returns it too).
pub use capability_exec::UnknownName;

macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every value, in the reference's order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            /// Parses a wire name.
            pub fn parse(value: &str) -> Result<Self, $crate::names::UnknownName> {
                match value {
                    $($text => Ok($name::$variant),)+
                    other => Err($crate::names::UnknownName {
                        what: $what,
                        value: other.to_string(),
                        expected: [$($text),+].join(", "),
                    }),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::names::UnknownName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
                Self::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}

pub(crate) use string_enum;

/// `<prefix>_` followed by 32 lowercase hex characters (a v4 UUID), Brane's id format.
///
/// Ids name things; they are not secrets (approval nonces and keys come from the operating
/// system directly). They come from a per-thread xoshiro256** generator seeded from the
/// operating system, which avoids a system call per id on the decision path.
pub fn new_id(prefix: &str) -> String {
    let mut bytes = [0u8; 16];
    IDS.with(|rng| {
        let mut rng = rng.borrow_mut();
        bytes[..8].copy_from_slice(&rng.next().to_le_bytes());
        bytes[8..].copy_from_slice(&rng.next().to_le_bytes());
    });
    format_id(prefix, bytes)
}

/// `<prefix>_<hex>` of random bytes made a v4 UUID.
fn format_id(prefix: &str, mut bytes: [u8; 16]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // A version 4, RFC 4122 variant UUID (as `uuid::Builder::from_random_bytes`), in its
    // simple form.
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let mut id = String::with_capacity(prefix.len() + 33);
    id.push_str(prefix);
    id.push('_');
    for b in bytes {
        id.push(HEX[usize::from(b >> 4)] as char);
        id.push(HEX[usize::from(b & 0xf)] as char);
    }
    id
}

struct Xoshiro([u64; 4]);

impl Xoshiro {
    fn seeded() -> Self {
        let mut seed = [0u8; 32];
        if getrandom::fill(&mut seed).is_err() {
            // No OS randomness: fall back to uuid's generator for the seed.
            seed[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
            seed[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        }
        let mut s = [0u64; 4];
        for (i, chunk) in seed.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            s[i] = u64::from_le_bytes(b);
        }
        if s == [0; 4] {
            s[0] = 0x9E37_79B9_7F4A_7C15;
        }
        Xoshiro(s)
    }

    fn next(&mut self) -> u64 {
        let s = &mut self.0;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }
}

thread_local! {
    static IDS: std::cell::RefCell<Xoshiro> = std::cell::RefCell::new(Xoshiro::seeded());
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_have_brane_shape_and_differ() {
        let a = super::new_id("dec");
        let b = super::new_id("dec");
        assert_ne!(a, b);
        let hex = a.strip_prefix("dec_").unwrap_or("");
        assert_eq!(hex.len(), 32);
        assert!(
            hex.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        // Version 4, RFC 4122 variant.
        assert_eq!(&hex[12..13], "4");
        assert!(matches!(&hex[16..17], "8" | "9" | "a" | "b"));
    }

    #[test]
    fn ids_are_formatted_as_uuid_formats_them() {
        for seed in [0u8, 0x5a, 0xff] {
            let bytes: [u8; 16] = std::array::from_fn(|i| seed.wrapping_mul(i as u8 + 1));
            assert_eq!(
                super::format_id("act", bytes),
                format!(
                    "act_{}",
                    uuid::Builder::from_random_bytes(bytes).into_uuid().simple()
                )
            );
        }
    }
}
