//! What a pool has asked the cloud for, kept on disk so that a pool killed at any moment
//! knows on restart which labelled slices are its own. Every request is written down before
//! it is sent: a slice is asked for under a name recorded first, so asking again after a
//! crash names the same slice and never makes a second one; and a slice is marked gone
//! before it is deleted, so one found after a crash mid-delete is deleted again.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Hex digits of the pool's identity in each slice's name: a clash between two
/// installations is one in 16 million, and is caught at create when it happens.
pub const NAME_TAG_LEN: usize = 6;

pub struct Journal {
    path: PathBuf,
    state: JournalState,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct JournalState {
    /// This pool's identity, on every slice it makes (`cloud::POOL_ID_LABEL`); made when
    /// the journal is.
    #[serde(default)]
    owner: String,
    /// The number in the next slice's name.
    next: u64,
    slices: BTreeMap<String, SliceRecord>,
}

/// One slice the pool asked for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SliceRecord {
    pub zone: String,
    pub asked_at: DateTime<Utc>,
    /// When the cloud took the request; none while it may not have.
    pub created_at: Option<DateTime<Utc>>,
    /// When the pool gave it up (deleted, or the create failed).
    pub gone_at: Option<DateTime<Utc>>,
}

impl Journal {
    /// The journal at `path`, empty when there is none yet.
    pub fn open(path: &Path) -> anyhow::Result<Journal> {
        let state = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("the pool journal {} is not readable", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => JournalState::default(),
            Err(e) => return Err(e).context(format!("cannot read {}", path.display())),
        };
        let mut journal = Journal {
            path: path.to_owned(),
            state,
        };
        if journal.state.owner.is_empty() {
            journal.state.owner = uuid::Uuid::new_v4().simple().to_string();
            journal.save()?;
        }
        Ok(journal)
    }

    /// This pool's identity.
    pub fn owner(&self) -> &str {
        &self.state.owner
    }

    /// The part of this pool's identity in its slices' names.
    pub fn tag(&self) -> &str {
        &self.state.owner[..NAME_TAG_LEN.min(self.state.owner.len())]
    }

    /// Whether this pool ever asked for a slice named `name` (held or given up).
    pub fn knows(&self, name: &str) -> bool {
        self.state.slices.contains_key(name)
    }

    /// Writes the journal whole, durably, before the request it records is sent.
    fn save(&self) -> anyhow::Result<()> {
        let tmp = self.path.with_extension("tmp");
        let bytes = serde_json::to_vec_pretty(&self.state)?;
        let mut file = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    /// Records a request for a slice in `zone` and answers its name, `{pool}-{tag}-{n}`:
    /// the tag is the start of this pool's identity, so two installations that give a pool
    /// one name in one project ask for different slices (and a clash the tag misses is
    /// caught at create, `SliceCloud::check_owner`).
    pub fn ask(&mut self, pool: &str, zone: &str, now: DateTime<Utc>) -> anyhow::Result<String> {
        self.state.next += 1;
        let name = format!("{pool}-{}-{}", self.tag(), self.state.next);
        self.state.slices.insert(
            name.clone(),
            SliceRecord {
                zone: zone.to_owned(),
                asked_at: now,
                created_at: None,
                gone_at: None,
            },
        );
        self.save()?;
        Ok(name)
    }

    pub fn created(&mut self, name: &str, at: DateTime<Utc>) -> anyhow::Result<()> {
        if let Some(record) = self.state.slices.get_mut(name) {
            record.created_at.get_or_insert(at);
        }
        self.save()
    }

    pub fn gone(&mut self, name: &str, at: DateTime<Utc>) -> anyhow::Result<()> {
        if let Some(record) = self.state.slices.get_mut(name) {
            record.gone_at.get_or_insert(at);
        }
        self.save()
    }

    /// The slice `name`, when this pool asked for it and has not given it up.
    pub fn held(&self, name: &str) -> Option<&SliceRecord> {
        self.state
            .slices
            .get(name)
            .filter(|record| record.gone_at.is_none())
    }

    /// Requests not given up, by name.
    pub fn open_requests(&self) -> impl Iterator<Item = (&String, &SliceRecord)> {
        self.state
            .slices
            .iter()
            .filter(|(_, record)| record.gone_at.is_none())
    }

    /// The newest `most` slices given up (deleted, or their create failed), newest first.
    pub fn given_up(&self, most: usize) -> Vec<String> {
        let mut gone: Vec<(&DateTime<Utc>, &String)> = self
            .state
            .slices
            .iter()
            .filter_map(|(name, r)| Some((r.gone_at.as_ref()?, name)))
            .collect();
        gone.sort();
        gone.into_iter()
            .rev()
            .take(most)
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// Hours the pool's slices have been alive since `since` (their creation, when later),
    /// to their end (or `now`): what they cost, leased or idle. `None`: since each began.
    pub fn slice_hours(&self, since: Option<DateTime<Utc>>, now: DateTime<Utc>) -> f64 {
        self.state
            .slices
            .values()
            .filter_map(|r| {
                let start = r.created_at?.max(since.unwrap_or(DateTime::<Utc>::MIN_UTC));
                let end = r.gone_at.unwrap_or(now);
                Some((end - start).num_milliseconds().max(0) as f64 / 3_600_000.0)
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_on_disk_before_it_is_sent_and_names_stay_unique() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool.json");
        let t0 = Utc::now();
        let mut journal = Journal::open(&path).unwrap();
        let first = journal.ask("p", "z-a", t0).unwrap();
        // As after a kill -9 right after the request was written.
        let mut again = Journal::open(&path).unwrap();
        assert!(again.held(&first).is_some());
        let second = again.ask("p", "z-b", t0).unwrap();
        assert_ne!(first, second);
        again.created(&first, t0).unwrap();
        again
            .gone(&first, t0 + chrono::Duration::minutes(30))
            .unwrap();
        let reread = Journal::open(&path).unwrap();
        assert!(reread.held(&first).is_none());
        assert!((reread.slice_hours(None, t0) - 0.5).abs() < 1e-9);
        // A grant that began ten minutes into the slice's life counts the twenty after.
        let grant_start = Some(t0 + chrono::Duration::minutes(10));
        assert!((reread.slice_hours(grant_start, t0) - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(reread.open_requests().count(), 1);
        assert_eq!(reread.owner().len(), 32);
        assert_eq!(reread.owner(), again.owner());
        assert!(reread.knows(&first) && !reread.knows("p-99"));
        // Each installation's names carry its identity: two journals of one pool name never
        // ask for the same slice.
        assert_eq!(first, format!("p-{}-1", &reread.owner()[..NAME_TAG_LEN]));
        let mut other = Journal::open(&dir.path().join("other.json")).unwrap();
        assert_ne!(other.owner(), reread.owner());
        assert_ne!(other.ask("p", "z-a", t0).unwrap(), first);
    }
}
