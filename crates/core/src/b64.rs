//! Serde adapters that carry byte buffers as base64 strings in JSON.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::{Deserialize, Deserializer, Serializer};

pub fn encode(data: &[u8]) -> String {
    STANDARD.encode(data)
}

pub fn decode(s: &str) -> std::result::Result<Vec<u8>, base64::DecodeError> {
    STANDARD.decode(s)
}

pub fn serialize<S: Serializer>(data: &[u8], s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&STANDARD.encode(data))
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<u8>, D::Error> {
    let s = String::deserialize(d)?;
    STANDARD
        .decode(s.as_bytes())
        .map_err(serde::de::Error::custom)
}

/// The same for `Option<Vec<u8>>`.
pub mod opt {
    use super::*;

    pub fn serialize<S: Serializer>(
        data: &Option<Vec<u8>>,
        s: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match data {
            Some(d) => s.serialize_some(&STANDARD.encode(d)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Option<Vec<u8>>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        s.map(|s| {
            STANDARD
                .decode(s.as_bytes())
                .map_err(serde::de::Error::custom)
        })
        .transpose()
    }
}
