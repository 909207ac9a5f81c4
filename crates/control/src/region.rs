//! Regions of a node and its store, and whether they may hold the data of
//! a tenant pinned to some regions (the check itself, audited, is
//! `Manager::check_region` in [`crate::governance`]).

use stasis_core::{Error, Result};

/// Where this node and its store are (`--region`, `--store-region`).
#[derive(Debug, Clone, Default)]
pub struct Region {
    pub node: Option<String>,
    pub store: Option<String>,
}

pub fn validate_region(r: &str) -> Result<()> {
    let ok = !r.is_empty()
        && r.len() <= 64
        && r.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(
            Error::invalid(format!("region {r:?}: 1-64 characters of [A-Za-z0-9_-]"))
                .with_field("regions"),
        )
    }
}

/// Whether a node (and store) of `here` may hold the data of a tenant
/// pinned to `pinned`; the refusal names both.
pub fn region_allows(here: &Region, pinned: Option<&[String]>) -> std::result::Result<(), String> {
    let Some(pinned) = pinned else {
        return Ok(());
    };
    for (what, r) in [("node", &here.node), ("store", &here.store)] {
        match r {
            Some(r) if pinned.contains(r) => {}
            Some(r) => {
                return Err(format!(
                    "this {what} is in region {r}, the tenant is pinned to {}",
                    pinned.join(", ")
                ))
            }
            None => {
                return Err(format!(
                    "this {what} has no region, the tenant is pinned to {}",
                    pinned.join(", ")
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_rules() {
        let eu = Region {
            node: Some("eu".into()),
            store: Some("eu".into()),
        };
        let pin = vec!["eu".to_string(), "ch".to_string()];
        assert!(region_allows(&eu, None).is_ok());
        assert!(region_allows(&eu, Some(&pin)).is_ok());
        let us = Region {
            node: Some("us".into()),
            store: Some("us".into()),
        };
        let e = region_allows(&us, Some(&pin)).unwrap_err();
        assert!(e.contains("region us") && e.contains("eu, ch"), "{e}");
        let mixed = Region {
            node: Some("eu".into()),
            store: Some("us".into()),
        };
        assert!(region_allows(&mixed, Some(&pin))
            .unwrap_err()
            .contains("store"));
        assert!(region_allows(&Region::default(), Some(&pin)).is_err());
        assert!(validate_region("eu-west_1").is_ok());
        assert!(validate_region("eu west").is_err());
    }
}
