//! Who is calling, and whether they may. Every API call's bearer token is looked up in the
//! team's directory (`scheduler/users.rs`); the caller's role must cover the route's:
//!
//! - reads: anyone while the server listens on loopback (or with `--open-reads`), else a
//!   viewer;
//! - submitting and acting on jobs: a submitter (whose own jobs the scheduler checks);
//! - the grant, the plan, schedules and people: an admin;
//! - the worker protocol: a worker; the pods its token names are checked by the scheduler
//!   once it has looked up the pod a call acts for.
//!
//! A person's calls are not checked while no person's token exists (a loopback-only server,
//! as before podq knew people), the worker protocol while no token of any role exists: the
//! caller is then `anonymous`. An unknown or disabled token
//! is 401; a role too small is 403 naming the role needed. The caller, the address and the
//! request id go with the request as an [`Acting`], which the audit records beside each
//! change. The request id is the client's `X-Request-Id` if it sent a sane one, else a new
//! uuid, and the answer carries it back.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio_util::sync::{CancellationToken, DropGuard};
use uuid::Uuid;

use super::error::ApiError;
use crate::scheduler::users::TokenCheck;
use crate::store::events::Actor;
use crate::team::{tokens, Acting, Caller, Role};
use crate::AppState;

pub const REQUEST_ID: &str = "x-request-id";

/// Which calls a route group makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Read,
    Submit,
    Manage,
    Work,
}

impl Need {
    fn role(self) -> Role {
        match self {
            Need::Read => Role::Viewer,
            Need::Submit => Role::Submitter,
            Need::Manage => Role::Admin,
            Need::Work => Role::Worker,
        }
    }

    /// The roles whose tokens, once any exists, make these calls checked. The worker
    /// protocol is open only while the server has no credential at all (`podq up` on
    /// loopback): a server with a person's token and no worker's must not lease to anyone.
    fn checked_by(self) -> &'static [Role] {
        match self {
            Need::Work => &[Role::Viewer, Role::Submitter, Role::Admin, Role::Worker],
            _ => &[Role::Viewer, Role::Submitter, Role::Admin],
        }
    }
}

pub async fn require_read(state: State<AppState>, req: Request, next: Next) -> Response {
    authorize(state, req, next, Need::Read).await
}

pub async fn require_submitter(state: State<AppState>, req: Request, next: Next) -> Response {
    authorize(state, req, next, Need::Submit).await
}

pub async fn require_admin(state: State<AppState>, req: Request, next: Next) -> Response {
    authorize(state, req, next, Need::Manage).await
}

pub async fn require_worker(state: State<AppState>, req: Request, next: Next) -> Response {
    authorize(state, req, next, Need::Work).await
}

/// Identifies the caller of a route open to all (`/whoami`): a bad token is still 401.
pub async fn identify(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let request_id = request_id(&req);
    match caller(&state, &req) {
        Ok(caller) => {
            let caller = caller.unwrap_or_else(|| anonymous(&state, Need::Read));
            run(req, next, caller, request_id).await
        }
        Err(e) => with_request_id(e.into_response(), &request_id),
    }
}

async fn authorize(
    State(state): State<AppState>,
    req: Request,
    next: Next,
    need: Need,
) -> Response {
    let request_id = request_id(&req);
    match check(&state, &req, need) {
        Ok(caller) => run(req, next, caller, request_id).await,
        Err(e) => with_request_id(e.into_response(), &request_id),
    }
}

async fn run(mut req: Request, next: Next, caller: Caller, request_id: String) -> Response {
    let address = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(a)| a.ip().to_string());
    let mut actor = Actor::request(&caller.name, address, Some(request_id.clone()));
    if caller.is_anonymous() {
        // No token was sent: nobody's credential made this change.
        actor.token_holder = None;
    }
    let credential = (!caller.is_anonymous())
        .then(|| bearer(&req).map(tokens::hash))
        .flatten();
    req.extensions_mut().insert(Acting {
        caller,
        actor,
        credential,
    });
    with_request_id(next.run(req).await, &request_id)
}

fn with_request_id(mut response: Response, request_id: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(request_id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    response
}

/// The client's `X-Request-Id` when it is 1 to 200 visible ASCII characters, else a new one.
fn request_id(req: &Request) -> String {
    req.headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| (1..=200).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_graphic()))
        .map_or_else(|| Uuid::new_v4().to_string(), str::to_owned)
}

