//! Databases for tests: SQLite in a temporary directory always, and a fresh
//! PostgreSQL database when a server is given by `STASIS_TEST_PG_URL`.
//! With `STASIS_REQUIRE_PG=1` (scripts/test.sh sets it) a missing server is a
//! failure, not a skip.

use crate::Meta;

pub(crate) struct TestDb {
    pub name: &'static str,
    pub meta: Meta,
    pub _dir: Option<tempfile::TempDir>,
}

pub(crate) async fn sqlite() -> TestDb {
    let dir = tempfile::tempdir().unwrap();
    let meta = Meta::open(&dir.path().join("meta.db")).await.unwrap();
    TestDb {
        name: "sqlite",
        meta,
        _dir: Some(dir),
    }
}

pub(crate) async fn postgres() -> Option<TestDb> {
    let url = crate::testing::pg_fresh_database_from_env()
        .await
        .unwrap()?;
    Some(TestDb {
        name: "postgres",
        meta: Meta::connect(&url).await.unwrap(),
        _dir: None,
    })
}

/// SQLite, plus PostgreSQL when available.
pub(crate) async fn all() -> Vec<TestDb> {
    let mut v = vec![sqlite().await];
    v.extend(postgres().await);
    v
}
