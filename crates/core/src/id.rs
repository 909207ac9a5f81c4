//! Identifiers. Generated ids are a short type prefix plus 32 hex digits of a
//! random UUID; ids from outside are validated before they reach a path or a query.

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::error::Error;

/// Ids are used in file names and URLs: keep them to a safe alphabet.
pub fn validate_id(kind: &str, s: &str) -> Result<(), Error> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "invalid {kind} id {s:?}: 1-64 characters of [A-Za-z0-9_-]"
        )))
    }
}

macro_rules! id_type {
    ($name:ident, $prefix:literal, $kind:literal) => {
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn generate() -> Self {
                $name(format!("{}{}", $prefix, uuid::Uuid::new_v4().simple()))
            }
            pub fn parse(s: &str) -> Result<Self, Error> {
                validate_id($kind, s)?;
                Ok($name(s.to_string()))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self, Error> {
                $name::parse(s)
            }
        }
    };
}

id_type!(SandboxId, "sb-", "sandbox");
id_type!(SnapshotId, "snap-", "snapshot");
id_type!(TenantId, "t-", "tenant");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_validate() {
        let id = SandboxId::generate();
        assert!(id.as_str().starts_with("sb-"));
        assert_eq!(SandboxId::parse(id.as_str()).unwrap(), id);
    }

    #[test]
    fn hostile_ids_rejected() {
        for bad in ["", "../x", "a/b", "x y", &"a".repeat(65), "sb-\u{e9}"] {
            assert!(SandboxId::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
