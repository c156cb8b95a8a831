//! The fake cloud the gcloud driver's tests run against: a real worker process whose
//! `gcloud` is the fake in tests/fake_gcloud (first on the worker's PATH). The fake keeps
//! the node's state in a file and logs every argument list it is given, so a test can
//! assert both behaviour and the exact calls a real gcloud would receive.
//!
//! Its hosts are an emulated pod (tests/fake_gcloud/hosts.py): each host is a machine of
//! its own made of Linux namespaces, with its own address on a bridge, process table and
//! /home, /tmp and /var/tmp (kept in `hosts/host-<i>/` so a test can look at them). The
//! worker reaches the hosts by the addresses `describe` gives, and the hosts' agents reach
//! the worker at the bridge's address, never at 127.0.0.1. This needs root; a machine that
//! cannot make namespaces fails the test with a message that says so.
//!
//! The node is a v4-64 (what the suite's jobs ask for) cut down to 4 hosts to keep the
//! tests light; the driver takes the host count from the node's network endpoints.
//!
//! Only the test binaries that drive the fake cloud declare this module (`mod fake_cloud;`,
//! next to `mod common;`), so the others do not compile it; each uses a part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{alive, shared_tempdir, Process, Server, PODQ};

pub const RUN: Duration = Duration::from_secs(150);
pub const SHORT: Duration = Duration::from_secs(60);
pub const FAKE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_gcloud");
pub const ZONE: &str = "us-central2-b";
pub const PROJECT: &str = "podq-test";
pub const HOSTS: u32 = 4;
pub const DEFAULT_SSH_FLAGS: [&str; 4] = [
    "--strict-host-key-checking=no",
    "--ssh-flag=-oServerAliveInterval=30",
    "--ssh-flag=-oServerAliveCountMax=6",
    "--ssh-flag=-oConnectTimeout=30",
];

/// Sets up each host's code checkout at one pinned commit, the dataset and a JAX version
/// file the preflight's python check reads; logs each run in ~/setup.log.
pub const SETUP: &str = r#"set -e
mkdir -p trm/data/sudoku
cd trm
if [ ! -d .git ]; then
  git -c init.defaultBranch=main init -q
  GIT_AUTHOR_DATE=2025-01-01T00:00:00Z GIT_COMMITTER_DATE=2025-01-01T00:00:00Z \
    git -c user.name=podq -c user.email=podq@example.com commit -q --allow-empty -m pinned
fi
echo 0.4.35 > ~/jax_version
echo "setup on host $PODQ_HOST_INDEX of $PODQ_HOST_COUNT" >> ~/setup.log"#;

/// The fake cloud: state, argument log and the hosts' directories.
pub struct FakeCloud {
    dir: tempfile::TempDir,
    hosts: u32,
    /// This machine's address on the hosts' bridge: where the worker listens for agents.
    bridge: String,
}

/// What `gcloud storage ls` finds under `root`: the dataset the suite's configs name.
fn seed_gcs(root: &Path) {
    std::fs::create_dir_all(
        root.join("gcs/sculptor-tpu-experiments/data/sudoku-extreme-1k-aug-1000"),
    )
    .unwrap();
}

/// Loads the fake gcloud (argv[1]) as a module and prints its `fleet_groups` of the fleet
/// at argv[2] as JSON: {name: [zone, group, [instance, ...]]}.
const FLEET_GROUPS: &str = r#"
import importlib.machinery, importlib.util, json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
loader = importlib.machinery.SourceFileLoader("fake_gcloud", sys.argv[1])
fake = importlib.util.module_from_spec(importlib.util.spec_from_loader("fake_gcloud", loader))
loader.exec_module(fake)
print(json.dumps(fake.fleet_groups(sys.argv[2])))
"#;

