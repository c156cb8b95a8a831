//! A team's people: their roles, their tokens, and who is calling. The store keeps people
//! (`store/users.rs`), the scheduler keeps the directory the HTTP layer asks
//! (`scheduler/users.rs`); this room holds what both share and what needs neither.

pub mod tokens;
pub mod users_file;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What a person may do. Ordered: each user role may do what the ones before it may.
/// `Worker` is apart: it speaks only the worker protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads everything.
    Viewer,
    /// Submits, and cancels, requeues, reprioritises and suspends the jobs they submitted.
    Submitter,
    /// Everything, including others' jobs, the grant, the plan, schedules and people.
    Admin,
    /// A worker beside a pod: leases and reports, for the pods its token names.
    Worker,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Viewer, Role::Submitter, Role::Admin, Role::Worker];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Submitter => "submitter",
            Role::Admin => "admin",
            Role::Worker => "worker",
        }
    }

    /// Whether this role may make a user call that needs `needed` (viewer, submitter or
    /// admin). A worker token makes no user call.
    pub fn covers(self, needed: Role) -> bool {
        self != Role::Worker && needed != Role::Worker && self >= needed
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(text: &str) -> Result<Role, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == text)
            .ok_or_else(|| {
                let names = Role::ALL.map(Role::as_str);
                format!(
                    "no role `{text}`{}: roles are viewer, submitter, admin and worker",
                    crate::names::phrase(&crate::names::did_you_mean(text, names))
                )
            })
    }
}

/// Who is calling, once their token has been checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The person's name; `admin` and `worker` for the built-in tokens
    /// (`PODQ_ADMIN_TOKEN`, `PODQ_WORKER_TOKEN`); `anonymous` when no token was needed.
    pub name: String,
    pub role: Role,
    /// A worker token limited to these pods; None: any pod.
    pub pods: Option<Vec<String>>,
}

impl Caller {
    /// The caller of a server that checks no tokens (loopback only, no credential set):
    /// whoever reaches it may do anything, as before podq knew people.
    pub fn anonymous() -> Caller {
        Caller {
            name: "anonymous".to_owned(),
            role: Role::Admin,
            pods: None,
        }
    }

    /// Whether this is the caller of a call that sent no token.
    pub fn is_anonymous(&self) -> bool {
        self.name == "anonymous"
    }

    /// Whether this caller may act for `pod` (a worker token limited to other pods may not).
    /// An entry `pool:NAME` allows the slices pool NAME makes (`NAME-1`, `NAME-2`, ...),
    /// whose names no one knows in advance.
    pub fn may_act_for_pod(&self, pod: &str) -> bool {
        self.pods.as_ref().is_none_or(|pods| {
            pods.iter().any(|p| {
                p == pod
                    || p.strip_prefix(POOL_ENTRY)
                        .is_some_and(|pool| is_slice_of(pod, pool))
            })
        })
    }

    /// Whether this caller may report for pool `pool`: a worker token limited to pods may
    /// only if it lists `pool:NAME`.
    pub fn may_act_for_pool(&self, pool: &str) -> bool {
        self.pods.as_ref().is_none_or(|pods| {
            pods.iter()
                .any(|p| p.strip_prefix(POOL_ENTRY) == Some(pool))
        })
    }
}

/// The prefix of a worker token's `pods` entry that names a pool rather than a pod.
pub const POOL_ENTRY: &str = "pool:";

/// Whether `pod` is a slice of pool `pool`: `POOL-TAG-N`, TAG the six hex digits of the
/// pool's identity and N its number (`worker/src/pool/journal.rs`), or `POOL-N` as slices
/// were named before the tag.
fn is_slice_of(pod: &str, pool: &str) -> bool {
    let number = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    let Some(rest) = pod
        .strip_prefix(pool)
        .and_then(|rest| rest.strip_prefix('-'))
    else {
        return false;
    };
    match rest.split_once('-') {
        Some((tag, n)) => {
            tag.len() == 6
                && tag
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                && number(n)
        }
        None => number(rest),
    }
}

/// A call being made: who makes it (for the checks) and how the audit names it.
#[derive(Debug, Clone)]
pub struct Acting {
    pub caller: Caller,
    pub actor: crate::store::events::Actor,
    /// The SHA-256 of the token the call presented: an open stream ends when it stops being
    /// valid (disabled or rotated).
    pub credential: Option<String>,
}