/// Whether reads need a token: the server listens beyond loopback without `--open-reads`.
pub fn reads_need_token(state: &AppState) -> bool {
    !state.config.listen.ip().is_loopback() && !state.config.open_reads
}

/// The caller a call without a token is taken for, when the call needs none: anyone may
/// do anything on a server with no tokens, as before podq knew people; open reads do not
/// make their reader more than a viewer once tokens exist.
fn anonymous(state: &AppState, need: Need) -> Caller {
    let mut caller = Caller::anonymous();
    if need == Need::Read && state.scheduler.tokens_exist_for(Need::Manage.checked_by()) {
        caller.role = Role::Viewer;
    }
    caller
}

fn check(state: &AppState, req: &Request, need: Need) -> Result<Caller, ApiError> {
    let presented = caller(state, req)?;
    let checked = state.scheduler.tokens_exist_for(need.checked_by())
        && (need != Need::Read || reads_need_token(state));
    let caller = match presented {
        Some(caller) => caller,
        None if !checked => return Ok(anonymous(state, need)),
        None => {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                format!(
                    "this call needs a token of a {} or more: send `Authorization: Bearer <token>`",
                    need.role()
                ),
            ))
        }
    };
    let allowed = match need {
        Need::Work => caller.role == Role::Worker,
        _ => caller.role.covers(need.role()),
    };
    // A call that is not checked at all lets any valid token through, as it would have let
    // no token through; but a worker's token never makes a person's change (it could mint
    // an admin on a server whose only token is the worker's).
    let worker_on_a_change =
        caller.role == Role::Worker && matches!(need, Need::Submit | Need::Manage);
    if !allowed && (checked || worker_on_a_change) {
        let needed = match need {
            Need::Work => "the worker role".to_owned(),
            _ => format!("the {} role or more", need.role()),
        };
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("this call needs {needed}; {} is a {}", caller.name, caller.role),
        )
        .with_details(serde_json::json!({ "role_needed": need.role().as_str(), "role": caller.role.as_str() })));
    }
    // A worker token limited to some pods is checked where the pod is known: after its
    // lease is looked up (scheduler/lease/authority.rs), whatever the path's spelling.
    Ok(caller)
}

/// The token of a well-formed `Authorization: Bearer <token>`.
fn bearer(req: &Request) -> Option<&str> {
    req.headers()
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// A cancellation that fires when the server shuts down or, checked every second, the
/// token `acting` called with is disabled or rotated: an open stream ends with its
/// credential. The guard cancels it (and so stops the check) when the stream is dropped.
pub fn while_credential_holds(state: &AppState, acting: &Acting) -> (CancellationToken, DropGuard) {
    let until = state.shutdown.child_token();
    if let Some(credential) = acting.credential.clone() {
        let (scheduler, watched) = (state.scheduler.clone(), until.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(CREDENTIAL_CHECK);
            loop {
                tokio::select! {
                    _ = watched.cancelled() => return,
                    _ = tick.tick() => {
                        if !scheduler.credential_holds(&credential) {
                            watched.cancel();
                            return;
                        }
                    }
                }
            }
        });
    }
    let guard = until.clone().drop_guard();
    (until, guard)
}

/// How often an open stream checks its token.
const CREDENTIAL_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// The caller the request's bearer token names; None when it sent none.
fn caller(state: &AppState, req: &Request) -> Result<Option<Caller>, ApiError> {
    if !req.headers().contains_key("authorization") {
        return Ok(None);
    }
    let token = bearer(req).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the Authorization header must be `Bearer <token>`",
        )
    })?;
    match state.scheduler.check_token(token) {
        TokenCheck::Known(caller) => Ok(Some(caller)),
        TokenCheck::Disabled(name) => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "token_disabled",
            format!("the token of {name} was disabled: ask an admin for a new one (`podq users rotate {name}`)"),
        )),
        TokenCheck::Unknown => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the token sent is not one this server knows: check PODQ_TOKEN, or ask an admin",
        )),
    }
}

impl FromRequestParts<AppState> for Acting {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Acting, ApiError> {
        parts.extensions.get::<Acting>().cloned().ok_or_else(|| {
            // A route that changes something without one of the layers above: a bug.
            tracing::error!(path = %parts.uri.path(), "a route needs a caller but has no auth layer");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the server could not tell who is calling",
            )
        })
    }
}
