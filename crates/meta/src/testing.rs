//! Helpers for tests (also used by other crates' tests): a fresh PostgreSQL
//! database on the server named by `STASIS_TEST_PG_URL`.

use sqlx::{Connection, Executor};

use stasis_core::{Error, Result};

/// The admin URL of the test PostgreSQL server, if any. Panics when there
/// is none and `STASIS_REQUIRE_PG=1`: a required test must fail, not skip.
pub fn pg_url_from_env() -> Option<String> {
    match std::env::var("STASIS_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            if std::env::var("STASIS_REQUIRE_PG").as_deref() == Ok("1") {
                panic!("STASIS_REQUIRE_PG=1 but STASIS_TEST_PG_URL names no PostgreSQL server");
            }
            eprintln!("note: STASIS_TEST_PG_URL unset: PostgreSQL cases skipped");
            None
        }
    }
}

/// Create an empty database with a unique name on the server at
/// `admin_url` and return its URL.
pub async fn pg_fresh_database(admin_url: &str) -> Result<String> {
    let mut conn = sqlx::PgConnection::connect(admin_url)
        .await
        .map_err(|e| Error::internal(format!("test postgres {admin_url}: {e}")))?;
    let name = format!(
        "stasis_t_{}",
        stasis_core::SnapshotId::generate()
            .as_str()
            .trim_start_matches("snap-")
            .replace('-', "_")
            .to_lowercase()
    );
    conn.execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .map_err(|e| Error::internal(format!("create test database: {e}")))?;
    let _ = conn.close().await;
    let base = match admin_url.rsplit_once('/') {
        Some((b, _)) if b.contains("://") && b.len() > b.find("://").unwrap() + 3 => b,
        _ => admin_url.trim_end_matches('/'),
    };
    Ok(format!("{base}/{name}"))
}

/// [`pg_fresh_database`] on the server named by the environment, if any.
pub async fn pg_fresh_database_from_env() -> Result<Option<String>> {
    match pg_url_from_env() {
        Some(u) => pg_fresh_database(&u).await.map(Some),
        None => Ok(None),
    }
}
