//! The team's directory: who each token belongs to, kept in memory (every request asks) and
//! loaded from the store (or from `--users FILE`) when this server takes the lead and after
//! each change. Adding, disabling and rotating go through here, each one write with its
//! audit event.

use std::collections::HashMap;
use std::sync::RwLock;

use futures::FutureExt;
use podq_api::{User, UserList, UserToken};

use super::{Result, Scheduler, SchedulerError};
use crate::config::ServerConfig;
use crate::store::events::{insert_event, Actor};
use crate::store::users::{self as stored, NewUser, UserRow};
use crate::store::{ms_to_datetime, StoreError};
use crate::team::users_file::{valid_name, NAME_RULE, RESERVED_NAMES};
use crate::team::{tokens, Caller, Role};

/// A token's owner as the directory knows them.
#[derive(Debug, Clone)]
struct Holder {
    caller: Caller,
    disabled: bool,
}

/// What a presented token turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenCheck {
    Known(Caller),
    Disabled(String),
    Unknown,
}

#[derive(Default)]
pub struct Directory {
    /// By the SHA-256 of the token: the built-in tokens and every person.
    by_token: RwLock<HashMap<String, Holder>>,
}

impl Directory {
    /// Replaces what the directory knows with the built-in tokens and `people`. A built-in
    /// token that is also a person's is refused: it would act beyond that person's role and
    /// pods, and disabling the person would not stop it.
    fn load(
        &self,
        config: &ServerConfig,
        people: Vec<Holder>,
        hashes: Vec<String>,
    ) -> std::result::Result<(), String> {
        let mut by_token: HashMap<String, Holder> = people
            .into_iter()
            .zip(hashes)
            .map(|(holder, hash)| (hash, holder))
            .collect();
        // The bootstrap tokens keep working beside the people: existing
        // deployments and `podq up` need no change.
        let builtin = [
            (&config.admin_token, "admin", Role::Admin),
            (&config.worker_token, "worker", Role::Worker),
        ];
        for (token, name, role) in builtin {
            if let Some(token) = token {
                if let Some(person) = by_token.get(&tokens::hash(token)) {
                    return Err(format!(
                        "PODQ_{}_TOKEN is the token of the person {}: give the built-in {name} \
                         its own token (or leave it unset)",
                        name.to_ascii_uppercase(),
                        person.caller.name
                    ));
                }
                let caller = Caller {
                    name: name.to_owned(),
                    role,
                    pods: None,
                };
                let holder = Holder {
                    caller,
                    disabled: false,
                };
                by_token.insert(tokens::hash(token), holder);
            }
        }
        *self.by_token.write().unwrap_or_else(|e| e.into_inner()) = by_token;
        Ok(())
    }

    pub fn check(&self, token: &str) -> TokenCheck {
        let map = self.by_token.read().unwrap_or_else(|e| e.into_inner());
        match map.get(&tokens::hash(token)) {
            Some(holder) if holder.disabled => TokenCheck::Disabled(holder.caller.name.clone()),
            Some(holder) => TokenCheck::Known(holder.caller.clone()),
            None => TokenCheck::Unknown,
        }
    }

    /// Whether the token whose SHA-256 is `hash` is still a valid one.
    fn holds(&self, hash: &str) -> bool {
        let map = self.by_token.read().unwrap_or_else(|e| e.into_inner());
        map.get(hash).is_some_and(|holder| !holder.disabled)
    }

    /// Whether any token of these roles exists: without one, calls of these roles are not
    /// checked (a loopback-only server, as before podq knew people).
    pub fn any_of(&self, roles: &[Role]) -> bool {
        let map = self.by_token.read().unwrap_or_else(|e| e.into_inner());
        map.values().any(|h| roles.contains(&h.caller.role))
    }
}

fn holder_of(row: &UserRow) -> std::result::Result<Holder, StoreError> {
    Ok(Holder {
        caller: Caller {
            name: row.name.clone(),
            role: row
                .role
                .parse()
                .map_err(|e: String| StoreError::Corrupt(format!("user {}: {e}", row.name)))?,
            pods: pods_of(row)?,
        },
        disabled: row.disabled_at.is_some(),
    })
}

