//! What the throughput and fleet benches share: the real server as its own process, the
//! simulated clients (the admin and the workers), the raw SQLite baselines, /proc's CPU and
//! memory figures, and the arithmetic of the report.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::{RunningServer, ServerLaunch};
use podq_api::{JobId, Lease, LeaseId, SubmitResponse};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, QueryBuilder, Sqlite};
use tempfile::TempDir;

pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The accelerator the server submits jobs for (`ServerConfig::accelerator`).
pub const ACCELERATOR: &str = "v4-64";
/// An accelerator no job is for.
pub const OTHER_ACCELERATOR: &str = "v5litepod-16";
const HOSTS: usize = 8;
pub const ADMIN_TOKEN: &str = "bench-admin-token";
pub const WORKER_TOKEN: &str = "bench-worker-token";

/// Raw baselines: how long each loop runs.
pub const RAW_WINDOW: Duration = Duration::from_secs(2);
const RAW_BATCH: usize = 1000;

/// The metric names the simulated workers report, and the raw batched insert's series.
pub const METRIC_NAMES: [&str; 10] = [
    "train/loss",
    "train/lm_loss",
    "train/q_halt_loss",
    "train/q_continue_loss",
    "train/accuracy",
    "train/exact_accuracy",
    "train/steps",
    "train/lr",
    "train/grad_norm",
    "train/tokens_per_s",
];

/// Linux reports CPU times in /proc in USER_HZ, 100 on every architecture it runs on.
const CLOCK_TICKS_PER_S: f64 = 100.0;

pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// 1234567.8 -> "1,234,568".
pub fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 {
        out.insert(0, '-');
    }
    out
}

fn percentile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i]
}

pub fn p50_p99(v: &mut [f64]) -> (f64, f64) {
    (percentile(v, 0.50), percentile(v, 0.99))
}

// ---------------------------------------------------------------------------------------
// Raw SQLite baselines, on scratch files

fn sqlite_options(path: &Path) -> Res<SqliteConnectOptions> {
    // The server's settings (server/src/store/backend/sqlite.rs).
    Ok(SqliteConnectOptions::from_str("sqlite:")?
        .filename(path)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(5))
        .create_if_missing(true)
        .disable_statement_logging())
}

/// A read-only connection to the server's database, to verify what a run left.
pub async fn read_only(path: &Path) -> Res<SqliteConnection> {
    Ok(SqliteConnectOptions::from_str("sqlite:")?
        .filename(path)
        .read_only(true)
        .busy_timeout(Duration::from_secs(5))
        .disable_statement_logging()
        .connect()
        .await?)
}

/// Finished attempts in the database, and how many were recorded as running.
pub async fn attempts_running(db: &Path) -> Res<(i64, i64)> {
    let mut conn = read_only(db).await?;
    let counts: (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(running_at) FROM attempts WHERE ended_at IS NOT NULL",
    )
    .fetch_one(&mut conn)
    .await?;
    conn.close().await?;
    Ok(counts)
}

