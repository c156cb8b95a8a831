//! What keeping the dashboard current costs on the network (`cargo bench --bench
//! dashboard_traffic`, about 5 minutes): the page's traffic per minute with one running job,
//! live through the event stream (server-sent events) against the old full refresh every 2 s
//! (`?poll=2000`, which the page still honours), measured in the same run on the same server
//! and job.
//!
//! A real `podq server` and worker (the sim trainer on a simulated 2-host pod, one job of the
//! suite running for the whole measurement) and a headless Chromium driven over CDP
//! (`tests/browser`). Each mode gets a fresh tab, loads, settles, and is then measured for
//! 60 s, twice: on the overview, and with the running job's panel open (`#job=<id>`).
//!
//! Two independent measurements of the same bytes:
//! - CDP's Network domain: per request, `loadingFinished.encodedDataLength` once it finished,
//!   else the sum of its `dataReceived.encodedDataLength` so far (the event stream never
//!   finishes), taken at the start and the end of the window;
//! - a byte-counting TCP relay between the browser and the server (each mode has its own),
//!   both directions, headers included.
//!
//! Nothing here is a pass/fail check: the figures are printed for the README.

#[path = "../tests/browser/mod.rs"]
mod browser;
#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use browser::{Browser, Page};
use chromiumoxide::cdp::browser_protocol::network::{
    EnableParams, EventDataReceived, EventLoadingFinished, EventRequestWillBeSent,
};
use common::{eventually, Server};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const WINDOW: Duration = Duration::from_secs(60);
/// Time after the page showed its data before the window opens: its first loads are done.
const SETTLE: Duration = Duration::from_secs(5);
const SHOW: Duration = Duration::from_secs(60);

/// A TCP relay to `target` that counts the bytes it carries each way.
struct Relay {
    port: u16,
    up: Arc<AtomicU64>,
    down: Arc<AtomicU64>,
}

impl Relay {
    async fn start(target: std::net::SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicU64::new(0));
        let down = Arc::new(AtomicU64::new(0));
        let (u, d) = (up.clone(), down.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(target).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pipe(cr, sw, u.clone()));
                tokio::spawn(pipe(sr, cw, d.clone()));
            }
        });
        Relay { port, up, down }
    }

    fn bytes(&self) -> (u64, u64) {
        (
            self.up.load(Ordering::Relaxed),
            self.down.load(Ordering::Relaxed),
        )
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    count: Arc<AtomicU64>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                count.fetch_add(n as u64, Ordering::Relaxed);
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown().await;
}

/// Bytes received per request, as CDP reports them.
#[derive(Default)]
struct Requests {
    kind: HashMap<String, &'static str>,
    streamed: HashMap<String, u64>,
    finished: HashMap<String, u64>,
}

impl Requests {
    /// Bytes received so far, per kind of request.
    fn totals(&self) -> BTreeMap<&'static str, (u64, u64)> {
        let mut out: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
        for (id, kind) in &self.kind {
            let bytes = self
                .finished
                .get(id)
                .copied()
                .unwrap_or_else(|| self.streamed.get(id).copied().unwrap_or(0));
            let entry = out.entry(kind).or_default();
            entry.0 += bytes;
            entry.1 += 1;
        }
        out
    }
}

fn kind_of(url: &str) -> &'static str {
    let path = url
        .split_once("://")
        .map(|(_, rest)| rest.split_once('/').map_or("/", |(_, p)| p))
        .unwrap_or(url);
    let path = format!("/{}", path.trim_start_matches('/'));
    let api = path.strip_prefix("/api/v1").unwrap_or("");
    if api.starts_with("/events/stream") {
        "event stream"
    } else if api.starts_with("/status") {
        "GET /status"
    } else if api.starts_with("/groups") {
        "GET /groups"
    } else if api.starts_with("/plan") {
        "GET /plan"
    } else if api.starts_with("/jobs?") || api == "/jobs" {
        "GET /jobs (list)"
    } else if api.starts_with("/jobs/") {
        "GET /jobs/{id}/..."
    } else if api.is_empty() {
        "page and assets"
    } else {
        "other API"
    }
}

/// Follows the tab's Network events into `requests`.
async fn watch_network(page: &Page, requests: Arc<Mutex<Requests>>) {
    page.page
        .execute(EnableParams::default())
        .await
        .expect("Network.enable");
    let mut sent = page
        .page
        .event_listener::<EventRequestWillBeSent>()
        .await
        .unwrap();
    let mut data = page
        .page
        .event_listener::<EventDataReceived>()
        .await
        .unwrap();
    let mut done = page
        .page
        .event_listener::<EventLoadingFinished>()
        .await
        .unwrap();
    let r = requests.clone();
    tokio::spawn(async move {
        while let Some(e) = sent.next().await {
            r.lock()
                .unwrap()
                .kind
                .insert(e.request_id.inner().clone(), kind_of(&e.request.url));
        }
    });
    let r = requests.clone();
    tokio::spawn(async move {
        while let Some(e) = data.next().await {
            *r.lock()
                .unwrap()
                .streamed
                .entry(e.request_id.inner().clone())
                .or_default() += e.encoded_data_length.max(0) as u64;
        }
    });
    tokio::spawn(async move {
        while let Some(e) = done.next().await {
            requests.lock().unwrap().finished.insert(
                e.request_id.inner().clone(),
                e.encoded_data_length.max(0.0) as u64,
            );
        }
    });
}

struct Measured {
    label: String,
    cdp: BTreeMap<&'static str, (u64, u64)>,
    relay_down: u64,
    relay_up: u64,
    seconds: f64,
}

