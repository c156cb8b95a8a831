//! The team: people and their tokens (admins only), and `/whoami` for anyone.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use podq_api::{AddUserRequest, ErrorBody, User, UserList, UserToken, WhoAmI};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::reads_need_token;
use super::error::ApiError;
use super::extract::JsonBody;
use crate::team::{Acting, Role};
use crate::AppState;

pub fn admin_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, add))
        .routes(routes!(disable))
        .routes(routes!(rotate))
}

pub fn open_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(whoami))
}

#[utoipa::path(
    get,
    path = "/users",
    tag = "team",
    summary = "People and their roles (never their tokens)",
    responses((status = 200, description = "Every person", body = UserList)),
    security(("admin_token" = ["admin"])),
)]
async fn list(State(state): State<AppState>) -> Result<Json<UserList>, ApiError> {
    Ok(Json(state.scheduler.users().await?))
}

#[utoipa::path(
    post,
    path = "/users",
    tag = "team",
    summary = "Add a person; their token is in the answer, this once",
    description = "The token is stored as its SHA-256, never as itself. `pods` limits a worker token to the named pods. While no admin token exists, the first person added must be an admin.",
    request_body = AddUserRequest,
    responses(
        (status = 201, description = "The person and their token", body = UserToken),
        (status = 400, description = "`invalid_name`, `unknown_role` (with the closest)", body = ErrorBody),
        (status = 409, description = "`user_exists`, `reserved_name` (podq, anonymous, admin, worker), `admin_first`, or `users_from_file` (people come from --users FILE)", body = ErrorBody),
        (status = 422, description = "`pods_for_worker_only`, `no_pods`", body = ErrorBody),
    ),
    security(("admin_token" = ["admin"])),
)]
async fn add(
    State(state): State<AppState>,
    acting: Acting,
    JsonBody(req, _): JsonBody<AddUserRequest>,
) -> Result<(StatusCode, Json<UserToken>), ApiError> {
    let added = state
        .scheduler
        .add_user(&acting.actor, req.name, &req.role, req.pods)
        .await?;
    Ok((StatusCode::CREATED, Json(added)))
}

#[utoipa::path(
    post,
    path = "/users/{name}/disable",
    tag = "team",
    summary = "Disable a person: their token stops working at once",
    params(("name" = String, Path, description = "The person's name")),
    responses(
        (status = 200, description = "The person, disabled", body = User),
        (status = 404, description = "`not_found`: no such user", body = ErrorBody),
        (status = 409, description = "`users_from_file`", body = ErrorBody),
    ),
    security(("admin_token" = ["admin"])),
)]
async fn disable(
    State(state): State<AppState>,
    acting: Acting,
    Path(name): Path<String>,
) -> Result<Json<User>, ApiError> {
    Ok(Json(
        state.scheduler.disable_user(&acting.actor, name).await?,
    ))
}

#[utoipa::path(
    post,
    path = "/users/{name}/rotate",
    tag = "team",
    summary = "Give a person a new token (and enable them); the old one stops working",
    params(("name" = String, Path, description = "The person's name")),
    responses(
        (status = 200, description = "The person and their new token", body = UserToken),
        (status = 404, description = "`not_found`: no such user", body = ErrorBody),
        (status = 409, description = "`users_from_file`", body = ErrorBody),
    ),
    security(("admin_token" = ["admin"])),
)]
async fn rotate(
    State(state): State<AppState>,
    acting: Acting,
    Path(name): Path<String>,
) -> Result<Json<UserToken>, ApiError> {
    Ok(Json(
        state.scheduler.rotate_user(&acting.actor, name).await?,
    ))
}

#[utoipa::path(
    get,
    path = "/whoami",
    tag = "team",
    summary = "Who the server takes the caller for, and what they may do",
    responses(
        (status = 200, description = "The caller", body = WhoAmI),
        (status = 401, description = "An unknown or disabled token", body = ErrorBody),
    ),
)]
async fn whoami(State(state): State<AppState>, acting: Acting) -> Json<WhoAmI> {
    let caller = &acting.caller;
    let tokens_required =
        state
            .scheduler
            .tokens_exist_for(&[Role::Viewer, Role::Submitter, Role::Admin]);
    let may: &[&str] = match caller.role {
        Role::Admin => &[
            "read",
            "submit",
            "act_on_own_jobs",
            "act_on_any_job",
            "manage",
        ],
        Role::Submitter => &["read", "submit", "act_on_own_jobs"],
        Role::Viewer => &["read"],
        Role::Worker => &[],
    };
    let reads_need_token = tokens_required && reads_need_token(&state);
    // The suite's classes are the catalog's, which a caller who may not read is not shown.
    let classes = if reads_need_token && caller.is_anonymous() {
        Vec::new()
    } else {
        state.scheduler.classes_for(caller)
    };
    Json(WhoAmI {
        name: caller.name.clone(),
        role: caller.role.to_string(),
        tokens_required,
        reads_need_token,
        may: may.iter().map(|s| s.to_string()).collect(),
        classes,
    })
}
