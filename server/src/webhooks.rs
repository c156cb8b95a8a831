//! Webhooks: a signed JSON (or Slack-shaped) POST for each event a receiver subscribed to.
//!
//! A notice is queued in the outbox by a trigger, in the transaction that writes its event
//! (migration 0005), so nothing acknowledged is ever left unannounced, even across a kill -9.
//! This task delivers each receiver's notices in order, one at a time: a receiver that is
//! down holds its own queue (retried with backoff up to 10 minutes) and no one else's, and
//! the scheduler never waits for it. Delivery is at least once: a crash between a receiver's
//! 2xx and the write that records it sends that notice again, with the same
//! `X-Podq-Delivery` id, so the receiver can drop the repeat.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

use crate::scheduler::Scheduler;
use crate::store::now_ms;
use crate::store::webhooks::Pending;
use crate::telemetry::{OutcomeLabel, Telemetry};

/// Event kinds a receiver gets unless its config lists others: attempt outcomes, job state
/// changes and pod state changes.
pub const DEFAULT_KINDS: [&str; 12] = [
    "leased",
    "running",
    "preempted",
    "lost",
    "failed",
    "hung",
    "held",
    "succeeded",
    "cancelled",
    "stopped",
    "requeued",
    "pod_state",
];
const MAX_BACKOFF: Duration = Duration::from_secs(600);
const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `{"delivery", "event", "job"}`.
    #[default]
    Json,
    /// `{"text": "..."}`, what a Slack incoming webhook accepts.
    Slack,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Slack => "slack",
        }
    }
}

/// One receiver, as written in the `--webhooks` file.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    pub url: String,
    /// The HMAC-SHA256 key; `secret_file` keeps it out of the config.
    #[serde(default)]
    pub secret: Option<String>,
    #[serde(default)]
    pub secret_file: Option<std::path::PathBuf>,
    #[serde(default)]
    pub format: Format,
    #[serde(default)]
    pub events: Option<Vec<String>>,
}

/// The secret and the URL's path (where Slack keeps its secret) never reach a log.
impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("url", &redacted(&self.url))
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("secret_file", &self.secret_file)
            .field("format", &self.format)
            .field("events", &self.events)
            .finish()
    }
}

impl WebhookConfig {
    pub fn kinds(&self) -> Vec<String> {
        self.events
            .clone()
            .unwrap_or_else(|| DEFAULT_KINDS.iter().map(|k| k.to_string()).collect())
    }
}

/// A receiver ready to deliver to.
#[derive(Clone)]
pub struct Receiver {
    pub id: i64,
    pub url: String,
    pub secret: Vec<u8>,
    pub format: Format,
}

/// Reads the `--webhooks` YAML file: a list of receivers.
pub fn load_config(path: &Path) -> anyhow::Result<Vec<WebhookConfig>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the webhooks file {}", path.display()))?;
    let hooks: Vec<WebhookConfig> = serde_yaml::from_str(&text)
        .with_context(|| format!("{} is not a list of webhooks", path.display()))?;
    for hook in &hooks {
        let url = url_is_http(&hook.url)
            .with_context(|| format!("{}: `{}`", path.display(), hook.url))?;
        if hook.secret.is_some() == hook.secret_file.is_some() {
            anyhow::bail!(
                "{}: the webhook {url} needs exactly one of `secret` and `secret_file`",
                path.display()
            );
        }
    }
    Ok(hooks)
}

fn url_is_http(url: &str) -> anyhow::Result<String> {
    let parsed = reqwest::Url::parse(url).context("not a URL")?;
    anyhow::ensure!(
        matches!(parsed.scheme(), "http" | "https"),
        "a webhook URL must be http or https"
    );
    Ok(redacted(url))
}

/// A URL as logs and the API show it: scheme and host only, since receivers such as Slack
/// put their secret in the path.
pub fn redacted(url: &str) -> String {
    reqwest::Url::parse(url)
        .map(|u| format!("{}://{}/…", u.scheme(), u.host_str().unwrap_or("?")))
        .unwrap_or_else(|_| "(invalid url)".into())
}

/// Records the configured receivers in the store and reads their secrets.
pub async fn register(
    scheduler: &Scheduler,
    hooks: &[WebhookConfig],
) -> anyhow::Result<Vec<Receiver>> {
    let rows: Vec<(String, String, Vec<String>)> = hooks
        .iter()
        .map(|h| (h.url.clone(), h.format.as_str().to_owned(), h.kinds()))
        .collect();
    let ids = scheduler.sync_webhook_receivers(rows).await?;
    hooks
        .iter()
        .zip(ids)
        .map(|(hook, id)| {
            let secret = match (&hook.secret, &hook.secret_file) {
                (Some(secret), _) => secret.clone(),
                (None, Some(file)) => std::fs::read_to_string(file)
                    .with_context(|| format!("cannot read {}", file.display()))?
                    .trim()
                    .to_owned(),
                (None, None) => anyhow::bail!("webhook {} has no secret", redacted(&hook.url)),
            };
            Ok(Receiver {
                id,
                url: hook.url.clone(),
                secret: secret.into_bytes(),
                format: hook.format,
            })
        })
        .collect()
}