impl Measured {
    fn cdp_total(&self) -> u64 {
        self.cdp.values().map(|(b, _)| b).sum()
    }
    fn per_minute(&self, bytes: u64) -> f64 {
        bytes as f64 * 60.0 / self.seconds
    }
}

async fn measure(
    browser: &Browser,
    server_addr: std::net::SocketAddr,
    label: &str,
    query: &str,
    hash: &str,
    job: &str,
) -> Measured {
    let relay = Relay::start(server_addr).await;
    let page = browser.blank().await;
    let requests = Arc::new(Mutex::new(Requests::default()));
    watch_network(&page, requests.clone()).await;
    page.goto(&format!("http://127.0.0.1:{}/{query}{hash}", relay.port))
        .await;
    let row = format!(
        "document.querySelector('#jobs-table tr[data-job-id=\"{job}\"]')?.dataset.state === 'running'"
    );
    page.wait_for::<bool>(SHOW, "the running job's row", &row)
        .await;
    if query.is_empty() {
        page.wait_for::<bool>(
            SHOW,
            "the event stream",
            "document.getElementById('conn').dataset.mode === 'live'",
        )
        .await;
    }
    if !hash.is_empty() {
        page.wait_for::<bool>(
            SHOW,
            "the job's panel",
            "!!document.querySelector('#detail-attempts tbody tr[data-attempt]')",
        )
        .await;
    }
    tokio::time::sleep(SETTLE).await;
    let (cdp0, up0, down0) = {
        let r = requests.lock().unwrap();
        let (u, d) = relay.bytes();
        (r.totals(), u, d)
    };
    let start = Instant::now();
    // The measurement window itself: a fixed span of time is what is measured.
    tokio::time::sleep(WINDOW).await;
    let seconds = start.elapsed().as_secs_f64();
    let (cdp1, up1, down1) = {
        let r = requests.lock().unwrap();
        let (u, d) = relay.bytes();
        (r.totals(), u, d)
    };
    let still_running: bool = page.eval(&row).await;
    assert!(still_running, "the job stopped running during the window");
    let _ = page.page.clone().close().await;
    let mut cdp = BTreeMap::new();
    for (kind, (bytes, n)) in cdp1 {
        let (b0, n0) = cdp0.get(kind).copied().unwrap_or((0, 0));
        if bytes > b0 || n > n0 {
            cdp.insert(kind, (bytes - b0, n - n0));
        }
    }
    Measured {
        label: label.to_owned(),
        cdp,
        relay_down: down1 - down0,
        relay_up: up1 - up0,
        seconds,
    }
}

fn kb(bytes: f64) -> String {
    format!("{:.1} kB", bytes / 1000.0)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    browser::chromium_path();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}

async fn run() {
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    // Long enough to stay running through all four windows (8,138 steps in 15 minutes).
    let _worker = server.worker("pod-t", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=900"]);
    server.wait_state(&id, "running", SHOW).await;
    eventually(SHOW, "the job's first metrics", || async {
        let job = server.job(&id).await;
        (job["last_step"].as_i64().unwrap_or(0) > 0).then_some(())
    })
    .await;
    let addr: std::net::SocketAddr = server.url.trim_start_matches("http://").parse().unwrap();
    let browser = Browser::launch().await;
    let panel = format!("#job={id}");
    let mut results = Vec::new();
    for (label, query, hash) in [
        ("overview, event stream", "", ""),
        ("overview, polling every 2 s", "?poll=2000", ""),
        ("job panel open, event stream", "", panel.as_str()),
        (
            "job panel open, polling every 2 s",
            "?poll=2000",
            panel.as_str(),
        ),
    ] {
        eprintln!("measuring: {label} ({}s)", WINDOW.as_secs());
        results.push(measure(&browser, addr, label, query, hash, &id).await);
    }
    browser.close().await;
    let job: Value = server.job(&id).await;

    println!(
        "\ndashboard traffic per minute, one running job ({} at step {}; the sim trainer reports \
         every 10 steps, about {:.0} steps/s; the worker sends metrics every 0.3 s)\n",
        job["experiment"].as_str().unwrap_or("?"),
        job["last_step"],
        8138.0 / 900.0
    );
    println!(
        "{:<36} {:>14} {:>14} {:>12}",
        "mode", "CDP received", "relay down", "relay up"
    );
    for m in &results {
        println!(
            "{:<36} {:>14} {:>14} {:>12}",
            m.label,
            kb(m.per_minute(m.cdp_total())),
            kb(m.per_minute(m.relay_down)),
            kb(m.per_minute(m.relay_up)),
        );
    }
    println!();
    for pair in results.chunks(2) {
        let (sse, poll) = (&pair[0], &pair[1]);
        println!(
            "{} / {}: {:.1}x less received with the stream (CDP), {:.1}x (relay, both ways)",
            poll.label,
            sse.label,
            poll.per_minute(poll.cdp_total()) / sse.per_minute(sse.cdp_total()).max(1.0),
            poll.per_minute(poll.relay_down + poll.relay_up)
                / sse.per_minute(sse.relay_down + sse.relay_up).max(1.0),
        );
    }
    println!("\nby request kind (CDP, bytes received per minute, requests per minute):");
    for m in &results {
        println!("  {}:", m.label);
        for (kind, (bytes, n)) in &m.cdp {
            println!(
                "    {:<22} {:>10} {:>6.0} req",
                kind,
                kb(m.per_minute(*bytes)),
                *n as f64 * 60.0 / m.seconds
            );
        }
    }
}
