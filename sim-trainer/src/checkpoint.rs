//! Orbax-shaped checkpoints on a filesystem shared by all hosts (it stands in for GCS).
//!
//! Layout of one step, as Orbax 0.12's `CheckpointManager` writes it on a local filesystem
//! with its default step names: `N.orbax-checkpoint-tmp/` while being written, holding
//! `_CHECKPOINT_METADATA` and one `default/ocdbt.process_<i>/` shard per host; process 0
//! writes `commit_success.txt` into the temporary directory and then renames it to `N/`,
//! which is the commit.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use podq_api::orbax::{committed_step, step_name, tmp_step_name, TMP_MARKER};
use serde::Serialize;

use crate::fatal::Fatal;

const METADATA_FILE: &str = "_CHECKPOINT_METADATA";
const COMMIT_MARKER: &str = "commit_success.txt";
/// The item directory of a `CheckpointManager` saving one unnamed item.
const ITEM_DIR: &str = "default";
const SHARD_MAGIC: &[u8; 8] = b"PODQSIM1";
const SHARD_BYTES: usize = 4096;

/// A location given as `file:///abs/dir` or `/abs/dir`.
///
/// The URI is kept as given so reports name checkpoints in the same form the worker used.
#[derive(Debug, Clone, PartialEq)]
pub struct Location {
    pub uri: String,
    pub path: PathBuf,
}

impl Location {
    pub fn parse(raw: &str) -> Result<Self, Fatal> {
        let uri = match raw.trim_end_matches('/') {
            "" => "/",
            trimmed => trimmed,
        };
        let path = if uri.starts_with("file:") {
            let url = url::Url::parse(uri)
                .map_err(|e| Fatal::usage(format!("invalid checkpoint URI '{raw}': {e}")))?;
            url.to_file_path().map_err(|()| {
                Fatal::usage(format!(
                    "checkpoint URI '{raw}' is not a local absolute path"
                ))
            })?
        } else if let Some((scheme, _)) = uri.split_once("://") {
            return Err(Fatal::usage(format!(
                "the sim trainer cannot use {scheme}:// storage ('{raw}'): \
                 give a file:// URI or an absolute path"
            )));
        } else {
            PathBuf::from(uri)
        };
        if !path.is_absolute() {
            return Err(Fatal::usage(format!(
                "checkpoint location '{raw}' must be absolute: every host must see the same directory"
            )));
        }
        Ok(Self {
            uri: uri.to_owned(),
            path,
        })
    }
}

/// The checkpoint directory of a run.
#[derive(Debug, Clone)]
pub struct CheckpointDir {
    location: Location,
}

#[derive(Debug, Serialize)]
struct Metadata {
    step: u64,
    timestamp: String,
    init_timestamp_nsecs: i64,
    process_count: usize,
    writer: String,
}

impl CheckpointDir {
    pub fn new(location: Location) -> Self {
        Self { location }
    }

    pub fn uri(&self) -> &str {
        &self.location.uri
    }

    pub fn step_uri(&self, step: u64) -> String {
        format!("{}/{}", self.location.uri, step_name(step))
    }

    fn committed_path(&self, step: u64) -> PathBuf {
        self.location.path.join(step_name(step))
    }

    fn tmp_path(&self, step: u64) -> PathBuf {
        self.location.path.join(tmp_step_name(step))
    }

    /// The newest committed step already in the directory. Like Orbax's `should_save`, the run
    /// does not save a step at or below it: a committed checkpoint is never overwritten.
    pub fn latest_committed_step(&self) -> Option<u64> {
        let entries = fs::read_dir(&self.location.path).ok()?;
        entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| committed_step(&e.file_name().to_string_lossy()))
            .max()
    }

    /// Process 0, before anyone writes: a leftover temporary directory of an interrupted save is
    /// discarded, as Orbax does.
    pub fn prepare(&self, step: u64) -> io::Result<()> {
        let tmp = self.tmp_path(step);
        if tmp.exists() {
            fs::remove_dir_all(&tmp)?;
        }
        fs::create_dir_all(tmp.join(ITEM_DIR))
    }

    pub fn write_shard(&self, step: u64, process_index: usize) -> io::Result<()> {
        let dir = shard_dir(&self.tmp_path(step), process_index);
        fs::create_dir_all(&dir)?;
        fs::write(dir.join("data.bin"), shard_bytes(step, process_index))
    }

    pub fn write_metadata(&self, step: u64, process_count: usize) -> io::Result<()> {
        let now = chrono::Utc::now();
        let metadata = Metadata {
            step,
            timestamp: now.to_rfc3339(),
            init_timestamp_nsecs: now.timestamp_nanos_opt().unwrap_or_default(),
            process_count,
            writer: "podq-sim-trainer".into(),
        };
        let json = serde_json::to_vec_pretty(&metadata).map_err(io::Error::other)?;
        fs::write(self.tmp_path(step).join(METADATA_FILE), json)
    }

    /// The rename is the commit: until it happens the step is invisible to a resume. As in
    /// Orbax, the marker is written inside the temporary directory first.
    pub fn commit(&self, step: u64) -> io::Result<()> {
        fs::write(self.tmp_path(step).join(COMMIT_MARKER), b"")?;
        fs::rename(self.tmp_path(step), self.committed_path(step))
    }
}

fn shard_dir(step_dir: &Path, process_index: usize) -> PathBuf {
    step_dir
        .join(ITEM_DIR)
        .join(format!("ocdbt.process_{process_index}"))
}

fn shard_bytes(step: u64, process_index: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(SHARD_BYTES);
    bytes.extend_from_slice(SHARD_MAGIC);
    bytes.extend_from_slice(&step.to_le_bytes());
    bytes.extend_from_slice(&(process_index as u64).to_le_bytes());
    let mut state = step ^ ((process_index as u64) << 32) ^ 0x5DEE_CE66;
    while bytes.len() < SHARD_BYTES {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        bytes.push((state >> 56) as u8);
    }
    bytes
}

