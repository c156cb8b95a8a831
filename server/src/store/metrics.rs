//! Metric series: points as workers report them, and downsampled for charts.

use super::db::{self, Builder, Conn};
use std::collections::HashMap;

use podq_api::{MetricSeries, MetricValue, MetricsBatch};

use super::{now_ms, StoreError};

/// Stores a batch for one attempt of `job_id`; a step reported again replaces its value.
/// Inserts in as few statements as SQLite's variable limit allows, and moves the job's and
/// the attempt's step marks.
pub async fn insert_points(
    conn: &mut Conn,
    job_id: &str,
    attempt: i64,
    batch: &MetricsBatch,
) -> Result<(), StoreError> {
    if batch.points.is_empty() {
        return Ok(());
    }
    let mut names: Vec<&str> = batch
        .points
        .iter()
        .flat_map(|p| p.values.keys().map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    // Every series of the batch in one statement: each statement is a round trip to the
    // store's connection thread.
    let mut upsert = Builder::new("INSERT INTO metric_series (job_id, name) ");
    upsert.push_values(&names, |mut row, name| {
        row.push_bind(job_id).push_bind(*name);
    });
    upsert
        .push(" ON CONFLICT (job_id, name) DO UPDATE SET name = excluded.name RETURNING id, name");
    let series: HashMap<String, i64> = upsert
        .build_query_as::<(i64, String)>()
        .fetch_all(conn)
        .await?
        .into_iter()
        .map(|(id, name)| (name, id))
        .collect();
    // One row per (series, step), the last reported winning: PostgreSQL refuses an upsert
    // that touches a row twice, and SQLite would keep the last anyway.
    let rows: Vec<(i64, i64, f64)> = batch
        .points
        .iter()
        .flat_map(|p| {
            p.values
                .iter()
                .map(|(name, value)| ((series[name.as_str()], p.step), *value))
        })
        .collect::<std::collections::BTreeMap<(i64, i64), f64>>()
        .into_iter()
        .map(|((series_id, step), value)| (series_id, step, value))
        .collect();
    // 4 variables a row; SQLite allows 32766 per statement.
    for chunk in rows.chunks(8000) {
        let mut insert =
            Builder::new("INSERT INTO metric_points (series_id, step, value, attempt) ");
        insert.push_values(chunk, |mut row, (series_id, step, value)| {
            row.push_bind(*series_id)
                .push_bind(*step)
                .push_bind(stored(*value))
                .push_bind(attempt);
        });
        insert.push(
            " ON CONFLICT (series_id, step) DO UPDATE SET value = excluded.value, attempt = excluded.attempt",
        );
        insert.build().execute(conn).await?;
    }
    let max_step = batch.points.iter().map(|p| p.step).max();
    let min_step = batch.points.iter().map(|p| p.step).min();
    db::query("UPDATE jobs SET last_step = MAX(COALESCE(last_step, 0), ?) WHERE id = ?")
        .bind(max_step)
        .bind(job_id)
        .execute(conn)
        .await?;
    db::query(
        "UPDATE attempts SET first_step = COALESCE(first_step, ?), \
         first_step_at = COALESCE(first_step_at, ?), end_step = MAX(COALESCE(end_step, 0), ?) \
         WHERE job_id = ? AND attempt = ?",
    )
    .bind(min_step)
    .bind(now_ms())
    .bind(max_step)
    .bind(job_id)
    .bind(attempt)
    .execute(conn)
    .await?;
    Ok(())
}

/// A value as stored: NaN as NULL, as SQLite stores a bound NaN (PostgreSQL, which could
/// hold it, is made to match). Infinities are stored as they are by both.
pub fn stored(value: f64) -> Option<f64> {
    (!value.is_nan()).then_some(value)
}

/// A stored value read back.
pub fn read(value: Option<f64>) -> f64 {
    value.unwrap_or(f64::NAN)
}

#[derive(sqlx::FromRow)]
struct Series {
    id: i64,
    name: String,
}

/// Each series of the job (or only `names`), at most `max_points` each. A series that fits
/// comes back whole; a longer one is sampled at `max_points` evenly spaced steps (the first
/// stored step at or after each), found by index seeks, so a million-point series costs a
/// few thousand seeks rather than a scan.
pub async fn downsampled(
    db: &mut Conn,
    job_id: &str,
    names: Option<&[String]>,
    max_points: i64,
) -> Result<Vec<MetricSeries>, StoreError> {
    let series: Vec<Series> =
        db::query_as("SELECT id, name FROM metric_series WHERE job_id = ? ORDER BY name")
            .bind(job_id)
            .fetch_all(db)
            .await?;
    let mut out = Vec::new();
    for Series { id, name } in series {
        if names.is_some_and(|wanted| !wanted.contains(&name)) {
            continue;
        }
        let mut points: Vec<(i64, Option<f64>)> = db::query_as(
            "SELECT step, value FROM metric_points WHERE series_id = ? ORDER BY step LIMIT ?",
        )
        .bind(id)
        .bind(max_points + 1)
        .fetch_all(db)
        .await?;
        let whole = points.len() as i64 <= max_points;
        if !whole {
            points = sampled(db, id, max_points).await?;
        }
        out.push(MetricSeries {
            name,
            total_points: whole.then_some(points.len() as i64),
            points: points
                .into_iter()
                .map(|(step, value)| MetricValue {
                    step,
                    value: read(value),
                })
                .collect(),
        });
    }
    Ok(out)
}

async fn sampled(
    db: &mut Conn,
    series_id: i64,
    max_points: i64,
) -> Result<Vec<(i64, Option<f64>)>, StoreError> {
    let (first, last): (i64, i64) = db::query_as(
        "SELECT (SELECT step FROM metric_points WHERE series_id = ?1 ORDER BY step LIMIT 1), \
                (SELECT step FROM metric_points WHERE series_id = ?1 ORDER BY step DESC LIMIT 1)",
    )
    .bind(series_id)
    .fetch_one(db)
    .await?;
    let width = ((last - first) / (max_points - 1)).max(1);
    let mut points: Vec<(i64, Option<f64>)> = db::query_as(
        "WITH RECURSIVE targets(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM targets WHERE i < ?3 - 2) \
         SELECT DISTINCT p.step, p.value FROM targets CROSS JOIN metric_points p \
         WHERE p.series_id = ?1 AND p.step = \
           (SELECT step FROM metric_points WHERE series_id = ?1 AND step >= ?2 + targets.i * ?4 \
            ORDER BY step LIMIT 1) \
         ORDER BY p.step",
    )
    .bind(series_id)
    .bind(first)
    .bind(max_points)
    .bind(width)
    .fetch_all(db)
    .await?;
    // The newest point always shows: a chart should end where the run is.
    let newest: (i64, Option<f64>) =
        db::query_as("SELECT step, value FROM metric_points WHERE series_id = ? AND step = ?")
            .bind(series_id)
            .bind(last)
            .fetch_one(db)
            .await?;
    if points.last() != Some(&newest) {
        points.push(newest);
    }
    Ok(points)
}

/// Per series of `job_id` whose name `wanted` accepts: its newest point and its best one
/// (the lowest where `podq_api::lower_is_better`, else the highest). The best reads the
/// whole series; a study reads a few series of a few runs.
pub async fn final_and_best(
    db: &mut Conn,
    job_id: &str,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<(String, MetricValue, MetricValue)>, StoreError> {
    let series: Vec<Series> =
        db::query_as("SELECT id, name FROM metric_series WHERE job_id = ? ORDER BY name")
            .bind(job_id)
            .fetch_all(db)
            .await?;
    let mut out = Vec::new();
    for Series { id, name } in series.into_iter().filter(|s| wanted(&s.name)) {
        let last: Option<(i64, Option<f64>)> = db::query_as(
            "SELECT step, value FROM metric_points WHERE series_id = ? ORDER BY step DESC LIMIT 1",
        )
        .bind(id)
        .fetch_optional(db)
        .await?;
        let order = if podq_api::lower_is_better(&name) {
            "ASC"
        } else {
            "DESC"
        };
        // A NaN (NULL) is no one's best; where NULLs sort differs between the two stores.
        let best: Option<(i64, Option<f64>)> = db::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT step, value FROM metric_points WHERE series_id = ? AND value IS NOT NULL \
             ORDER BY value {order}, step LIMIT 1"
        )))
        .bind(id)
        .fetch_optional(db)
        .await?;
        if let (Some((ls, lv)), Some((bs, bv))) = (last, best) {
            out.push((
                name,
                MetricValue {
                    step: ls,
                    value: read(lv),
                },
                MetricValue {
                    step: bs,
                    value: read(bv),
                },
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;
    use crate::store::Store;

    #[tokio::test]
    async fn long_series_are_sampled_short_ones_returned_whole() {
        let path = std::env::temp_dir().join(format!("podq-metrics-{}.db", uuid::Uuid::new_v4()));
        let store = Store::open(&path).await.unwrap();
        store
            .write(|conn| {
                async move {
                    db::query(
                        "INSERT INTO jobs (id, seq, experiment, group_name, state, accelerator, config_json, \
                         config_sha256, est_hours, checkpoint_dir, max_failures, submitted_at, updated_at) \
                         VALUES ('j', 1, 'e', 'g', 'queued', 'v4-64', '{}', 's', 1, 'd', 3, 0, 0)",
                    )
                    .execute(conn)
                    .await?;
                    db::query("INSERT INTO metric_series (id, job_id, name) VALUES (1, 'j', 'long'), (2, 'j', 'short')")
                        .execute(conn)
                        .await?;
                    db::query(
                        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10007) \
                         INSERT INTO metric_points SELECT 1, i * 10, i, 1 FROM n",
                    )
                    .execute(conn)
                    .await?;
                    db::query("INSERT INTO metric_points VALUES (2, 10, 1.0, 1), (2, 20, 2.0, 1)")
                        .execute(conn)
                        .await?;
                    Ok::<_, StoreError>(())
                }
                .boxed()
            })
            .await
            .unwrap();
        let series = downsampled(&mut store.read().await.unwrap(), "j", None, 100)
            .await
            .unwrap();
        let long = series.iter().find(|s| s.name == "long").unwrap();
        assert!(
            long.points.len() <= 101 && long.points.len() >= 99,
            "{}",
            long.points.len()
        );
        assert_eq!(long.total_points, None);
        assert_eq!(long.points.first().unwrap().step, 10);
        assert_eq!(
            long.points.last().unwrap().step,
            100_070,
            "the newest point is kept"
        );
        assert!(long.points.windows(2).all(|w| w[0].step < w[1].step));
        let short = series.iter().find(|s| s.name == "short").unwrap();
        assert_eq!((short.total_points, short.points.len()), (Some(2), 2));
        let _ = std::fs::remove_file(path);
    }
}
