//! `podq server` as its own process, started as a user starts it: a listen address, a
//! SQLite file (or `--database`), a catalog, and the line it prints once it listens.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::proc_stats;

/// The line `podq server` prints on stdout once it accepts connections.
const LISTENING: &str = "podq server listening on ";

/// How to start a server. Its state (`podq.db`, and `server.log`, which takes its stderr)
/// lives in `dir`.
#[derive(Debug, Clone)]
pub struct ServerLaunch {
    program: PathBuf,
    dir: PathBuf,
    port: u16,
    experiments: Option<PathBuf>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    env_removed: Vec<String>,
    startup: Duration,
    log: String,
}

impl ServerLaunch {
    /// `program server --listen 127.0.0.1:0 --db DIR/podq.db`, its stderr in
    /// `DIR/server.log`, without the tokens of the caller's environment.
    pub fn new(program: impl Into<PathBuf>, dir: impl Into<PathBuf>) -> ServerLaunch {
        ServerLaunch {
            program: program.into(),
            dir: dir.into(),
            port: 0,
            experiments: None,
            args: Vec::new(),
            env: Vec::new(),
            env_removed: vec!["PODQ_ADMIN_TOKEN".into(), "PODQ_WORKER_TOKEN".into()],
            startup: Duration::from_secs(60),
            log: "server.log".into(),
        }
    }

    /// The file in `dir` that takes the server's stderr (default `server.log`), for servers
    /// that share a directory.
    pub fn log_file(mut self, name: &str) -> ServerLaunch {
        self.log = name.to_owned();
        self
    }

    /// Listens on this port (a restart keeps its address).
    pub fn port(mut self, port: u16) -> ServerLaunch {
        self.port = port;
        self
    }

    /// The catalog (`--experiments`).
    pub fn experiments(mut self, dir: impl Into<PathBuf>) -> ServerLaunch {
        self.experiments = Some(dir.into());
        self
    }

    /// The store is this PostgreSQL database instead of `DIR/podq.db`.
    pub fn database(self, url: &str) -> ServerLaunch {
        self.args(["--database", url])
    }

    /// The admin and worker tokens (`PODQ_ADMIN_TOKEN`, `PODQ_WORKER_TOKEN`).
    pub fn tokens(self, admin: &str, worker: &str) -> ServerLaunch {
        self.env("PODQ_ADMIN_TOKEN", admin)
            .env("PODQ_WORKER_TOKEN", worker)
    }

    pub fn args<I, S>(mut self, args: I) -> ServerLaunch
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> ServerLaunch {
        self.env_removed.retain(|k| k != key);
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// How long the server may take to say it listens (default 60 s).
    pub fn startup(mut self, limit: Duration) -> ServerLaunch {
        self.startup = limit;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts the server and waits until it listens; its log is in the error otherwise.
    pub fn start(&self) -> Result<RunningServer, String> {
        let mut child = self.command(Stdio::piped())?;
        let stdout = child.stdout.take().ok_or("the server has no stdout")?;
        // Read on a thread of its own, so that a server that never says it listens is
        // noticed at the deadline and its stdout keeps draining afterwards.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix(LISTENING) {
                    let _ = tx.send(url.to_owned());
                }
            }
        });
        match rx.recv_timeout(self.startup) {
            Ok(url) => Ok(RunningServer {
                pid: child.id(),
                child: Some(child),
                url,
                dir: self.dir.clone(),
            }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!(
                    "the server did not start within {:?}; its log: {}",
                    self.startup,
                    std::fs::read_to_string(self.dir.join(&self.log)).unwrap_or_default()
                ))
            }
        }
    }

    /// Starts the server without waiting for it to listen: a standby that waits for the
    /// store's lease says nothing until it leads. Its address is `127.0.0.1:port`.
    pub fn spawn(&self) -> Result<Child, String> {
        self.command(Stdio::null())
    }

    fn command(&self, stdout: Stdio) -> Result<Child, String> {
        let log_path = self.dir.join(&self.log);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("{}: {e}", log_path.display()))?;
        let mut command = Command::new(&self.program);
        command
            .arg("server")
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--db")
            .arg(self.dir.join("podq.db"));
        if let Some(experiments) = &self.experiments {
            command.arg("--experiments").arg(experiments);
        }
        for key in &self.env_removed {
            command.env_remove(key);
        }
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(stdout)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.program.display()))
    }
}

/// A started server, killed when dropped.
#[derive(Debug)]
pub struct RunningServer {
    /// None once handed over (`into_child`).
    child: Option<Child>,
    pid: u32,
    /// `http://127.0.0.1:PORT`
    pub url: String,
    dir: PathBuf,
}

impl RunningServer {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The process, for a caller that keeps it its own way (and kills it itself).
    pub fn into_child(mut self) -> Child {
        self.child.take().expect("a running server has its process")
    }

    /// Whether the process has ended.
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// `URL/api/v1`
    pub fn base(&self) -> String {
        format!("{}/api/v1", self.url)
    }

    pub fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    /// The SQLite file (unused on PostgreSQL).
    pub fn db(&self) -> PathBuf {
        self.dir.join("podq.db")
    }

    /// User + system CPU seconds the server has used so far.
    pub fn cpu_s(&self) -> Result<f64, String> {
        proc_stats::cpu_time(self.pid).map(|t| t.as_secs_f64())
    }

    /// (VmRSS, VmHWM) in kB.
    pub fn rss_kb(&self) -> Result<(u64, u64), String> {
        Ok((
            proc_stats::status_kb(self.pid, "VmRSS:")?,
            proc_stats::status_kb(self.pid, "VmHWM:")?,
        ))
    }

    /// Resets the peak RSS to the current RSS, and returns that, in kB.
    pub fn reset_peak_kb(&self) -> Result<u64, String> {
        proc_stats::reset_peak_kb(self.pid)
    }

    /// SIGTERM, then SIGKILL if it has not stopped within `grace`.
    pub fn terminate(&mut self, grace: Duration) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exited() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }

    /// SIGKILL: no shutdown, no flush, as a crash.
    pub fn kill(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        if !self.exited() {
            self.kill();
        }
    }
}
