//! `podq migrate`: a study's whole history copied from a SQLite file into a PostgreSQL store,
//! in one transaction that commits only if every table's count, and the totals the
//! destination's triggers kept, match the source's.

use futures::{FutureExt, TryStreamExt};
use sqlx::sqlite::SqliteRow;
use sqlx::{Connection, Row, SqliteConnection};

use super::backend::{postgres, sqlite};
use super::db::{self, Builder, Conn};
use super::{Backend, Location, Store, StoreError};

/// Every table, parents first. The maintained totals (`job_counts`, `fresh_queue`) are not
/// copied: the destination's triggers count the rows as they arrive, and the check below
/// compares them with the source's. `webhook_outbox` comes after `events`, `webhooks` after
/// both: the outbox trigger must not queue old events again.
const TABLES: [&str; 23] = [
    "experiments",
    "jobs",
    "job_accelerators",
    "attempts",
    "checkpoints",
    "metric_series",
    "metric_chunks",
    "metric_tail",
    "events",
    "webhooks",
    "webhook_outbox",
    "pods",
    "schedules",
    "idempotency_keys",
    "grant_terms",
    "log_chunks",
    "log_counts",
    "pod_time_totals",
    "goodput_totals",
    "users",
    "job_links",
    "rung_values",
    "rung_decisions",
];

/// Tables whose ids are generated: their sequences continue after the copied ids.
const IDENTITY_TABLES: [&str; 4] = ["metric_series", "events", "webhooks", "webhook_outbox"];

/// What a migration copied: (table, rows in the source, rows in the destination).
pub type Counts = Vec<(String, i64, i64)>;

/// Rows per INSERT: PostgreSQL takes at most 65535 parameters a statement.
const ROWS_PER_INSERT: usize = 500;

/// Copies everything in the SQLite file `from` into the empty PostgreSQL store `to`, and
/// answers the row counts of both. Nothing is written unless all of it is.
pub async fn sqlite_to_postgres(from: &Location, to: &Location) -> Result<Counts, StoreError> {
    let (Location::Sqlite(path), Location::Postgres(_)) = (from, to) else {
        return Err(StoreError::BadLocation(
            "podq migrate copies a SQLite file (--from sqlite://FILE) into PostgreSQL \
             (--to postgres://...)"
                .into(),
        ));
    };
    if !path.exists() {
        return Err(StoreError::BadLocation(format!(
            "{} does not exist",
            path.display()
        )));
    }
    // Bring the source to this podq's schema (and settle its history) first.
    drop(Store::open(path).await?);
    let destination = Store::open_at(to).await?;
    let held: i64 =
        db::query_scalar("SELECT (SELECT COUNT(*) FROM jobs) + (SELECT COUNT(*) FROM experiments)")
            .fetch_one(&mut destination.read().await?)
            .await?;
    if held > 0 {
        return Err(StoreError::BadLocation(format!(
            "{to} already holds a study ({held} jobs and experiments; a server has run on \
             it): migrate into an empty database"
        )));
    }
    if !destination.is_active() {
        return Err(StoreError::BadLocation(format!(
            "a podq server is running on {to}: stop every server on it first"
        )));
    }
    let source = sqlite::open_source(path).await?;
    let copied = destination
        .write(move |conn| {
            async move {
                let mut source = source;
                // One snapshot of the source, should a server still be writing to it.
                sqlx::raw_sql("BEGIN").execute(&mut source).await?;
                let counts = copy_tables(&mut source, conn).await?;
                check_counts(&counts, &mut source, conn).await?;
                let _ = source.close().await;
                Ok::<_, StoreError>(counts)
            }
            .boxed()
        })
        .await?;
    Ok(copied)
}

