//! SQL about people: who they are, their role, and the hash of their token.

use super::db::{self, Conn};
use super::{now_ms, StoreError};

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UserRow {
    pub name: String,
    pub role: String,
    pub token_sha256: String,
    pub pods_json: Option<String>,
    pub created_at: i64,
    pub created_by: String,
    pub disabled_at: Option<i64>,
}

const COLUMNS: &str =
    "name, role, token_sha256, pods_json, created_at, created_by, disabled_at FROM users";

pub async fn all(db: &mut Conn) -> Result<Vec<UserRow>, StoreError> {
    Ok(db::query_as::<UserRow>(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} ORDER BY name"
    )))
    .fetch_all(db)
    .await?)
}

pub async fn get(db: &mut Conn, name: &str) -> Result<Option<UserRow>, StoreError> {
    Ok(db::query_as::<UserRow>(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} WHERE name = ?"
    )))
    .bind(name)
    .fetch_optional(db)
    .await?)
}

pub struct NewUser<'a> {
    pub name: &'a str,
    pub role: &'a str,
    pub token_sha256: &'a str,
    pub pods_json: Option<&'a str>,
    pub created_by: &'a str,
}

pub async fn insert(conn: &mut Conn, user: NewUser<'_>) -> Result<(), StoreError> {
    db::query(
        "INSERT INTO users (name, role, token_sha256, pods_json, created_at, created_by) \
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(user.name)
    .bind(user.role)
    .bind(user.token_sha256)
    .bind(user.pods_json)
    .bind(now_ms())
    .bind(user.created_by)
    .execute(conn)
    .await?;
    Ok(())
}

/// Disables `name`: its token stops working at once. Answers whether it was enabled.
pub async fn disable(conn: &mut Conn, name: &str) -> Result<bool, StoreError> {
    let changed =
        db::query("UPDATE users SET disabled_at = ? WHERE name = ? AND disabled_at IS NULL")
            .bind(now_ms())
            .bind(name)
            .execute(conn)
            .await?;
    Ok(changed == 1)
}

/// Gives `name` a new token (and enables it again): the old one stops working at once.
pub async fn rotate(conn: &mut Conn, name: &str, token_sha256: &str) -> Result<(), StoreError> {
    db::query("UPDATE users SET token_sha256 = ?, disabled_at = NULL WHERE name = ?")
        .bind(token_sha256)
        .bind(name)
        .execute(conn)
        .await?;
    Ok(())
}
