//! A run's metric series read whole, page by page, for `metrics.csv` and `metrics.ndjson`:
//! each page is a few short queries on the `(series_id, last_step)` key of `metric_chunks`
//! and the `(job_seq, last_step)` key of `metric_tail` (a keyset page, an index range scan
//! whatever the series' length), so an export of a million points never holds a
//! connection, a transaction or more than one page.

use super::db::{self, Conn};
use super::StoreError;
use podq_api::JobId;

/// Points per page of an export.
pub const PAGE_ROWS: i64 = 10_000;

/// The job's series, `(id, name)`, by name.
pub async fn series_of(db: &mut Conn, job_id: JobId) -> Result<Vec<(i64, String)>, StoreError> {
    Ok(
        db::query_as("SELECT id, name FROM metric_series WHERE job_id = ? ORDER BY name")
            .bind(job_id)
            .fetch_all(db)
            .await?,
    )
}

/// Up to `limit` points `(step, value)` of one series with `from <= step <= to`, by step.
/// The next page starts at the last step returned plus one.
pub async fn page(
    db: &mut Conn,
    series_id: i64,
    from: i64,
    to: i64,
    limit: i64,
) -> Result<Vec<(i64, f64)>, StoreError> {
    let mut points = Vec::new();
    super::metrics::scan_forward(db, series_id, from, |step, value| {
        if step > to {
            return false;
        }
        points.push((step, value));
        (points.len() as i64) < limit
    })
    .await?;
    Ok(points)
}

#[cfg(test)]
mod tests {
    use crate::store::db;
    use crate::store::metrics::{SCAN_BACKWARD, SCAN_FORWARD};
    use crate::store::test_support::{assert_uses_indexes, scratch_store};

    #[tokio::test]
    async fn a_page_is_a_range_of_the_primary_key_read_in_order() {
        let (store, _dir) = scratch_store().await;
        for scan in [SCAN_FORWARD, SCAN_BACKWARD] {
            let plan: Vec<(i64, i64, i64, String)> =
                db::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {scan}")))
                    .bind(1_i64)
                    .bind(0_i64)
                    .bind(10_i64)
                    .fetch_all(&mut store.read().await.unwrap())
                    .await
                    .unwrap();
            assert_uses_indexes("a page of an export", &plan, true);
        }
    }
}
