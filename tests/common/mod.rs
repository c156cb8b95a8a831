//! Test harness: the real `podq` binary as server and worker processes, on port 0, with a
//! temporary SQLite file (or a fresh PostgreSQL database), driven over HTTP.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod gcs;
pub mod pools;
pub mod postgres;
pub mod rungs;
pub mod tls;

pub const PODQ: &str = env!("CARGO_BIN_EXE_podq");

/// Which store a test's server keeps its state in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Sqlite,
    Postgres,
}

/// Each `async fn name(store: StoreKind)` named becomes two tests, `name::sqlite` and
/// `name::postgres` (the latter on `PODQ_TEST_DATABASE_URL`'s server).
#[macro_export]
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name($crate::common::StoreKind::Sqlite).await
            }
            #[tokio::test]
            async fn postgres() {
                super::$name($crate::common::StoreKind::Postgres).await
            }
        }
    )*};
}

/// The project venv's Python, with JAX, Orbax and Hydra (`PODQ_TEST_PYTHON`, else
/// `.venv/bin/python`).
pub fn python() -> String {
    let python = std::env::var("PODQ_TEST_PYTHON").unwrap_or_else(|_| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(".venv/bin/python")
            .display()
            .to_string()
    });
    assert!(
        Path::new(&python).exists(),
        "no Python with JAX and Orbax at {python}: run scripts/venv (scripts/test does)"
    );
    python
}

/// Runs `tests/python/<script> <arg>` with the venv's Python on JAX's CPU backend, and answers
/// the JSON it printed; fails the test with its stderr if it failed.
pub fn python_json(script: &str, arg: &Path) -> Value {
    let output = Command::new(python())
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/python")
                .join(script),
        )
        .arg(arg)
        .env("JAX_PLATFORMS", "cpu")
        .output()
        .expect("run the venv's python");
    assert!(
        output.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the script's JSON")
}

/// Runs `podq validate` on the catalog in `dir`: whether it exited 0, and what it printed.
pub fn validate(dir: &Path) -> (bool, String) {
    let output = Command::new(PODQ)
        .args(["validate", "--experiments"])
        .arg(dir)
        .output()
        .expect("run podq validate");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    (output.status.success(), text)
}

pub fn experiments_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments")
}

/// The study's original configs as the user wrote them (a copy of
/// the study's reference material, kept in the repository so no test reads outside it).
pub fn original_configs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kellen-configs")
}

/// A directory the emulated hosts see too: not under /tmp, /var/tmp or /home, which every
/// host has its own of (the server's bucket, which stands for GCS, must be shared).
/// Copies a directory tree (a catalog a test changes for itself).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

pub fn shared_tempdir() -> tempfile::TempDir {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(base).expect("create the target's tmp dir");
    tempfile::Builder::new()
        .prefix("podq-")
        .tempdir_in(base)
        .expect("temp dir")
}

/// Polls `check` until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A child process killed (SIGKILL) when dropped.
pub struct Process {
    pub child: Child,
    pub name: String,
}

impl Process {
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Settings a test may change before starting the server.
#[derive(Clone)]
pub struct ServerOptions {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// The catalog: the repository's `experiments/` unless a test brings its own.
    pub experiments: PathBuf,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            args: vec![
                "--lease-ttl-s".into(),
                "5".into(),
                "--heartbeat-s".into(),
                "1".into(),
                "--backoff-s".into(),
                "1".into(),
                "--backoff-cap-s".into(),
                "4".into(),
            ],
            env: Vec::new(),
            experiments: experiments_dir(),
        }
    }
}

/// A podq server process with its own database: a file in a temporary directory, or a fresh
/// PostgreSQL database.
pub struct Server {
    pub dir: tempfile::TempDir,
    pub url: String,
    pub process: Option<Process>,
    pub client: reqwest::Client,
    options: ServerOptions,
    port: u16,
    postgres: Option<postgres::PostgresDatabase>,
}

impl Server {
    pub async fn start() -> Server {
        Self::start_with(ServerOptions::default()).await
    }

    pub async fn start_on(store: StoreKind) -> Server {
        Self::start_with_on(ServerOptions::default(), store).await
    }

    pub async fn start_with(options: ServerOptions) -> Server {
        Self::start_with_on(options, StoreKind::Sqlite).await
    }

    /// A server on a PostgreSQL database the test made (and drops) itself.
    pub async fn start_on_url(url: &str) -> Server {
        let mut options = ServerOptions::default();
        options.args.extend(["--database".into(), url.to_owned()]);
        Self::start_with_on(options, StoreKind::Sqlite).await
    }

