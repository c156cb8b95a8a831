//! What the host agents cost, measured with real processes (`cargo bench --bench agent`):
//!
//! 1. metric delivery: from a trainer's `print` on host 0 to the metric's row being
//!    readable on the server, through the agent's log file, its push to the worker, and
//!    the worker's batch to the server. Baseline, same run: one read of the same endpoint
//!    (the resolution of the measurement);
//! 2. staging and launching 8 hosts through the fake `gcloud` with 2 s per call, against
//!    16 serial calls of the same fake in the same run. Target: at most 2 calls' worth;
//! 3. a preemption of the real JAX example (`examples/jax-trainer`, 2 processes, the
//!    project venv): steps lost against the checkpoint interval, and the seconds from the
//!    preemption to the resumed attempt's first metric, split into podq's part and the
//!    trainer's start-up.
//!
//! Nothing here is a pass/fail check: the figures are printed for the README.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use podq_testkit::{RunningServer, ServerLaunch};
use serde_json::{json, Value};

const PODQ: &str = env!("CARGO_BIN_EXE_podq");
type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn start_server(dir: &Path) -> Res<(RunningServer, String)> {
    let server = ServerLaunch::new(PODQ, dir)
        .experiments(repo().join("experiments"))
        .args(["--bucket", &dir.join("bucket").to_string_lossy()])
        .start()?;
    let url = server.url.clone();
    Ok((server, url))
}

async fn submit(http: &reqwest::Client, api: &str, experiment: &str) -> Res<String> {
    let submitted: Value = http
        .post(format!("{api}/jobs"))
        .json(&json!({"experiments": [experiment]}))
        .send()
        .await?
        .json()
        .await?;
    Ok(submitted["created"][0]["job_id"]
        .as_str()
        .ok_or("nothing submitted")?
        .to_owned())
}

fn main() -> Res<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        metric_delivery().await?;
        launch_eight_hosts().await?;
        jax_preemption().await?;
        Ok(())
    })
}

/// A trainer that prints a metric every 50 ms on host 0, carrying the time it printed it.
const TIMED_TRAINER: &str = r#"exec python3 -u -c '
import json, os, time
for step in range(1, 301):
    if os.environ["PODQ_HOST_INDEX"] == "0":
        print("PODQ " + json.dumps({"event": "metrics", "step": step, "values": {"t": time.time()}}), flush=True)
    time.sleep(0.05)
'"#;

