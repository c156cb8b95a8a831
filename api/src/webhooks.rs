//! `GET /api/v1/webhooks` and `GET /api/v1/webhooks/deliveries`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Webhook {
    pub id: i64,
    /// Scheme and host only: receivers such as Slack keep their secret in the path.
    pub url: String,
    /// `json` or `slack`.
    pub format: String,
    /// Event kinds it receives.
    pub events: Vec<String>,
    /// False once it is no longer in the server's `--webhooks` file.
    pub enabled: bool,
    pub pending: i64,
    pub delivered: i64,
    /// Attempts so far at the oldest pending notice, and why the last one failed.
    pub oldest_pending_attempts: Option<i64>,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Delivery {
    /// Also sent as `X-Podq-Delivery`.
    pub id: i64,
    pub webhook_id: i64,
    pub event_id: i64,
    pub kind: String,
    pub attempts: i64,
    pub next_attempt_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
}