/// Raw durable commits: one single-row INSERT per (implicit) transaction, in a loop.
pub async fn raw_commits_per_s() -> Res<f64> {
    let dir = tempfile::tempdir()?;
    let mut conn = sqlite_options(&dir.path().join("raw.db"))?
        .connect()
        .await?;
    sqlx::query(
        "CREATE TABLE scratch (id INTEGER PRIMARY KEY, at INTEGER NOT NULL, payload TEXT NOT NULL)",
    )
    .execute(&mut conn)
    .await?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < RAW_WINDOW {
        sqlx::query("INSERT INTO scratch (at, payload) VALUES (?, ?)")
            .bind(n as i64)
            .bind("a row about the size of an event message")
            .execute(&mut conn)
            .await?;
        n += 1;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    conn.close().await?;
    Ok(rate)
}

/// Raw batched insert: 1,000 rows per transaction, one multi-row INSERT with the server's
/// upsert clause, into a table shaped like `metric_points`.
pub async fn raw_batched_points_per_s() -> Res<f64> {
    let dir = tempfile::tempdir()?;
    let mut conn = sqlite_options(&dir.path().join("raw-points.db"))?
        .connect()
        .await?;
    sqlx::query(
        "CREATE TABLE points (series_id INTEGER NOT NULL, step INTEGER NOT NULL, \
         value REAL NOT NULL, attempt INTEGER NOT NULL, PRIMARY KEY (series_id, step)) \
         WITHOUT ROWID",
    )
    .execute(&mut conn)
    .await?;
    let series: Vec<i64> = (1..=METRIC_NAMES.len() as i64).collect();
    let steps_per_batch = (RAW_BATCH / series.len()) as i64;
    let start = Instant::now();
    let mut points = 0u64;
    let mut step0 = 0i64;
    while start.elapsed() < RAW_WINDOW {
        let rows: Vec<(i64, i64, f64)> = (step0..step0 + steps_per_batch)
            .flat_map(|step| {
                series
                    .iter()
                    .enumerate()
                    .map(move |(i, id)| (*id, step, value(step, i)))
            })
            .collect();
        sqlx::query("BEGIN IMMEDIATE").execute(&mut conn).await?;
        let mut insert =
            QueryBuilder::<Sqlite>::new("INSERT INTO points (series_id, step, value, attempt) ");
        insert.push_values(&rows, |mut row, (series_id, step, value)| {
            row.push_bind(*series_id)
                .push_bind(*step)
                .push_bind(*value)
                .push_bind(1i64);
        });
        insert.push(
            " ON CONFLICT (series_id, step) DO UPDATE SET value = excluded.value, \
             attempt = excluded.attempt",
        );
        insert.build().execute(&mut conn).await?;
        sqlx::query("COMMIT").execute(&mut conn).await?;
        points += rows.len() as u64;
        step0 += steps_per_batch;
    }
    let rate = points as f64 / start.elapsed().as_secs_f64();
    conn.close().await?;
    Ok(rate)
}

fn value(step: i64, i: usize) -> f64 {
    1.0 / (1.0 + step as f64 * 0.001) + i as f64 * 0.01
}

// ---------------------------------------------------------------------------------------
// The real server, as its own process

pub struct ServerProc {
    running: RunningServer,
    pub pid: u32,
    /// `http://127.0.0.1:<port>/api/v1`
    pub base: String,
    pub db: PathBuf,
    dir: TempDir,
}

impl ServerProc {
    /// `podq server` (the binary `podq`) on port 0 with a fresh database, as a user runs it
    /// (default settings, default logging, both tokens set).
    pub async fn start(podq: &str) -> Res<ServerProc> {
        ServerProc::start_on(podq, None).await
    }

    /// As `start`, on the PostgreSQL database `database` when given.
    pub async fn start_on(podq: &str, database: Option<String>) -> Res<ServerProc> {
        let dir = tempfile::tempdir()?;
        let mut launch = ServerLaunch::new(podq, dir.path())
            .experiments(crate::repo().join("experiments"))
            .args(["--bucket", "gs://bench"])
            .tokens(ADMIN_TOKEN, WORKER_TOKEN);
        if let Some(url) = &database {
            launch = launch.database(url);
        }
        let running = tokio::task::spawn_blocking(move || launch.start()).await??;
        Ok(ServerProc {
            pid: running.pid(),
            base: running.base(),
            db: running.db(),
            running,
            dir,
        })
    }

    /// User + system CPU seconds the server has used so far.
    pub fn cpu_s(&self) -> Res<f64> {
        Ok(crate::proc_stats::cpu_time(self.pid)?.as_secs_f64())
    }

    /// (VmRSS, VmHWM) in kB.
    pub fn rss_kb(&self) -> Res<(u64, u64)> {
        Ok(self.running.rss_kb()?)
    }

    /// Sizes of the database file and of its WAL.
    pub fn db_bytes(&self) -> (u64, u64) {
        let size = |f: &str| std::fs::metadata(self.dir.path().join(f)).map_or(0, |m| m.len());
        (size("podq.db"), size("podq.db-wal"))
    }

    /// SIGTERM, then SIGKILL if it has not stopped within 5 s.
    pub async fn stop(self) {
        let mut running = self.running;
        let _ =
            tokio::task::spawn_blocking(move || running.terminate(Duration::from_secs(5))).await;
    }
}

/// utime + stime of a /proc stat file, in seconds.
pub fn cpu_s_of(path: &str) -> Res<f64> {
    let stat = std::fs::read_to_string(path)?;
    // Fields after the command name (which may hold spaces) start at field 3, `state`;
    // utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').ok_or("unreadable stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11).ok_or("short stat")?.parse()?;
    let stime: f64 = fields.get(12).ok_or("short stat")?.parse()?;
    Ok((utime + stime) / CLOCK_TICKS_PER_S)
}

// ---------------------------------------------------------------------------------------
// HTTP clients

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(4)
        .tcp_nodelay(true)
        .build()
        .expect("http client")
}