fn hosts_script(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new("python3")
        .arg(Path::new(FAKE_DIR).join("hosts.py"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run tests/fake_gcloud/hosts.py")
}

pub fn node(state: &str, scheduling: Value) -> Value {
    node_of(state, scheduling, HOSTS)
}

/// A node as `tpu-vm describe --format=json` shows it, with `hosts` network endpoints.
pub fn node_of(state: &str, scheduling: Value, hosts: u32) -> Value {
    let mut node = json!({
        "name": format!("projects/{PROJECT}/locations/{ZONE}/nodes/stable-1"),
        "id": "6140925358375210001",
        "acceleratorType": "v4-64",
        "runtimeVersion": "tpu-ubuntu2204-base",
        "state": state,
        "networkEndpoints": (0..hosts)
            .map(|_| json!({"ipAddress": "127.0.0.1", "port": 8470}))
            .collect::<Vec<_>>(),
        "schedulingConfig": scheduling,
        "networkConfig": {
            "network": format!("projects/{PROJECT}/global/networks/default"),
            "enableExternalIps": true,
        },
    });
    if state == "READY" {
        node["health"] = json!("HEALTHY");
    }
    node
}

/// A READY node of another name and accelerator type, with `hosts` network endpoints.
pub fn named_node(name: &str, accelerator: &str, hosts: u32) -> Value {
    let mut node = node_of("READY", json!({"preemptible": true}), hosts);
    node["name"] = json!(format!("projects/{PROJECT}/locations/{ZONE}/nodes/{name}"));
    node["acceleratorType"] = json!(accelerator);
    node
}

impl FakeCloud {
    pub fn new(state: Value) -> FakeCloud {
        FakeCloud::with_hosts(state, HOSTS)
    }

    /// A fake cloud whose nodes have `hosts` hosts.
    pub fn with_hosts(state: Value, hosts: u32) -> FakeCloud {
        let dir = shared_tempdir();
        let mut state = state;
        state["zone"] = json!(ZONE);
        state["hosts"] = json!(hosts);
        state["project"] = json!(PROJECT);
        std::fs::write(dir.path().join("state.json"), state.to_string()).unwrap();
        std::fs::create_dir_all(dir.path().join("control")).unwrap();
        for host in 0..hosts {
            std::fs::create_dir_all(dir.path().join(format!("hosts/host-{host}/home"))).unwrap();
            std::fs::create_dir_all(dir.path().join(format!("hosts/host-{host}/tmp"))).unwrap();
        }
        seed_gcs(dir.path());
        let setup = hosts_script(&[
            "setup".as_ref(),
            dir.path().as_os_str(),
            hosts.to_string().as_ref(),
        ]);
        assert!(
            setup.status.success(),
            "cannot make the emulated pod's hosts: {}",
            String::from_utf8_lossy(&setup.stderr)
        );
        let bridge = String::from_utf8_lossy(&setup.stdout).trim().to_owned();
        FakeCloud { dir, hosts, bridge }
    }

    /// A fleet: zones scripted by `zones` (`{ZONE: {capacity | fault, clears_after_s |
    /// preempt_young}}`, as the fake's "fleet" documents) that hold many nodes, each of
    /// `hosts` emulated hosts on one bridge, for the pools that make them.
    pub fn fleet(zones: Value, hosts: u32) -> FakeCloud {
        let dir = shared_tempdir();
        let state = json!({
            "zone": ZONE,
            "project": PROJECT,
            "node": null,
            "fleet": {"zones": zones, "hosts": hosts, "settle_describes": 2},
        });
        std::fs::write(dir.path().join("state.json"), state.to_string()).unwrap();
        std::fs::create_dir_all(dir.path().join("control")).unwrap();
        seed_gcs(dir.path());
        let setup = hosts_script(&["setup".as_ref(), dir.path().as_os_str(), "0".as_ref()]);
        assert!(
            setup.status.success(),
            "cannot make the emulated fleet's bridge: {}",
            String::from_utf8_lossy(&setup.stderr)
        );
        let bridge = String::from_utf8_lossy(&setup.stdout).trim().to_owned();
        FakeCloud { dir, hosts, bridge }
    }

    /// A fleet's nodes that exist (deleted ones are gone), by name: (zone, node).
    pub fn fleet_nodes(&self) -> BTreeMap<String, (String, Value)> {
        let mut nodes = BTreeMap::new();
        for entry in std::fs::read_dir(self.root().join("slices"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let Ok(text) = std::fs::read_to_string(entry.path().join("state.json")) else {
                continue;
            };
            let state: Value = serde_json::from_str(&text).unwrap();
            if !state["node"].is_null() {
                nodes.insert(
                    entry.file_name().to_string_lossy().into_owned(),
                    (
                        state["zone"].as_str().unwrap_or_default().to_owned(),
                        state["node"].clone(),
                    ),
                );
            }
        }
        nodes
    }

    /// A fleet's managed instance groups that exist, by name: (zone, the group as describe
    /// prints it without advancing it, its instances as stored (each with `labels`)).
    ///
    /// Read from slices/*/state.json (the `ce.migs` entry and the `ce.instances` whose `_mig`
    /// is it, the fake's own `_` keys left out) by the fake's `fleet_groups`, which builds the
    /// view with the code describe prints it with: no call is made or logged, nothing moves
    /// on.
    pub fn fleet_groups(&self) -> BTreeMap<String, (String, Value, Vec<Value>)> {
        let out = Command::new("python3")
            .arg("-c")
            .arg(FLEET_GROUPS)
            .arg(Path::new(FAKE_DIR).join("gcloud"))
            .arg(self.root())
            .env("FAKE_GCLOUD_ROOT", self.root())
            .stdin(Stdio::null())
            .output()
            .expect("run python3 for the fake's fleet_groups");
        assert!(
            out.status.success(),
            "cannot read the fleet's groups: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("the fleet's groups as JSON")
    }

    /// The environment a process needs to find this fake as `gcloud`, with gcloud's ssh
    /// retries and slow connections made quick.
    pub fn gcloud_env(&self) -> Vec<(String, String)> {
        let path = format!("{FAKE_DIR}:{}", std::env::var("PATH").unwrap_or_default());
        [
            ("PATH", path.as_str()),
            ("FAKE_GCLOUD_ROOT", self.root().to_str().unwrap()),
            ("FAKE_GCLOUD_SSH_RETRY_S", "0.02"),
            ("FAKE_GCLOUD_SLOW_CONNECT_S", "0.2"),
            ("FAKE_GCLOUD_HANG_S", "2"),
            ("FAKE_GCLOUD_LATENCY_S", "0"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// Runs `script` with bash on `host` as its login user would (booting the host if it
    /// is down); answers its stdout, panicking when it fails.
    pub fn on_host(&self, host: u32, script: &str) -> String {
        let out = hosts_script(&[
            "run".as_ref(),
            self.root().as_os_str(),
            host.to_string().as_ref(),
            script.as_ref(),
        ]);
        assert!(
            out.status.success(),
            "on host {host}: `{script}` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts `sleep` in a process group of its own on `host`, carrying the lease tag
    /// `tag` when given; answers its pid as the host numbers it.
    pub fn group_leader_on(&self, host: u32, tag: Option<&str>) -> i32 {
        let env = tag
            .map(|t| format!("PODQ_LEASE_ID={t} "))
            .unwrap_or_default();
        let out = self.on_host(
            host,
            &format!("{env}setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $!"),
        );
        out.trim().parse().expect("a pid")
    }

    /// Whether process group `pgid` of `host` has a live (not zombie) member.
    pub fn group_alive_on(&self, host: u32, pgid: i32) -> bool {
        let out = self.on_host(
            host,
            &format!(
                "for p in $(pgrep -g {pgid}); do grep -qs '^State:[[:space:]]*Z' /proc/$p/status || echo live; done; true"
            ),
        );
        out.contains("live")
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn host(&self, host: u32) -> PathBuf {
        self.root().join(format!("hosts/host-{host}"))
    }

    /// Host `host`'s address, as describe's networkEndpoints give it (on a Compute Engine
    /// slice: its instance's internal address).
    pub fn address(&self, host: usize) -> String {
        if let Some(instance) = self.instance_of(host as u32) {
            let state = self.state();
            return state["ce"]["instances"][&instance]["networkInterfaces"][0]["networkIP"]
                .as_str()
                .expect("an internal address")
                .to_owned();
        }
        self.state()["node"]["networkEndpoints"][host]["ipAddress"]
            .as_str()
            .expect("an endpoint address")
            .to_owned()
    }

    /// The Compute Engine instance that is worker `host`, when the cloud holds a slice.
    pub fn instance_of(&self, host: u32) -> Option<String> {
        let state = self.state();
        let instances = state["ce"]["instances"].as_object()?;
        instances
            .iter()
            .find(|(_, i)| i["_worker"].as_u64() == Some(host as u64))
            .map(|(name, _)| name.clone())
    }

    /// Runs `command` on `host` through the fake gcloud as the worker's ssh calls do (`tpu-vm
    /// ssh --worker`, or `compute ssh` to the host's instance), with a variable in the
    /// caller's environment that must not reach the host.
    pub fn ssh(&self, host: u32, command: &str) -> (i32, String, String) {
        let mut cmd = Command::new(gcloud_wrapper(self));
        match self.instance_of(host) {
            Some(instance) => cmd.args(["compute", "ssh", &instance]),
            None => cmd
                .args(["compute", "tpus", "tpu-vm", "ssh", "stable-1"])
                .arg(format!("--worker={host}")),
        };
        let out = cmd
            .args([format!("--zone={ZONE}"), format!("--project={PROJECT}")])
            .arg(format!("--command={command}"))
            .env("PODQ_WORKER_SECRET_FOR_TEST", "worker-only")
            .stdin(Stdio::null())
            .output()
            .expect("run the fake gcloud");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Sets a key of the fake's state under its lock, as a person acting on the cloud.
    pub fn set_state(&self, key: &str, value: Value) {
        let script = r#"
import fcntl, json, os, sys
root, key, value = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with open(os.path.join(root, "state.lock"), "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    path = os.path.join(root, "state.json")
    state = json.load(open(path))
    state[key] = value
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)
"#;
        let out = Command::new("python3")
            .args(["-c", script])
            .arg(self.root())
            .arg(key)
            .arg(value.to_string())
            .output()
            .expect("run python3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The login user's home on `host` (`/home/<user>` there), as seen from here.
    pub fn home(&self, host: u32) -> PathBuf {
        self.host(host).join("home").join(whoami())
    }

    pub fn control(&self, name: &str, contents: &str) {
        let path = self.root().join("control").join(name);
        std::fs::write(path.with_extension("partial"), contents).unwrap();
        std::fs::rename(path.with_extension("partial"), path).unwrap();
    }

    pub fn state(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.root().join("state.json")).unwrap())
            .unwrap()
    }

    /// Every argument list gcloud was called with, in order.
    pub fn calls(&self) -> Vec<Vec<String>> {
        std::fs::read_to_string(self.root().join("argv.log"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("argv line"))
            .collect()
    }

    /// `worker.yaml` for a worker on the fake node, with `gcloud` settings merged in.
    pub fn worker_config(&self, server: &str, gcloud: Value, top: Value) -> PathBuf {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut settings = json!({
            "zone": ZONE,
            "project": PROJECT,
            "capacity": "preemptible",
            "coordinator_port": port,
            "code_dir": "~/trm",
            "setup_command": SETUP,
            "setup_on_start": true,
            "python_check": "cat ~/jax_version",
            "dataset_paths": ["data/sudoku"],
            "min_free_disk_gb": 0.001,
            "ssh_timeout_s": 30,
            "retries": 2,
            "retry_backoff_s": 0.05,
            "poll_s": 0.1,
            "recovery_timeout_s": 60,
        });
        settings
            .as_object_mut()
            .unwrap()
            .extend(gcloud.as_object().cloned().unwrap_or_default());
        let mut config = json!({
            "server": server,
            "agent_listen": format!("{}:0", self.bridge),
            "pod": "stable-1",
            "driver": "gcloud",
            "accelerator": "v4-64",
            "hosts": self.hosts,
            "state_dir": self.root().join("state"),
            "trainer_command": format!(
                "'{PODQ}' sim-trainer --config-path {{config_dir}} --config-name {{experiment}} \
                 checkpoint_path={{checkpoint_dir}} load_checkpoint={{resume_from}}"
            ),
            "trainer_env": {"PODQ_SIM_RUN_SECS": "15"},
            "stop_grace_s": 5,
            "status_poll_s": 0.2,
            "hang_timeout_s": 60,
            "agent_silence_s": 3,
            "metrics_flush_s": 0.3,
            "checkpoint_scan_s": 0.3,
            "lease_wait_s": 2,
            "preflight_retry_s": 0.3,
            "gcloud": settings,
        });
        config
            .as_object_mut()
            .unwrap()
            .extend(top.as_object().cloned().unwrap_or_default());
        // JSON is YAML.
        let path = self.root().join("worker.yaml");
        std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
        path
    }

    /// A `podq worker --config` process whose PATH starts with the fake gcloud.
    pub fn worker(&self, config: &Path) -> (Process, PathBuf) {
        let log_path = self.root().join("worker.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let path = format!("{FAKE_DIR}:{}", std::env::var("PATH").unwrap_or_default());
        let mut cmd = Command::new(PODQ);
        for (key, _) in std::env::vars() {
            if key.starts_with("PODQ_") || key.starts_with("GOOGLE_") {
                cmd.env_remove(key);
            }
        }
        let child = cmd
            .arg("worker")
            .arg("--config")
            .arg(config)
            .env("PATH", path)
            .env("FAKE_GCLOUD_ROOT", self.root())
            // gcloud's ssh retries (10 attempts, 5 s apart) and slow connections, made quick.
            .env("FAKE_GCLOUD_SSH_RETRY_S", "0.02")
            .env("FAKE_GCLOUD_SLOW_CONNECT_S", "0.2")
            .env("FAKE_GCLOUD_HANG_S", "2")
            .env("FAKE_GCLOUD_LATENCY_S", "0")
            .env("PODQ_LOG", "info,podq_worker=debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the worker");
        (
            Process {
                child,
                name: "gcloud worker".into(),
            },
            log_path,
        )
    }
}

impl Drop for FakeCloud {
    /// A test that fails mid-run kills its worker, and the trainers and agents on the hosts
    /// live on, as they would on a real host: the hosts go down with everything on them,
    /// and their namespaces and bridge are removed.
    fn drop(&mut self) {
        let out = hosts_script(&["teardown".as_ref(), self.root().as_os_str()]);
        if !out.status.success() {
            eprintln!(
                "cannot tear the emulated pod down: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// The isolation test, for a node or a slice whose hosts are up: each host is a machine of
/// its own (address, login environment, files, processes, loopback), and host 0 reaches
/// the others by address, as the JAX coordinator must.
pub fn hosts_are_separate_machines(cloud: &FakeCloud, server: &Server) {
    let port = server.url.rsplit(':').next().unwrap().to_owned();

    // Each host has its own address, the one describe gives, on its own interface.
    let addresses: Vec<String> = (0..HOSTS as usize).map(|h| cloud.address(h)).collect();
    let mut distinct = addresses.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), HOSTS as usize, "{addresses:?}");
    assert!(addresses.iter().all(|a| a != "127.0.0.1"), "{addresses:?}");
    for host in 0..HOSTS {
        let (code, out, err) = cloud.ssh(host, "ip -4 -o addr show eth0");
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains(&format!("inet {}/", addresses[host as usize])),
            "host {host}: {out}"
        );
    }

    // A fresh login environment: nothing of the caller's.
    let (code, env, err) = cloud.ssh(1, "env");
    assert_eq!(code, 0, "{err}");
    for expected in ["HOME=/home/root", "USER=root", "LANG=C.UTF-8"] {
        assert!(env.lines().any(|l| l == expected), "{expected} in {env}");
    }
    for leaked in ["PODQ_WORKER_SECRET_FOR_TEST", "FAKE_GCLOUD_ROOT", "CARGO"] {
        assert!(!env.contains(leaked), "{leaked} reached the host: {env}");
    }

    // Its own /tmp and home: a file written on host 1 is on no other host, nor here.
    let marker = format!("podq-emulated-{}", std::process::id());
    let (code, _, err) = cloud.ssh(
        1,
        &format!("echo one > /tmp/{marker} && echo one > ~/{marker}"),
    );
    assert_eq!(code, 0, "{err}");
    let (_, seen, _) = cloud.ssh(1, &format!("cat /tmp/{marker} ~/{marker}"));
    assert_eq!(seen, "one\none\n");
    let (code, _, _) = cloud.ssh(2, &format!("cat /tmp/{marker} || cat ~/{marker}"));
    assert_ne!(code, 0, "host 2 sees host 1's files");
    assert!(!std::path::Path::new("/tmp").join(&marker).exists());
    assert!(cloud.host(1).join("tmp").join(&marker).exists());

    // Its own processes: its init is pid 1 and nothing of this machine's is there.
    let (_, ps, _) = cloud.ssh(2, "ps -e -o pid=,args=");
    assert!(
        ps.lines()
            .next()
            .unwrap_or_default()
            .trim()
            .starts_with("1 "),
        "{ps}"
    );
    assert!(ps.contains("hosts.py init"), "{ps}");
    assert!(!ps.contains("cargo") && !ps.contains("podq server"), "{ps}");

    // Its own loopback: the server on this machine's 127.0.0.1 is out of reach, and the
    // bridge's address (where a worker listens for agents) is reachable.
    let probe = |address: &str| {
        format!("timeout 3 bash -c 'exec 3<>/dev/tcp/{address}/{port}' && echo open || echo closed")
    };
    let (_, out, _) = cloud.ssh(3, &probe("127.0.0.1"));
    assert_eq!(
        out.trim(),
        "closed",
        "a host reached this machine's loopback"
    );
    // Host 0 reaches host 3 by address (the JAX coordinator's path): a listener there.
    cloud.on_host(
        3,
        "setsid python3 -c 'import socket,time; s=socket.socket(); s.bind((\"0.0.0.0\", 18470)); s.listen(); time.sleep(60)' </dev/null >/dev/null 2>&1 &",
    );
    let reach = format!(
        "for i in $(seq 50); do timeout 1 bash -c 'exec 3<>/dev/tcp/{}/18470' 2>/dev/null && {{ echo open; exit; }}; sleep 0.1; done; echo closed",
        addresses[3]
    );
    let (_, out, _) = cloud.ssh(0, &reach);
    assert_eq!(out.trim(), "open", "host 0 cannot reach host 3");
}

/// The secrets test, for a run whose trainers are running on `pod` with `token` in their
/// environment: no secret in any command line or in gcloud's log. The lease's secret and
/// the trainer's environment reach the hosts as 0600 files copied with scp, and the
/// worker's record of the attempt is 0600 too. Call it first once the trainers are up:
/// it reads their live environments, so it must run before they finish.
pub fn no_secret_on_a_command_line(cloud: &FakeCloud, pod: &str, token: &str) {
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o777
    };
    let record = cloud.root().join(format!("state/{pod}.running.json"));
    assert_eq!(mode(&record), 0o600, "{}", record.display());
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    let secret = saved["attempt"]["secret"].as_str().unwrap().to_owned();
    let lease = saved["attempt"]["lease"]["lease_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Every command line on this machine, the hosts' processes included (their PID
    // namespaces are children of this one), and every argument gcloud was given.
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            !text.contains(&secret),
            "the lease secret in a command line: {text}"
        );
        assert!(
            !text.contains(token),
            "a trainer_env value in a command line: {text}"
        );
    }
    let argv = std::fs::read_to_string(cloud.root().join("argv.log")).unwrap();
    assert!(!argv.contains(&secret) && !argv.contains(token));

    for host in 0..HOSTS {
        let agent = cloud.home(host).join(".podq/agent");
        assert_eq!(mode(&agent.join(format!("{lease}.secret"))), 0o600);
        assert_eq!(mode(&agent.join(format!("{lease}.env"))), 0o600);
        // The trainer has its environment all the same.
        let environ = cloud.on_host(
            host,
            "tr '\\0' '\\n' < /proc/$(cat /tmp/podq-trainer-*.pgid)/environ | grep ^WANDB_API_KEY=",
        );
        assert_eq!(
            environ.trim(),
            format!("WANDB_API_KEY={token}"),
            "host {host}"
        );
    }
}

/// One line of figures for a fault: how each attempt ended, the failures charged, the steps
/// trained again, and the seconds from the fault to the run moving again.
pub fn report_fault(fault: &str, job: &Value, moving: std::time::Duration) {
    let tries = attempts(job);
    let outcomes: Vec<String> = tries
        .iter()
        .map(|a| a["outcome"].as_str().unwrap_or("?").to_owned())
        .collect();
    let lost: i64 = tries
        .windows(2)
        .map(|w| {
            let ended = w[0]["end_step"].as_i64().unwrap_or(0);
            let resumed = w[1]["start_step"].as_i64().unwrap_or(0);
            (ended - resumed).max(0)
        })
        .sum();
    eprintln!(
        "FAULT {fault}: outcomes {outcomes:?}, failures {}, steps lost {lost}, moving again after {:.1}s",
        job["failures"],
        moving.as_secs_f64()
    );
}

/// Waits until a second attempt of job `id` has trained past the step it resumed from.
pub async fn second_attempt_trains(server: &Server, id: &str) {
    crate::common::eventually(RUN, "a second attempt running", || async {
        let job = server.job(id).await;
        let second = attempts(&job).get(1).cloned()?;
        (job["last_step"].as_i64()? > second["start_step"].as_i64().unwrap_or(0)).then_some(())
    })
    .await;
}

/// A copy of the repository's catalog in which `group` runs on `accelerator`.
pub fn catalog_with_accelerator(group: &str, accelerator: &str) -> tempfile::TempDir {
    let dir = shared_tempdir();
    crate::common::gcs::copy_tree(&crate::common::experiments_dir(), dir.path());
    let docs = dir.path().join(format!("groups/{group}/group.yaml"));
    let mut text = std::fs::read_to_string(&docs).unwrap();
    text.push_str(&format!("accelerator: {accelerator}\n"));
    std::fs::write(docs, text).unwrap();
    dir
}

pub fn ssh_prefix(host: u32) -> Vec<String> {
    let mut args: Vec<String> = [
        "compute",
        "tpus",
        "tpu-vm",
        "ssh",
        "stable-1",
        &format!("--zone={ZONE}"),
        &format!("--project={PROJECT}"),
        &format!("--worker={host}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(DEFAULT_SSH_FLAGS.iter().map(|s| s.to_string()));
    args
}

/// `gcloud compute tpus tpu-vm VERB stable-1 --zone --project` and then `flags`, as the
/// worker calls it.
pub fn tpu_vm(verb: &str, flags: &[&str]) -> Vec<String> {
    tpus("tpu-vm", verb, "stable-1", flags)
}

/// `gcloud compute tpus queued-resources VERB stable-1-qr --zone --project` and `flags`.
pub fn queued_resources(verb: &str, flags: &[&str]) -> Vec<String> {
    tpus("queued-resources", verb, "stable-1-qr", flags)
}

pub fn tpus(group: &str, verb: &str, target: &str, flags: &[&str]) -> Vec<String> {
    let mut args = strings(&["compute", "tpus", group, verb, target]);
    args.push(format!("--zone={ZONE}"));
    args.push(format!("--project={PROJECT}"));
    args.extend(flags.iter().map(|f| f.to_string()));
    args
}

pub fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// What an ssh call was for, from its remote command.
pub fn ssh_kind(call: &[String]) -> Option<&'static str> {
    if call.get(3).map(String::as_str) != Some("ssh") {
        return None;
    }
    let command = call.last()?.strip_prefix("--command=")?;
    Some(if command.starts_with("export PODQ_HOST_INDEX=") {
        "setup"
    } else if command.contains("killed leftover trainer") {
        "clean"
    } else if command.contains("podq-info commit") {
        "preflight"
    } else if command.contains("\" agent --worker-url ") {
        // It also places the config and checks its sha256 first.
        "launch"
    } else if command.contains("sent SIGTERM") {
        "term"
    } else if command.contains("sent SIGKILL") {
        "kill"
    } else {
        "other"
    })
}

pub fn worker_of(call: &[String]) -> Option<u32> {
    call.iter()
        .find_map(|a| a.strip_prefix("--worker="))
        .and_then(|w| w.parse().ok())
}

/// The ssh calls of one kind from `from` on, as (index in the log, host).
pub fn ssh_calls(calls: &[Vec<String>], kind: &str, from: usize) -> Vec<(usize, u32)> {
    calls
        .iter()
        .enumerate()
        .skip(from)
        .filter(|(_, c)| ssh_kind(c) == Some(kind))
        .map(|(i, c)| (i, worker_of(c).expect("--worker")))
        .collect()
}

pub fn hosts_of(calls: &[(usize, u32)]) -> Vec<u32> {
    let mut hosts: Vec<u32> = calls.iter().map(|(_, h)| *h).collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// The last lines of a log, for failure messages; the debug line of every gcloud call is
/// left out unless PODQ_TEST_FULL_LOG is set.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| std::env::var("PODQ_TEST_FULL_LOG").is_ok() || !l.contains("gcloud::runner"))
        .collect();
    lines[lines.len().saturating_sub(80)..].join("\n")
}

/// Waits for the job to reach `state`; on timeout the panic shows the worker's log.
pub async fn wait_job(server: &Server, id: &str, state: &str, log: &Path) -> Value {
    wait_job_within(server, id, state, log, RUN).await
}

/// `wait_job` with its own deadline, for a run that trains for minutes (a JAX trainer's).
pub async fn wait_job_within(
    server: &Server,
    id: &str,
    state: &str,
    log: &Path,
    within: Duration,
) -> Value {
    let deadline = std::time::Instant::now() + within;
    loop {
        let job = server.job(id).await;
        if job["state"] == state {
            return job;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for job {id} to be {state}: {job}\nworker log:\n{}",
            log_tail(log)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn attempts(job: &Value) -> Vec<Value> {
    job["attempts"].as_array().cloned().unwrap_or_default()
}

/// A process in a process group of its own, optionally carrying a lease tag; killed when
/// dropped.
pub fn group_leader(tag: Option<&str>) -> Process {
    let mut cmd = Command::new("sleep");
    cmd.arg("600").process_group(0).stdin(Stdio::null());
    if let Some(tag) = tag {
        cmd.env("PODQ_LEASE_ID", tag);
    }
    Process {
        child: cmd.spawn().expect("sleep"),
        name: "group leader".into(),
    }
}

/// Pids of the live processes in process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid) && alive(pid) {
            members.push(pid);
        }
    }
    members
}

/// The pgids of the trainers tagged on every host now.
pub fn trainer_groups(cloud: &FakeCloud) -> BTreeMap<u32, i32> {
    let mut groups = BTreeMap::new();
    for host in 0..HOSTS {
        for entry in std::fs::read_dir(cloud.host(host).join("tmp"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("podq-trainer-") && name.ends_with(".pgid") {
                if let Ok(pgid) = std::fs::read_to_string(entry.path())
                    .unwrap_or_default()
                    .trim()
                    .parse()
                {
                    groups.insert(host, pgid);
                }
            }
        }
    }
    groups
}

pub fn orbax_step(dir: &Path, name: &str, committed: bool) {
    let step = dir.join(name);
    for host in 0..2 {
        let shard = step.join(format!("state/ocdbt.process_{host}/d"));
        std::fs::create_dir_all(&shard).unwrap();
        std::fs::write(shard.join("0123"), b"shard").unwrap();
    }
    std::fs::write(step.join("_CHECKPOINT_METADATA"), b"{}").unwrap();
    if committed {
        std::fs::write(
            step.join("commit_success.txt"),
            b"Checkpoint commit was successful",
        )
        .unwrap();
    }
}

/// A server whose jobs checkpoint to `bucket`; (process, url).
pub fn gs_server(dir: &Path, bucket: &str) -> (Process, String) {
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    let mut child = Command::new(PODQ)
        .args(["server", "--listen", "127.0.0.1:0", "--db"])
        .arg(dir.join("podq.db"))
        .arg("--experiments")
        .arg(crate::common::experiments_dir())
        .args(["--bucket", bucket])
        .args([
            "--lease-ttl-s",
            "5",
            "--heartbeat-s",
            "1",
            "--backoff-s",
            "1",
        ])
        .args(["--backoff-cap-s", "2"])
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("the server printed its address")
            .unwrap();
        if let Some(url) = line.strip_prefix("podq server listening on ") {
            break url.to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (
        Process {
            child,
            name: "gs server".into(),
        },
        url,
    )
}

/// A v4-64 of `hosts` hosts with every part of a spec podq must carry over when it
/// recreates the node: preemptible scheduling, a network and subnetwork given as full
/// resource paths, internal addresses only (no `enableExternalIps`), a service account with
/// scopes, metadata whose values hold a comma and a newline, tags, labels and a data disk.
pub fn full_node(state: &str, hosts: u32) -> Value {
    let mut node = node_of(state, json!({"preemptible": true}), hosts);
    node["networkConfig"] = json!({
        "network": format!("projects/{PROJECT}/global/networks/tpu-net"),
        "subnetwork": format!("projects/{PROJECT}/regions/us-central2/subnetworks/tpu-sub"),
    });
    node["serviceAccount"] = json!({
        "email": format!("trainer@{PROJECT}.iam.gserviceaccount.com"),
        "scope": [
            "https://www.googleapis.com/auth/cloud-platform",
            "https://www.googleapis.com/auth/devstorage.read_write",
        ],
    });
    node["metadata"] = json!({
        "enable-oslogin": "FALSE",
        "startup-script": "#!/bin/bash\necho booted, ok > /var/tmp/boot\n",
    });
    node["tags"] = json!(["tpu", "allow-ssh"]);
    node["labels"] = json!({"study": "trm-scaling", "team": "trm"});
    node["dataDisks"] = json!([{
        "sourceDisk": format!("projects/{PROJECT}/zones/{ZONE}/disks/sudoku-data"),
        "mode": "READ_ONLY",
    }]);
    node
}

/// The create call that brings `full_node` back, exactly.
pub fn full_create() -> Vec<String> {
    tpu_vm(
        "create",
        &[
            "--accelerator-type=v4-64",
            "--version=tpu-ubuntu2204-base",
            "--preemptible",
            "--network=projects/podq-test/global/networks/tpu-net",
            "--subnetwork=projects/podq-test/regions/us-central2/subnetworks/tpu-sub",
            "--internal-ips",
            "--service-account=trainer@podq-test.iam.gserviceaccount.com",
            "--scopes=https://www.googleapis.com/auth/cloud-platform,\
         https://www.googleapis.com/auth/devstorage.read_write",
            "--metadata=^;^enable-oslogin=FALSE;\
         startup-script=#!/bin/bash\necho booted, ok > /var/tmp/boot\n",
            "--tags=tpu,allow-ssh",
            "--labels=study=trm-scaling,team=trm",
            "--data-disk=source=projects/podq-test/zones/us-central2-b/disks/sudoku-data,\
         mode=read-only",
        ],
    )
}

pub fn verb(call: &[String]) -> Option<&str> {
    call.get(3).map(String::as_str)
}

/// The parts of a node's describe that make it the same node.
pub fn spec_of(node: &Value) -> Value {
    let keys = [
        "acceleratorType",
        "runtimeVersion",
        "schedulingConfig",
        "networkConfig",
        "serviceAccount",
        "metadata",
        "tags",
        "labels",
        "dataDisks",
    ];
    Value::Object(
        keys.iter()
            .map(|k| (k.to_string(), node[*k].clone()))
            .collect(),
    )
}

/// A `gcloud` for a driver made in this process: the fake, with its root.
pub fn gcloud_wrapper(cloud: &FakeCloud) -> PathBuf {
    let path = cloud.root().join("gcloud");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nFAKE_GCLOUD_ROOT='{}' FAKE_GCLOUD_SSH_RETRY_S=0.02 exec '{FAKE_DIR}/gcloud' \"$@\"\n",
            cloud.root().display()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).unwrap();
    path
}

/// The local login, as gcloud (and the fake) takes it: Python's `getpass.getuser()`.
pub fn whoami() -> String {
    let output = Command::new("python3")
        .args(["-c", "import getpass; print(getpass.getuser())"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A driver made in this process on the fake cloud, quick to poll.
pub fn local_driver(cloud: &FakeCloud, hosts: u32) -> podq_worker::pod::gcloud::GcloudPod {
    use podq_worker::pod::gcloud::{GcloudPod, GcloudSettings};
    GcloudPod::new(
        "stable-1",
        "v4-64",
        hosts,
        GcloudSettings {
            binary: gcloud_wrapper(cloud).display().to_string(),
            zone: ZONE.into(),
            project: Some(PROJECT.into()),
            state_dir: Some(cloud.root().join("state")),
            retries: 0,
            poll_s: 0.05,
            recovery_timeout_s: 30.0,
            ..GcloudSettings::default()
        },
    )
    .unwrap()
}
