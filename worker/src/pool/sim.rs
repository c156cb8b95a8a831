//! The cloud of a `driver: local` pool: zones scripted by the pool file's `sim:` entries,
//! slices kept as files so that they outlive the pool's process, as a cloud's do. A slice's
//! hosts are the local driver's simulated hosts under `<root>/pods/<name>`.
//!
//! What it answers is what the Cloud TPU API answers in the same case, word for word where
//! the words are known (worker/src/pod/gcloud/errors.rs cites them):
//! - `capacity: N`: a create beyond N slices alive in the zone is a stockout;
//! - `fault: stockout | quota | denied`: every create fails so, until `clears_after` has
//!   passed since the zone's first create (a quota raised, a role granted);
//! - `preempt_young: N`: the zone's first N slices are preempted 20 s after they are ready
//!   ("within a minute"), as Spot capacity taken back.
//!
//! A create is asynchronous, as `gcloud ... create --async` is: the slice is `creating` for
//! `create_time`, then `ready`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::classify::{classify_create_error, CloudError, CreateError};
use super::cloud::{CloudSlice, SliceCloud, SliceSpec, SliceState, POOL_ID_LABEL, POOL_LABEL};
use super::config::{SimFault, SimScript};

/// How long after it is ready a young slice of a `preempt_young` zone is preempted.
pub const YOUNG_PREEMPTION: Duration = Duration::from_secs(20);

pub struct SimCloud {
    root: PathBuf,
    zones: BTreeMap<String, SimScript>,
    create_time: Duration,
}

/// A slice as the sim cloud keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SliceFile {
    name: String,
    zone: String,
    labels: BTreeMap<String, String>,
    created_at: DateTime<Utc>,
    ready_at: DateTime<Utc>,
    #[serde(default)]
    preempt_at: Option<DateTime<Utc>>,
    #[serde(default)]
    deleting: bool,
}

/// What the sim cloud remembers of a zone: its first create (for `clears_after`) and how
/// many slices it has made (for `preempt_young`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct ZoneFile {
    first_create: Option<DateTime<Utc>>,
    made: u32,
}

impl SimCloud {
    /// A cloud under `root` whose zones are scripted by `zones` (a zone without a script has
    /// room for any number of slices).
    pub fn new(
        root: &Path,
        zones: BTreeMap<String, SimScript>,
        create_time: Duration,
    ) -> anyhow::Result<SimCloud> {
        std::fs::create_dir_all(root.join("slices"))?;
        std::fs::create_dir_all(root.join("zones"))?;
        Ok(SimCloud {
            root: root.to_owned(),
            zones,
            create_time,
        })
    }

    /// Where slice `name`'s simulated hosts live (the local driver's pod root).
    pub fn pod_root(&self, name: &str) -> PathBuf {
        self.root.join("pods").join(name)
    }

    fn slice_path(&self, name: &str) -> PathBuf {
        self.root.join("slices").join(format!("{name}.json"))
    }

    fn zone_path(&self, zone: &str) -> PathBuf {
        self.root.join("zones").join(format!("{zone}.json"))
    }

    fn slices(&self) -> Vec<SliceFile> {
        let Ok(dir) = std::fs::read_dir(self.root.join("slices")) else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|entry| std::fs::read(entry.path()).ok())
            .filter_map(|bytes| serde_json::from_slice(&bytes).ok())
            .collect()
    }

    fn zone_file(&self, zone: &str) -> ZoneFile {
        std::fs::read(self.zone_path(zone))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Why a create in `zone` fails now, in the Cloud TPU API's words.
    fn refusal(&self, spec: &SliceSpec, zone: &ZoneFile, now: DateTime<Utc>) -> Option<String> {
        let script = self.zones.get(&spec.zone)?;
        if let Some(fault) = script.fault {
            let cleared = match (script.clears_after, zone.first_create) {
                (Some(after), Some(first)) => {
                    now >= first + chrono::Duration::from_std(after).unwrap_or_default()
                }
                _ => false,
            };
            if !cleared {
                return Some(fault_text(fault, spec));
            }
        }
        let capacity = script.capacity?;
        let alive = self
            .slices()
            .iter()
            .filter(|s| {
                s.zone == spec.zone && !s.deleting && state_of(s, now) != SliceState::Preempted
            })
            .count();
        (alive >= capacity as usize).then(|| fault_text(SimFault::Stockout, spec))
    }
}

/// The API's answer to a create that fails so.
fn fault_text(fault: SimFault, spec: &SliceSpec) -> String {
    let zone = &spec.zone;
    match fault {
        // The TPU API's stockout (RESOURCE_EXHAUSTED), as `gcloud compute tpus tpu-vm create`
        // prints it.
        SimFault::Stockout => format!(
            "ERROR: (gcloud.compute.tpus.tpu-vm.create) {{\"code\": 8, \"message\": \"There is \
             no more capacity in the zone \\\"{zone}\\\"; you can try in another zone where \
             Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) \
             [EID: 0x1]\"}}"
        ),
        // A per-zone TPU quota, named as the TPU API names its quotas.
        SimFault::Quota => format!(
            "ERROR: (gcloud.compute.tpus.tpu-vm.create) {{\"code\": 8, \"message\": \"Quota \
             limit 'TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI' has been exceeded. \
             Limit: 0 in zone {zone}.\"}}"
        ),
        SimFault::Denied => format!(
            "ERROR: (gcloud.compute.tpus.tpu-vm.create) PERMISSION_DENIED: Permission \
             'tpu.nodes.create' denied on 'projects/sim/locations/{zone}/nodes/{}'",
            spec.name
        ),
    }
}

