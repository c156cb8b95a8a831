//! Cron submissions: a stored submission body that runs whenever its cron expression fires.
//! Each run is an ordinary submission, so deduplication applies: an experiment that already
//! has a live or succeeded job is skipped.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use podq_api::{Schedule, ScheduleRequest, SubmitRequest};
use sqlx::sqlite::SqliteConnection;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{submit, Result, Scheduler, SchedulerError};
use crate::store::jobs::insert_event;
use crate::store::{ms_to_datetime, now_ms, parse_uuid, StoreError};

/// Parses standard 5-field cron (minute first) as well as the cron crate's forms with seconds.
pub fn parse_cron(expr: &str) -> Result<cron::Schedule> {
    let fields = expr.split_whitespace().count();
    let full = if fields == 5 {
        format!("0 {expr}")
    } else {
        expr.to_owned()
    };
    cron::Schedule::from_str(&full).map_err(|e| {
        SchedulerError::invalid(
            "invalid_cron",
            format!("`{expr}` is not a cron expression: {e}"),
        )
    })
}

fn next_after(expr: &str, after: DateTime<Utc>) -> Option<i64> {
    parse_cron(expr)
        .ok()?
        .after(&after)
        .next()
        .map(|t| t.timestamp_millis())
}

#[derive(sqlx::FromRow)]
struct ScheduleRow {
    id: String,
    cron: String,
    body_json: String,
    enabled: bool,
    next_run_at: Option<i64>,
    last_run_at: Option<i64>,
    created_at: i64,
}

impl ScheduleRow {
    fn into_api(self) -> Result<Schedule, StoreError> {
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

const COLUMNS: &str = "id, cron, body_json, enabled, next_run_at, last_run_at, created_at";

impl Scheduler {
    pub async fn create_schedule(&self, req: ScheduleRequest) -> Result<Schedule> {
        parse_cron(&req.cron)?;
        submit::select(&self.catalog, &req.submit)?;
        if req.submit.dry_run {
            return Err(SchedulerError::invalid(
                "invalid_schedule",
                "a scheduled submission cannot be a dry run",
            ));
        }
        let id = Uuid::new_v4();
        let body = serde_json::to_string(&req.submit)
            .map_err(|e| StoreError::Corrupt(format!("schedule body: {e}")))?;
        let next = next_after(&req.cron, Utc::now());
        self.store
            .write(move |conn| {
                async move {
                    sqlx::query(
                        "INSERT INTO schedules (id, cron, body_json, enabled, next_run_at, created_at) \
                         VALUES (?, ?, ?, ?, ?, ?)",
                    )
                    .bind(id.to_string())
                    .bind(&req.cron)
                    .bind(&body)
                    .bind(req.enabled)
                    .bind(next)
                    .bind(now_ms())
                    .execute(&mut *conn)
                    .await?;
                    get(conn, id).await
                }
                .boxed()
            })
            .await
    }

    pub async fn schedules(&self) -> Result<Vec<Schedule>> {
        let rows: Vec<ScheduleRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM schedules ORDER BY created_at"
        )))
        .fetch_all(self.store.reader())
        .await?;
        Ok(rows
            .into_iter()
            .map(ScheduleRow::into_api)
            .collect::<Result<_, _>>()?)
    }

    pub async fn delete_schedule(&self, id: Uuid) -> Result<()> {
        self.store
            .write(move |conn| {
                async move {
                    let gone = sqlx::query("DELETE FROM schedules WHERE id = ?")
                        .bind(id.to_string())
                        .execute(&mut *conn)
                        .await?
                        .rows_affected();
                    if gone == 0 {
                        return Err(SchedulerError::UnknownSchedule(id));
                    }
                    Ok(())
                }
                .boxed()
            })
            .await
    }

    /// Runs due schedules until `shutdown`. A schedule missed while the server was down
    /// runs once when it comes back, not once per missed firing.
    pub async fn run_schedules(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let due: Vec<ScheduleRow> = match sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM schedules WHERE enabled = 1 AND next_run_at <= ?"
            )))
            .bind(now_ms())
            .fetch_all(self.store.reader())
            .await
            {
                Ok(due) => due,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read schedules");
                    continue;
                }
            };
            for schedule in due {
                if let Err(e) = self.fire(schedule).await {
                    tracing::error!(error = %e, "a scheduled submission failed");
                }
            }
        }
    }

    async fn fire(&self, schedule: ScheduleRow) -> Result<()> {
        let req: SubmitRequest = serde_json::from_str(&schedule.body_json)
            .map_err(|e| StoreError::Corrupt(format!("schedule {}: {e}", schedule.id)))?;
        // The catalog may have changed since the schedule was made: what it names no longer
        // exists is skipped, and said so, rather than failing every firing.
        let experiments: Vec<_> = match submit::select(&self.catalog, &req) {
            Ok(chosen) => chosen.into_iter().cloned().collect(),
            Err(e) => {
                tracing::warn!(schedule = %schedule.id, error = %e, "a schedule names nothing the catalog has");
                Vec::new()
            }
        };
        let accelerator = self.config.accelerator.clone();
        let next = next_after(&schedule.cron, Utc::now());
        let id = schedule.id.clone();
        let answer = self
            .store
            .write(move |conn| {
                async move {
                    let answer = submit::submit(conn, &experiments, &req, &accelerator).await?;
                    sqlx::query(
                        "UPDATE schedules SET last_run_at = ?, next_run_at = ? WHERE id = ?",
                    )
                    .bind(now_ms())
                    .bind(next)
                    .bind(&id)
                    .execute(&mut *conn)
                    .await?;
                    for job_id in answer.created.iter().filter_map(|job| job.job_id) {
                        insert_event(
                            conn,
                            Some(&job_id.to_string()),
                            None,
                            "scheduled",
                            &format!("submitted by schedule {id}"),
                        )
                        .await?;
                    }
                    Ok::<_, SchedulerError>(answer)
                }
                .boxed()
            })
            .await?;
        self.waiters
            .leasable(&self.config.accelerator, answer.created.len());
        tracing::info!(schedule = %schedule.id, created = answer.created.len(), skipped = answer.skipped.len(), "schedule fired");
        Ok(())
    }
}

async fn get(conn: &mut SqliteConnection, id: Uuid) -> Result<Schedule> {
    let row: ScheduleRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM schedules WHERE id = ?"
    )))
    .bind(id.to_string())
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(SchedulerError::UnknownSchedule(id))?;
    Ok(row.into_api()?)
}
