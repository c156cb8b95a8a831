//! Client commands: talk to a running server over HTTP. Each module is one job (submitting,
//! reading jobs, changing a job, the plan and the grant); this one holds what they share:
//! the server's address and token, and turning the server's error answers into one line a
//! person can read.

/// `print!` through [`emit`], returning its error with `?`.
macro_rules! emit_text {
    ($($arg:tt)*) => {
        $crate::client::emit(&format!($($arg)*))?
    };
}

/// `println!` through [`emit`], returning its error with `?`.
macro_rules! emit_line {
    () => {
        $crate::client::emit("\n")?
    };
    ($($arg:tt)*) => {
        $crate::client::emit(&format!("{}\n", format_args!($($arg)*)))?
    };
}

mod control;
mod jobs;
mod plan;
mod pools;
mod results;
mod study;
mod submit;
mod table;
mod team;

use std::fmt;

use clap::Args;
use podq_api::ErrorBody;
use podq_worker::trust::{explain, http_client, tls_error, CaFile};
use reqwest::{Method, RequestBuilder, Response};
use serde::de::DeserializeOwned;

pub use control::{cancel, priority, requeue, resume, suspend, JobArg, PriorityArgs, RequeueArgs};
pub use jobs::{job, jobs, logs, JobArgs, JobsArgs, LogsArgs};
pub use plan::{grant, plan, GrantArgs, PlanArgs};
pub use pools::{pools, PoolsArgs};
pub use results::{results, ResultsArgs};
pub use study::{study, StudyArgs};
pub use submit::{status, submit, StatusArgs, SubmitArgs};
pub use team::{audit, users, whoami, AuditArgs, UsersArgs, WhoAmIArgs};

/// Where the server is and the token for calls that change something. `global` so it can
/// follow a subcommand (`podq plan apply --token ...`).
#[derive(Args, Clone)]
pub struct ServerAddress {
    /// The podq server's base URL; several, separated by commas, when a standby shares the
    /// active server's database (podq asks the one that is ready).
    #[arg(
        long,
        env = "PODQ_SERVER",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub server: String,
    /// Your token (`podq users add` printed it), sent as a bearer token; PODQ_ADMIN_TOKEN
    /// is used when neither this nor PODQ_TOKEN is given.
    #[arg(long, env = "PODQ_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// The CA certificate(s) (PEM) that signed an https:// server's certificate; trusted
    /// instead of the system's roots.
    #[arg(long, env = "PODQ_CA", global = true, value_name = "FILE",
          value_parser = CaFile::parse_arg)]
    pub ca: Option<CaFile>,
}

/// One server, one token, one connection pool.
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// A client of the server `address` names: of several, the first whose `/readyz`
    /// answers 200 (the active one), else the first.
    pub async fn connect(address: &ServerAddress) -> Client {
        let http = http_client(address.ca.as_ref())
            .build()
            .expect("an HTTP client with a CA file CaFile::load accepted");
        let servers = podq_worker::client::server_list(&address.server);
        let server = ready_server(&http, &servers).await;
        Client {
            base: format!("{server}/api/v1"),
            token: address
                .token
                .clone()
                .or_else(|| std::env::var("PODQ_ADMIN_TOKEN").ok())
                .filter(|t| !t.is_empty()),
            http,
        }
    }

    /// A request to `path` under `/api/v1`, with the token when there is one.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends and decodes a JSON answer, or fails with the server's error as a sentence.
    pub async fn json<T: DeserializeOwned>(&self, request: RequestBuilder) -> anyhow::Result<T> {
        let response = self
            .send(request.header("accept", "application/json"))
            .await?;
        let body = response.text().await?;
        serde_json::from_str(&body)
            .map_err(|e| anyhow::anyhow!("the server's answer is not what podq expects: {e}"))
    }

    /// Sends and answers the body as text (a table), or fails with the server's error.
    pub async fn text(&self, request: RequestBuilder) -> anyhow::Result<String> {
        let response = self.send(request.header("accept", "text/plain")).await?;
        Ok(response.text().await?)
    }

    /// Sends and answers the response to read as it arrives (`chunk()`), or fails with the
    /// server's error.
    pub async fn stream(&self, request: RequestBuilder) -> anyhow::Result<Response> {
        self.send(request).await
    }

    async fn send(&self, request: RequestBuilder) -> anyhow::Result<Response> {
        let server = self.base.trim_end_matches("/api/v1");
        let response = request.send().await.map_err(|e| match tls_error(&e) {
            Some(_) => anyhow::anyhow!("{}", explain(&e, server)),
            None => anyhow::anyhow!(
                "cannot reach the podq server at {server} ({}); is it running? (--server or PODQ_SERVER)",
                explain(&e, server)
            ),
        })?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        Err(ServerError::from_answer(status, &body).into())
    }
}

async fn ready_server(http: &reqwest::Client, servers: &[String]) -> String {
    let first = servers.first().cloned().unwrap_or_default();
    if servers.len() < 2 {
        return first;
    }
    for server in servers {
        let ready = http
            .get(format!("{server}/readyz"))
            .timeout(std::time::Duration::from_secs(2))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ready {
            return server.clone();
        }
    }
    first
}

/// Writes `text` to stdout. A reader that went away (`podq jobs --all | head`) is no
/// error: there is no one left to tell.
pub fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// `text` as one URL path segment or query value: everything but unreserved characters
/// percent-encoded.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// `path?k=v&...`, each value encoded; `path` alone without pairs.
pub fn with_query(path: &str, pairs: &[(&str, String)]) -> String {
    if pairs.is_empty() {
        return path.to_owned();
    }
    let query: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
    format!("{path}?{}", query.join("&"))
}