fn state_of(slice: &SliceFile, now: DateTime<Utc>) -> SliceState {
    if slice.deleting {
        SliceState::Deleting
    } else if slice.preempt_at.is_some_and(|at| now >= at) {
        SliceState::Preempted
    } else if now >= slice.ready_at {
        SliceState::Ready
    } else {
        SliceState::Creating
    }
}

/// Writes `value` to `path` whole or not at all: a crash leaves the old file or the new.
fn write_atomic(path: &Path, value: &impl Serialize) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| e.to_string())?;
    std::fs::write(&tmp, bytes).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

impl SimCloud {
    /// The cloud's lock, across processes (two installations may share one sim cloud): a
    /// zone's capacity check and the slice it lets through are one step, as the real API's
    /// are, so two creates in flight never both take a zone's last slot.
    fn lock(&self) -> Result<nix::fcntl::Flock<std::fs::File>, CreateError> {
        let path = self.root.join("lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| CreateError::transient(format!("{}: {e}", path.display())))?;
        // flock(2), held until the guard drops (nix: std's File::lock needs a newer Rust
        // than the workspace's rust-version).
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| CreateError::transient(format!("{}: {e}", path.display())))
    }

    /// Makes `spec`'s slice, or refuses it in the API's words; under the cloud's lock.
    fn make(&self, spec: &SliceSpec) -> Result<(), CreateError> {
        let now = Utc::now();
        let mut zone = self.zone_file(&spec.zone);
        zone.first_create.get_or_insert(now);
        let refusal = self.refusal(spec, &zone, now);
        if refusal.is_none() {
            zone.made += 1;
        }
        write_atomic(&self.zone_path(&spec.zone), &zone).map_err(CreateError::transient)?;
        if let Some(text) = refusal {
            return Err(classify_create_error(&text));
        }
        let ready_at = now + chrono::Duration::from_std(self.create_time).unwrap_or_default();
        let young = self
            .zones
            .get(&spec.zone)
            .and_then(|s| s.preempt_young)
            .is_some_and(|n| zone.made <= n);
        let slice = SliceFile {
            name: spec.name.clone(),
            zone: spec.zone.clone(),
            labels: BTreeMap::from([
                (POOL_LABEL.to_owned(), spec.pool.clone()),
                (POOL_ID_LABEL.to_owned(), spec.owner.clone()),
            ]),
            created_at: now,
            ready_at,
            preempt_at: young.then(|| {
                ready_at + chrono::Duration::from_std(YOUNG_PREEMPTION).unwrap_or_default()
            }),
            deleting: false,
        };
        std::fs::create_dir_all(self.pod_root(&spec.name))
            .map_err(|e| CreateError::transient(e.to_string()))?;
        write_atomic(&self.slice_path(&spec.name), &slice).map_err(CreateError::transient)
    }
}

#[async_trait]
impl SliceCloud for SimCloud {
    async fn create(&self, spec: &SliceSpec) -> Result<(), CreateError> {
        let taken = {
            let _cloud = self.lock()?;
            let taken = self.slice_path(&spec.name).exists();
            if !taken {
                self.make(spec)?;
            }
            taken
        };
        if taken {
            return self.check_owner(spec).await;
        }
        // A create answers once the slice is made, as `tpu-vm create` does without
        // `--async`: the pool must not wait on it.
        tokio::time::sleep(self.create_time).await;
        Ok(())
    }

