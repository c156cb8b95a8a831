//! Finding checkpoints in the store, by the store's own commit rule rather than the
//! trainer's word (docs/architecture.md §3.4).
//!
//! The one rule set, for every store (checked against directories real Orbax 0.12 writes,
//! `tests/orbax.rs`):
//! - a step directory is named `<step>` (Orbax's default) or `<prefix>_<step>`
//!   (`podq_api::orbax`, the parser the sim trainer shares);
//! - a name holding `.orbax-checkpoint-tmp` (older Orbax: `...-tmp-<n>`) is never
//!   committed, on any store. In atomic-rename mode Orbax writes `commit_success.txt`
//!   *inside* the temporary directory before the rename, so on GCS the marker alone does
//!   not mean committed;
//! - on a local filesystem the rename is the commit: a final name is committed;
//! - on an object store (GCS) Orbax writes into the final name and adds
//!   `commit_success.txt` last: a final name is committed once the marker is in it.
//!
//! `gs://` is read with Application Default Credentials, in object_store's order: a
//! service account key or authorized-user file named by `GOOGLE_APPLICATION_CREDENTIALS`
//! (or `GOOGLE_SERVICE_ACCOUNT`), then gcloud's
//! `~/.config/gcloud/application_default_credentials.json`, then the VM's metadata server.
//! Every `GOOGLE_*` variable object_store knows applies (`GOOGLE_BASE_URL` points it at
//! another endpoint, such as an emulator), and `StoreOptions` can add or override keys.

use anyhow::Context;
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt};
use url::Url;

/// How to reach the store, beyond what the URI and the environment say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreOptions {
    /// object_store's GCS keys and values (`google_base_url`, `google_skip_signature`,
    /// `google_service_account`, `google_application_credentials`, ...). They win over the
    /// environment.
    pub gcs: Vec<(String, String)>,
}