/// Checks that `location` is a committed step this process can restore and returns its step.
/// The error says why not, for the trainer's "could not load" warning.
pub fn loadable_step(location: &Location, process_index: usize) -> Result<u64, String> {
    let dir = &location.path;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or("it names no step directory")?;
    if name.contains(TMP_MARKER) {
        return Err("it is an uncommitted (temporary) Orbax directory".into());
    }
    let step = committed_step(&name)
        .ok_or_else(|| format!("'{name}' is not a step directory (<step> or <prefix>_<step>)"))?;
    if !dir.is_dir() {
        return Err("the directory does not exist".into());
    }
    let metadata = fs::read(dir.join(METADATA_FILE))
        .map_err(|e| format!("cannot read {METADATA_FILE}: {e}"))?;
    let metadata: serde_json::Value = serde_json::from_slice(&metadata)
        .map_err(|e| format!("{METADATA_FILE} is not valid JSON: {e}"))?;
    // Metadata without a step (not written by the sim) defers to the directory name.
    if let Some(recorded) = metadata.get("step").and_then(serde_json::Value::as_u64) {
        if recorded != step {
            return Err(format!(
                "{METADATA_FILE} says step {recorded} but the directory is step {step}"
            ));
        }
    }
    let shard = shard_dir(dir, process_index).join("data.bin");
    let bytes = fs::read(&shard).map_err(|e| {
        format!(
            "no shard for process {process_index} ({}): {e}",
            shard.display()
        )
    })?;
    if bytes.len() < 24 || &bytes[..8] != SHARD_MAGIC || bytes[8..16] != step.to_le_bytes() {
        return Err(format!("shard {} is corrupt", shard.display()));
    }
    Ok(step)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            let path = std::env::temp_dir().join(format!(
                "podq-sim-ckpt-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = fs::remove_dir_all(&path);
            fs::create_dir_all(&path).unwrap();
            Self(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn save(dir: &CheckpointDir, step: u64, processes: usize) {
        dir.prepare(step).unwrap();
        for i in 0..processes {
            dir.write_shard(step, i).unwrap();
        }
        dir.write_metadata(step, processes).unwrap();
        dir.commit(step).unwrap();
    }

    fn store(tmp: &TempDir) -> CheckpointDir {
        CheckpointDir::new(Location::parse(tmp.0.to_str().unwrap()).unwrap())
    }

    #[test]
    fn locations_accept_file_uris_and_absolute_paths() {
        let uri = Location::parse("file:///tmp/ck%20pt/").unwrap();
        assert_eq!(uri.uri, "file:///tmp/ck%20pt");
        assert_eq!(uri.path, PathBuf::from("/tmp/ck pt"));
        let plain = Location::parse("/tmp/ckpt").unwrap();
        assert_eq!(plain.path, PathBuf::from("/tmp/ckpt"));
        for bad in ["gs://bucket/ckpt", "relative/dir", "s3://b/x"] {
            assert_eq!(Location::parse(bad).unwrap_err().code, 2, "{bad}");
        }
        let dir = CheckpointDir::new(uri);
        assert_eq!(dir.step_uri(5000), "file:///tmp/ck%20pt/5000");
    }

    #[test]
    fn a_saved_step_is_resumed_by_every_process() {
        let tmp = TempDir::new("resume");
        let dir = store(&tmp);
        save(&dir, 814, 2);
        let loc = Location::parse(&dir.step_uri(814)).unwrap();
        assert_eq!(loadable_step(&loc, 0), Ok(814));
        assert_eq!(loadable_step(&loc, 1), Ok(814));
        // A third host has no shard in a two-host checkpoint.
        assert!(loadable_step(&loc, 2).unwrap_err().contains("no shard"));
    }

    #[test]
    fn unusable_checkpoints_are_refused_with_a_reason() {
        let tmp = TempDir::new("refuse");
        let dir = store(&tmp);
        save(&dir, 1628, 1);
        dir.prepare(2441).unwrap();
        dir.write_shard(2441, 0).unwrap();
        dir.write_metadata(2441, 1).unwrap();

        let uncommitted = Location::parse(dir.tmp_path(2441).to_str().unwrap()).unwrap();
        assert!(loadable_step(&uncommitted, 0)
            .unwrap_err()
            .contains("uncommitted"));
        let missing = Location::parse(&dir.step_uri(3255)).unwrap();
        assert!(loadable_step(&missing, 0)
            .unwrap_err()
            .contains("does not exist"));

        fs::remove_file(dir.committed_path(1628).join(METADATA_FILE)).unwrap();
        let no_metadata = Location::parse(&dir.step_uri(1628)).unwrap();
        assert!(loadable_step(&no_metadata, 0)
            .unwrap_err()
            .contains(METADATA_FILE));
    }

    #[test]
    fn latest_committed_ignores_temporary_directories() {
        let tmp = TempDir::new("latest");
        let dir = store(&tmp);
        assert_eq!(dir.latest_committed_step(), None);
        save(&dir, 814, 1);
        save(&dir, 1628, 1);
        dir.prepare(2441).unwrap();
        assert_eq!(dir.latest_committed_step(), Some(1628));
    }

    #[test]
    fn prepare_discards_an_interrupted_save() {
        let tmp = TempDir::new("stale");
        let dir = store(&tmp);
        dir.prepare(814).unwrap();
        dir.write_shard(814, 3).unwrap();
        dir.prepare(814).unwrap();
        assert!(!shard_dir(&dir.tmp_path(814), 3).exists());
    }
}
