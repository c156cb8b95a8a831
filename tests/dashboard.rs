//! The dashboard in a real browser: a real `podq server` process on port 0, a group submitted
//! over HTTP, and headless Chromium loading the page, running its JavaScript against the live
//! API and printing the resulting DOM (and a screenshot).
//!
//! Needs Chromium at `/usr/bin/chromium` (Debian: `apt-get install -y chromium`), or another
//! binary named by `PODQ_TEST_CHROMIUM`. Without it the test fails: it never passes silently.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const CHROMIUM: &str = "/usr/bin/chromium";
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(60);
const BROWSER_TIMEOUT: Duration = Duration::from_secs(60);
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);
/// Where a copy of the screenshot goes, for people to look at.
const SCREENSHOT_COPY: &str = "/tmp/podq-dashboard.png";

// ---------------------------------------------------------------------------------------------
// processes

/// A child process in its own process group, killed with the whole group when dropped
/// (Chromium forks helpers; the server is killed the same way).
struct Guard {
    child: Child,
    name: &'static str,
}

impl Guard {
    fn spawn(mut command: Command, name: &'static str) -> Guard {
        command.process_group(0);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Guard { child, name }
    }

    fn kill(&mut self) {
        let pid = self.child.id();
        // The group id is the child's pid (process_group(0)); the group holds only processes
        // this test started.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to exit; kills it and panics after `timeout`.
    fn wait_with_deadline(&mut self, timeout: Duration, log: &Path) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) => {}
                Err(e) => panic!("waiting for {}: {e}", self.name),
            }
            if Instant::now() >= deadline {
                self.kill();
                panic!(
                    "{} did not finish within {timeout:?}; killed it. Its stderr:\n{}",
                    self.name,
                    tail(log)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Starts `podq server` on an ephemeral port and returns it with its base URL, once it has
/// printed `podq server listening on http://...`.
fn start_server(dir: &Path) -> (Guard, String) {
    let log = dir.join("server.stderr");
    let mut command = Command::new(env!("CARGO_BIN_EXE_podq"));
    command
        .arg("server")
        .args(["--listen", "127.0.0.1:0"])
        .arg("--db")
        .arg(dir.join("podq.db"))
        .arg("--experiments")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments"))
        .arg("--bucket")
        .arg(dir.join("bucket"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(File::create(&log).unwrap());
    // Settings from the environment of whoever runs the tests must not leak in (a token
    // would make the anonymous submit below fail).
    for (key, _) in std::env::vars() {
        if key.starts_with("PODQ_") {
            command.env_remove(key);
        }
    }
    let mut server = Guard::spawn(command, "podq server");

    let stdout = server.child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Keeps draining stdout for the life of the server so it never blocks on a full pipe.
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // After the listening line nobody receives any more: keep reading anyway.
            let _ = tx.send(line);
        }
    });

    let deadline = Instant::now() + SERVER_START_TIMEOUT;
    let prefix = "podq server listening on ";
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(url) = line.trim().strip_prefix(prefix) {
                    return (server, url.trim_end_matches('/').to_owned());
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "podq server printed no `{prefix}...` line within {SERVER_START_TIMEOUT:?}; stderr:\n{}",
                tail(&log)
            ),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = server.child.wait().ok();
                panic!(
                    "podq server exited ({status:?}) before it listened; stderr:\n{}",
                    tail(&log)
                );
            }
        }
    }
}