fn pods_of(row: &UserRow) -> std::result::Result<Option<Vec<String>>, StoreError> {
    row.pods_json
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("user {}: pods: {e}", row.name)))
}

fn user_of(row: UserRow) -> std::result::Result<User, StoreError> {
    Ok(User {
        pods: pods_of(&row)?,
        name: row.name,
        role: row.role,
        created_at: ms_to_datetime(row.created_at),
        created_by: row.created_by,
        disabled_at: row.disabled_at.map(ms_to_datetime),
    })
}

impl Scheduler {
    /// Whether the token whose SHA-256 is `hash` still works (not disabled nor rotated).
    pub fn credential_holds(&self, hash: &str) -> bool {
        self.directory.holds(hash)
    }

    /// Who `token` belongs to.
    pub fn check_token(&self, token: &str) -> TokenCheck {
        self.directory.check(token)
    }

    /// Whether calls of these roles are checked at all.
    pub fn tokens_exist_for(&self, roles: &[Role]) -> bool {
        self.directory.any_of(roles)
    }

    /// Reloads the directory: what a standby does now and then, since people are added and
    /// disabled on the active server.
    pub async fn reload_directory(&self) -> Result<()> {
        self.load_directory().await
    }

    /// Loads the directory: from `--users FILE` when given, else from the store.
    pub(super) async fn load_directory(&self) -> Result<()> {
        let (people, hashes) = match &self.config.users_file {
            Some(file) => file
                .iter()
                .map(|p| {
                    let caller = Caller {
                        name: p.name.clone(),
                        role: p.role,
                        pods: p.pods.clone(),
                    };
                    let holder = Holder {
                        caller,
                        disabled: false,
                    };
                    (holder, p.token_sha256.clone())
                })
                .unzip(),
            None => {
                let rows = stored::all(&mut self.store.read().await?).await?;
                let mut people = Vec::new();
                let mut hashes = Vec::new();
                for row in &rows {
                    people.push(holder_of(row)?);
                    hashes.push(row.token_sha256.clone());
                }
                (people, hashes)
            }
        };
        self.directory
            .load(&self.config, people, hashes)
            .map_err(|message| SchedulerError::conflict("builtin_token_taken", message))
    }

    pub async fn users(&self) -> Result<UserList> {
        let users = match &self.config.users_file {
            Some(file) => file
                .iter()
                .map(|p| User {
                    name: p.name.clone(),
                    role: p.role.to_string(),
                    pods: p.pods.clone(),
                    created_at: self.started_at,
                    created_by: "--users".to_owned(),
                    disabled_at: None,
                })
                .collect(),
            None => stored::all(&mut self.store.read().await?)
                .await?
                .into_iter()
                .map(user_of)
                .collect::<std::result::Result<_, _>>()?,
        };
        Ok(UserList {
            users,
            from_file: self.config.users_file.is_some(),
        })
    }