async fn copy_tables(source: &mut SqliteConnection, to: &mut Conn) -> Result<Counts, StoreError> {
    debug_assert_eq!(to.backend(), Backend::Postgres);
    let mut counts = Vec::new();
    for table in TABLES {
        // A linked job refers to its run, which was submitted before it.
        let order = if table == "jobs" { " ORDER BY seq" } else { "" };
        let sql = format!("SELECT * FROM {table}{order}");
        let mut rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch(&mut *source);
        let mut batch: Vec<SqliteRow> = Vec::with_capacity(ROWS_PER_INSERT);
        let mut copied = 0_i64;
        if table == "goodput_totals" {
            // The seeded row is replaced by the source's.
            db::query("DELETE FROM goodput_totals").execute(to).await?;
        }
        while let Some(row) = rows.try_next().await? {
            batch.push(row);
            if batch.len() == ROWS_PER_INSERT {
                copied += insert(to, table, &batch).await?;
                batch.clear();
            }
        }
        copied += insert(to, table, &batch).await?;
        let here: i64 =
            db::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
                .fetch_one(to)
                .await?;
        counts.push((table.to_string(), copied, here));
    }
    for table in IDENTITY_TABLES {
        postgres::continue_ids(to, table).await?;
    }
    Ok(counts)
}

/// Inside the copy's transaction: every table holds as many rows as the source's, and the
/// totals the destination's triggers kept as it filled match the source's.
async fn check_counts(
    counts: &Counts,
    source: &mut SqliteConnection,
    to: &mut Conn,
) -> Result<(), StoreError> {
    let mut problems = Vec::new();
    for (table, copied, here) in counts {
        let there: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
                .fetch_one(&mut *source)
                .await?;
        if there != *here || there != *copied {
            problems.push(format!(
                "{table}: {there} rows in the source, {copied} copied, {here} there"
            ));
        }
    }
    let counts = "SELECT group_name || '/' || state || '=' || n FROM job_counts \
                  WHERE n <> 0 ORDER BY group_name, state";
    let there: Vec<String> = sqlx::query_scalar(counts).fetch_all(&mut *source).await?;
    let here: Vec<String> = db::query_scalar(counts).fetch_all(to).await?;
    if there != here {
        problems.push(format!(
            "job counts: {there:?} in the source, {here:?} there"
        ));
    }
    let fresh = "SELECT n, hours FROM fresh_queue";
    let there: (i64, f64) = sqlx::query_as(fresh).fetch_one(&mut *source).await?;
    let here: (i64, f64) = db::query_as(fresh).fetch_one(to).await?;
    // The hours are sums of floats, added in another order: equal to within rounding.
    if there.0 != here.0 || (there.1 - here.1).abs() > 1e-6 * there.1.abs().max(1.0) {
        problems.push(format!(
            "fresh queue: {there:?} in the source, {here:?} there"
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(StoreError::Corrupt(format!(
            "the copy does not match its source, so nothing was written: {}",
            problems.join("; ")
        )))
    }
}

/// One INSERT of `rows` into `table`, each value bound as the type SQLite stored it as.
async fn insert(to: &mut Conn, table: &str, rows: &[SqliteRow]) -> Result<i64, StoreError> {
    let Some(first) = rows.first() else {
        return Ok(0);
    };
    let columns: Vec<String> = first
        .columns()
        .iter()
        .map(|c| format!("\"{}\"", sqlx::Column::name(c)))
        .collect();
    let mut statement = Builder::new(format!("INSERT INTO {table} ({}) ", columns.join(", ")));
    let mut values = Vec::with_capacity(rows.len());
    for row in rows {
        let mut row_values = Vec::with_capacity(columns.len());
        for index in 0..columns.len() {
            row_values.push(sqlite::stored_value(row, index)?);
        }
        values.push(row_values);
    }
    statement.push_values(values, |mut out, row| {
        for value in row {
            out.push_bind(value);
        }
    });
    statement.build().execute(to).await?;
    Ok(rows.len() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::scratch_store;

    /// A table a migration adds is copied, or is a total the triggers keep: forgetting it
    /// would lose its rows in every `podq migrate`.
    #[tokio::test]
    async fn every_table_of_the_schema_is_copied() {
        let (store, _dir) = scratch_store().await;
        let tables: Vec<String> = db::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx_%' ORDER BY name",
        )
        .fetch_all(&mut store.read().await.unwrap())
        .await
        .unwrap();
        let maintained = ["job_counts", "fresh_queue"];
        let missing: Vec<&String> = tables
            .iter()
            .filter(|t| !TABLES.contains(&t.as_str()) && !maintained.contains(&t.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "not copied by podq migrate: {missing:?}"
        );
        assert!(tables.iter().any(|t| t == "job_links"), "{tables:?}");
    }
}