/// An error answer from the server, as a person reads it: the message, what was probably
/// meant, and the details that add something, never the raw JSON.
#[derive(Debug)]
pub struct ServerError {
    pub text: String,
}

impl ServerError {
    pub fn from_answer(status: reqwest::StatusCode, body: &str) -> ServerError {
        let Ok(ErrorBody { error }) = serde_json::from_str::<ErrorBody>(body) else {
            let first = body.lines().next().unwrap_or_default().trim();
            let text = if first.is_empty() {
                format!("the server answered {status}")
            } else {
                format!("the server answered {status}: {first}")
            };
            return ServerError { text };
        };
        let mut text = error.message.clone();
        let details = error.details.unwrap_or(serde_json::Value::Null);
        let suggestion = did_you_mean(&details["did_you_mean"]);
        if let Some(suggestion) = &suggestion {
            if !text.contains("did you mean") {
                text.push_str(&format!("; {suggestion}"));
            }
        }
        if matches!(status.as_u16(), 401 | 403) {
            text.push_str(" (give it with --token or PODQ_TOKEN)");
        }
        // With a suggestion the line is enough; otherwise the details that say something
        // the message does not (the valid names, say) follow, one per line.
        if suggestion.is_none() {
            if let serde_json::Value::Object(map) = &details {
                for (key, value) in map {
                    if key == "did_you_mean" || already_said(&error.message, value) {
                        continue;
                    }
                    text.push_str(&format!("\n  {}: {}", key.replace('_', " "), plain(value)));
                }
            }
        }
        ServerError { text }
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for ServerError {}

/// "did you mean `a` or `b`?" from a `did_you_mean` detail: a list, or a list per name.
fn did_you_mean(value: &serde_json::Value) -> Option<String> {
    let quoted = |list: &serde_json::Value| -> Vec<String> {
        list.as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|s| s.as_str())
                    .map(|s| format!("`{s}`"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let either = |names: Vec<String>| match names.as_slice() {
        [] => None,
        [one] => Some(one.clone()),
        [init @ .., last] => Some(format!("{} or {last}", init.join(", "))),
    };
    match value {
        serde_json::Value::Array(_) => either(quoted(value)).map(|s| format!("did you mean {s}?")),
        serde_json::Value::Object(per_name) => {
            let parts: Vec<String> = per_name
                .iter()
                .filter_map(|(name, list)| {
                    either(quoted(list)).map(|s| format!("`{name}`: did you mean {s}?"))
                })
                .collect();
            (!parts.is_empty()).then(|| parts.join("; "))
        }
        _ => None,
    }
}

/// Whether the message already names everything `value` holds.
fn already_said(message: &str, value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(s) => message.contains(s.as_str()),
        serde_json::Value::Array(items) => items.iter().all(|i| already_said(message, i)),
        serde_json::Value::Null => true,
        _ => false,
    }
}

/// A detail value as text: lists joined, strings bare, the rest as compact JSON.
fn plain(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(items) => items.iter().map(plain).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(status: u16, body: serde_json::Value) -> String {
        ServerError::from_answer(
            reqwest::StatusCode::from_u16(status).unwrap(),
            &body.to_string(),
        )
        .text
    }

    #[test]
    fn names_and_values_are_encoded() {
        assert_eq!(encode("exp07a"), "exp07a");
        assert_eq!(encode("a/b c"), "a%2Fb%20c");
        assert_eq!(
            with_query("/plan", &[("deadline", "2026-12-23T00:00:00+00:00".into())]),
            "/plan?deadline=2026-12-23T00%3A00%3A00%2B00%3A00"
        );
        assert_eq!(with_query("/plan", &[]), "/plan");
    }

    #[test]
    fn a_suggestion_makes_one_line() {
        let text = error(
            400,
            serde_json::json!({"error": {"code": "unknown_group",
                "message": "no group `exp01-model-scalling`",
                "details": {"did_you_mean": ["exp01-model-scaling"], "groups": ["a", "b"]}}}),
        );
        assert_eq!(
            text,
            "no group `exp01-model-scalling`; did you mean `exp01-model-scaling`?"
        );
    }

    #[test]
    fn without_a_suggestion_the_valid_names_follow() {
        let text = error(
            400,
            serde_json::json!({"error": {"code": "unknown_group",
                "message": "no group `nope`",
                "details": {"did_you_mean": [], "groups": ["exp01", "exp02"]}}}),
        );
        assert_eq!(text, "no group `nope`\n  groups: exp01, exp02");
    }

    #[test]
    fn suggestions_per_name_and_plain_answers_read_as_sentences() {
        let text = error(
            400,
            serde_json::json!({"error": {"code": "unknown_experiment",
                "message": "no experiments `a1`, `zz`",
                "details": {"unknown": ["a1", "zz"], "did_you_mean": {"a1": ["a"], "zz": []}}}}),
        );
        assert_eq!(text, "no experiments `a1`, `zz`; `a1`: did you mean `a`?");
        let proxy = ServerError::from_answer(reqwest::StatusCode::BAD_GATEWAY, "<html>\nbad");
        assert_eq!(proxy.text, "the server answered 502 Bad Gateway: <html>");
        let auth = error(
            401,
            serde_json::json!({"error": {"code": "unauthorized", "message": "this call needs the admin token"}}),
        );
        assert!(auth.ends_with("(give it with --token or PODQ_TOKEN)"));
    }
}