    /// Adds a person and answers their token, which is shown this once.
    pub async fn add_user(
        &self,
        by: &Actor,
        name: String,
        role: &str,
        pods: Option<Vec<String>>,
    ) -> Result<UserToken> {
        refuse_without_token(by)?;
        self.refuse_if_file()?;
        if RESERVED_NAMES.contains(&name.as_str()) {
            return Err(SchedulerError::conflict(
                "reserved_name",
                format!("`{name}` names podq's own actor in the audit: choose another name"),
            ));
        }
        if !valid_name(&name) {
            return Err(SchedulerError::invalid(
                "invalid_name",
                format!("`{name}` is not a name: {NAME_RULE}"),
            ));
        }
        let role: Role = role
            .parse()
            .map_err(|e: String| SchedulerError::invalid("unknown_role", e))?;
        if pods.is_some() && role != Role::Worker {
            return Err(SchedulerError::unprocessable(
                "pods_for_worker_only",
                "only a worker token is limited to pods: drop `pods`, or make the role `worker`",
            ));
        }
        if pods.as_ref().is_some_and(Vec::is_empty) {
            return Err(SchedulerError::unprocessable(
                "no_pods",
                "`pods` names no pod: name at least one, or leave it out for any pod",
            ));
        }
        // The first person added closes a server that checked no tokens: if they cannot
        // manage people, nobody could any more.
        if role != Role::Admin && !self.directory.any_of(&[Role::Admin]) {
            return Err(SchedulerError::conflict(
                "admin_first",
                format!(
                    "adding {name} as {role} would leave no admin: add an admin first \
                     (`podq users add NAME --role admin`), or set PODQ_ADMIN_TOKEN"
                ),
            ));
        }
        let token = tokens::generate();
        let hash = tokens::hash(&token);
        let pods_json = pods
            .as_ref()
            .map(|p| serde_json::to_string(p).expect("a list of strings serialises"));
        let by = by.clone();
        let row = self
            .store
            .write(move |conn| {
                async move {
                    if stored::get(conn, &name).await?.is_some() {
                        return Err(SchedulerError::conflict(
                            "user_exists",
                            format!("{name} is already a user: `podq users rotate {name}` gives them a new token"),
                        ));
                    }
                    stored::insert(
                        conn,
                        NewUser {
                            name: &name,
                            role: role.as_str(),
                            token_sha256: &hash,
                            pods_json: pods_json.as_deref(),
                            created_by: &by.by,
                        },
                    )
                    .await?;
                    let limited = pods_json
                        .as_deref()
                        .map(|p| format!(" for pods {p}"))
                        .unwrap_or_default();
                    let message = format!("added {name} as {role}{limited}");
                    insert_event(conn, &by, None, None, "user_added", &message).await?;
                    Ok(stored::get(conn, &name).await?.ok_or_else(|| {
                        StoreError::Corrupt(format!("user {name} vanished as it was added"))
                    })?)
                }
                .boxed()
            })
            .await?;
        self.load_directory().await?;
        Ok(UserToken {
            user: user_of(row)?,
            token,
        })
    }

    /// Disables a person: their token stops working at once. Disabling again changes
    /// nothing.
    pub async fn disable_user(&self, by: &Actor, name: String) -> Result<User> {
        self.refuse_if_file()?;
        let by = by.clone();
        let row = self
            .store
            .write(move |conn| {
                async move {
                    let row = existing(conn, &name).await?;
                    if stored::disable(conn, &name).await? {
                        let message = format!("disabled {name} ({})", row.role);
                        insert_event(conn, &by, None, None, "user_disabled", &message).await?;
                    }
                    existing(conn, &name).await
                }
                .boxed()
            })
            .await?;
        self.load_directory().await?;
        Ok(user_of(row)?)
    }

    /// Gives a person a new token (enabling them again); the old one stops working at once.
    pub async fn rotate_user(&self, by: &Actor, name: String) -> Result<UserToken> {
        refuse_without_token(by)?;
        self.refuse_if_file()?;
        let token = tokens::generate();
        let hash = tokens::hash(&token);
        let by = by.clone();
        let row = self
            .store
            .write(move |conn| {
                async move {
                    existing(conn, &name).await?;
                    stored::rotate(conn, &name, &hash).await?;
                    let message = format!("gave {name} a new token; the old one no longer works");
                    insert_event(conn, &by, None, None, "user_rotated", &message).await?;
                    existing(conn, &name).await
                }
                .boxed()
            })
            .await?;
        self.load_directory().await?;
        Ok(UserToken {
            user: user_of(row)?,
            token,
        })
    }

    fn refuse_if_file(&self) -> Result<()> {
        if self.config.users_file.is_some() {
            return Err(SchedulerError::conflict(
                "users_from_file",
                "this server takes its people from --users FILE: change them there and restart",
            ));
        }
        Ok(())
    }
}

async fn existing(conn: &mut crate::store::Conn, name: &str) -> Result<UserRow> {
    stored::get(conn, name)
        .await?
        .ok_or_else(|| SchedulerError::missing("not_found", format!("no user {name}")))
}

/// A call that makes a credential must itself carry one, tokenless servers included: else any
/// web page open in the operator's browser could mint an admin on a loopback podq. The
/// first admin comes from `PODQ_ADMIN_TOKEN` or `--users FILE`.
fn refuse_without_token(by: &Actor) -> Result<()> {
    if by.token_holder.is_some() {
        return Ok(());
    }
    Err(SchedulerError::forbidden(
        "token_required",
        "making a token needs an admin's token, even on a server that checks none: start the \
         server with PODQ_ADMIN_TOKEN (or --users FILE) and call with that token",
    ))
}