impl StoreOptions {
    /// Options that point GCS at `base_url` without signing requests: an emulator.
    pub fn gcs_emulator(base_url: &str) -> StoreOptions {
        StoreOptions {
            gcs: vec![
                ("google_base_url".into(), base_url.into()),
                ("google_skip_signature".into(), "true".into()),
            ],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundCheckpoint {
    pub step: i64,
    pub uri: String,
    pub committed: bool,
}

pub struct CheckpointStore {
    store: Box<dyn ObjectStore>,
    root: StorePath,
    base_uri: String,
    /// Local filesystems commit by rename; object stores by a marker file.
    commits_by_rename: bool,
}

const COMMIT_MARKER: &str = "commit_success.txt";

impl CheckpointStore {
    /// Opens the store behind a `file:///...` or `gs://...` URI (a bare absolute path is
    /// taken as a local directory).
    pub fn open(uri: &str) -> anyhow::Result<CheckpointStore> {
        Self::open_with(uri, &StoreOptions::default())
    }

    /// `open`, with `options` for the object store.
    pub fn open_with(uri: &str, options: &StoreOptions) -> anyhow::Result<CheckpointStore> {
        let url = if uri.starts_with('/') {
            Url::from_directory_path(uri).map_err(|_| anyhow::anyhow!("bad path {uri}"))?
        } else {
            Url::parse(uri).with_context(|| format!("`{uri}` is not a checkpoint URI"))?
        };
        let commits_by_rename = url.scheme() == "file";
        if commits_by_rename {
            // LocalFileSystem refuses to list a directory that does not exist yet.
            std::fs::create_dir_all(url.path())
                .with_context(|| format!("cannot create {}", url.path()))?;
        }
        let (store, root): (Box<dyn ObjectStore>, StorePath) = if url.scheme() == "gs" {
            let bucket = url
                .host_str()
                .filter(|b| !b.is_empty())
                .with_context(|| format!("`{uri}` names no bucket"))?;
            let mut builder = GoogleCloudStorageBuilder::from_env().with_bucket_name(bucket);
            for (key, value) in &options.gcs {
                let key: GoogleConfigKey = key
                    .parse()
                    .with_context(|| format!("`{key}` is not a GCS option"))?;
                builder = builder.with_config(key, value);
            }
            let store = builder
                .build()
                .with_context(|| format!("cannot reach GCS for `{uri}`"))?;
            let root = StorePath::from_url_path(url.path())
                .with_context(|| format!("bad path in `{uri}`"))?;
            (Box::new(store), root)
        } else {
            object_store::parse_url(&url).with_context(|| format!("no object store for `{uri}`"))?
        };
        Ok(CheckpointStore {
            store,
            root,
            base_uri: uri.trim_end_matches('/').to_owned(),
            commits_by_rename,
        })
    }

    /// Every step directory under the root, oldest first.
    pub async fn list(&self) -> anyhow::Result<Vec<FoundCheckpoint>> {
        let listing = self
            .store
            .list_with_delimiter(Some(&self.root))
            .await
            .with_context(|| format!("cannot list {}", self.base_uri))?;
        let mut found = Vec::new();
        for dir in listing.common_prefixes {
            let Some(name) = dir.filename() else { continue };
            // A name a shell would read (`x$(...)_814`) is no checkpoint of podq's: the
            // server refuses it, and it never becomes a resume point.
            let uri = format!("{}/{name}", self.base_uri);
            let Ok(podq_api::orbax::StepDir {
                step,
                committed_name,
                ..
            }) = podq_api::orbax::step_dir_in(&self.base_uri, &uri)
            else {
                continue;
            };
            let tmp = !committed_name;
            let committed = if tmp {
                false
            } else if self.commits_by_rename {
                true
            } else {
                self.store
                    .head(&dir.clone().join(COMMIT_MARKER))
                    .await
                    .is_ok()
            };
            found.push(FoundCheckpoint {
                step,
                uri,
                committed,
            });
        }
        found.sort_by_key(|c| (c.step, c.committed));
        Ok(found)
    }

    /// The newest committed step: what the next attempt resumes from.
    pub async fn newest_committed(&self) -> anyhow::Result<Option<FoundCheckpoint>> {
        Ok(self.list().await?.into_iter().rev().find(|c| c.committed))
    }

    /// Whether `uri` is a committed, complete checkpoint: one a trainer can resume from.
    pub async fn verify(&self, uri: &str) -> anyhow::Result<bool> {
        Ok(self.resume_point(uri).await?.is_some())
    }

    /// The committed, complete checkpoint `uri` names, as this store names it (its own root
    /// joined with the step directory's name, never `uri` itself): `uri` must be a plainly
    /// named step directory directly under the root (`podq_api::orbax::resume_point_in`).
    pub async fn resume_point(&self, uri: &str) -> anyhow::Result<Option<FoundCheckpoint>> {
        let Ok(found) = podq_api::orbax::resume_point_in(&self.base_uri, uri) else {
            return Ok(None);
        };
        let dir = self.root.clone().join(found.name.as_str());
        let marker = if self.commits_by_rename {
            "_CHECKPOINT_METADATA"
        } else {
            COMMIT_MARKER
        };
        if self.store.head(&dir.join(marker)).await.is_err() {
            return Ok(None);
        }
        Ok(Some(FoundCheckpoint {
            step: found.step,
            uri: format!("{}/{}", self.base_uri, found.name),
            committed: true,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_commit_is_the_rename() {
        let dir = std::env::temp_dir().join(format!("podq-ckpt-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("step_10")).unwrap();
        std::fs::write(dir.join("step_10/_CHECKPOINT_METADATA"), "{}").unwrap();
        std::fs::create_dir_all(dir.join("step_20.orbax-checkpoint-tmp")).unwrap();
        std::fs::write(dir.join("step_20.orbax-checkpoint-tmp/x"), "1").unwrap();
        let uri = format!("file://{}", dir.display());
        let store = CheckpointStore::open(&uri).unwrap();
        let found = store.list().await.unwrap();
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].committed && found[0].step == 10);
        assert!(!found[1].committed && found[1].step == 20);
        assert!(store.verify(&format!("{uri}/step_10")).await.unwrap());
        assert!(!store
            .verify(&format!("{uri}/step_20.orbax-checkpoint-tmp"))
            .await
            .unwrap());
        assert!(!store.verify(&format!("{uri}/step_30")).await.unwrap());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