fn chromium_path() -> PathBuf {
    let path = std::env::var_os("PODQ_TEST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(CHROMIUM));
    assert!(
        path.is_file(),
        "Chromium not found at {}. The dashboard test drives a real headless browser: install \
         it with `apt-get install -y chromium` (Debian/Ubuntu), or point PODQ_TEST_CHROMIUM at \
         a Chromium/Chrome binary.",
        path.display()
    );
    path
}

/// Runs headless Chromium on `url` with `extra` arguments; returns what it printed on stdout.
fn chromium(dir: &Path, label: &str, url: &str, extra: &[String]) -> String {
    let profile = dir.join(format!("chromium-profile-{label}"));
    std::fs::create_dir_all(&profile).unwrap();
    let stdout_path = dir.join(format!("chromium-{label}.stdout"));
    let stderr_path = dir.join(format!("chromium-{label}.stderr"));
    let mut command = Command::new(chromium_path());
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(File::create(&stdout_path).unwrap())
        .stderr(File::create(&stderr_path).unwrap());
    let mut browser = Guard::spawn(command, "chromium");
    let status = browser.wait_with_deadline(BROWSER_TIMEOUT, &stderr_path);
    assert!(
        status.success(),
        "chromium ({label}) exited with {status}; stderr:\n{}",
        tail(&stderr_path)
    );
    std::fs::read_to_string(&stdout_path).unwrap()
}

// ---------------------------------------------------------------------------------------------
// a small reader for the DOM Chromium serializes (well-formed: every non-void element closed)

#[derive(Debug)]
struct Tag {
    name: String,
    attrs: Vec<(String, String)>,
    /// Byte offset of `<` and just after `>` of the start tag.
    start: usize,
    open_end: usize,
}

impl Tag {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn decode(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// Every start tag of `html`, in order (offsets relative to `html`).
fn start_tags(html: &str) -> Vec<Tag> {
    let bytes = html.as_bytes();
    let mut tags = Vec::new();
    let mut i = 0;
    while let Some(off) = html[i..].find('<') {
        let at = i + off;
        let rest = &html[at..];
        if rest.starts_with("<!--") {
            i = at + rest.find("-->").map_or(rest.len(), |e| e + 3);
            continue;
        }
        if rest.starts_with("</") || rest.starts_with("<!") {
            i = at + rest.find('>').map_or(rest.len(), |e| e + 1);
            continue;
        }
        // name
        let mut j = at + 1;
        while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'-') {
            j += 1;
        }
        let name = html[at + 1..j].to_ascii_lowercase();
        if name.is_empty() {
            i = at + 1;
            continue;
        }
        // attributes
        let mut attrs = Vec::new();
        loop {
            while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                j += 1;
            }
            if j >= bytes.len() {
                break;
            }
            if bytes[j] == b'>' {
                j += 1;
                break;
            }
            if bytes[j] == b'/' {
                j += 1;
                continue;
            }
            let key_start = j;
            while j < bytes.len()
                && !matches!(bytes[j], b'=' | b'>' | b'/')
                && !bytes[j].is_ascii_whitespace()
            {
                j += 1;
            }
            let key = html[key_start..j].to_ascii_lowercase();
            let mut value = String::new();
            if j < bytes.len() && bytes[j] == b'=' {
                j += 1;
                if j < bytes.len() && (bytes[j] == b'"' || bytes[j] == b'\'') {
                    let quote = bytes[j] as char;
                    let end = html[j + 1..].find(quote).map_or(html.len(), |e| j + 1 + e);
                    value = decode(&html[j + 1..end]);
                    j = (end + 1).min(html.len());
                } else {
                    let v_start = j;
                    while j < bytes.len() && bytes[j] != b'>' && !bytes[j].is_ascii_whitespace() {
                        j += 1;
                    }
                    value = decode(&html[v_start..j]);
                }
            }
            attrs.push((key, value));
        }
        let raw_text = name == "script" || name == "style";
        tags.push(Tag {
            name: name.clone(),
            attrs,
            start: at,
            open_end: j,
        });
        i = j;
        if raw_text {
            let close = format!("</{name}");
            i = html[j..].find(&close).map_or(html.len(), |e| j + e);
        }
    }
    tags
}

const VOID: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
    "wbr",
];

/// The markup inside `tag` (between its start tag and its matching end tag).
fn inner<'a>(html: &'a str, tag: &Tag) -> &'a str {
    if VOID.contains(&tag.name.as_str()) {
        return "";
    }
    let open = format!("<{}", tag.name);
    let close = format!("</{}>", tag.name);
    let mut depth = 1;
    let mut i = tag.open_end;
    loop {
        let next_close = html[i..].find(&close).map(|e| i + e);
        let next_open = html[i..]
            .match_indices(&open)
            .map(|(e, _)| i + e)
            .find(|&p| {
                html.as_bytes()
                    .get(p + open.len())
                    .is_some_and(|b| b.is_ascii_whitespace() || *b == b'>' || *b == b'/')
            });
        let Some(close_at) = next_close else {
            return &html[tag.open_end..];
        };
        match next_open {
            Some(open_at) if open_at < close_at => {
                depth += 1;
                i = open_at + open.len();
            }
            _ => {
                depth -= 1;
                if depth == 0 {
                    return &html[tag.open_end..close_at];
                }
                i = close_at + close.len();
            }
        }
    }
}