async fn metric_delivery() -> Res<()> {
    let dir = tempfile::tempdir()?;
    let (_server, url) = start_server(dir.path())?;
    let http = reqwest::Client::new();
    let api = format!("{url}/api/v1");
    let id = submit(&http, &api, "exp01a").await?;
    let flush_s = "0.2";
    let _worker = Killed(
        Command::new(PODQ)
            .args(["worker", "--server", &url, "--pod", "bench", "--hosts", "2"])
            .arg("--pod-root")
            .arg(dir.path().join("pod"))
            .args(["--trainer-command", TIMED_TRAINER])
            .args(["--metrics-flush-s", flush_s, "--lease-wait-s", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let metrics = format!("{api}/jobs/{id}/metrics?names=t&max_points=100000");
    let mut seen: std::collections::BTreeMap<i64, f64> = Default::default();
    let mut reads = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.len() < 300 && Instant::now() < deadline {
        let asked = Instant::now();
        let answer: Value = http.get(&metrics).send().await?.json().await?;
        reads.push(asked.elapsed().as_secs_f64() * 1000.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs_f64();
        for point in answer["series"][0]["points"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let (Some(step), Some(printed)) = (point["step"].as_i64(), point["value"].as_f64())
            else {
                continue;
            };
            seen.entry(step).or_insert((now - printed) * 1000.0);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut latencies: Vec<f64> = seen.values().copied().collect();
    latencies.sort_by(f64::total_cmp);
    reads.sort_by(f64::total_cmp);
    if latencies.is_empty() {
        return Err("no metric arrived".into());
    }
    println!("metric delivery, trainer print -> server row, through the agent ({} points, worker --metrics-flush-s {flush_s}):", latencies.len());
    println!(
        "  p50 {:.0} ms, p99 {:.0} ms; baseline in the same run: one read of the metrics endpoint p50 {:.1} ms, p99 {:.1} ms (the measurement's resolution, plus the 10 ms poll)",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        percentile(&reads, 0.5),
        percentile(&reads, 0.99),
    );
    Ok(())
}

const LATENCY_S: &str = "2";
const HOSTS: u32 = 8;

/// A fake cloud with one READY 8-host node, and a gcloud wrapper whose every call waits
/// `latency_s` before it starts.
fn fake_cloud(root: &Path, latency_s: &str) -> Res<PathBuf> {
    let endpoints: Vec<Value> = (0..HOSTS)
        .map(|_| json!({"ipAddress": "127.0.0.1", "port": 8470}))
        .collect();
    let state = json!({
        "zone": "us-central2-b", "project": "bench", "hosts": HOSTS,
        "node": {
            "name": "projects/bench/locations/us-central2-b/nodes/stable-1",
            "acceleratorType": "v4-64", "runtimeVersion": "tpu-ubuntu2204-base",
            "state": "READY", "health": "HEALTHY", "networkEndpoints": endpoints,
            "schedulingConfig": {"preemptible": true},
        },
    });
    std::fs::write(root.join("state.json"), state.to_string())?;
    std::fs::create_dir_all(root.join("control"))?;
    for host in 0..HOSTS {
        std::fs::create_dir_all(root.join(format!("hosts/host-{host}/home")))?;
        std::fs::create_dir_all(root.join(format!("hosts/host-{host}/tmp")))?;
    }
    let wrapper = root.join("gcloud");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nFAKE_GCLOUD_ROOT='{}' FAKE_GCLOUD_LATENCY_S={latency_s} exec '{}' \"$@\"\n",
            root.display(),
            repo().join("tests/fake_gcloud/gcloud").display()
        ),
    )?;
    let mut perms = std::fs::metadata(&wrapper)?.permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&wrapper, perms)?;
    Ok(wrapper)
}

/// Stages the config and starts the agents on 8 hosts through the gcloud driver, as an
/// attempt does, with every gcloud call taking 2 s; against 16 serial calls (a copy and a
/// start per host, one after another) of the same fake in the same run, and the same
/// launch with no latency (what the fake itself costs on this machine).
async fn launch_eight_hosts() -> Res<()> {
    let (with_latency, serial) = timed_launches(LATENCY_S).await?;
    let (without, _) = timed_launches("0").await?;
    let one_call = serial / 16.0;
    let latency: f64 = LATENCY_S.parse()?;
    println!("stage + launch on {HOSTS} hosts through gcloud at {LATENCY_S} s per call (median of 3 launches):");
    println!(
        "  {with_latency:.1} s = {:.1} calls' worth; baseline in the same run: 16 serial calls {serial:.1} s ({one_call:.2} s a call)",
        with_latency / one_call,
    );
    println!(
        "  the same launch with no latency {without:.1} s (the fake's own CPU, 8 at once on this machine): the latency podq pays is {:.1} calls' worth; target: at most 2",
        (with_latency - without) / latency,
    );
    Ok(())
}

/// The median of 3 timed launches, and 16 serial calls, at `latency_s` per call.
async fn timed_launches(latency_s: &str) -> Res<(f64, f64)> {
    use podq_worker::agent::hub::AgentHub;
    use podq_worker::pod::gcloud::{GcloudPod, GcloudSettings};
    use podq_worker::pod::{AgentStart, HostLaunch, PodDriver, StagedConfig};

    let dir = tempfile::tempdir()?;
    let gcloud = fake_cloud(dir.path(), latency_s)?;
    let pod = GcloudPod::new(
        "stable-1",
        "v4-64",
        HOSTS,
        GcloudSettings {
            binary: gcloud.display().to_string(),
            zone: "us-central2-b".into(),
            project: Some("bench".into()),
            state_dir: Some(dir.path().join("state")),
            agent_binary: Some(PODQ.into()),
            check_config_datasets: false,
            ..GcloudSettings::default()
        },
    )?;
    let hub = AgentHub::bind("127.0.0.1:0".parse()?, None).await?;
    let contents = b"arch: {name: bench}\n".to_vec();
    let config = StagedConfig {
        file_name: "bench.yaml".into(),
        sha256: hex_sha256(&contents),
        contents,
    };
    let launch = |lease: &str| AgentStart {
        config: config.clone(),
        lease: lease.to_owned(),
        secret: "bench".into(),
        worker_url: hub.url().to_owned(),
        launches: (0..HOSTS)
            .map(|host| HostLaunch {
                host,
                command: "sleep 60".into(),
                env: [("PODQ_LEASE_ID".to_owned(), lease.to_owned())].into(),
            })
            .collect(),
    };
    let stage_and_start = |lease: String| {
        let pod = &pod;
        let hub = &hub;
        let start = launch(&lease);
        async move {
            let _streams = hub.register(&lease, "bench", HOSTS);
            pod.start_agents(&start).await?;
            hub.finish(&lease);
            Ok::<(), Box<dyn std::error::Error>>(())
        }
    };
    // The first launch also installs the agent binary on every host (not timed).
    stage_and_start("warm-up".into()).await?;
    let mut launches = Vec::new();
    for i in 0..3 {
        let started = Instant::now();
        stage_and_start(format!("bench-{i}")).await?;
        launches.push(started.elapsed().as_secs_f64());
    }
    let started = Instant::now();
    for host in 0..16 {
        let status = Command::new(&gcloud)
            .args([
                "compute",
                "tpus",
                "tpu-vm",
                "ssh",
                "stable-1",
                "--zone=us-central2-b",
            ])
            .arg(format!("--worker={}", host % HOSTS))
            .arg("--command=true")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !status.success() {
            return Err("a serial baseline call failed".into());
        }
    }
    let serial = started.elapsed().as_secs_f64();
    launches.sort_by(f64::total_cmp);
    Ok((launches[1], serial))
}

fn hex_sha256(bytes: &[u8]) -> String {
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(bytes)?;
            child.wait_with_output()
        })
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

async fn get_json(http: &reqwest::Client, url: &str) -> Res<Value> {
    Ok(http.get(url).send().await?.json().await?)
}

fn parse_time(value: &Value) -> Option<f64> {
    let text = value.as_str()?;
    let at = chrono::DateTime::parse_from_rfc3339(text).ok()?;
    Some(at.timestamp_millis() as f64 / 1000.0)
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

async fn jax_preemption() -> Res<()> {
    let python = repo().join(".venv/bin/python");
    if !python.exists() {
        println!(
            "jax preemption: skipped, no {} (run scripts/venv)",
            python.display()
        );
        return Ok(());
    }
    let every = 50;
    let dir = tempfile::tempdir()?;
    let (_server, url) = start_server(dir.path())?;
    let http = reqwest::Client::new();
    let api = format!("{url}/api/v1");
    let id = submit(&http, &api, "exp01a").await?;
    let command = format!(
        "exec '{}' '{}' --config-path {{config_dir}} --config-name {{experiment}} \
         checkpoint_path={{checkpoint_dir}} load_checkpoint={{resume_from}}",
        python.display(),
        repo().join("examples/jax-trainer/pretrain.py").display()
    );
    let pod_root = dir.path().join("pod");
    let _worker = Killed(
        Command::new(PODQ)
            .args([
                "worker",
                "--server",
                &url,
                "--pod",
                "bench-jax",
                "--hosts",
                "2",
            ])
            .arg("--pod-root")
            .arg(&pod_root)
            .args(["--trainer-command", &command])
            .args(["--trainer-env", "PODQ_EXAMPLE_TOTAL_STEPS=400"])
            .args([
                "--trainer-env",
                &format!("PODQ_EXAMPLE_CHECKPOINT_EVERY={every}"),
            ])
            .args(["--trainer-env", "PODQ_EXAMPLE_STEP_SLEEP_S=0.05"])
            .args(["--trainer-env", "JAX_PLATFORMS=cpu"])
            .args(["--status-poll-s", "0.2", "--metrics-flush-s", "0.2"])
            .args(["--checkpoint-scan-s", "0.3", "--recovery-delay-s", "0"])
            .args(["--lease-wait-s", "2", "--preflight-retry-s", "0.2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let job_url = format!("{api}/jobs/{id}");
    let deadline = Instant::now() + Duration::from_secs(300);
    // Preempt between two checkpoints, once one past step 100 is committed.
    loop {
        let job = get_json(&http, &job_url).await?;
        let committed = job["checkpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["committed"] == true)
            .filter_map(|c| c["step"].as_i64())
            .max()
            .unwrap_or(0);
        let last = job["last_step"].as_i64().unwrap_or(0);
        if committed >= 100 && last >= committed + every / 2 {
            break;
        }
        if Instant::now() > deadline {
            return Err("the example never reached step 100".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::write(pod_root.join("control/preempt"), b"")?;
    let preempted_at = unix_now();
    // The resumed attempt's first metric line, as host 0's agent writes it to its log.
    let (job, first_metric_at) = loop {
        let job = get_json(&http, &job_url).await?;
        if let Some(lease) = job["attempts"][1]["lease_id"].as_str() {
            let log = pod_root
                .join("hosts/host-0/podq-agent")
                .join(lease)
                .join("trainer.log");
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("PODQ {\"event\":\"metrics\"") {
                break (job, unix_now());
            }
        }
        if Instant::now() > deadline {
            return Err("the resumed attempt never reported".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The server records "running" in batches: wait for the resumed attempt's mark.
    let mut job = job;
    let running_at = loop {
        if let Some(at) = parse_time(&job["attempts"][1]["running_at"]) {
            break at;
        }
        if Instant::now() > deadline {
            return Err("the resumed attempt never ran".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        job = get_json(&http, &job_url).await?;
    };
    let attempts = job["attempts"].as_array().ok_or("no attempts")?;
    let lost = attempts[0]["end_step"].as_i64().unwrap_or(0)
        - attempts[1]["start_step"].as_i64().unwrap_or(0);
    println!("a preemption of the JAX example (2 processes, a checkpoint every {every} steps):");
    println!(
        "  steps lost {lost} (last step reported before the preemption minus the resumed step); target: at most one checkpoint interval, {every}"
    );
    println!(
        "  preemption -> the resumed attempt's first metric line {:.1} s: podq {:.1} s (stop, finish, requeue, preflight, lease, stage, agents started; the simulated node comes back at once), the trainer's start-up {:.1} s (imports, jax.distributed, restore, compile, first step); the line then reaches the server as measured above",
        first_metric_at - preempted_at,
        running_at - preempted_at,
        first_metric_at - running_at,
    );
    Ok(())
}
