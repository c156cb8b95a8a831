//! A `podq pool` process for the tests that need slices made on demand (`tests/pools.rs`,
//! the dashboard's capacity card).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::{pids_matching, Process, Server, PODQ};

/// A `podq pool` process on a pool file, with its state under the server's temp dir.
pub struct PoolProcess {
    process: Process,
    pub state: PathBuf,
    log: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl PoolProcess {
    pub fn start(server: &Server, yaml: &str, run_secs: u32) -> PoolProcess {
        PoolProcess::start_with(server, yaml, run_secs, &[])
    }

    /// `start`, with `extra` flags after the usual ones; a flag in `extra` replaces the
    /// usual one (clap refuses a flag given twice).
    pub fn start_with(server: &Server, yaml: &str, run_secs: u32, extra: &[&str]) -> PoolProcess {
        let (file, state) = pool_files(server, yaml);
        let args: Vec<String> = [
            "pool",
            "--pools",
            file.to_str().unwrap(),
            "--pool-state",
            state.to_str().unwrap(),
            "--server",
            &server.url,
            "--tick-s",
            "0.3",
            "--sim-create-s",
            "1",
            "--hosts",
            "2",
            "--status-poll-s",
            "0.2",
            "--metrics-flush-s",
            "0.3",
            "--checkpoint-scan-s",
            "0.3",
            "--stop-grace-s",
            "3",
            "--lease-wait-s",
            "1",
            "--preflight-retry-s",
            "0.3",
            "--trainer-env",
            &format!("PODQ_SIM_RUN_SECS={run_secs}"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // `--trainer-env` may be given many times: only single flags are replaced.
        let replaced = |flag: &String| {
            flag.starts_with("--") && flag != "--trainer-env" && extra.contains(&flag.as_str())
        };
        let mut kept: Vec<String> = Vec::new();
        let mut i = 0;
        while i < args.len() {
            if replaced(&args[i]) {
                i += 2;
            } else {
                kept.push(args[i].clone());
                i += 1;
            }
        }
        let mut args = kept;
        args.extend(extra.iter().map(|s| s.to_string()));
        PoolProcess::launch(server, args, Vec::new())
    }

    /// A `podq pool` process on a pool file of `driver: gcloud` pools, whose slices' workers
    /// are configured by `config` (a worker's config file), with `env` added.
    pub fn gcloud(
        server: &Server,
        yaml: &str,
        config: &Path,
        env: Vec<(String, String)>,
    ) -> PoolProcess {
        PoolProcess::gcloud_ticking(server, yaml, config, env, "0.3")
    }

    /// `gcloud`, looking at the cloud and the queue every `tick_s` seconds.
    pub fn gcloud_ticking(
        server: &Server,
        yaml: &str,
        config: &Path,
        env: Vec<(String, String)>,
        tick_s: &str,
    ) -> PoolProcess {
        let (file, state) = pool_files(server, yaml);
        let args = [
            "pool",
            "--pools",
            file.to_str().unwrap(),
            "--pool-state",
            state.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--tick-s",
            tick_s,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        PoolProcess::launch(server, args, env)
    }

    fn launch(server: &Server, args: Vec<String>, env: Vec<(String, String)>) -> PoolProcess {
        let log = server.dir.path().join("pool.log");
        let process = spawn(&args, &env, &log);
        PoolProcess {
            process,
            state: server.dir.path().join("pools"),
            log,
            args,
            env,
        }
    }

    /// SIGKILL, then the same command again: as a crash and a supervisor's restart.
    pub fn crash_and_restart(&mut self) {
        self.process.kill();
        self.process = spawn(&self.args, &self.env, &self.log);
    }

    /// SIGTERM, as a supervisor stops it: how long it took to exit, or `None` after
    /// `deadline`.
    pub fn terminate(&mut self, deadline: std::time::Duration) -> Option<std::time::Duration> {
        let pid = nix::unistd::Pid::from_raw(self.process.pid());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        let sent = std::time::Instant::now();
        while sent.elapsed() < deadline {
            if self.process.child.try_wait().expect("wait").is_some() {
                return Some(sent.elapsed());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        None
    }

    /// What the process has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The slices the simulated cloud holds, labelled with any pool, by name.
    pub fn cloud_slices(&self) -> Vec<Value> {
        let dir = self.state.join("cloud/slices");
        let mut slices: Vec<Value> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
            .collect();
        slices.sort_by_key(|s| s["name"].as_str().unwrap_or_default().to_owned());
        slices
    }

    /// Pool `pool`'s identity, from its journal (written when the pool first starts).
    pub fn owner(&self, pool: &str) -> String {
        let path = self.state.join(pool).join("journal.json");
        let journal: Value = serde_json::from_slice(&std::fs::read(&path).expect("the journal"))
            .expect("a readable journal");
        journal["owner"]
            .as_str()
            .expect("the pool's identity")
            .to_owned()
    }

    /// The name of pool `pool`'s `n`th slice: `{pool}-{tag}-{n}`, the tag from its identity.
    pub fn slice_name(&self, pool: &str, n: u32) -> String {
        format!("{pool}-{}-{n}", &self.owner(pool)[..6])
    }

    pub fn pod_control(&self, slice: &str) -> PathBuf {
        self.state.join("cloud/pods").join(slice).join("control")
    }
}

/// Gives pool `pool` the identity `owner` before its first start, so a test knows its slices'
/// names (`{pool}-{owner[..6]}-{n}`) before they exist.
pub fn pin_identity(server: &Server, pool: &str, owner: &str) {
    let dir = server.dir.path().join("pools").join(pool);
    std::fs::create_dir_all(&dir).unwrap();
    let journal = serde_json::json!({"owner": owner, "next": 0, "slices": {}});
    std::fs::write(dir.join("journal.json"), journal.to_string()).unwrap();
}

/// The pool file, written under the server's temp dir, and the pools' state directory.
fn pool_files(server: &Server, yaml: &str) -> (PathBuf, PathBuf) {
    let state = server.dir.path().join("pools");
    std::fs::create_dir_all(&state).unwrap();
    let file = server.dir.path().join("pools.yaml");
    std::fs::write(&file, yaml).unwrap();
    (file, state)
}

fn spawn(args: &[String], env: &[(String, String)], log: &Path) -> Process {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let child = Command::new(PODQ)
        .args(args)
        .env("PODQ_LOG", "info,podq_worker=debug")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start podq pool");
    Process {
        child,
        name: "podq pool".into(),
    }
}

/// Trainers and agents outlive a killed pool process (as on a real pod): none may outlive
/// the test.
impl Drop for PoolProcess {
    fn drop(&mut self) {
        self.process.kill();
        if std::thread::panicking() {
            // Its debug lines (every gcloud call) left out: what it decided, not each look.
            let log: String = self
                .log()
                .lines()
                .filter(|line| !line.contains(" DEBUG "))
                .map(|line| format!("{line}\n"))
                .collect();
            let mut start = log.len().saturating_sub(12_000);
            while !log.is_char_boundary(start) {
                start += 1;
            }
            eprintln!("--- the end of the pool's log ---\n{}", &log[start..]);
        }
        let me = self.process.pid();
        for pid in pids_matching(&self.state.display().to_string()) {
            if pid != me {
                let pid = nix::unistd::Pid::from_raw(pid);
                let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}

/// A pool file of one local-driver pool.
pub fn pool_yaml(name: &str, max_slices: u32, idle_after: &str, zones: &[&str]) -> String {
    let zones: String = zones.iter().map(|z| format!("      - {z}\n")).collect();
    format!(
        "pools:\n  - name: {name}\n    accelerator: v4-64\n    max_slices: {max_slices}\n    \
         idle_after: {idle_after}\n    provisioning: spot\n    driver: local\n    zones:\n{zones}"
    )
}
