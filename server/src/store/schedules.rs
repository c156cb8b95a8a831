//! Stored schedules: a cron expression and the submission body it runs.

use super::db::{self, Conn};
use podq_api::Schedule;
use uuid::Uuid;

use super::{ms_to_datetime, now_ms, parse_uuid, StoreError};

#[derive(sqlx::FromRow)]
pub struct ScheduleRow {
    pub id: String,
    pub cron: String,
    pub body_json: String,
    pub enabled: bool,
    pub next_run_at: Option<i64>,
    pub last_run_at: Option<i64>,
    pub created_at: i64,
}

impl ScheduleRow {
    pub fn into_api(self) -> Result<Schedule, StoreError> {
        Ok(Schedule {
            id: parse_uuid(&self.id)?,
            submit: serde_json::from_str(&self.body_json)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            cron: self.cron,
            enabled: self.enabled,
            next_run_at: self.next_run_at.map(ms_to_datetime),
            last_run_at: self.last_run_at.map(ms_to_datetime),
            created_at: ms_to_datetime(self.created_at),
        })
    }
}

const COLUMNS: &str =
    "id, cron, body_json, (enabled <> 0) AS enabled, next_run_at, last_run_at, created_at";

/// A new schedule.
pub struct NewSchedule<'a> {
    pub id: Uuid,
    pub cron: &'a str,
    pub body_json: &'a str,
    pub enabled: bool,
    pub next_run_at: Option<i64>,
}

pub async fn insert(conn: &mut Conn, new: &NewSchedule<'_>) -> Result<(), StoreError> {
    db::query(
        "INSERT INTO schedules (id, cron, body_json, enabled, next_run_at, created_at) \
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(new.id.to_string())
    .bind(new.cron)
    .bind(new.body_json)
    .bind(new.enabled)
    .bind(new.next_run_at)
    .bind(now_ms())
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn get(conn: &mut Conn, id: Uuid) -> Result<Option<ScheduleRow>, StoreError> {
    Ok(db::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM schedules WHERE id = ?"
    )))
    .bind(id.to_string())
    .fetch_optional(conn)
    .await?)
}

pub async fn list(db: &mut Conn) -> Result<Vec<ScheduleRow>, StoreError> {
    Ok(db::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM schedules ORDER BY created_at"
    )))
    .fetch_all(db)
    .await?)
}

/// Deletes a schedule; false when there was none.
pub async fn delete(conn: &mut Conn, id: Uuid) -> Result<bool, StoreError> {
    Ok(db::query("DELETE FROM schedules WHERE id = ?")
        .bind(id.to_string())
        .execute(conn)
        .await?
        > 0)
}

/// Enabled schedules whose next firing is at or before `now`.
pub async fn due(db: &mut Conn, now: i64) -> Result<Vec<ScheduleRow>, StoreError> {
    Ok(db::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM schedules WHERE enabled = 1 AND next_run_at <= ?"
    )))
    .bind(now)
    .fetch_all(db)
    .await?)
}

/// Records a firing now and when the schedule fires next.
pub async fn fired(conn: &mut Conn, id: &str, next_run_at: Option<i64>) -> Result<(), StoreError> {
    db::query("UPDATE schedules SET last_run_at = ?, next_run_at = ? WHERE id = ?")
        .bind(now_ms())
        .bind(next_run_at)
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}
