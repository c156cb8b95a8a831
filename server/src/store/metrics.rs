//! Metric series, downsampled for charts.

use podq_api::{MetricSeries, MetricValue};
use sqlx::SqlitePool;

use super::StoreError;

#[derive(sqlx::FromRow)]
struct SeriesExtent {
    id: i64,
    name: String,
    total: i64,
    first: Option<i64>,
    last: Option<i64>,
}

/// Each series of the job (or only `names`), cut to at most `max_points` by averaging equal
/// step ranges. A series with fewer points comes back whole.
pub async fn downsampled(
    db: &SqlitePool,
    job_id: &str,
    names: Option<&[String]>,
    max_points: i64,
) -> Result<Vec<MetricSeries>, StoreError> {
    let series: Vec<SeriesExtent> = sqlx::query_as(
        "SELECT s.id AS id, s.name AS name, COUNT(p.step) AS total, MIN(p.step) AS first, MAX(p.step) AS last FROM metric_series s \
         LEFT JOIN metric_points p ON p.series_id = s.id WHERE s.job_id = ? GROUP BY s.id ORDER BY s.name",
    )
    .bind(job_id)
    .fetch_all(db)
    .await?;
    let mut out = Vec::new();
    for SeriesExtent {
        id,
        name,
        total,
        first,
        last,
    } in series
    {
        if names.is_some_and(|wanted| !wanted.contains(&name)) {
            continue;
        }
        let points: Vec<(i64, f64)> = match (first, last) {
            (Some(first), Some(last)) if total > max_points => {
                let width = ((last - first) / max_points + 1).max(1);
                sqlx::query_as(
                    "SELECT MIN(step), AVG(value) FROM metric_points WHERE series_id = ? \
                     GROUP BY (step - ?) / ? ORDER BY 1",
                )
                .bind(id)
                .bind(first)
                .bind(width)
                .fetch_all(db)
                .await?
            }
            _ => {
                sqlx::query_as(
                    "SELECT step, value FROM metric_points WHERE series_id = ? ORDER BY step",
                )
                .bind(id)
                .fetch_all(db)
                .await?
            }
        };
        out.push(MetricSeries {
            name,
            total_points: total,
            points: points
                .into_iter()
                .map(|(step, value)| MetricValue { step, value })
                .collect(),
        });
    }
    Ok(out)
}