/// One HTTP client (one connection, like a separate process) against the server.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
}

impl Api {
    pub fn new(base: &str) -> Api {
        Api {
            http: http_client(),
            base: base.to_owned(),
        }
    }

    /// Sends `req`; the status and body, or an error naming the call, its status and body.
    async fn send(&self, req: reqwest::RequestBuilder, what: &str) -> Res<(u16, Vec<u8>)> {
        let resp = req.send().await.map_err(|e| format!("{what}: {e}"))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| format!("{what}: reading the body: {e}"))?
            .to_vec();
        if !status.is_success() {
            return Err(format!("{what}: {status}: {}", String::from_utf8_lossy(&body)).into());
        }
        Ok((status.as_u16(), body))
    }

    pub async fn post(&self, path: &str, token: &str, body: String) -> Res<(u16, Vec<u8>)> {
        let req = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body);
        self.send(req, &format!("POST {path}")).await
    }

    /// A GET, timed until the whole body has arrived.
    pub async fn get_timed(&self, path: &str) -> Res<(Duration, Vec<u8>)> {
        let started = Instant::now();
        let req = self
            .http
            .get(format!("{}{path}", self.base))
            .header("accept", "application/json");
        let resp = req.send().await.map_err(|e| format!("GET {path}: {e}"))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| format!("GET {path}: reading the body: {e}"))?;
        let elapsed = started.elapsed();
        if !status.is_success() {
            return Err(format!("GET {path}: {status}: {}", String::from_utf8_lossy(&body)).into());
        }
        Ok((elapsed, body.to_vec()))
    }

    pub async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> Res<T> {
        let (_, body) = self.get_timed(path).await?;
        serde_json::from_slice(&body).map_err(|e| format!("GET {path}: {e}").into())
    }

    /// The catalog's experiment names, as the server loaded them.
    pub async fn experiment_names(&self) -> Res<Vec<String>> {
        let list: Vec<serde_json::Value> = self.get_json("/experiments").await?;
        let names: Vec<String> = list
            .iter()
            .filter_map(|e| e["name"].as_str().map(str::to_owned))
            .collect();
        if names.is_empty() {
            return Err("the server's catalog is empty".into());
        }
        Ok(names)
    }

    /// One submit call, as the admin: `"all": true` when `n` covers the catalog, else the
    /// first `n` experiments. Answers how many jobs it created.
    pub async fn submit(&self, names: &[String], n: usize) -> Res<usize> {
        let body = if n >= names.len() {
            serde_json::json!({"all": true, "force": true})
        } else {
            serde_json::json!({"experiments": &names[..n], "force": true})
        };
        let (status, body) = self.post("/jobs", ADMIN_TOKEN, body.to_string()).await?;
        let answer: SubmitResponse = serde_json::from_slice(&body)?;
        if status != 201 || answer.created.is_empty() {
            return Err(
                format!("POST /jobs: {status} and {} created", answer.created.len()).into(),
            );
        }
        Ok(answer.created.len())
    }

    /// Submits `n` jobs, a catalog at a time.
    pub async fn submit_jobs(&self, names: &[String], n: usize) -> Res<()> {
        let mut created = 0;
        while created < n {
            created += self.submit(names, n - created).await?;
        }
        Ok(())
    }
}

