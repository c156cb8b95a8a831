//! Checkpoint discovery against directories real Orbax 0.12 wrote (tests/python/
//! orbax_fixtures.py, run with the project venv): on a local filesystem, and served by a
//! fake GCS, including a save killed mid-write in each commit mode.

mod common;

use std::collections::BTreeSet;

use common::gcs::{copy_tree, FakeGcs};
use common::python_json;
use podq_worker::checkpoints::{CheckpointStore, StoreOptions};
use serde_json::Value;

/// Writes the fixtures with real Orbax; answers their directory and the manifest, which
/// says which steps Orbax itself lists as committed in each case.
fn orbax_fixtures() -> (tempfile::TempDir, Value) {
    let dir = tempfile::tempdir().unwrap();
    let manifest = python_json("orbax_fixtures.py", dir.path());
    (dir, manifest)
}

fn expected(manifest: &Value, case: &str) -> BTreeSet<i64> {
    manifest["cases"][case]["committed_steps"]
        .as_array()
        .unwrap_or_else(|| panic!("no case {case}: {manifest}"))
        .iter()
        .map(|s| s.as_i64().unwrap())
        .collect()
}

async fn committed(store: &CheckpointStore) -> BTreeSet<i64> {
    store
        .list()
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.committed)
        .map(|c| c.step)
        .collect()
}

/// Every listed step's `verify` agrees with the listing.
async fn assert_verify_agrees(store: &CheckpointStore) {
    for found in store.list().await.unwrap() {
        assert_eq!(
            store.verify(&found.uri).await.unwrap(),
            found.committed,
            "{found:?}"
        );
    }
}

#[tokio::test]
async fn discovery_agrees_with_real_orbax_on_every_store_and_every_interruption() {
    let (dir, manifest) = orbax_fixtures();
    assert_eq!(manifest["orbax_checkpoint_version"], "0.12.8");

    // A local filesystem: the rename is the commit.
    for case in ["local", "interrupted"] {
        let path = dir.path().join(case);
        let store = CheckpointStore::open(path.to_str().unwrap()).unwrap();
        assert_eq!(committed(&store).await, expected(&manifest, case), "{case}");
        assert_verify_agrees(&store).await;
    }
    let interrupted =
        CheckpointStore::open(dir.path().join("interrupted").to_str().unwrap()).unwrap();
    let listed = interrupted.list().await.unwrap();
    assert!(
        listed.iter().any(|c| !c.committed && c.step == 10),
        "the interrupted save is listed, uncommitted: {listed:?}"
    );

    // GCS: Orbax's default there writes into the final name and adds commit_success.txt
    // last (commit_file); in atomic-rename mode the tmp directory already holds the
    // marker before the rename (atomic_rename_gcs) and must still not count.
    let objects = tempfile::tempdir().unwrap();
    for case in ["commit_file", "atomic_rename_gcs", "local"] {
        copy_tree(
            &dir.path().join(case),
            &objects.path().join("bucket/ckpt").join(case),
        );
    }
    let gcs = FakeGcs::start(objects.path());
    for case in ["commit_file", "atomic_rename_gcs", "local"] {
        let uri = format!("gs://bucket/ckpt/{case}");
        let store =
            CheckpointStore::open_with(&uri, &StoreOptions::gcs_emulator(&gcs.url)).unwrap();
        assert_eq!(committed(&store).await, expected(&manifest, case), "{case}");
        assert_verify_agrees(&store).await;
    }
}