impl Acting {
    /// podq acting on its own (the plan's own steps, a test): an admin named `podq`.
    pub fn podq() -> Acting {
        Acting {
            caller: Caller {
                name: "podq".to_owned(),
                role: Role::Admin,
                pods: None,
            },
            actor: crate::store::events::Actor::podq(),
            credential: None,
        }
    }

    /// Whether this caller may `verb` a job submitted by `owner`: an admin may act on any
    /// job, a submitter on their own. The refusal names the owner.
    pub fn may_act_on(
        &self,
        job: impl std::fmt::Display,
        owner: Option<&str>,
        verb: &str,
    ) -> Result<(), String> {
        if self.caller.role.covers(Role::Admin) || owner == Some(self.caller.name.as_str()) {
            return Ok(());
        }
        Err(match owner {
            Some(owner) => format!(
                "job {job} was submitted by {owner}: only {owner} or an admin may {verb} it"
            ),
            None => format!(
                "job {job} was submitted before podq knew people: only an admin may {verb} it"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_user_role_covers_the_ones_below_it_and_a_worker_none() {
        use Role::*;
        let cases = [
            (Viewer, Viewer, true),
            (Viewer, Submitter, false),
            (Submitter, Viewer, true),
            (Submitter, Submitter, true),
            (Submitter, Admin, false),
            (Admin, Admin, true),
            (Admin, Viewer, true),
            (Worker, Viewer, false),
            (Admin, Worker, false),
        ];
        for (role, needed, covers) in cases {
            assert_eq!(role.covers(needed), covers, "{role} covers {needed}");
        }
    }

    #[test]
    fn a_pool_entry_allows_the_pool_and_its_slices_alone() {
        let worker = |pods: &[&str]| Caller {
            name: "w".into(),
            role: Role::Worker,
            pods: Some(pods.iter().map(|p| p.to_string()).collect()),
        };
        let limited = worker(&["stable-1", "pool:v4"]);
        // (pod, allowed)
        let pods = [
            ("stable-1", true),
            ("v4-1", true),
            ("v4-12", true),
            ("v4", false),
            ("v4-", false),
            ("v4-x", false),
            ("v4-1-2", false),
            ("v4x-1", false),
            // As the journal names them: the pool identity's tag, then the number.
            ("v4-3fa2b1-1", true),
            ("v4-3fa2b1-", false),
            ("v4-3FA2B1-1", false),
            ("v4-3fa2b-1", false),
            ("v4-3fa2b1-1-2", false),
            ("stable-2", false),
        ];
        for (pod, allowed) in pods {
            assert_eq!(limited.may_act_for_pod(pod), allowed, "{pod}");
        }
        assert!(limited.may_act_for_pool("v4"));
        assert!(!limited.may_act_for_pool("v4-1"));
        assert!(!limited.may_act_for_pool("stable-1"));
        assert!(!worker(&["v4-1"]).may_act_for_pool("v4"));
        assert!(Caller::anonymous().may_act_for_pool("any"));
    }

    #[test]
    fn a_misspelt_role_is_named_with_the_closest() {
        let err = "submiter".parse::<Role>().unwrap_err();
        assert!(err.contains("did you mean `submitter`?"), "{err}");
        assert_eq!("viewer".parse::<Role>(), Ok(Role::Viewer));
    }

    #[test]
    fn a_submitter_acts_on_their_own_jobs_and_an_admin_on_any() {
        let acting = |role| Acting {
            caller: Caller {
                name: "alice".into(),
                role,
                pods: None,
            },
            actor: crate::store::events::Actor::podq(),
            credential: None,
        };
        let submitter = acting(Role::Submitter);
        assert!(submitter.may_act_on("j", Some("alice"), "cancel").is_ok());
        let refusal = submitter
            .may_act_on("j", Some("bob"), "cancel")
            .unwrap_err();
        assert_eq!(
            refusal,
            "job j was submitted by bob: only bob or an admin may cancel it"
        );
        assert!(submitter.may_act_on("j", None, "cancel").is_err());
        assert!(acting(Role::Admin)
            .may_act_on("j", Some("bob"), "cancel")
            .is_ok());
    }

    #[test]
    fn a_pod_limited_caller_acts_only_for_its_pods() {
        let limited = Caller {
            name: "w".into(),
            role: Role::Worker,
            pods: Some(vec!["stable-1".into()]),
        };
        assert!(limited.may_act_for_pod("stable-1"));
        assert!(!limited.may_act_for_pod("stable-2"));
        assert!(Caller::anonymous().may_act_for_pod("anything"));
    }
}