/// Delivers every receiver's notices until `shutdown`. Wakes on each commit (a new event may
/// have queued a notice) and when a retry falls due.
pub async fn deliver(
    scheduler: Arc<Scheduler>,
    receivers: Vec<Receiver>,
    shutdown: CancellationToken,
) {
    if receivers.is_empty() {
        return;
    }
    let client = match reqwest::Client::builder().timeout(TIMEOUT).build() {
        Ok(client) => client,
        Err(e) => {
            tracing::error!(error = %e, "webhooks: cannot build an HTTP client; none will be sent");
            return;
        }
    };
    let telemetry = scheduler.telemetry().clone();
    let mut commits = scheduler.commits();
    loop {
        let mut next_due: Option<i64> = None;
        for receiver in &receivers {
            match drain(&scheduler, &client, receiver, &telemetry).await {
                Ok(due) => {
                    next_due = match (next_due, due) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    }
                }
                Err(e) => {
                    tracing::warn!(webhook = %redacted(&receiver.url), error = %e, "webhooks: the outbox could not be read")
                }
            }
        }
        let wait = next_due
            .map(|at| Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0)))
            .unwrap_or(MAX_BACKOFF)
            .max(Duration::from_millis(50));
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = commits.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Sends the receiver's due notices in order; stops at the first failure. Answers when the
/// next retry is due, if one is waiting.
async fn drain(
    scheduler: &Scheduler,
    client: &reqwest::Client,
    receiver: &Receiver,
    telemetry: &Telemetry,
) -> anyhow::Result<Option<i64>> {
    while let Some(pending) = scheduler.next_notice(receiver.id).await? {
        if pending.next_attempt_at > now_ms() {
            return Ok(Some(pending.next_attempt_at));
        }
        let body = payload(receiver.format, &pending)?;
        let result = send(client, receiver, &pending, body).await;
        let delivery = pending.delivery;
        let label = |outcome: &str| OutcomeLabel {
            outcome: outcome.to_owned(),
        };
        match result {
            Ok(()) => {
                scheduler.notice_delivered(delivery).await?;
                telemetry
                    .webhook_deliveries
                    .get_or_create(&label("delivered"))
                    .inc();
            }
            Err(error) => {
                let doublings = u32::try_from(pending.attempts.clamp(0, 10)).unwrap_or(10);
                let backoff =
                    podq_api::backoff::exponential(Duration::from_secs(1), doublings, MAX_BACKOFF);
                let next = now_ms() + i64::try_from(backoff.as_millis()).unwrap_or(i64::MAX / 2);
                tracing::warn!(
                    webhook = %redacted(&receiver.url),
                    delivery,
                    attempts = pending.attempts + 1,
                    retry_in_s = backoff.as_secs(),
                    %error,
                    "webhooks: a delivery failed"
                );
                scheduler.notice_failed(delivery, next, error).await?;
                telemetry
                    .webhook_deliveries
                    .get_or_create(&label("failed"))
                    .inc();
                return Ok(Some(next));
            }
        }
    }
    Ok(None)
}

async fn send(
    client: &reqwest::Client,
    receiver: &Receiver,
    pending: &Pending,
    body: Vec<u8>,
) -> Result<(), String> {
    let signature = sign(&receiver.secret, &body);
    let response = client
        .post(&receiver.url)
        .header("content-type", "application/json")
        .header("x-podq-delivery", pending.delivery.to_string())
        .header("x-podq-event", &pending.event.kind)
        .header("x-podq-signature", format!("sha256={signature}"))
        .body(body)
        .send()
        .await
        // Without the URL: it may hold the receiver's secret.
        .map_err(|e| format!("no answer: {}", e.without_url()))?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!("answered {}", response.status()))
    }
}

/// `hex(HMAC-SHA256(secret, body))`, sent as `X-Podq-Signature: sha256=<hex>`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

fn payload(format: Format, pending: &Pending) -> anyhow::Result<Vec<u8>> {
    let event = pending.event.clone().into_api()?;
    let body = match format {
        Format::Json => serde_json::json!({
            "delivery": pending.delivery,
            "event": event,
            "job": event.job_id.map(|id| serde_json::json!({
                "id": id,
                "experiment": pending.experiment,
                "group": pending.group,
            })),
        }),
        Format::Slack => {
            let subject = pending
                .experiment
                .as_deref()
                .or(event.pod.as_deref())
                .unwrap_or("podq");
            // Every notice says who: a worker's message is its own words, and must not read
            // as a person's. Slack renders `<...>` and `&` as markup, so they are escaped
            // (https://api.slack.com/reference/surfaces/formatting#escaping).
            let text = format!(
                "podq: {} {subject}: {} (by {})",
                event.kind,
                podq_api::escape_controls(&event.message),
                event.by
            );
            serde_json::json!({ "text": slack_escaped(&text) })
        }
    };
    Ok(serde_json::to_vec(&body)?)
}

/// Slack's three control characters in message text, as its formatting reference asks.
fn slack_escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
