//! What a refused create makes a pool do. gcloud's words are read in one place,
//! `pod::gcloud::errors` (its `ROWS` table cites where each text was seen), the same reading
//! a pod's recovery acts on; here that reading becomes the pool's vocabulary. What each kind
//! makes the pool do is `zones.rs`'s: a stockout backs its zone off, a quota error blocks the
//! zone or region it names, a denial or an invalid request pauses the pool until a person
//! looks, a transient error (a per-minute request limit among them) retries the same zone.

pub use crate::pod::gcloud::errors::{CloudError, Kind, Response, Scope};

/// What a failed create means, how far it reaches, and the cloud's own words: what a
/// driver answers, read where it read the text (or built from what it knows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateError {
    pub kind: ErrorKind,
    pub scope: Scope,
    pub text: String,
}

impl CreateError {
    /// An error the driver knows the meaning of without reading a cloud's text.
    pub fn new(kind: ErrorKind, scope: Scope, text: impl Into<String>) -> CreateError {
        CreateError {
            kind,
            scope,
            text: text.into(),
        }
    }

    /// A failure on the way to the cloud (a timeout, a process that would not start): the
    /// same request may well succeed, in the same zone.
    pub fn transient(text: impl Into<String>) -> CreateError {
        CreateError::new(ErrorKind::Transient, Scope::Zone, text)
    }
}

impl From<CloudError> for CreateError {
    fn from(error: CloudError) -> CreateError {
        CreateError {
            kind: ErrorKind::of(error.kind),
            scope: error.scope,
            text: error.text,
        }
    }
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// What a refused create makes the pool do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The zone has no capacity for the slice now.
    Stockout,
    /// The project may not have more of this accelerator where `scope` says.
    Quota,
    /// Credentials, permissions, billing or a disabled API: a person must act.
    Denied,
    /// The request itself is wrong (accelerator, version, flags): a person must act.
    Invalid,
    /// The call failed on its way, or met a per-minute request limit; the same request may
    /// well succeed.
    Transient,
    /// The name is another owner's slice (another podq installation's, or a person's): the
    /// zone is fine, the pool asks again under another name.
    NameTaken,
}

impl ErrorKind {
    /// The pool's word for what gcloud said, by the response every caller gives it
    /// (`Kind::response`).
    pub fn of(kind: Kind) -> ErrorKind {
        match kind.response() {
            Response::Capacity => ErrorKind::Stockout,
            Response::Quota => ErrorKind::Quota,
            Response::Retry => ErrorKind::Transient,
            Response::Person if kind == Kind::Denied => ErrorKind::Denied,
            Response::Person => ErrorKind::Invalid,
        }
    }
}

/// What a failed create's message means for the pool: `pod::gcloud::errors::classify`'s
/// reading, in the pool's words.
pub fn classify_create_error(message: &str) -> CreateError {
    crate::pod::gcloud::errors::classify(message).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_the_pools_word_for_its_response() {
        let cases = [
            (Kind::Stockout, ErrorKind::Stockout),
            (Kind::Preempted, ErrorKind::Stockout),
            (Kind::Unknown, ErrorKind::Stockout),
            (Kind::Quota, ErrorKind::Quota),
            (Kind::RateLimited, ErrorKind::Transient),
            (Kind::Transient, ErrorKind::Transient),
            (Kind::AlreadyExists, ErrorKind::Transient),
            (Kind::Denied, ErrorKind::Denied),
            (Kind::Invalid, ErrorKind::Invalid),
            (Kind::NotFound, ErrorKind::Invalid),
        ];
        for (kind, pool) in cases {
            assert_eq!(ErrorKind::of(kind), pool, "{kind:?}");
        }
        let read = classify_create_error("Quota 'CPUS' exceeded. Limit: 24.0 in region us-east5.");
        assert_eq!(
            (read.kind, read.scope),
            (ErrorKind::Quota, Scope::Region("us-east5".into()))
        );
    }
}
