//! The receivers a `--webhooks` file lists: what each wants and how it is shown. A leaf:
//! the server's config reads it without reaching the scheduler the deliverer uses.

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Event kinds a receiver gets unless its config lists others: attempt outcomes, job state
/// changes, a run pruned at a rung and pod state changes.
pub const DEFAULT_KINDS: [&str; 13] = [
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
    "rung_pruned",
    "pod_state",
];
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
