//! Strict deserialization of request JSON into typed values.
//!
//! serde's derived structs also accept a JSON *array* as their fields in
//! order, so `{"manifest": []}` or `{"resources": [512]}` would silently pass
//! as a value with defaults. [`from_value`] refuses any non-object where a
//! struct or map is expected, at every nesting level, and turns serde's error
//! into one readable line that names the field path (`resources.memory_mb`,
//! `mounts[0].source`), also set as the error's `field`.

use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{self, DeserializeOwned, IntoDeserializer, Unexpected, Visitor};
use serde_json::Value;

use crate::error::{Error, ErrorCode};

/// Deserialize `v` into `T`, objects required for structs and maps. On error:
/// `code`, the field path (`root` when the value itself is wrong) and a
/// readable message starting with that path.
pub fn from_value<T: DeserializeOwned>(v: Value, code: ErrorCode, root: &str) -> Result<T, Error> {
    serde_path_to_error::deserialize(Strict(v)).map_err(|e| {
        let path = e.path().to_string();
        let field = if path.is_empty() || path == "." {
            root.to_string()
        } else {
            path
        };
        let msg = readable(&e.into_inner().to_string());
        Error::new(code, format!("{field}: {msg}")).with_field(field)
    })
}

/// A JSON value as a deserializer that only reads objects as structs/maps.
struct Strict(Value);

impl<'de> IntoDeserializer<'de, serde_json::Error> for Strict {
    type Deserializer = Strict;
    fn into_deserializer(self) -> Strict {
        self
    }
}

fn unexpected(v: &Value) -> Unexpected<'_> {
    match v {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Unexpected::Unsigned(u)
            } else if let Some(i) = n.as_i64() {
                Unexpected::Signed(i)
            } else {
                Unexpected::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

impl Strict {
    fn object_only<'de, V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, serde_json::Error> {
        if self.0.is_object() {
            de::Deserializer::deserialize_any(self, visitor)
        } else {
            Err(de::Error::invalid_type(
                unexpected(&self.0),
                &"a JSON object",
            ))
        }
    }
}

impl<'de> de::Deserializer<'de> for Strict {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(a) => {
                let mut seq = SeqDeserializer::new(a.into_iter().map(Strict));
                let v = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(v)
            }
            Value::Object(m) => {
                let mut map = MapDeserializer::new(m.into_iter().map(|(k, v)| (k, Strict(v))));
                let v = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(v)
            }
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.object_only(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.object_only(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_enum(name, variants, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct identifier ignored_any
    }
}

/// serde's `invalid type: integer `-256`, expected u64` as
/// `must be a whole number from 0 to 18446744073709551615 (got -256)`;
/// other messages (unknown field, unknown variant, ...) pass unchanged.
fn readable(msg: &str) -> String {
    let rest = msg
        .strip_prefix("invalid type: ")
        .or_else(|| msg.strip_prefix("invalid value: "));
    let Some((got, expected)) = rest.and_then(|r| r.rsplit_once(", expected ")) else {
        return msg.to_string();
    };
    let expected = match expected {
        "u8" => format!("a whole number from 0 to {}", u8::MAX),
        "u16" => format!("a whole number from 0 to {}", u16::MAX),
        "u32" => format!("a whole number from 0 to {}", u32::MAX),
        "u64" | "usize" => format!("a whole number from 0 to {}", u64::MAX),
        "i32" => format!("a whole number from {} to {}", i32::MIN, i32::MAX),
        "i64" | "isize" => format!("a whole number from {} to {}", i64::MIN, i64::MAX),
        "f32" | "f64" => "a number".to_string(),
        "a boolean" => "true or false".to_string(),
        "a sequence" => "an array".to_string(),
        "a map" => "a JSON object".to_string(),
        e if e.starts_with("struct ") => "a JSON object".to_string(),
        e => e.to_string(),
    };
    let got = match got {
        "sequence" => "an array".to_string(),
        "map" => "an object".to_string(),
        "unit value" | "null" => "null".to_string(),
        g => {
            // `integer `-256``, `floating point `1.5``, `boolean `true``.
            match g.split_once(" `") {
                Some((_, v)) if v.ends_with('`') => v.trim_end_matches('`').to_string(),
                _ => g.to_string(),
            }
        }
    };
    format!("must be {expected} (got {got})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq, Default)]
    #[serde(deny_unknown_fields, default)]
    struct Inner {
        n: u64,
    }

    #[derive(Debug, Deserialize, PartialEq, Default)]
    #[serde(deny_unknown_fields, default)]
    struct Outer {
        inner: Inner,
        list: Vec<Inner>,
        opt: Option<Inner>,
        map: std::collections::BTreeMap<String, String>,
    }

    fn err(v: Value) -> Error {
        from_value::<Outer>(v, ErrorCode::InvalidArgument, "body").unwrap_err()
    }

    #[test]
    fn objects_read_as_before() {
        let o: Outer = from_value(
            json!({"inner": {"n": 3}, "list": [{"n": 1}], "opt": {"n": 2}, "map": {"a": "b"}}),
            ErrorCode::InvalidArgument,
            "body",
        )
        .unwrap();
        assert_eq!(o.inner.n, 3);
        assert_eq!(o.list[0].n, 1);
        assert_eq!(o.opt, Some(Inner { n: 2 }));
        assert_eq!(o.map["a"], "b");
        let o: Outer = from_value(json!({"opt": null}), ErrorCode::InvalidArgument, "b").unwrap();
        assert_eq!(o, Outer::default());
    }

    #[test]
    fn non_objects_are_refused_at_every_level() {
        for (v, field) in [
            (json!([]), "body"),
            (json!([{"n": 1}]), "body"),
            (json!(null), "body"),
            (json!("x"), "body"),
            (json!(7), "body"),
            (json!({"inner": []}), "inner"),
            (json!({"inner": [5]}), "inner"),
            (json!({"list": [[1]]}), "list[0]"),
            (json!({"list": [{"n": 1}, []]}), "list[1]"),
            (json!({"opt": [1]}), "opt"),
            (json!({"map": [["a", "b"]]}), "map"),
            (json!({"inner": "x"}), "inner"),
        ] {
            let e = err(v.clone());
            assert_eq!(e.field.as_deref(), Some(field), "{v}: {e}");
            assert!(e.message.starts_with(&format!("{field}: ")), "{v}: {e}");
            assert!(e.message.contains("JSON object"), "{v}: {e}");
        }
    }

    #[test]
    fn type_errors_name_the_field_readably() {
        for (v, field, got) in [
            (json!({"inner": {"n": -256}}), "inner.n", "-256"),
            (json!({"inner": {"n": "x"}}), "inner.n", "x"),
            (json!({"inner": {"n": 1.5}}), "inner.n", "1.5"),
            (json!({"inner": {"n": 1e30}}), "inner.n", "1"),
            (json!({"list": [{"n": true}]}), "list[0].n", "true"),
        ] {
            let e = err(v.clone());
            assert_eq!(e.field.as_deref(), Some(field), "{v}: {e}");
            assert!(
                e.message.starts_with(&format!(
                    "{field}: must be a whole number from 0 to 18446744073709551615 (got "
                )),
                "{v}: {e}"
            );
            assert!(e.message.contains(got), "{v}: {e}");
            assert!(!e.message.contains('\n'), "{v}: {e}");
        }
        let e = err(json!({"inner": {"m": 1}}));
        assert!(e.message.contains("unknown field `m`"), "{e}");
        assert!(e.field.as_deref().unwrap().starts_with("inner"), "{e:?}");
    }
}
