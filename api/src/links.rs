//! Links from a job to where its run lives elsewhere (its W&B run, say): reported by the
//! trainer (`PODQ {"event":"link","name":"wandb","url":"https://..."}`), sent by the worker
//! (`POST /leases/{id}/links`), shown with the job. The newest URL of each name wins, across
//! attempts.

use serde::{Deserialize, Serialize};

/// A name is 1 to this many letters, digits, `_`, `.` or `-`, starting with a letter.
pub const MAX_LINK_NAME: usize = 32;
/// A URL is at most this many bytes.
pub const MAX_LINK_URL: usize = 2048;
/// A job keeps at most this many names; a new name beyond them is refused.
pub const MAX_LINKS_PER_JOB: usize = 16;

/// One link: `GET /jobs/{id}` lists them by name.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobLink {
    /// E.g. `wandb`: 1 to 32 letters, digits, `_`, `.` or `-`, starting with a letter.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z][A-Za-z0-9_.-]{0,31}$")
    )]
    pub name: String,
    /// `http://` or `https://`, at most 2048 bytes, without spaces or control characters.
    #[cfg_attr(feature = "openapi", schema(max_length = 2048))]
    pub url: String,
}

/// `POST /api/v1/leases/{lease_id}/links`: links the trainer reported in this attempt.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LinksBatch {
    pub links: Vec<JobLink>,
}

impl JobLink {
    /// Why this link is refused, if it is: the rules of the trainer SDK's `report_link`,
    /// checked again by the worker (which logs and skips a bad line) and the server (400).
    pub fn problem(&self) -> Option<String> {
        let name = &self.name;
        let name_ok = name.len() <= MAX_LINK_NAME
            && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !name_ok {
            return Some(format!(
                "link name {:?} is not 1 to {MAX_LINK_NAME} letters, digits, `_`, `.` or `-` \
                 starting with a letter",
                cut(name, 60)
            ));
        }
        let url = &self.url;
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"));
        if rest.is_none_or(str::is_empty) {
            return Some(format!(
                "the url of link {name}, {:?}, is not http:// or https://",
                cut(url, 80)
            ));
        }
        if url.len() > MAX_LINK_URL {
            return Some(format!(
                "the url of link {name} is {} bytes long, more than {MAX_LINK_URL}",
                url.len()
            ));
        }
        if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Some(format!(
                "the url of link {name}, {:?}, holds a space or a control character",
                cut(url, 80)
            ));
        }
        None
    }
}

fn cut(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(name: &str, url: &str) -> JobLink {
        JobLink {
            name: name.into(),
            url: url.into(),
        }
    }

    #[test]
    fn short_names_and_http_urls_pass() {
        for (name, url) in [
            (
                "wandb",
                "https://wandb.ai/team/trm/runs/0c9e6f4a-2b1d-4c3e-9f8a-7b6c5d4e3f21",
            ),
            ("tb.run-1_x", "http://tracker.local:6006/?q=a%20b#c"),
        ] {
            assert_eq!(link(name, url).problem(), None, "{name} {url}");
        }
        let longest = format!("https://e.com/{}", "x".repeat(MAX_LINK_URL - 14));
        assert_eq!(link(&"a".repeat(MAX_LINK_NAME), &longest).problem(), None);
    }

    #[test]
    fn everything_else_is_refused() {
        let long = format!("https://e.com/{}", "x".repeat(MAX_LINK_URL));
        for (name, url) in [
            ("", "https://e.com"),
            ("1wandb", "https://e.com"),
            ("my tracker", "https://e.com"),
            ("wandb\n", "https://e.com"),
            ("<b>", "https://e.com"),
            (&"a".repeat(MAX_LINK_NAME + 1), "https://e.com"),
            ("wandb", "javascript:alert(1)"),
            ("wandb", "JAVASCRIPT://x"),
            ("wandb", "ftp://e.com"),
            ("wandb", "https://"),
            ("wandb", "//e.com"),
            ("wandb", "https://e.com/a b"),
            ("wandb", "https://e.com/\u{7}"),
            ("wandb", &long),
        ] {
            assert!(link(name, url).problem().is_some(), "{name:?} {url:?}");
        }
    }
}
