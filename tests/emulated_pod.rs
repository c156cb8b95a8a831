//! The emulated pod: a real server and worker driving a node whose hosts are separate
//! machines (Linux network, mount and PID namespaces; tests/fake_gcloud/hosts.py), and the
//! faults of separate VMs: an agent killed, a host rebooted, a preemption with its shutdown
//! notice, a recreated node with blank disks, OS Login.
//!
//! Needs root (CI runs as root); a machine that cannot make namespaces fails these tests
//! with a message that says so. Run them alone with `cargo test --test emulated_pod`.

mod common;
mod fake_cloud;

use std::process::{Command, Stdio};
use std::time::Instant;

use common::{eventually, Server, PODQ};
use fake_cloud::*;
use serde_json::{json, Value};

/// A worker config for short simulated runs (5 s), with `gcloud` settings merged in.
fn short_runs(cloud: &FakeCloud, server: &Server, gcloud: Value) -> std::path::PathBuf {
    cloud.worker_config(
        &server.url,
        gcloud,
        json!({"trainer_env": {"PODQ_SIM_RUN_SECS": "5"}}),
    )
}

/// The trainer of the only lease on each host, as (host, pgid in the host's numbering).
fn trainers(cloud: &FakeCloud) -> Vec<(u32, i32)> {
    trainer_groups(cloud).into_iter().collect()
}

#[tokio::test]
async fn the_hosts_are_separate_machines() {
    let cloud = FakeCloud::new(json!({"node": node("READY", json!({"preemptible": true}))}));
    let server = Server::start().await;
    hosts_are_separate_machines(&cloud, &server);
}

#[tokio::test]
async fn a_run_succeeds_on_the_emulated_hosts_with_agents_calling_the_bridge() {
    let cloud = FakeCloud::new(json!({"node": node("READY", json!({"preemptible": true}))}));
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    let config = short_runs(&cloud, &server, json!({}));
    let (_worker, log) = cloud.worker(&config);
    let job = wait_job(&server, &id, "succeeded", &log).await;
    assert_eq!(job["failures"], 0, "{job}");
    assert_eq!(attempts(&job).len(), 1, "{job}");
    // The agents were installed into each host's own home (it had no podq) and called
    // the worker at the bridge's address.
    let text = std::fs::read_to_string(&log).unwrap();
    let bridge = cloud.address(0).rsplit_once('.').unwrap().0.to_owned() + ".1:";
    assert!(
        text.lines()
            .any(|l| l.contains("listening for agents") && l.contains(&bridge)),
        "{}",
        log_tail(&log)
    );
    for host in 0..HOSTS {
        let home = cloud.home(host);
        assert!(home.join(".podq/bin/podq").exists(), "host {host}");
        assert!(home.join("setup.log").exists(), "host {host}");
    }
}

