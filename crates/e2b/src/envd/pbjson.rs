//! The proto3 JSON mapping where it is not serde's default: `bytes` as
//! base64, 32-bit integers that may arrive as strings, 64-bit integers
//! written as strings, enums by name (numbers accepted), timestamps as
//! RFC 3339. Field names are written lowerCamelCase (serde's `rename_all`)
//! and read in either spelling (`alias`), as the mapping asks of parsers.

use base64::Engine;
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serializer};

/// `bytes` fields.
pub mod b64 {
    use super::*;

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = Option::<String>::deserialize(d)?.unwrap_or_default();
        decode(&s).map_err(de::Error::custom)
    }

    /// Standard or URL-safe alphabet, padded or not (parsers accept all).
    pub fn decode(s: &str) -> Result<Vec<u8>, String> {
        use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
        let t = s.trim_end_matches('=');
        STANDARD_NO_PAD
            .decode(t)
            .or_else(|_| URL_SAFE_NO_PAD.decode(t))
            .map_err(|e| format!("invalid base64: {e}"))
    }
}

/// Optional `bytes` fields (a oneof member).
pub mod b64_opt {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(s) => b64::decode(&s).map(Some).map_err(de::Error::custom),
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum NumOrText {
    Num(u64),
    Text(String),
}

fn u32_of(v: NumOrText) -> Result<u32, String> {
    let n = match v {
        NumOrText::Num(n) => n,
        NumOrText::Text(t) => t
            .trim()
            .parse()
            .map_err(|_| format!("not a number: {t:?}"))?,
    };
    u32::try_from(n).map_err(|_| format!("{n} is out of range"))
}

/// A `uint32` given as a number or a string.
pub fn de_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    match Option::<NumOrText>::deserialize(d)? {
        None => Ok(0),
        Some(v) => u32_of(v).map_err(de::Error::custom),
    }
}

/// An optional `uint32` (a oneof member).
pub fn de_u32_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    match Option::<NumOrText>::deserialize(d)? {
        None => Ok(None),
        Some(v) => u32_of(v).map(Some).map_err(de::Error::custom),
    }
}

/// An enum given by name or number, as its number; unknown names refused.
pub fn de_enum<'de, D: Deserializer<'de>>(d: D, names: &[(&str, i32)]) -> Result<i32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum E {
        Num(i32),
        Name(String),
    }
    match Option::<E>::deserialize(d)? {
        None => Ok(0),
        Some(E::Num(n)) => Ok(n),
        Some(E::Name(s)) => names
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, v)| *v)
            .ok_or_else(|| de::Error::custom(format!("unknown enum value {s:?}"))),
    }
}

/// An `int64`, written as a string.
pub fn ser_i64<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.to_string())
}

/// A `google.protobuf.Timestamp` from seconds since the epoch.
pub fn timestamp(secs: i64) -> String {
    let t =
        time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_in_any_alphabet_and_padding() {
        assert_eq!(b64::decode("aGk=").unwrap(), b"hi");
        assert_eq!(b64::decode("aGk").unwrap(), b"hi");
        assert_eq!(b64::decode("-_8").unwrap(), vec![0xfb, 0xff]);
        assert_eq!(b64::decode("+/8=").unwrap(), vec![0xfb, 0xff]);
        assert!(b64::decode("!!").is_err());
    }

    #[test]
    fn numbers_as_numbers_or_strings() {
        #[derive(Deserialize)]
        struct T {
            #[serde(deserialize_with = "de_u32", default)]
            n: u32,
        }
        let a: T = serde_json::from_str(r#"{"n": 7}"#).unwrap();
        let b: T = serde_json::from_str(r#"{"n": "7"}"#).unwrap();
        let c: T = serde_json::from_str(r#"{}"#).unwrap();
        assert_eq!((a.n, b.n, c.n), (7, 7, 0));
        assert!(serde_json::from_str::<T>(r#"{"n": 5000000000}"#).is_err());
    }

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(timestamp(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
