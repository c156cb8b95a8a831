//! Webhooks: a signed JSON (or Slack-shaped) POST for each event a receiver subscribed to.
//!
//! A notice is queued in the outbox by a trigger, in the transaction that writes its event
//! (migration 0005), so nothing acknowledged is ever left unannounced, even across a kill -9.
//! This task delivers each receiver's notices in order, one at a time: a receiver that is
//! down holds its own queue (retried with backoff up to 10 minutes) and no one else's, and
//! the scheduler never waits for it. Delivery is at least once: a crash between a receiver's
//! 2xx and the write that records it sends that notice again, with the same
//! `X-Podq-Delivery` id, so the receiver can drop the repeat.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hmac::{KeyInit, Mac};
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

use crate::scheduler::Scheduler;
use crate::store::now_ms;
use crate::store::webhooks::Pending;
use crate::telemetry::{OutcomeLabel, Telemetry};

pub mod receivers;
pub use receivers::{load_config, redacted, Format, WebhookConfig, DEFAULT_KINDS};

const MAX_BACKOFF: Duration = Duration::from_secs(600);
const TIMEOUT: Duration = Duration::from_secs(10);

/// A receiver ready to deliver to.
#[derive(Clone)]
pub struct Receiver {
    pub id: i64,
    pub url: String,
    pub secret: Vec<u8>,
    pub format: Format,
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
    // A receiver's redirect is an answer, not an address to send on to: followed, it would
    // carry the signed body (and its secret's signature) wherever the receiver pointed.
    let client = match reqwest::Client::builder()
        .timeout(TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
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