/// Text content of a fragment: tags removed, entities decoded, whitespace collapsed.
fn text(fragment: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in fragment.chars() {
        match c {
            '<' => {
                in_tag = true;
                out.push(' ');
            }
            '>' if in_tag => in_tag = false,
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    decode(&out)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

struct Dom {
    html: String,
    tags: Vec<Tag>,
}

impl Dom {
    fn parse(html: String) -> Dom {
        assert!(
            html.contains("</html>"),
            "chromium printed no DOM; stdout was:\n{html}"
        );
        let tags = start_tags(&html);
        Dom { html, tags }
    }

    fn by_id(&self, id: &str) -> &Tag {
        self.tags
            .iter()
            .find(|t| t.attr("id") == Some(id))
            .unwrap_or_else(|| panic!("no element with id `{id}` in the DOM:\n{}", self.html))
    }

    fn inner(&self, tag: &Tag) -> &str {
        inner(&self.html, tag)
    }

    fn text(&self, tag: &Tag) -> String {
        text(self.inner(tag))
    }

    /// The tags inside `outer` (by position).
    fn within<'a>(&'a self, outer: &'a Tag) -> impl Iterator<Item = &'a Tag> + 'a {
        let body = self.inner(outer);
        let from = outer.open_end;
        let to = from + body.len();
        self.tags
            .iter()
            .filter(move |t| t.start >= from && t.start < to)
    }
}

// ---------------------------------------------------------------------------------------------

#[test]
fn dashboard_renders_a_submitted_group_in_a_real_browser() {
    // Fail first, and clearly, when there is no browser.
    chromium_path();

    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = start_server(dir.path());

    // Submit one group over the real API.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let submitted: Value = runtime.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(HTTP_TIMEOUT)
            .build()
            .unwrap();
        let resp = client
            .post(format!("{base}/api/v1/jobs"))
            .json(&json!({ "group": "exp07-precision" }))
            .send()
            .await
            .expect("POST /api/v1/jobs");
        let status = resp.status();
        let body = resp.text().await.unwrap();
        assert!(status.is_success(), "submit answered {status}: {body}");
        serde_json::from_str(&body).unwrap()
    });
    let mut job_ids: BTreeSet<String> = BTreeSet::new();
    let mut exp07a = None;
    for key in ["created", "linked"] {
        for job in submitted[key].as_array().unwrap() {
            let id = job["job_id"].as_str().unwrap().to_owned();
            if job["experiment"] == "exp07a" {
                exp07a = Some(id.clone());
            }
            job_ids.insert(id);
        }
    }
    assert_eq!(
        job_ids.len(),
        3,
        "exp07-precision has 3 experiments: {submitted}"
    );
    let exp07a = exp07a.expect("exp07a was submitted");

    // Three browser runs at once: the page's DOM, the page with a job's detail panel open
    // (from the URL hash), and a screenshot.
    let page = format!("{base}/");
    let detail_page = format!("{base}/#job={exp07a}");
    let screenshot = dir.path().join("dashboard.png");
    let (main_dom, detail_dom) = std::thread::scope(|s| {
        let main = s.spawn(|| chromium(dir.path(), "main", &page, &["--dump-dom".into()]));
        let detail =
            s.spawn(|| chromium(dir.path(), "detail", &detail_page, &["--dump-dom".into()]));
        let shot = s.spawn(|| {
            chromium(
                dir.path(),
                "screenshot",
                &page,
                &[
                    format!("--screenshot={}", screenshot.display()),
                    "--window-size=1280,800".into(),
                ],
            )
        });
        shot.join().expect("screenshot run");
        (
            main.join().expect("dump-dom run"),
            detail.join().expect("detail dump-dom run"),
        )
    });

    // ----- the main page -----
    let dom = Dom::parse(main_dom);
    let body = dom.tags.iter().find(|t| t.name == "body").unwrap();
    assert_eq!(
        body.attr("data-status"),
        Some("ok"),
        "the page did not finish a successful refresh"
    );
    assert!(
        dom.by_id("conn-banner").attr("hidden").is_some(),
        "the `server unreachable` banner shows"
    );

    let table = dom.by_id("jobs-table");
    let rows: Vec<&Tag> = dom
        .within(table)
        .filter(|t| t.name == "tr" && t.attr("data-job-id").is_some())
        .collect();
    assert_eq!(rows.len(), 3, "jobs table rows:\n{}", dom.inner(table));
    let mut experiments = BTreeSet::new();
    for row in &rows {
        let id = row.attr("data-job-id").unwrap();
        assert!(job_ids.contains(id), "unexpected job {id} in the table");
        assert_eq!(row.attr("data-state"), Some("queued"), "row {id}");
        let row_text = dom.text(row);
        let experiment = row.attr("data-experiment").unwrap().to_owned();
        assert!(row_text.contains(&experiment), "row text `{row_text}`");
        assert!(
            row_text.contains("exp07-precision"),
            "row text `{row_text}`"
        );
        let badge = dom
            .within(row)
            .find(|t| t.attr("data-badge").is_some())
            .expect("a state badge in the row");
        assert_eq!(dom.text(badge), "queued");
        experiments.insert(experiment);
    }
    assert_eq!(
        experiments,
        BTreeSet::from([
            "exp07a".to_owned(),
            "exp07b".to_owned(),
            "exp07c".to_owned()
        ])
    );

    let counts = dom.by_id("state-counts");
    let count_of = |state: &str| -> (String, String) {
        let tag = dom
            .within(counts)
            .find(|t| t.attr("data-state") == Some(state))
            .unwrap_or_else(|| panic!("no `{state}` count in:\n{}", dom.inner(counts)));
        (tag.attr("data-count").unwrap().to_owned(), dom.text(tag))
    };
    let (queued, queued_text) = count_of("queued");
    assert_eq!(queued, "3");
    assert_eq!(queued_text, "3 queued");
    for state in [
        "running",
        "leased",
        "succeeded",
        "failed",
        "cancelled",
        "held",
    ] {
        assert_eq!(count_of(state).0, "0", "{state} count");
    }

    let group_row = dom
        .within(dom.by_id("groups-table"))
        .find(|t| t.name == "tr" && t.attr("data-group") == Some("exp07-precision"))
        .expect("a groups table row for exp07-precision");
    let group_text = dom.text(group_row);
    assert!(group_text.contains("3 queued"), "group row `{group_text}`");

    let queue_hours = dom.text(dom.by_id("queue-hours"));
    assert!(
        queue_hours.chars().any(|c| c.is_ascii_digit()),
        "queue pod-hours shown: `{queue_hours}`"
    );

    // ----- the detail panel, opened from the URL -----
    let dom = Dom::parse(detail_dom);
    let panel = dom.by_id("job-detail");
    assert!(panel.attr("hidden").is_none(), "the detail panel is hidden");
    assert_eq!(panel.attr("data-job-id"), Some(exp07a.as_str()));
    assert_eq!(panel.attr("data-state"), Some("queued"));
    assert_eq!(dom.text(dom.by_id("detail-experiment")), "exp07a");
    assert!(dom.by_id("detail-error").attr("hidden").is_some());
    let events: Vec<&Tag> = dom
        .within(dom.by_id("detail-events"))
        .filter(|t| t.name == "li" && t.attr("data-kind").is_some())
        .collect();
    assert!(
        events
            .iter()
            .any(|t| t.attr("data-kind") == Some("submitted")),
        "the timeline shows the submission: {}",
        dom.inner(dom.by_id("detail-events"))
    );
    let charts: Vec<&str> = dom
        .within(dom.by_id("detail-charts"))
        .filter(|t| t.name == "svg")
        .filter_map(|t| t.attr("data-metric"))
        .collect();
    assert_eq!(
        charts,
        [
            "train/lm_loss",
            "train/exact_accuracy",
            "eval/exact_accuracy"
        ]
    );
    let attempts = dom.text(dom.by_id("detail-attempts"));
    assert!(
        attempts.contains("No attempts yet"),
        "attempts: `{attempts}`"
    );

    // ----- the screenshot -----
    let png = std::fs::read(&screenshot)
        .unwrap_or_else(|e| panic!("no screenshot at {}: {e}", screenshot.display()));
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "the screenshot is not a PNG"
    );
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((width, height), (1280, 800), "screenshot size");
    // A blank 1280x800 page compresses to a few kilobytes; the rendered dashboard does not.
    assert!(
        png.len() > 30_000,
        "the screenshot is only {} bytes: the page looks empty",
        png.len()
    );
    let _ = std::fs::copy(&screenshot, SCREENSHOT_COPY);
}
