//! The catalog as loaded, recorded so the database can answer about experiments on its own.

use super::db;
use futures::FutureExt;

use super::{now_ms, Store, StoreError};
use crate::catalog::Catalog;

pub async fn record(store: &Store, catalog: &Catalog) -> Result<(), StoreError> {
    let rows: Vec<(String, String, String, String, f64, String)> = catalog
        .experiments
        .iter()
        .map(|e| {
            (
                e.name.clone(),
                e.group.clone(),
                e.config.to_string(),
                e.config_sha256.clone(),
                e.est_hours,
                e.source_file.clone(),
            )
        })
        .collect();
    store
        .write(move |conn| {
            async move {
                let now = now_ms();
                for (name, group, config, sha, hours, file) in rows {
                    db::query(
                        "INSERT INTO experiments (name, group_name, config_json, config_sha256, \
                         est_hours, source_file, loaded_at) VALUES (?, ?, ?, ?, ?, ?, ?) \
                         ON CONFLICT (name) DO UPDATE SET group_name = excluded.group_name, \
                         config_json = excluded.config_json, config_sha256 = excluded.config_sha256, \
                         est_hours = excluded.est_hours, source_file = excluded.source_file, \
                         loaded_at = excluded.loaded_at",
                    )
                    .bind(name)
                    .bind(group)
                    .bind(config)
                    .bind(sha)
                    .bind(hours)
                    .bind(file)
                    .bind(now)
                    .execute(conn)
                    .await?;
                }
                Ok::<_, StoreError>(())
            }
            .boxed()
        })
        .await
}
