//! `GET /events/stream`: server-sent events for live views, so the dashboard need not poll.
//!
//! - `event: event` (with `id:`): each row of the event timeline as it is committed. The
//!   stream wakes on the store's commit counter, then reads what is new, so it costs nothing
//!   while nothing happens.
//! - `event: progress`: `{"job_id", "step"}` when a job's metrics arrive.
//!
//! A client that reconnects sends `Last-Event-ID` (browsers do) or `?after=`, and gets every
//! event it missed.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::extract::QueryParams;
use crate::scheduler::{Progress, Scheduler};
use crate::AppState;

/// Events read per wake-up at most; the rest follow at once.
const BATCH: i64 = 500;

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
    headers: HeaderMap,
    QueryParams(q): QueryParams<StreamQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .or(q.after);
    let cursor = match resume {
        Some(after) => after,
        None => state.scheduler.last_event_id().await?,
    };
    let tail = Tail {
        shutdown: state.shutdown.clone(),
        scheduler: state.scheduler.clone(),
        commits: state.scheduler.commits(),
        progress: state.scheduler.progress(),
        cursor,
        pending: VecDeque::new(),
    };
    let events = futures::stream::unfold(tail, |mut tail| async move {
        let event = tail.next().await?;
        Some((Ok(event), tail))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

struct Tail {
    /// Ends the stream when the server shuts down; graceful shutdown waits for every answer.
    shutdown: CancellationToken,
    scheduler: Arc<Scheduler>,
    commits: watch::Receiver<u64>,
    progress: broadcast::Receiver<Progress>,
    cursor: i64,
    pending: VecDeque<SseEvent>,
}

impl Tail {
    /// The next event to send; None ends the stream (the server is shutting down).
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            // Whatever was committed before this point is read below; what commits after
            // marks the receiver changed.
            self.commits.borrow_and_update();
            if self.read_new().await {
                continue;
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => return None,
                changed = self.commits.changed() => changed.ok()?,
                progress = self.progress.recv() => match progress {
                    Ok(p) => self.pending.push_back(
                        SseEvent::default().event("progress").json_data(p).ok()?,
                    ),
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            }
        }
    }

    /// Queues the events committed after the cursor; true if there were any.
    async fn read_new(&mut self) -> bool {
        let events = match self.scheduler.events_after(self.cursor, BATCH).await {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(error = %e, "the event stream could not read events");
                return false;
            }
        };
        let found = !events.is_empty();
        for event in events {
            self.cursor = event.id;
            match SseEvent::default()
                .event("event")
                .id(event.id.to_string())
                .json_data(&event)
            {
                Ok(sse) => self.pending.push_back(sse),
                Err(e) => tracing::warn!(error = %e, "an event did not serialise"),
            }
        }
        found
    }
}
