//! What a page of another site, open in the operator's browser, cannot make podq do.
//!
//! A browser sends a "simple" cross-site request (a form's POST, `text/plain` included)
//! without asking first, with the user's network position: a podq on the operator's
//! loopback, with no tokens, would obey it. And with DNS rebinding a page's own name comes to
//! point at 127.0.0.1, so it may even read the answers. Three checks close that
//! (docs/security.md):
//!
//! - `Host` must name this server: an IP address, a loopback name (`localhost`), a host of
//!   `--public-url`, or a name of one label (`podq`, a lab machine's short name). A rebound
//!   name is the attacker's own domain, which has a dot: 421.
//! - A request that can change something (any method but GET, HEAD and OPTIONS) whose
//!   `Origin` is not this server's own is refused: 403 `cross_origin`. Browsers send `Origin`
//!   on every such request (the Fetch standard, "append a request `Origin` header").
//! - A body must carry the type its route reads (`extract.rs`): a form's types are 415.

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::AppState;

pub async fn refuse_cross_site(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    match check(&state.config.public_hosts, &req) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

fn check(public_hosts: &[String], req: &Request) -> Result<(), ApiError> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    if let Some(host) = &host {
        if !names_this_server(host, public_hosts) {
            return Err(ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                "unknown_host",
                format!(
                    "Host `{}` does not name this server: use its address, `localhost`, or a \
                     name given with --public-url",
                    podq_api::escape_controls(host)
                ),
            ));
        }
    }
    let changes = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if changes {
        if let Some(origin) = req.headers().get(header::ORIGIN) {
            let same = origin
                .to_str()
                .ok()
                .and_then(origin_authority)
                .is_some_and(|authority| {
                    host.as_deref()
                        .is_some_and(|h| h.eq_ignore_ascii_case(authority))
                });
            if !same {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "cross_origin",
                    "a page of another site cannot change anything here: the request's Origin \
                     is not this server",
                ));
            }
        }
    }
    Ok(())
}

/// `host[:port]` of an `Origin` (`scheme://host[:port]`); None for `null` and the malformed.
fn origin_authority(origin: &str) -> Option<&str> {
    let (scheme, rest) = origin.split_once("://")?;
    (matches!(scheme, "http" | "https") && !rest.is_empty() && !rest.contains('/')).then_some(rest)
}

/// Whether `host` (a `Host` header: `name[:port]`) names this server.
pub fn names_this_server(host: &str, public_hosts: &[String]) -> bool {
    let name = host_name(host).to_ascii_lowercase();
    // A single label is no site's domain, so no page can rebind it; an empty one is no name.
    let single_label = !name.is_empty() && !name.contains('.');
    name.parse::<std::net::IpAddr>().is_ok()
        || single_label
        || name.ends_with(".localhost")
        || public_hosts.iter().any(|p| p.eq_ignore_ascii_case(&name))
}

/// The name of `name[:port]` or `[v6]:port`, without brackets or port.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_that_name_this_server() {
        let public = vec!["podq.lab.example".to_owned()];
        for (host, named) in [
            ("127.0.0.1:8080", true),
            ("localhost:8080", true),
            ("LOCALHOST", true),
            ("[::1]:8080", true),
            ("10.1.2.3", true),
            ("podq.lab.example:443", true),
            ("evil.example:8080", false),
            ("podq.lab.example.evil.example", false),
            ("localhost.evil.example", false),
            ("podq", true),
            ("", false),
        ] {
            assert_eq!(names_this_server(host, &public), named, "{host}");
        }
    }

    #[test]
    fn origins_are_read_strictly() {
        assert_eq!(
            origin_authority("http://127.0.0.1:8080"),
            Some("127.0.0.1:8080")
        );
        assert_eq!(origin_authority("https://podq.lab"), Some("podq.lab"));
        assert_eq!(origin_authority("null"), None);
        assert_eq!(origin_authority("file://"), None);
        assert_eq!(origin_authority("http://a/b"), None);
    }
}