    async fn delete(&self, name: &str, _zone: &str) -> Result<(), CloudError> {
        let path = self.slice_path(name);
        let Ok(bytes) = std::fs::read(&path) else {
            return Ok(());
        };
        if let Ok(mut slice) = serde_json::from_slice::<SliceFile>(&bytes) {
            slice.deleting = true;
            write_atomic(&path, &slice).map_err(CloudError::transient)?;
        }
        let _ = std::fs::remove_dir_all(self.pod_root(name));
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(CloudError::transient(format!("{}: {e}", path.display())))
            }
            _ => Ok(()),
        }
    }

    async fn list(&self, pool: &str) -> Result<Vec<CloudSlice>, CloudError> {
        let now = Utc::now();
        let mut slices: Vec<CloudSlice> = self
            .slices()
            .into_iter()
            .filter(|s| s.labels.get(POOL_LABEL).map(String::as_str) == Some(pool))
            .map(|s| {
                let state = state_of(&s, now);
                if state == SliceState::Preempted {
                    // The hosts go down with the capacity: the local driver acts on this.
                    let control = self.pod_root(&s.name).join("control");
                    let _ = std::fs::create_dir_all(&control);
                    let _ = std::fs::write(control.join("preempt"), b"");
                }
                CloudSlice {
                    owner: s.labels.get(POOL_ID_LABEL).cloned(),
                    name: s.name,
                    zone: s.zone,
                    state,
                    created_at: s.created_at,
                }
            })
            .collect();
        slices.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(slices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, zone: &str) -> SliceSpec {
        SliceSpec {
            name: name.into(),
            zone: zone.into(),
            pool: "p".into(),
            owner: "a1".into(),
            accelerator: "v4-64".into(),
        }
    }

    fn script(text: &str) -> SimScript {
        let file = crate::pool::config::PoolFile::parse(
            &format!(
                "pools:\n  - name: p\n    accelerator: v4-64\n    max_slices: 1\n    idle_after: never\n    zones:\n      - {{zone: z-a, sim: {text}}}\n"
            ),
            "t",
        )
        .unwrap();
        file.pools[0].zones[0].sim.clone().unwrap()
    }

    #[tokio::test]
    async fn scripted_zones_answer_as_the_tpu_api_does() {
        let dir = tempfile::tempdir().unwrap();
        let zones = BTreeMap::from([("z-a".to_owned(), script("{capacity: 1}"))]);
        let cloud = SimCloud::new(dir.path(), zones, Duration::ZERO).unwrap();
        cloud.create(&spec("p-1", "z-a")).await.unwrap();
        // The same request again is the same slice.
        cloud.create(&spec("p-1", "z-a")).await.unwrap();
        let read = cloud.create(&spec("p-2", "z-a")).await.unwrap_err();
        let full = &read.text;
        assert_eq!(
            read.kind,
            crate::pool::classify::ErrorKind::Stockout,
            "{full}"
        );
        // A zone without a script has room.
        cloud.create(&spec("p-3", "z-b")).await.unwrap();
        let listed = cloud.list("p").await.unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().all(|s| s.state == SliceState::Ready));
        assert!(cloud.list("other").await.unwrap().is_empty());
        cloud.delete("p-1", "z-a").await.unwrap();
        cloud.delete("p-1", "z-a").await.unwrap();
        cloud.create(&spec("p-2", "z-a")).await.unwrap();
    }

    #[tokio::test]
    async fn faults_read_as_their_kind_and_clear() {
        use crate::pool::classify::{ErrorKind, Scope};
        let dir = tempfile::tempdir().unwrap();
        let zones = BTreeMap::from([
            ("z-a".to_owned(), script("{fault: quota}")),
            ("z-b".to_owned(), script("{fault: denied}")),
            (
                "z-c".to_owned(),
                script("{fault: stockout, clears_after: 0s}"),
            ),
        ]);
        let cloud = SimCloud::new(dir.path(), zones, Duration::ZERO).unwrap();
        let quota = cloud.create(&spec("a", "z-a")).await.unwrap_err();
        assert_eq!((quota.kind, quota.scope), (ErrorKind::Quota, Scope::Zone));
        let denied = cloud.create(&spec("b", "z-b")).await.unwrap_err();
        assert_eq!(denied.kind, ErrorKind::Denied);
        // Cleared from its first create on.
        cloud.create(&spec("c", "z-c")).await.unwrap();
    }

    #[tokio::test]
    async fn a_name_another_owner_holds_is_refused_and_left_alone() {
        use crate::pool::classify::ErrorKind;
        let dir = tempfile::tempdir().unwrap();
        let cloud = SimCloud::new(dir.path(), BTreeMap::new(), Duration::ZERO).unwrap();
        cloud.create(&spec("p-1", "z-a")).await.unwrap();
        let theirs = SliceSpec {
            owner: "b2".into(),
            ..spec("p-1", "z-a")
        };
        let taken = cloud.create(&theirs).await.unwrap_err();
        assert_eq!(taken.kind, ErrorKind::NameTaken, "{}", taken.text);
        assert!(taken.text.contains("a1"), "{}", taken.text);
        let listed = cloud.list("p").await.unwrap();
        assert_eq!(listed[0].owner.as_deref(), Some("a1"));
        // Another pool's slice of that name is no more this pool's.
        let other_pool = SliceSpec {
            pool: "q".into(),
            ..spec("p-1", "z-a")
        };
        let taken = cloud.create(&other_pool).await.unwrap_err();
        assert_eq!(taken.kind, ErrorKind::NameTaken);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_creates_never_pass_a_zones_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let zones = BTreeMap::from([("z-a".to_owned(), script("{capacity: 1}"))]);
        let cloud = std::sync::Arc::new(SimCloud::new(dir.path(), zones, Duration::ZERO).unwrap());
        let mut creates = tokio::task::JoinSet::new();
        for n in 0..16 {
            let cloud = cloud.clone();
            creates.spawn(async move { cloud.create(&spec(&format!("p-{n}"), "z-a")).await });
        }
        let made = creates
            .join_all()
            .await
            .iter()
            .filter(|r| r.is_ok())
            .count();
        assert_eq!(made, 1);
        assert_eq!(cloud.list("p").await.unwrap().len(), 1);
    }
}
