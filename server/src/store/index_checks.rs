//! The queries that must read an index whatever the history holds, and the check that they
//! do: here on SQLite, in `tests/scheduler.rs` on PostgreSQL.

use super::backend::dialect;
use super::{events, goodput, leases, views, Backend};

/// The fixed queries that run on every status, lease and dashboard call, as (what, SQL,
/// ordered), for the tests that check each store reads them through an index. `ordered`: the
/// rows must come in the index's order, not sorted after reading all of them (runs on pods
/// are at most one per pod, so their sort costs nothing).
pub fn hot_reads(backend: Backend) -> [(&'static str, &'static str, bool); 6] {
    [
        ("runs on pods", views::RUNS_ON_PODS.as_str(), false),
        (
            "progressed queue",
            dialect(backend).progressed_queue.as_str(),
            true,
        ),
        ("fresh queue", views::FRESH_QUEUE, false),
        ("any leasable", leases::ANY_LEASABLE, false),
        ("open attempts", goodput::OPEN_ATTEMPTS, false),
        ("job events", events::JOB_EVENTS, false),
    ]
}

/// Tables small enough by construction that a scan of them costs nothing.
#[cfg(test)]
const SMALL_TABLES: [&str; 3] = ["job_counts", "goodput_totals", "pods"];

/// Fails unless every step of `plan` (rows of `EXPLAIN QUERY PLAN`) reads an index or a
/// small table, and, for an `ordered` page, no step sorts the whole result.
#[cfg(test)]
pub fn assert_uses_indexes(what: &str, plan: &[(i64, i64, i64, String)], ordered: bool) {
    let steps: Vec<&str> = plan
        .iter()
        .map(|(_, _, _, detail)| detail.as_str())
        .collect();
    for step in &steps {
        let full_scan = step.starts_with("SCAN ")
            && !step.contains(" USING ")
            && !SMALL_TABLES
                .iter()
                .any(|t| step.starts_with(&format!("SCAN {t}")));
        assert!(!full_scan, "{what}: a full scan in {steps:?}");
        assert!(
            !(ordered && step.contains("TEMP B-TREE FOR ORDER BY")),
            "{what}: sorts every match in {steps:?}"
        );
    }
}

#[cfg(test)]
mod plan_checks {
    use super::assert_uses_indexes;
    use crate::store::test_support::scratch_store;

    #[tokio::test]
    #[should_panic(expected = "a full scan")]
    async fn the_plan_check_catches_a_full_scan() {
        let (store, _dir) = scratch_store().await;
        let plan: Vec<(i64, i64, i64, String)> = crate::store::db::query_as(
            "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE config_json = 'x'",
        )
        .fetch_all(&mut store.read().await.unwrap())
        .await
        .unwrap();
        assert_uses_indexes("a filter on an unindexed column", &plan, false);
    }

    #[tokio::test]
    #[should_panic(expected = "sorts every match")]
    async fn the_plan_check_catches_a_sort_of_every_match() {
        let (store, _dir) = scratch_store().await;
        let plan: Vec<(i64, i64, i64, String)> = crate::store::db::query_as(
            "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE state = 'queued' ORDER BY updated_at LIMIT 10",
        )
        .fetch_all(&mut store.read().await.unwrap())
        .await
        .unwrap();
        assert_uses_indexes("an order no index has", &plan, true);
    }

    /// The fixed queries that run on every status, lease and dashboard call.
    #[tokio::test]
    async fn the_hot_reads_use_indexes() {
        let (store, _dir) = scratch_store().await;
        let queries = super::hot_reads(super::Backend::Sqlite);
        for (what, sql, ordered) in queries {
            let explain = format!("EXPLAIN QUERY PLAN {sql}");
            let mut query =
                crate::store::db::query_as::<(i64, i64, i64, String)>(sqlx::AssertSqlSafe(explain));
            for _ in 0..sql.matches('?').count() {
                query = query.bind(0_i64);
            }
            let plan = query
                .fetch_all(&mut store.read().await.unwrap())
                .await
                .unwrap();
            assert_uses_indexes(what, &plan, ordered);
        }
    }
}