#[test]
fn a_loopback_agent_address_is_refused_under_the_gcloud_driver() {
    for (flag, value, named) in [
        (
            "--agent-url",
            "http://127.0.0.1:7433",
            "agent_url `http://127.0.0.1:7433`",
        ),
        (
            "--agent-listen",
            "127.0.0.1:7433",
            "agent_listen 127.0.0.1:7433",
        ),
    ] {
        let mut cmd = Command::new(PODQ);
        cmd.args(["worker", "--driver", "gcloud", "--zone", ZONE])
            .args([
                "--trainer-command",
                "true",
                "--server",
                "http://127.0.0.1:9",
            ])
            .args([flag, value]);
        if flag == "--agent-url" {
            cmd.args(["--agent-listen", "0.0.0.0:0"]);
        }
        let out = cmd.stdin(Stdio::null()).output().unwrap();
        assert!(!out.status.success(), "{flag} {value} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(named), "{stderr}");
        assert!(stderr.contains("PODQ_AGENT_URL"), "{stderr}");
    }
}

/// A worker on the emulated pod with one long run going, every host training, and at least
/// one committed checkpoint.
struct Running {
    cloud: FakeCloud,
    server: Server,
    id: String,
    _worker: common::Process,
    log: std::path::PathBuf,
}

async fn running(run_secs: u32, extra: Value) -> Running {
    let cloud = FakeCloud::new(json!({"node": node("READY", json!({"preemptible": true}))}));
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    let mut top = json!({"trainer_env": {"PODQ_SIM_RUN_SECS": run_secs.to_string()}});
    top.as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    let config = cloud.worker_config(&server.url, json!({}), top);
    let (worker, log) = cloud.worker(&config);
    wait_job(&server, &id, "running", &log).await;
    eventually(SHORT, "a trainer on every host", || async {
        (trainers(&cloud).len() == HOSTS as usize).then_some(())
    })
    .await;
    server.committed_at_least(&id, 1, RUN).await;
    Running {
        cloud,
        server,
        id,
        _worker: worker,
        log,
    }
}

/// When the run moves again after a fault at `fault`: the first step past `step` (the last
/// one reported before the fault) that the server records.
async fn moving_again(run: &Running, step: i64) -> std::time::Duration {
    let fault = Instant::now();
    eventually(RUN, "the run moving again", || async {
        let job = run.server.job(&run.id).await;
        (job["last_step"].as_i64()? > step || job["state"] == "succeeded").then_some(())
    })
    .await;
    fault.elapsed()
}

/// Waits until a second attempt has trained past the step it resumed from.
async fn second_attempt_moving(run: &Running) {
    second_attempt_trains(&run.server, &run.id).await;
}

fn kill_agent(cloud: &FakeCloud, host: u32) {
    cloud.on_host(host, "kill -KILL $(cat /tmp/podq-agent-*.pid)");
}

/// One agent is killed, as the OOM killer would: the trainers go on, nothing is charged,
/// and the same trainer process runs on every host from start to end.
async fn an_agent_killed_costs_nothing(host: u32) {
    let run = running(25, json!({"hang_timeout_s": 20})).await;
    let before = trainers(&run.cloud);
    let step = run.server.job(&run.id).await["last_step"]
        .as_i64()
        .unwrap_or(0);
    kill_agent(&run.cloud, host);
    // Host 0's agent carries the metrics: the run is seen moving once its new agent calls.
    let moving = moving_again(&run, step + 50).await;
    let job = wait_job(&run.server, &run.id, "succeeded", &run.log).await;
    report_fault(&format!("host {host}'s agent killed"), &job, moving);
    assert_eq!(job["failures"], 0, "{job}");
    assert_eq!(attempts(&job).len(), 1, "{job}");
    assert_eq!(trainers(&run.cloud), before, "a trainer was restarted");
    let (_, events) = run.server.get(&format!("/jobs/{}/events", run.id)).await;
    assert!(
        events.to_string().contains("agent_restarted"),
        "no agent_restarted event: {events}"
    );
}

#[tokio::test]
async fn host_0s_agent_killed_costs_nothing() {
    an_agent_killed_costs_nothing(0).await;
}

#[tokio::test]
async fn host_2s_agent_killed_costs_nothing() {
    an_agent_killed_costs_nothing(2).await;
}

#[tokio::test]
async fn a_rebooted_host_costs_no_failure_and_the_run_resumes() {
    let run = running(40, json!({})).await;
    let kept = run.server.committed_at_least(&run.id, 1, RUN).await;
    run.cloud.control("reboot-2", "3");
    let fault = Instant::now();
    second_attempt_moving(&run).await;
    let moving = fault.elapsed();
    let job = wait_job(&run.server, &run.id, "succeeded", &run.log).await;
    report_fault("host 2 rebooted", &job, moving);
    assert_eq!(job["failures"], 0, "{job}");
    let tries = attempts(&job);
    assert_eq!(tries[0]["outcome"], "lost", "{job}");
    assert!(
        tries[0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("host 2's trainer is gone"),
        "{job}"
    );
    assert!(tries.len() >= 2, "{job}");
    assert!(
        tries[1]["start_step"].as_i64().unwrap_or(0) >= kept,
        "resumed before the newest committed checkpoint {kept}: {job}"
    );
    // The reboot emptied host 2's /tmp and kept its home.
    assert!(run.cloud.home(2).join(".podq/bin/podq").exists());
}

#[tokio::test]
async fn a_preemption_with_its_shutdown_notice_resumes_on_a_recreated_blank_node() {
    let run = running(30, json!({"stop_grace_s": 5})).await;
    let kept = run.server.committed_at_least(&run.id, 1, RUN).await;
    let notice = Instant::now();
    run.cloud.control("preempt-notice", "3");
    second_attempt_moving(&run).await;
    let moving = notice.elapsed();
    let job = wait_job(&run.server, &run.id, "succeeded", &run.log).await;
    report_fault("preemption with a 3 s shutdown notice", &job, moving);
    let tries = attempts(&job);
    assert_eq!(job["failures"], 0, "{job}");
    assert!(tries.len() >= 2, "{job}");
    assert_eq!(tries[0]["outcome"], "preempted", "{job}");
    assert!(
        tries[1]["start_step"].as_i64().unwrap_or(0) >= kept,
        "resumed before the newest committed checkpoint {kept}: {job}"
    );
    // The recreated node's hosts had blank disks: setup ran again on each, from nothing.
    for host in 0..HOSTS {
        let setups =
            std::fs::read_to_string(run.cloud.home(host).join("setup.log")).unwrap_or_default();
        assert_eq!(setups.lines().count(), 1, "host {host}: {setups}");
    }
    eprintln!(
        "preemption notice to success: {:.1}s",
        notice.elapsed().as_secs_f64()
    );
}

#[tokio::test]
async fn os_login_replaces_the_user_and_the_home_follows() {
    let cloud = FakeCloud::new(json!({
        "node": node("READY", json!({"preemptible": true})),
        "os_login_user": "sa_112233445566",
    }));
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    let config = short_runs(&cloud, &server, json!({"user": "kellen"}));
    let (_worker, log) = cloud.worker(&config);
    let job = wait_job(&server, &id, "succeeded", &log).await;
    assert_eq!(job["failures"], 0, "{job}");
    for host in 0..HOSTS {
        let home = cloud.host(host).join("home/sa_112233445566");
        assert!(home.join("setup.log").exists(), "host {host}");
        assert!(home.join(".podq/bin/podq").exists(), "host {host}");
        assert!(
            !cloud.host(host).join("home/kellen").exists(),
            "host {host}"
        );
    }
    let argv = cloud.calls();
    assert!(
        argv.iter()
            .any(|c| c.iter().any(|a| a == "kellen@stable-1")),
        "the worker asks for its user"
    );
}

/// The last lines of every host's trainer and agent logs, for a failure message.
fn trainer_logs(cloud: &FakeCloud) -> String {
    let mut text = String::new();
    for host in 0..HOSTS {
        let dir = cloud.home(host).join(".podq/agent");
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let file = if path.is_dir() {
                path.join("trainer.log")
            } else {
                path.clone()
            };
            let body = std::fs::read_to_string(&file).unwrap_or_default();
            let lines: Vec<&str> = body.lines().collect();
            text.push_str(&format!(
                "== host {host}: {}\n{}\n",
                file.display(),
                lines[lines.len().saturating_sub(12)..].join("\n")
            ));
        }
    }
    text
}

fn venv_python() -> String {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var("PODQ_TEST_PYTHON")
        .unwrap_or_else(|_| repo.join(".venv/bin/python").display().to_string());
    assert!(
        std::path::Path::new(&python).exists(),
        "no Python with JAX at {python}: run scripts/venv (scripts/test does)"
    );
    python
}

fn committed_steps(dir: &std::path::Path) -> Vec<i64> {
    let mut steps: Vec<i64> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    steps.sort();
    steps
}

/// The real JAX + Orbax example on 4 emulated hosts: 4 processes that meet through
/// `jax.distributed` at host 0's address and run gloo collectives over the bridge. The
/// node is preempted with Compute Engine's shutdown notice: every process gets SIGTERM,
/// JAX's preemption sync point stops them all at one step, Orbax saves it within the
/// grace, and the run resumes from that save on the recreated node. Then host 2 reboots
/// mid-run, and the run resumes from the newest committed checkpoint.
#[tokio::test]
async fn the_jax_example_on_four_hosts_saves_on_the_shutdown_notice_and_resumes() {
    let cloud = FakeCloud::new(json!({"node": node("READY", json!({"preemptible": true}))}));
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let command = format!(
        "exec '{}' '{}' --config-path {{config_dir}} --config-name {{experiment}} \
         checkpoint_path={{checkpoint_dir}} load_checkpoint={{resume_from}}",
        venv_python(),
        repo.join("examples/jax-trainer/pretrain.py").display()
    );
    let config = cloud.worker_config(
        &server.url,
        json!({}),
        json!({
            "trainer_command": command,
            "trainer_env": {
                "PODQ_EXAMPLE_TOTAL_STEPS": "400",
                "PODQ_EXAMPLE_CHECKPOINT_EVERY": "100",
                "PODQ_EXAMPLE_STEP_SLEEP_S": "0.1",
                "JAX_PLATFORMS": "cpu",
            },
            "stop_grace_s": 30,
            "hang_timeout_s": 240,
        }),
    );
    let (_worker, log) = cloud.worker(&config);
    const JAX_RUN: std::time::Duration = std::time::Duration::from_secs(400);
    let kept = server.committed_at_least(&id, 100, JAX_RUN).await;
    let dir = std::path::PathBuf::from(server.job(&id).await["checkpoint_dir"].as_str().unwrap());

    let notice = Instant::now();
    cloud.control("preempt-notice", "20");
    // The stop step's save: a committed step that is not one of the every-100 saves.
    let (saved, saved_after) = loop {
        if let Some(step) = committed_steps(&dir).into_iter().find(|s| s % 100 != 0) {
            break (step, notice.elapsed());
        }
        assert!(
            notice.elapsed() < SHORT,
            "no save of the stop step within {SHORT:?}; committed {:?}\n{}",
            committed_steps(&dir),
            trainer_logs(&cloud)
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    // The node reads PREEMPTED once the notice's 20 s are over, then is recreated.
    eventually(SHORT, "the node preempted", || async {
        (cloud.state()["node"]["state"] != "READY").then_some(())
    })
    .await;
    let ready = eventually(RUN, "the node READY again", || async {
        (cloud.state()["node"]["state"] == "READY").then(chrono::Utc::now)
    })
    .await;
    let first_step = eventually(JAX_RUN, "the resumed attempt's first step", || async {
        let job = server.job(&id).await;
        let second = attempts(&job).get(1).cloned()?;
        let start = second["start_step"].as_i64()?;
        (job["last_step"].as_i64()? > start).then(chrono::Utc::now)
    })
    .await;
    // Host 2 reboots mid-run: its process is gone, the others wait in a collective; the
    // attempt is lost, not charged, and the run resumes from the newest committed save.
    let before_reboot = loop {
        let newest = committed_steps(&dir).into_iter().max().unwrap_or(0);
        if newest > saved {
            break newest;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    cloud.control("reboot-2", "3");
    // The third attempt starts JAX again and trains half the run: minutes on 2 shared cores.
    let job = wait_job_within(&server, &id, "succeeded", &log, JAX_RUN).await;
    let tries = attempts(&job);
    assert_eq!(tries[0]["outcome"], "preempted", "{job}");
    assert_eq!(job["failures"], 0, "{job}");
    assert_eq!(tries.len(), 3, "{job}");
    assert_eq!(tries[1]["outcome"], "lost", "{job}");
    let after_reboot = tries[2]["start_step"].as_i64().unwrap();
    assert!(
        after_reboot >= before_reboot,
        "resumed at {after_reboot} after the reboot; {before_reboot} was committed"
    );
    let resumed = tries[1]["start_step"].as_i64().unwrap();
    assert_eq!(resumed, saved, "resumed from the preemption save: {job}");
    assert!(resumed >= kept, "{job}");
    let reported = tries[0]["end_step"].as_i64().unwrap_or(resumed);
    assert_eq!(job["last_step"], 400, "{job}");
    // READY -> the lease (set-up of the blank hosts, preflight) -> running (config staged,
    // agents started) -> the first step (the trainer's imports, jax.distributed, restore,
    // compilation).
    let at = |key: &str| {
        chrono::DateTime::parse_from_rfc3339(tries[1][key].as_str().unwrap())
            .unwrap()
            .with_timezone(&chrono::Utc)
    };
    let secs = |d: chrono::TimeDelta| d.num_milliseconds() as f64 / 1000.0;
    eprintln!(
        "JAX on 4 emulated hosts: notice -> save of step {saved} committed {:.1}s; steps lost \
         {}; node READY -> first resumed step {:.1}s (setup and preflight {:.1}s, launch \
         {:.1}s, trainer start-up {:.1}s)",
        saved_after.as_secs_f64(),
        (reported - resumed).max(0),
        secs(first_step - ready),
        secs(at("started_at") - ready),
        secs(at("running_at") - at("started_at")),
        secs(first_step - at("running_at")),
    );
}

/// A maintenance event the hosts come through: nothing is killed, nothing charged, the same
/// trainers run from start to end.
#[tokio::test]
async fn a_maintenance_event_the_hosts_survive_kills_nothing() {
    let run = running(30, json!({"maintenance_lead_s": 0, "hang_timeout_s": 20})).await;
    let before = trainers(&run.cloud);
    let step = run.server.job(&run.id).await["last_step"]
        .as_i64()
        .unwrap_or(0);
    run.cloud.control(
        "maintenance-notice",
        r#"{"in_s": 1, "duration_s": 25, "reboot": false}"#,
    );
    eventually(SHORT, "the node under maintenance", || async {
        (run.cloud.state()["node"]["health"] == "UNHEALTHY_MAINTENANCE").then_some(())
    })
    .await;
    let moving = moving_again(&run, step).await;
    let job = wait_job(&run.server, &run.id, "succeeded", &run.log).await;
    report_fault("maintenance the hosts survive", &job, moving);
    assert_eq!(job["failures"], 0, "{job}");
    assert_eq!(attempts(&job).len(), 1, "{job}");
    assert_eq!(trainers(&run.cloud), before, "a trainer was restarted");
}

/// A maintenance window announced ahead: the run is stopped before it opens with SIGTERM
/// and the full grace (its preemption save), not charged, and nothing is leased on the pod
/// until the window (in which the hosts reboot) has passed.
#[tokio::test]
async fn a_maintenance_window_ahead_stops_the_run_first_and_leases_after_it() {
    let run = running(40, json!({"maintenance_lead_s": 600})).await;
    let notice = Instant::now();
    run.cloud.control(
        "maintenance-notice",
        r#"{"in_s": 6, "duration_s": 6, "reboot": true}"#,
    );
    let window_end = chrono::Utc::now() + chrono::TimeDelta::seconds(12);
    second_attempt_moving(&run).await;
    let moving = notice.elapsed();
    let job = wait_job(&run.server, &run.id, "succeeded", &run.log).await;
    report_fault(
        "maintenance window ahead (hosts reboot in it)",
        &job,
        moving,
    );
    let tries = attempts(&job);
    assert_eq!(job["failures"], 0, "{job}");
    assert_eq!(tries[0]["outcome"], "preempted", "{job}");
    assert!(
        tries[0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("maintenance window opens"),
        "{job}"
    );
    // Stopped by SIGTERM, within the grace: the trainers exited 143 themselves.
    assert_eq!(tries[0]["exit_codes"], json!([143, 143, 143, 143]), "{job}");
    let leased =
        chrono::DateTime::parse_from_rfc3339(tries[1]["started_at"].as_str().unwrap()).unwrap();
    assert!(
        leased >= window_end - chrono::TimeDelta::seconds(1),
        "leased at {leased}, before the window ended at {window_end}"
    );
}

/// The node is recreated with blank disks while no worker watches; a worker started
/// without `setup_on_start` still sets the new hosts up before preflight, because the node
/// is not the one it set up (its id changed).
#[tokio::test]
async fn a_node_recreated_while_no_worker_watched_is_set_up_before_preflight() {
    let cloud = FakeCloud::new(json!({"node": node("READY", json!({"preemptible": true}))}));
    let server = Server::start().await;
    let first = server.submit_one("exp01a", json!({})).await;
    let config = short_runs(&cloud, &server, json!({}));
    let (worker, log) = cloud.worker(&config);
    wait_job(&server, &first, "succeeded", &log).await;
    drop(worker);

    let gcloud = gcloud_wrapper(&cloud);
    let zone = format!("--zone={ZONE}");
    let project = format!("--project={PROJECT}");
    for args in [
        vec!["delete", "stable-1", "--quiet"],
        vec![
            "create",
            "stable-1",
            "--accelerator-type=v4-64",
            "--version=tpu-ubuntu2204-base",
            "--preemptible",
        ],
    ] {
        let status = Command::new(&gcloud)
            .args(["compute", "tpus", "tpu-vm"])
            .args(&args)
            .args([&zone, &project])
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "{args:?}");
    }
    assert!(
        !cloud.home(0).join("trm").exists(),
        "the new hosts are blank"
    );

    let second = server.submit_one("exp01b", json!({})).await;
    let config = short_runs(&cloud, &server, json!({"setup_on_start": false}));
    let (_worker, log) = cloud.worker(&config);
    let job = wait_job(&server, &second, "succeeded", &log).await;
    assert_eq!(job["failures"], 0, "{job}");
    for host in 0..HOSTS {
        let setups = std::fs::read_to_string(cloud.home(host).join("setup.log")).unwrap();
        assert_eq!(setups.lines().count(), 1, "host {host}: {setups}");
    }
}

/// No secret in any command line or in gcloud's log: the lease's secret and the trainer's
/// environment reach the hosts as 0600 files copied with scp, and the worker's record of
/// the attempt is 0600 too.
#[tokio::test]
async fn no_secret_is_in_a_command_line_or_the_gcloud_log() {
    let token = "wandb-sekrit-4242";
    let run = running(
        20,
        json!({"trainer_env": {"PODQ_SIM_RUN_SECS": "20", "WANDB_API_KEY": token}}),
    )
    .await;
    no_secret_on_a_command_line(&run.cloud, "stable-1", token);
    let job = wait_job(&run.server, &run.id, "succeeded", &run.log).await;
    assert_eq!(job["failures"], 0, "{job}");
}

/// The binary podq installs as the hosts' agent by default (the worker's own) runs on the
/// TPU VM image, tpu-ubuntu2204-base (Ubuntu 22.04, glibc 2.35): no versioned glibc symbol
/// it needs is newer.
#[test]
fn the_default_agent_binary_needs_no_glibc_newer_than_the_tpu_vm_image_has() {
    let binary = std::fs::read(PODQ).unwrap();
    let needed = podq_worker::build_id::required_glibc(&binary);
    eprintln!("{PODQ} needs glibc {needed:?}");
    assert!(
        needed.is_some(),
        "a glibc binary names the versions it needs"
    );
    assert!(needed <= Some((2, 35)), "needs glibc {needed:?}");
}

/// A v4-64 of 8 hosts and a v4-32 of 4, each with its own worker, take
/// only the jobs of their own accelerator type, and the plan and status show both.
#[tokio::test]
async fn two_pods_take_the_jobs_of_their_own_accelerator_type() {
    let big = FakeCloud::new(json!({"node": named_node("stable-1", "v4-64", HOSTS)}));
    let small = FakeCloud::with_hosts(json!({"node": named_node("stable-2", "v4-32", 4)}), 4);
    let catalog = catalog_with_accelerator("exp02a-l-cycles", "v4-32");
    let server = Server::start_with(common::ServerOptions {
        experiments: catalog.path().to_owned(),
        ..common::ServerOptions::default()
    })
    .await;
    // Two v4-64 runs and one v4-32 run: the v4-32 pod, idle once its run ends, must leave
    // the second v4-64 run to the v4-64 pod.
    let big_runs = [
        server.submit_one("exp01a", json!({})).await,
        server.submit_one("exp01b", json!({})).await,
    ];
    let small_run = server.submit_one("exp02a_01", json!({})).await;
    assert_eq!(server.job(&small_run).await["accelerator"], "v4-32");
    assert_eq!(server.job(&big_runs[0]).await["accelerator"], "v4-64");

    let run_secs = json!({"trainer_env": {"PODQ_SIM_RUN_SECS": "4"}});
    let big_config = big.worker_config(&server.url, json!({}), run_secs.clone());
    let mut small_top = run_secs;
    small_top["pod"] = json!("stable-2");
    small_top["accelerator"] = json!("v4-32");
    let small_config = small.worker_config(&server.url, json!({}), small_top);
    let (_big_worker, big_log) = big.worker(&big_config);
    let (_small_worker, small_log) = small.worker(&small_config);

    let small_job = wait_job(&server, &small_run, "succeeded", &small_log).await;
    let pods_of = |job: &Value| -> Vec<String> {
        attempts(job)
            .iter()
            .map(|a| a["pod"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(pods_of(&small_job), ["stable-2"], "{small_job}");
    for id in &big_runs {
        let job = wait_job(&server, id, "succeeded", &big_log).await;
        assert_eq!(pods_of(&job), ["stable-1"], "{job}");
    }
    // Every v4-32 host ran the trainer; the v4-64's hosts 4 to 7 exist only there.
    for host in 0..4 {
        assert!(
            small.home(host).join(".podq/bin/podq").exists(),
            "host {host}"
        );
    }

    let (code, status) = server.get("/status").await;
    assert_eq!(code, 200, "{status}");
    let mut pods: Vec<(String, String, u64)> = status["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_owned(),
                p["accelerator"].as_str().unwrap().to_owned(),
                p["hosts"].as_u64().unwrap(),
            )
        })
        .collect();
    pods.sort();
    assert_eq!(
        pods,
        [
            ("stable-1".to_owned(), "v4-64".to_owned(), u64::from(HOSTS)),
            ("stable-2".to_owned(), "v4-32".to_owned(), 4)
        ]
    );
    let (code, plan) = server.get("/plan").await;
    assert_eq!(code, 200, "{plan}");
    let pools: Vec<(String, u64)> = plan["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["accelerator"].as_str().unwrap().to_owned(),
                p["pods"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        pools,
        [("v4-32".to_owned(), 1), ("v4-64".to_owned(), 1)],
        "{}",
        plan["pools"]
    );
    // The v4-32 group's runs still to go are its pool's, none of the suite's others: four,
    // as its baseline row (exp02a_03) shares exp01c's run, which the v4-64 trains.
    let small_pool = &plan["pools"][0];
    assert_eq!(small_pool["runs_to_go"], 4, "{}", plan["pools"]);
    let text = server.text("/plan").await;
    assert!(text.contains("v4-32: 1 pod(s)"), "{text}");
    assert!(text.contains("v4-64: 1 pod(s)"), "{text}");
}