    pub async fn start_with_on(mut options: ServerOptions, store: StoreKind) -> Server {
        let postgres = match store {
            StoreKind::Sqlite => None,
            StoreKind::Postgres => Some(postgres::PostgresDatabase::create().await),
        };
        if let Some(database) = &postgres {
            options
                .args
                .extend(["--database".into(), database.url.clone()]);
        }
        let dir = shared_tempdir();
        let (process, url) = spawn_server(dir.path(), 0, &options);
        let port = url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port");
        Server {
            dir,
            url,
            process: Some(process),
            client: reqwest::Client::new(),
            options,
            port,
            postgres,
        }
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("podq.db")
    }

    /// How many rows `table` has, read straight from the server's database.
    pub async fn count_rows(&self, table: &str) -> i64 {
        use sqlx::{ConnectOptions, Connection};
        let sql = sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}"));
        match &self.postgres {
            Some(database) => {
                let mut conn = sqlx::PgConnection::connect(&database.url)
                    .await
                    .expect("connect to the database");
                sqlx::query_scalar(sql)
                    .fetch_one(&mut conn)
                    .await
                    .expect("count")
            }
            None => {
                let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(self.db())
                    .read_only(true)
                    .connect()
                    .await
                    .expect("open the database");
                sqlx::query_scalar(sql)
                    .fetch_one(&mut conn)
                    .await
                    .expect("count")
            }
        }
    }

    /// SIGKILL: no shutdown, no flush, as a crash.
    pub fn crash(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }

    /// Starts the server again on the same port and database.
    pub fn restart(&mut self) {
        self.crash();
        let (process, url) = spawn_server(self.dir.path(), self.port, &self.options);
        assert_eq!(url, self.url);
        self.process = Some(process);
        // Pooled connections died with the old process.
        self.client = reqwest::Client::new();
    }

    pub fn api(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.url)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self
            .client
            .get(self.api(path))
            .header("accept", "application/json")
            .send()
            .await
            .expect("GET");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// GET as curl does (`Accept: */*`): the plain-text answer.
    pub async fn text(&self, path: &str) -> String {
        self.client
            .get(self.api(path))
            .send()
            .await
            .expect("GET")
            .text()
            .await
            .expect("body")
    }

    /// `/metrics` (served beside the API, not under it), as Prometheus reads it.
    pub async fn metrics(&self) -> String {
        self.client
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("body")
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, body.to_string(), &[])
            .await
    }

    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: String,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        // A body goes with the type its route reads, unless the test sends its own.
        let typed = headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("content-type"));
        let mut request = self.client.request(method, self.api(path));
        if !typed && !body.is_empty() {
            let yaml = path.starts_with("/experiments/validate");
            let kind = if yaml {
                "application/yaml"
            } else {
                "application/json"
            };
            request = request.header("content-type", kind);
        }
        let mut request = request.body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn jobs(&self) -> Vec<Value> {
        let (status, body) = self.get("/jobs?limit=1000").await;
        assert_eq!(status, 200, "{body}");
        body["jobs"].as_array().cloned().unwrap_or_default()
    }

    pub async fn job(&self, id: &str) -> Value {
        let (status, body) = self.get(&format!("/jobs/{id}")).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Submits one experiment (with extra body fields such as `max_failures`), returning the
    /// new job's id.
    pub async fn submit_one(&self, experiment: &str, extra: Value) -> String {
        let mut body = serde_json::json!({"experiments": [experiment]});
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        let (status, answer) = self.post("/jobs", body).await;
        assert_eq!(status, 201, "{answer}");
        answer["created"][0]["job_id"].as_str().unwrap().to_owned()
    }

    /// Waits for a committed checkpoint at or past `step`, returning its step.
    pub async fn committed_at_least(&self, id: &str, step: i64, timeout: Duration) -> i64 {
        eventually(
            timeout,
            &format!("a committed checkpoint at step >= {step}"),
            || async {
                let job = self.job(id).await;
                job["checkpoints"]
                    .as_array()?
                    .iter()
                    .filter(|c| c["committed"] == true)
                    .filter_map(|c| c["step"].as_i64())
                    .filter(|s| *s >= step)
                    .max()
            },
        )
        .await
    }

    /// The steps of one metric series of a job, every point.
    pub async fn metric_steps(&self, job: &str, name: &str) -> Vec<i64> {
        let (status, metrics) = self
            .get(&format!(
                "/jobs/{job}/metrics?names={name}&max_points=100000"
            ))
            .await;
        assert_eq!(status, 200, "{metrics}");
        metrics["series"][0]["points"]
            .as_array()
            .map(|points| points.iter().map(|p| p["step"].as_i64().unwrap()).collect())
            .unwrap_or_default()
    }

    pub async fn job_of(&self, experiment: &str) -> Value {
        self.jobs()
            .await
            .into_iter()
            .find(|j| j["experiment"] == experiment)
            .unwrap_or_else(|| panic!("no job for {experiment}"))
    }

    /// Waits until the job's state is `state`, returning its detail.
    pub async fn wait_state(&self, id: &str, state: &str, timeout: Duration) -> Value {
        eventually(timeout, &format!("job {id} to be {state}"), || async {
            let job = self.job(id).await;
            (job["state"] == state).then_some(job)
        })
        .await
    }

    /// A worker process on a simulated pod under this server's temp dir.
    pub fn worker(&self, pod: &str, hosts: u32, extra: &[&str]) -> Worker {
        let root = self.dir.path().join(format!("pod-{pod}"));
        let args: Vec<String> = vec![
            "worker".into(),
            "--server".into(),
            self.url.clone(),
            "--pod".into(),
            pod.into(),
            "--hosts".into(),
            hosts.to_string(),
            "--pod-root".into(),
            root.display().to_string(),
            "--status-poll-s".into(),
            "0.2".into(),
            "--metrics-flush-s".into(),
            "0.3".into(),
            "--checkpoint-scan-s".into(),
            "0.3".into(),
            "--stop-grace-s".into(),
            "3".into(),
            "--recovery-delay-s".into(),
            "0.5".into(),
            "--lease-wait-s".into(),
            "2".into(),
        ];
        // A flag in `extra` replaces the default above (clap refuses a flag given twice).
        let mut kept = vec![args[0].clone()];
        for pair in args[1..].chunks(2) {
            if !extra.contains(&pair[0].as_str()) {
                kept.extend(pair.iter().cloned());
            }
        }
        let mut args = kept;
        args.extend(extra.iter().map(|s| s.to_string()));
        let log =
            std::fs::File::create(self.dir.path().join(format!("worker-{pod}.log"))).expect("log");
        let child = Command::new(PODQ)
            .args(&args)
            .env("PODQ_LOG", "info,podq_worker=debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the worker");
        Worker {
            process: Process {
                child,
                name: format!("worker {pod}"),
            },
            root,
            log: self.dir.path().join(format!("worker-{pod}.log")),
        }
    }
}

