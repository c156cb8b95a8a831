//! The worker's side of the worker protocol. Every call is retried with backoff while the
//! server cannot be reached or answers 5xx, so a server restart costs nothing but time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use podq_api::LeaseId;
use podq_api::{
    CheckpointsBatch, ErrorBody, FinishRequest, FinishResponse, HeartbeatRequest,
    HeartbeatResponse, Lease, LeaseRequest, LinksBatch, LogBatch, MetricsBatch, PodReport,
    WorkerEvent, WorkerEvents,
};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::trust::{explain, http_client, tls_error, CaFile};

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
    /// Every server address given, each ending in the API prefix: one is active, the others
    /// standbys that answer 503. Calls go to `current` and move to the next
    /// address when it cannot be reached or answers 5xx.
    bases: Arc<Vec<String>>,
    current: Arc<AtomicUsize>,
    token: Option<String>,
    shutdown: CancellationToken,
}

/// A failed call's first pause, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl ServerClient {
    /// `servers`: one address, or several separated by commas (the worker's config checks
    /// there is at least one). `ca`: the private CA that signed an `https://` server's
    /// certificate, when the platform's roots do not cover it.
    pub fn new(
        servers: &str,
        token: Option<String>,
        ca: Option<&CaFile>,
        shutdown: CancellationToken,
    ) -> Self {
        let mut bases: Vec<String> = server_list(servers)
            .into_iter()
            .map(|base| format!("{base}{}", podq_api::API_PREFIX))
            .collect();
        if bases.is_empty() {
            bases.push(format!("http://127.0.0.1:8080{}", podq_api::API_PREFIX));
        }
        ServerClient {
            http: http_client(ca)
                .build()
                .expect("an HTTP client with a CA file CaFile::load accepted"),
            bases: Arc::new(bases),
            current: Arc::new(AtomicUsize::new(0)),
            token,
            shutdown,
        }
    }

    /// The same client, its calls abandoned when `shutdown` fires instead.
    pub fn with_shutdown(&self, shutdown: CancellationToken) -> ServerClient {
        ServerClient {
            shutdown,
            ..self.clone()
        }
    }

    fn base(&self) -> &str {
        &self.bases[self.current.load(Ordering::Relaxed) % self.bases.len()]
    }

    /// After a failed call to `base`: the next address, unless another call moved on already.
    fn move_on_from(&self, base: &str) {
        let Some(at) = self.bases.iter().position(|b| b == base) else {
            return;
        };
        if self.bases.len() < 2 {
            return;
        }
        let at = at % self.bases.len();
        let current = self.current.load(Ordering::Relaxed);
        // Only the first of several calls that failed on the same server moves on.
        if current % self.bases.len() == at
            && self
                .current
                .compare_exchange(current, current + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::info!(
                server = %self.bases[(current + 1) % self.bases.len()],
                "trying the next server"
            );
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
        let mut pauses = 0;
        loop {
            let base = self.base().to_owned();
            let url = format!("{base}{path}");
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
                            self.pause(&mut pauses).await?;
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
                // A certificate the worker does not trust will not fix itself: say so
                // where it is seen, and keep trying (the server's may be replaced).
                Err(e) if tls_error(&e).is_some() => {
                    let server = base.trim_end_matches(podq_api::API_PREFIX);
                    tracing::warn!(%url, error = %explain(&e, server), "TLS failed; retrying");
                }
                Err(e) => {
                    tracing::debug!(%url, error = %e, "server unreachable; retrying");
                }
            }
            // A standby answers 503 and a dead server nothing: another address may be the
            // active one. With one address this is a plain retry.
            self.move_on_from(&base);
            self.pause(&mut pauses).await?;
        }
    }

    /// The `pauses`-th pause of a call: 100 ms doubling to `MAX_BACKOFF`.
    async fn pause(&self, pauses: &mut u32) -> Result<(), CallError> {
        let delay = podq_api::backoff::exponential(FIRST_PAUSE, *pauses, MAX_BACKOFF);
        tokio::select! {
            _ = self.shutdown.cancelled() => return Err(CallError::Shutdown),
            _ = tokio::time::sleep(delay) => {}
        }
        *pauses += 1;
        Ok(())
    }

    /// A pool's report (`POST /pools/{name}/report`); the answer is the queue's demand.
    pub async fn report_pool(
        &self,
        pool: &str,
        report: &podq_api::PoolReport,
    ) -> Result<podq_api::PoolAnswer, CallError> {
        let answer = self
            .post(
                &format!("/pools/{pool}/report"),
                report,
                Duration::from_secs(30),
            )
            .await?;
        answer.ok_or_else(|| CallError::Refused {
            status: 204,
            message: "the server answered a pool's report with no body".into(),
        })
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
        lease: LeaseId,
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

    /// Sends a batch; answers the stop a rule ordered on it, if one fired.
    pub async fn metrics(
        &self,
        lease: LeaseId,
        batch: &MetricsBatch,
    ) -> Result<Option<podq_api::StopOrder>, CallError> {
        self.post::<_, podq_api::MetricsAck>(
            &format!("/leases/{lease}/metrics"),
            batch,
            Duration::from_secs(30),
        )
        .await
        .map(|ack| ack.and_then(|ack| ack.stop))
    }

    pub async fn logs(&self, lease: LeaseId, batch: &LogBatch) -> Result<(), CallError> {
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
        lease: LeaseId,
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

    pub async fn links(&self, lease: LeaseId, batch: &LinksBatch) -> Result<(), CallError> {
        self.post::<_, serde_json::Value>(
            &format!("/leases/{lease}/links"),
            batch,
            Duration::from_secs(10),
        )
        .await
        .map(|_| ())
    }

    pub async fn event(
        &self,
        lease: LeaseId,
        kind: podq_api::WorkerEventKind,
        message: impl Into<String>,
    ) -> Result<(), CallError> {
        let events = WorkerEvents {
            events: vec![WorkerEvent::of(kind, message)],
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
        lease: LeaseId,
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

/// The addresses in `servers` (separated by commas), without trailing slashes.
pub fn server_list(servers: &str) -> Vec<String> {
    servers
        .split(',')
        .map(|s| s.trim().trim_end_matches('/').to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}
