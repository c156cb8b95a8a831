//! The worker's side of the worker protocol. Every call is retried with backoff while the
//! server cannot be reached or answers 5xx, so a server restart costs nothing but time.

use std::time::Duration;

use podq_api::{
    CheckpointsBatch, ErrorBody, FinishRequest, FinishResponse, HeartbeatRequest,
    HeartbeatResponse, Lease, LeaseRequest, LogBatch, MetricsBatch, PodReport, WorkerEvent,
    WorkerEvents,
};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The lease is no longer the job's live lease: stop the attempt's processes at once.
    #[error("lease lost: {0}")]
    LeaseLost(String),
    /// The server refused the call for good (a 4xx other than lease loss).
    #[error("the server refused the call ({status}): {message}")]
    Refused { status: u16, message: String },
    /// The worker is shutting down; the call was abandoned.
    #[error("shutting down")]
    Shutdown,
}

#[derive(Clone)]
pub struct ServerClient {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    shutdown: CancellationToken,
}

const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl ServerClient {
    pub fn new(base: &str, token: Option<String>, shutdown: CancellationToken) -> Self {
        ServerClient {
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .build()
                .expect("an HTTP client with default TLS settings"),
            base: format!("{}{}", base.trim_end_matches('/'), podq_api::API_PREFIX),
            token,
            shutdown,
        }
    }

    /// POSTs `body` and decodes the answer; `None` for 204. Retries until the server answers
    /// something other than a transport error or 5xx, or the worker shuts down.
    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<Option<T>, CallError> {
        let url = format!("{}{path}", self.base);
        let mut delay = Duration::from_millis(100);
        loop {
            let mut request = self.http.post(&url).json(body).timeout(timeout);
            if let Some(token) = &self.token {
                request = request.bearer_auth(token);
            }
            let outcome = tokio::select! {
                _ = self.shutdown.cancelled() => return Err(CallError::Shutdown),
                outcome = request.send() => outcome,
            };
            match outcome {
                Ok(response) if response.status() == StatusCode::NO_CONTENT => return Ok(None),
                Ok(response) if response.status().is_success() => {
                    return match response.json::<T>().await {
                        Ok(value) => Ok(Some(value)),
                        Err(e) => {
                            tracing::warn!(%url, error = %e, "unreadable answer; retrying");
                            self.pause(&mut delay).await?;
                            continue;
                        }
                    };
                }
                Ok(response) if response.status().is_client_error() => {
                    let status = response.status().as_u16();
                    let body: Option<ErrorBody> = response.json().await.ok();
                    let (code, message) = body
                        .map(|b| (b.error.code, b.error.message))
                        .unwrap_or_else(|| (String::new(), format!("HTTP {status}")));
                    if code == "lease_lost" {
                        return Err(CallError::LeaseLost(message));
                    }
                    return Err(CallError::Refused { status, message });
                }
                Ok(response) => {
                    tracing::warn!(%url, status = %response.status(), "server error; retrying");
                }
                Err(e) => {
                    tracing::debug!(%url, error = %e, "server unreachable; retrying");
                }
            }
            self.pause(&mut delay).await?;
        }
    }

    async fn pause(&self, delay: &mut Duration) -> Result<(), CallError> {
        tokio::select! {
            _ = self.shutdown.cancelled() => return Err(CallError::Shutdown),
            _ = tokio::time::sleep(*delay) => {}
        }
        *delay = (*delay * 2).min(MAX_BACKOFF);
        Ok(())
    }

    pub async fn lease(&self, pod: &str, req: &LeaseRequest) -> Result<Option<Lease>, CallError> {
        let wait = Duration::from_secs(req.wait_s.unwrap_or(20) + 10);
        self.post(&format!("/pods/{pod}/lease"), req, wait).await
    }

    pub async fn report(&self, pod: &str, report: &PodReport) -> Result<(), CallError> {
        self.post::<_, serde_json::Value>(
            &format!("/pods/{pod}/report"),
            report,
            Duration::from_secs(10),
        )
        .await
        .map(|_| ())
    }

    pub async fn heartbeat(
        &self,
        lease: Uuid,
        req: &HeartbeatRequest,
    ) -> Result<HeartbeatResponse, CallError> {
        self.post(
            &format!("/leases/{lease}/heartbeat"),
            req,
            Duration::from_secs(10),
        )
        .await?
        .ok_or_else(|| CallError::Refused {
            status: 204,
            message: "empty heartbeat answer".into(),
        })
    }

    pub async fn metrics(&self, lease: Uuid, batch: &MetricsBatch) -> Result<(), CallError> {
        self.post::<_, serde_json::Value>(
            &format!("/leases/{lease}/metrics"),
            batch,
            Duration::from_secs(30),
        )
        .await
        .map(|_| ())
    }

    pub async fn logs(&self, lease: Uuid, batch: &LogBatch) -> Result<(), CallError> {
        self.post::<_, serde_json::Value>(
            &format!("/leases/{lease}/logs"),
            batch,
            Duration::from_secs(30),
        )
        .await
        .map(|_| ())
    }

    pub async fn checkpoints(
        &self,
        lease: Uuid,
        batch: &CheckpointsBatch,
    ) -> Result<(), CallError> {
        self.post::<_, serde_json::Value>(
            &format!("/leases/{lease}/checkpoints"),
            batch,
            Duration::from_secs(30),
        )
        .await
        .map(|_| ())
    }

    pub async fn event(
        &self,
        lease: Uuid,
        kind: &str,
        message: impl Into<String>,
    ) -> Result<(), CallError> {
        let events = WorkerEvents {
            events: vec![WorkerEvent {
                kind: kind.to_owned(),
                message: message.into(),
            }],
        };
        self.post::<_, serde_json::Value>(
            &format!("/leases/{lease}/events"),
            &events,
            Duration::from_secs(10),
        )
        .await
        .map(|_| ())
    }

    pub async fn finish(
        &self,
        lease: Uuid,
        req: &FinishRequest,
    ) -> Result<FinishResponse, CallError> {
        self.post(
            &format!("/leases/{lease}/finish"),
            req,
            Duration::from_secs(30),
        )
        .await?
        .ok_or_else(|| CallError::Refused {
            status: 204,
            message: "empty finish answer".into(),
        })
    }
}