pub struct Worker {
    pub process: Process,
    pub root: PathBuf,
    pub log: PathBuf,
}

/// A killed worker leaves its trainers running (they are in process groups of their own, as
/// on a real pod); a test must not leave them behind.
impl Drop for Worker {
    fn drop(&mut self) {
        self.process.kill();
        for pid in self.trainer_pids() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Worker {
    /// Drops a control file for the local pod driver (`preempt`, `kill-host-3`, ...).
    pub fn control(&self, name: &str) {
        std::fs::write(self.root.join("control").join(name), b"").expect("control file");
    }

    pub fn host_dir(&self, host: u32) -> PathBuf {
        self.root.join("hosts").join(format!("host-{host}"))
    }

    /// Trainer processes running on this simulated pod (anything whose command line names
    /// the pod's directory, other than the worker itself).
    pub fn trainer_pids(&self) -> Vec<i32> {
        pids_matching(&self.root.display().to_string())
            .into_iter()
            .filter(|pid| *pid != self.process.pid())
            .collect()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn spawn_server(dir: &Path, port: u16, options: &ServerOptions) -> (Process, String) {
    let mut launch = podq_testkit::ServerLaunch::new(PODQ, dir)
        .port(port)
        .experiments(&options.experiments)
        .args(["--bucket", &dir.join("bucket").to_string_lossy()])
        .args(&options.args)
        .startup(Duration::from_secs(30));
    for (key, value) in &options.env {
        launch = launch.env(key, value);
    }
    let server = launch.start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url.clone();
    (
        Process {
            child: server.into_child(),
            name: "server".into(),
        },
        url,
    )
}

/// Whether a process with this pid is still alive (and not a zombie).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// Pids of every process whose command line mentions `needle`.
pub fn pids_matching(needle: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) && alive(pid) {
            pids.push(pid);
        }
    }
    pids
}