/// A simulated worker: one pod, its own connection.
#[derive(Clone)]
pub struct WorkerClient {
    api: Api,
    pod: String,
}

impl WorkerClient {
    pub fn new(base: &str, pod: String) -> WorkerClient {
        WorkerClient {
            api: Api::new(base),
            pod,
        }
    }

    /// What the real worker sends: its pod, READY and HEALTHY, with a passed preflight.
    pub async fn lease(&self, accelerator: &str, wait_s: u64) -> Res<Option<Lease>> {
        let body = serde_json::json!({
            "accelerator": accelerator,
            "hosts": HOSTS,
            "state": "READY",
            "health": "HEALTHY",
            "preflight": {"passed": true, "at": "2026-01-01T00:00:00Z", "failures": []},
            "wait_s": wait_s,
        });
        let path = format!("/pods/{}/lease", self.pod);
        let (status, body) = self.api.post(&path, WORKER_TOKEN, body.to_string()).await?;
        if status == 204 {
            return Ok(None);
        }
        Ok(Some(
            serde_json::from_slice(&body).map_err(|e| format!("POST {path}: {e}"))?,
        ))
    }

    pub async fn heartbeat(&self, lease: LeaseId, step: i64) -> Res<()> {
        let body = serde_json::json!({
            "phase": "running", "step": step, "hosts_alive": vec![true; HOSTS]
        });
        self.api
            .post(
                &format!("/leases/{lease}/heartbeat"),
                WORKER_TOKEN,
                body.to_string(),
            )
            .await?;
        Ok(())
    }

    pub async fn metrics(&self, lease: LeaseId, body: String) -> Res<()> {
        self.api
            .post(&format!("/leases/{lease}/metrics"), WORKER_TOKEN, body)
            .await?;
        Ok(())
    }

    pub async fn checkpoint(&self, lease: LeaseId, job: JobId, step: i64) -> Res<()> {
        let body = serde_json::json!({"checkpoints": [{
            "step": step, "uri": format!("gs://bench/ckpt/{job}/{step}"), "committed": true
        }]});
        self.api
            .post(
                &format!("/leases/{lease}/checkpoints"),
                WORKER_TOKEN,
                body.to_string(),
            )
            .await?;
        Ok(())
    }

    pub async fn finish(&self, lease: LeaseId, end_step: i64) -> Res<()> {
        let body = serde_json::json!({
            "outcome": "succeeded",
            "exit_codes": vec![0; HOSTS],
            "start_step": 0,
            "end_step": end_step,
        });
        self.api
            .post(
                &format!("/leases/{lease}/finish"),
                WORKER_TOKEN,
                body.to_string(),
            )
            .await?;
        Ok(())
    }
}

/// A metrics batch: each of `steps` with a value for each of `names`.
pub fn metrics_body(steps: impl Iterator<Item = i64>, names: &[&str]) -> String {
    let mut s = String::with_capacity(64 * 1024);
    s.push_str("{\"points\":[");
    for (k, step) in steps.enumerate() {
        if k > 0 {
            s.push(',');
        }
        let _ = write!(s, "{{\"step\":{step},\"values\":{{");
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(s, "\"{name}\":{}", value(step, i));
        }
        s.push_str("}}");
    }
    s.push_str("]}");
    s
}
