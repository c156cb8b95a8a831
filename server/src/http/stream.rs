//! `GET /events/stream`: server-sent events for live views, so the dashboard need not poll.
//!
//! - `event: event` (with `id:`): each row of the event timeline as it is committed (the feed
//!   is `scheduler/reads/live_events.rs`).
//! - `event: progress`: `{"job_id", "step"}` when a job's metrics arrive.
//!
//! A client that reconnects sends `Last-Event-ID` (browsers do) or `?after=`, and gets every
//! event it missed.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::extract::QueryParams;
use crate::scheduler::LiveItem;
use crate::team::Acting;
use crate::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(stream))
}

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct StreamQuery {
    /// Resume after this event id (the `Last-Event-ID` header wins when both are sent).
    after: Option<i64>,
}

#[utoipa::path(
    get,
    path = "/events/stream",
    tag = "status",
    summary = "Server-sent events for live views",
    description = "`event: event` (with `id:`): each timeline `Event` as JSON, as it is committed. `event: progress`: `{\"job_id\", \"step\"}` when a job's metrics arrive. A client that reconnects sends `Last-Event-ID` or `?after=` and gets every event it missed. The stream stays open.",
    params(
        StreamQuery,
        ("Last-Event-ID" = Option<i64>, Header, description = "The last event id received"),
    ),
    responses((status = 200, description = "The stream", body = String, content_type = "text/event-stream")),
)]
async fn stream(
    State(state): State<AppState>,
    acting: Acting,
    headers: HeaderMap,
    QueryParams(q): QueryParams<StreamQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .or(q.after);
    let (until, guard) = super::auth::while_credential_holds(&state, &acting);
    let feed = state.scheduler.live_feed(resume, until).await?;
    // The guard lives as long as the stream: a client that leaves stops the token's check.
    let events = futures::stream::unfold((feed, guard), |(mut feed, guard)| async move {
        loop {
            let sse = match feed.next().await? {
                LiveItem::Event(event) => match SseEvent::default()
                    .event("event")
                    .id(event.id.to_string())
                    .json_data(&event)
                {
                    Ok(sse) => sse,
                    Err(e) => {
                        tracing::warn!(error = %e, "an event did not serialise");
                        continue;
                    }
                },
                LiveItem::Progress(p) => SseEvent::default().event("progress").json_data(p).ok()?,
            };
            return Some((Ok(sse), (feed, guard)));
        }
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
