//! A PostgreSQL database of its own for one test, on the server `PODQ_TEST_DATABASE_URL`
//! names: `scripts/test` starts a throwaway PostgreSQL 15 and sets it, or point it at a
//! server where the tests may create databases.

use sqlx::{Connection, PgConnection};

pub const SERVER_VARIABLE: &str = "PODQ_TEST_DATABASE_URL";

/// Dropped (with its connections closed) when the value is.
pub struct PostgresDatabase {
    pub url: String,
    server: String,
    name: String,
}

impl PostgresDatabase {
    pub async fn create() -> PostgresDatabase {
        let server = std::env::var(SERVER_VARIABLE).unwrap_or_else(|_| {
            panic!(
                "{SERVER_VARIABLE} is not set: run scripts/test, which starts a throwaway \
                 PostgreSQL 15, or set it to a postgres:// URL of a server where tests may \
                 create databases"
            )
        });
        let name = format!("podq_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&server)
            .await
            .unwrap_or_else(|e| panic!("cannot reach {SERVER_VARIABLE} ({server}): {e}"));
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .expect("create a test database");
        let _ = admin.close().await;
        PostgresDatabase {
            url: with_database(&server, &name),
            server,
            name,
        }
    }
}

/// `url` with its database name replaced by `name` (its query string kept).
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let root = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    format!("{root}/{name}{query}")
}

impl Drop for PostgresDatabase {
    fn drop(&mut self) {
        let server = self.server.clone();
        let name = self.name.clone();
        // Drop may run inside a test's runtime, which cannot be blocked on: use a thread.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                if let Ok(mut admin) = PgConnection::connect(&server).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut admin)
                    .await;
                }
            });
        })
        .join();
    }
}
