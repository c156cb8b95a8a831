//! Where a pool's slices are made: the cloud as a pool sees it. Every slice carries a label
//! naming its pool, so a restarted pool finds its own (and only its own) by listing.

use async_trait::async_trait;

use super::classify::{CloudError, CreateError, ErrorKind, Scope};
use chrono::{DateTime, Utc};

/// The label every slice of a pool carries, with the pool's name as its value (GCP label
/// keys are lowercase letters, digits, `-` and `_`).
pub const POOL_LABEL: &str = "podq-pool";
/// The label that names the pool's identity, a random id kept in its journal: two podq
/// installations (or a test and production) may give pools one name, and each deletes
/// only its own slices.
pub const POOL_ID_LABEL: &str = "podq-pool-id";

/// A slice to make.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceSpec {
    pub name: String,
    pub zone: String,
    pub pool: String,
    /// The pool's identity (`POOL_ID_LABEL`).
    pub owner: String,
    pub accelerator: String,
}

/// A slice as the cloud lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudSlice {
    pub name: String,
    pub zone: String,
    pub state: SliceState,
    pub created_at: DateTime<Utc>,
    /// The identity of the pool that made it (`POOL_ID_LABEL`), when it carries one.
    pub owner: Option<String>,
}

pub use podq_api::SliceState;

#[async_trait]
pub trait SliceCloud: Send + Sync {
    /// Asks for `spec` and waits until the cloud has made it or refused it, however long
    /// that takes: the pool runs each create on a task of its own. `Err` is what the refusal
    /// means, read where the driver read the cloud's words. A name that exists already is
    /// not an error: a pool that crashed after asking asks again under the same name, and so
    /// never makes a second slice for one request.
    async fn create(&self, spec: &SliceSpec) -> Result<(), CreateError>;
    /// Deletes slice `name`; one that is gone already is not an error. `Err` is the cloud's
    /// answer, read as a create's is (`pod::gcloud::errors`).
    async fn delete(&self, name: &str, zone: &str) -> Result<(), CloudError>;
    /// Every slice labelled as `pool`'s. `Err` is read as `delete`'s.
    async fn list(&self, pool: &str) -> Result<Vec<CloudSlice>, CloudError>;

    /// Whether the slice that already holds `spec`'s name is the pool's own (asked for
    /// before a crash): a create that finds its name taken adopts only then. Another
    /// installation's slice, or one with no owner at all, is `NameTaken`: a second podq in the
    /// same project must never start a worker (and its preflight) on the first one's slice.
    async fn check_owner(&self, spec: &SliceSpec) -> Result<(), CreateError> {
        let listed = self.list(&spec.pool).await.map_err(CreateError::from)?;
        let owner = listed
            .into_iter()
            .find(|slice| slice.name == spec.name)
            .and_then(|slice| slice.owner);
        if owner.as_deref() == Some(spec.owner.as_str()) {
            return Ok(());
        }
        Err(CreateError::new(
            ErrorKind::NameTaken,
            Scope::Zone,
            format!(
                "{} exists already and is not this pool's (its {POOL_ID_LABEL} is {}): left \
                 alone",
                spec.name,
                owner.as_deref().unwrap_or("missing")
            ),
        ))
    }
}
