//! `cargo bench --bench failover`: two `podq server` processes on one PostgreSQL database,
//! the active one killed with SIGKILL 100 times (`PODQ_BENCH_SWITCHES`) while clients keep
//! submitting. Prints how long each switch took (kill to the standby's `/readyz` answering
//! 200) and what happened to the acknowledged writes: lost (must be 0) and duplicated (must
//! be 0).
//!
//! Each client submits one experiment at a time with a fresh `Idempotency-Key`, to whichever
//! server it last reached, and on a transport error or a 5xx (a standby answers 503) retries
//! the same request, with the same key, on the other server until one acknowledges it. So a
//! submission whose answer was lost in a kill is retried, and the key must stop it from
//! becoming two jobs. At the end the database is read directly: every acknowledged job must
//! be there once, and there must be no job nobody was told about.
//!
//! PostgreSQL: `PODQ_BENCH_DATABASE_URL` (a database the bench may fill), or else a throwaway
//! cluster from `scripts/postgres-cluster`. It is a report: it exits 0 whatever it finds, 1
//! only when it could not run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};

use podq_testkit::ServerLaunch;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::Connection;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const PODQ: &str = env!("CARGO_BIN_EXE_podq");
const CLIENTS: usize = 4;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A throwaway cluster, stopped when dropped.
struct Cluster(PathBuf);

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/postgres-cluster"))
            .arg("stop")
            .arg(&self.0)
            .status();
    }
}

fn database() -> Res<(String, Option<Cluster>)> {
    if let Ok(url) = std::env::var("PODQ_BENCH_DATABASE_URL") {
        return Ok((url, None));
    }
    let dir = PathBuf::from(format!("/tmp/podq-bench-postgres-{}", std::process::id()));
    let output = Command::new(repo().join("scripts/postgres-cluster"))
        .arg("start")
        .arg(&dir)
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        return Err("scripts/postgres-cluster start failed".into());
    }
    let url = String::from_utf8(output.stdout)?.trim().to_owned();
    Ok((url, Some(Cluster(dir))))
}

fn free_port() -> Res<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

struct ServerProcess {
    port: u16,
    child: Option<Child>,
}

impl ServerProcess {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn start(&mut self, database: &str, dir: &Path) -> Res<()> {
        // Not waited for: the second server is a standby and says nothing until it leads.
        let launch = ServerLaunch::new(PODQ, dir)
            .port(self.port)
            .log_file(&format!("server-{}.log", self.port))
            .database(database)
            .experiments(repo().join("experiments"))
            .args(["--bucket", &dir.join("bucket").to_string_lossy()])
            .env("PODQ_LOG", "warn");
        self.child = Some(launch.spawn()?);
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn status_of(http: &reqwest::Client, url: &str, path: &str) -> Option<u16> {
    http.get(format!("{url}{path}"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()
        .map(|r| r.status().as_u16())
}

async fn wait_for(http: &reqwest::Client, url: &str, path: &str, want: u16) -> Res<Duration> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if status_of(http, url, path).await == Some(want) {
            return Ok(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!("{url}{path} did not answer {want} within 60 s").into())
}

#[derive(Default)]
struct Tally {
    /// Job ids the servers acknowledged, by idempotency key.
    acknowledged: BTreeMap<String, Vec<String>>,
    retries: u64,
}

/// Submits until `stop`, each submission retried on either server until acknowledged.
async fn client(urls: [String; 2], stop: Arc<AtomicBool>, tally: Arc<Mutex<Tally>>) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let mut at = 0;
    while !stop.load(Ordering::Relaxed) {
        let key = uuid::Uuid::new_v4().to_string();
        loop {
            let answer = http
                .post(format!("{}/api/v1/jobs", urls[at]))
                .header("idempotency-key", &key)
                .json(&json!({"experiments": ["exp07a"], "force": true}))
                .send()
                .await;
            let answer = match answer {
                Ok(response) if response.status().is_success() => {
                    response.json::<Value>().await.ok()
                }
                Ok(response) if response.status().is_client_error() => {
                    eprintln!("refused: {}", response.text().await.unwrap_or_default());
                    None
                }
                _ => None,
            };
            if let Some(answer) = answer {
                let ids = answer["created"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .chain(answer["linked"].as_array().into_iter().flatten())
                    .filter_map(|j| j["job_id"].as_str().map(str::to_owned))
                    .collect();
                tally.lock().unwrap().acknowledged.insert(key, ids);
                break;
            }
            tally.lock().unwrap().retries += 1;
            at = 1 - at;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index]
}

async fn run() -> Res<()> {
    let switches: usize = std::env::var("PODQ_BENCH_SWITCHES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let (url, _cluster) = database()?;
    let dir = tempfile::tempdir()?;
    let http = reqwest::Client::new();
    let mut servers = [
        ServerProcess {
            port: free_port()?,
            child: None,
        },
        ServerProcess {
            port: free_port()?,
            child: None,
        },
    ];
    servers[0].start(&url, dir.path())?;
    wait_for(&http, &servers[0].url(), "/readyz", 200).await?;
    servers[1].start(&url, dir.path())?;
    wait_for(&http, &servers[1].url(), "/readyz", 503).await?;
    println!(
        "failover: 2 servers on one PostgreSQL database, {CLIENTS} clients submitting, \
         {switches} kills of the active server"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let urls = [servers[0].url(), servers[1].url()];
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| tokio::spawn(client(urls.clone(), stop.clone(), tally.clone())))
        .collect();

    let mut active = 0;
    let mut switch_s = Vec::with_capacity(switches);
    for _ in 0..switches {
        // Let some writes land on this active server first.
        tokio::time::sleep(Duration::from_millis(300)).await;
        servers[active].kill();
        let took = wait_for(&http, &servers[1 - active].url(), "/readyz", 200).await?;
        switch_s.push(took.as_secs_f64());
        servers[active].start(&url, dir.path())?;
        wait_for(&http, &servers[active].url(), "/readyz", 503).await?;
        active = 1 - active;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await?;
    }

    let mut conn = sqlx::PgConnection::connect(&url).await?;
    let stored: Vec<String> = sqlx::query_scalar("SELECT id FROM jobs")
        .fetch_all(&mut conn)
        .await?;
    let tally = tally.lock().unwrap();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for id in &stored {
        *seen.entry(id.as_str()).or_default() += 1;
    }
    let acknowledged: Vec<&String> = tally.acknowledged.values().flatten().collect();
    let lost = acknowledged
        .iter()
        .filter(|id| !seen.contains_key(id.as_str()))
        .count();
    let told: std::collections::BTreeSet<&str> =
        acknowledged.iter().map(|id| id.as_str()).collect();
    let unacknowledged = stored
        .iter()
        .filter(|id| !told.contains(id.as_str()))
        .count();
    // A retry that made a second job shows as a job nobody was told about (the first try's
    // answer was lost), or as one job acknowledged under two keys.
    let duplicated = unacknowledged + (acknowledged.len() - told.len());
    switch_s.sort_by(f64::total_cmp);
    println!(
        "switch (kill -9 to the standby's /readyz 200): median {:.2} s, p95 {:.2} s, max {:.2} s \
         over {} switches (target: seconds)",
        percentile(&switch_s, 0.5),
        percentile(&switch_s, 0.95),
        percentile(&switch_s, 1.0),
        switch_s.len()
    );
    println!(
        "writes: {} acknowledged ({} calls retried on the other server); lost {lost} \
         (target 0), duplicated {duplicated} (target 0)",
        acknowledged.len(),
        tally.retries
    );
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("failover bench could not run: {e}");
            ExitCode::FAILURE
        }
    }
}
