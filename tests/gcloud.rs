//! The gcloud pod driver end to end: a real server and a real worker process driving the
//! fake cloud of tests/fake_cloud/mod.rs, which stands in for `gcloud` and the node's
//! hosts, so the tests assert both behaviour and the exact calls a real gcloud would
//! receive.
//!
//! GCS checkpoint discovery runs against tests/fake_gcloud/fake_gcs.py, a fake GCS endpoint
//! serving a directory.

mod common;
mod fake_cloud;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::gcs::FakeGcs;
use common::{eventually, Process, Server, PODQ};
use fake_cloud::*;
use podq_worker::checkpoints::{CheckpointStore, StoreOptions};
use serde_json::{json, Value};

#[tokio::test]
async fn a_preempted_node_is_recreated_set_up_checked_and_the_run_resumes() {
    let cloud = FakeCloud::new(json!({
        "node": node("READY", json!({"preemptible": true})),
        "settle_describes": 2,
    }));
    // Leftovers of an earlier worker: a tagged trainer group on host 2 and libtpu's lock on
    // host 1 must go; an untagged group that a stale pgid file points at must be left alone.
    let stale = cloud.group_leader_on(2, Some("stale-lease"));
    std::fs::write(
        cloud.host(2).join("tmp/podq-trainer-stale-lease.pgid"),
        stale.to_string(),
    )
    .unwrap();
    let decoy = cloud.group_leader_on(3, None);
    std::fs::write(
        cloud.host(3).join("tmp/podq-trainer-reused.pgid"),
        decoy.to_string(),
    )
    .unwrap();
    std::fs::write(cloud.host(1).join("tmp/libtpu_lockfile"), "4242\n").unwrap();
    // The first ssh to host 2 drops, as a flaky connection does: it must be retried.
    cloud.control("ssh-fail-2", "1");

    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    let config = cloud.worker_config(&server.url, json!({}), json!({}));
    let (_worker, log) = cloud.worker(&config);

    wait_job(&server, &id, "running", &log).await;
    let kept = server.committed_at_least(&id, 1, RUN).await;
    assert!(
        !cloud.group_alive_on(2, stale),
        "the tagged leftover was killed"
    );
    assert!(
        cloud.group_alive_on(3, decoy),
        "an untagged process is never killed"
    );
    // The running trainer holds its own lock there now; the stale one was removed first.
    let lock =
        std::fs::read_to_string(cloud.host(1).join("tmp/libtpu_lockfile")).unwrap_or_default();
    assert_ne!(lock, "4242\n", "the stale lock file is still there");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("host 1: removed stale ") && text.contains("/libtpu_lockfile"),
        "{}",
        log_tail(&log)
    );
    assert!(
        text.contains("host 2: killed leftover trainer process group"),
        "{}",
        log_tail(&log)
    );

    // The calls of the first launch, exactly as gcloud takes them.
    let before = cloud.calls();
    assert_eq!(before[0], tpu_vm("describe", &["--format=json"]));
    let setups = ssh_calls(&before, "setup", 0);
    assert_eq!(hosts_of(&setups), vec![0, 1, 2, 3], "{setups:?}");
    assert_eq!(
        setups.iter().filter(|(_, h)| *h == 2).count(),
        2,
        "the dropped connection to host 2 was retried: {setups:?}"
    );
    for (i, host) in &setups {
        let call = &before[*i];
        assert_eq!(&call[..call.len() - 1], ssh_prefix(*host).as_slice());
        assert_eq!(
            call.last().unwrap(),
            &format!("--command=export PODQ_HOST_INDEX={host} PODQ_HOST_COUNT=4\ncd && {SETUP}")
        );
    }
    assert_eq!(
        hosts_of(&ssh_calls(&before, "preflight", 0)),
        vec![0, 1, 2, 3]
    );
    // The config's copies; the agent binary's are checked in the launch test.
    let mut scps: Vec<&Vec<String>> = before
        .iter()
        .filter(|c| c.get(3).map(String::as_str) == Some("scp"))
        .filter(|c| c.get(5).is_some_and(|dest| dest.contains("podq-stage-")))
        .collect();
    assert_eq!(scps.len(), 4, "{scps:?}");
    // The hosts are staged at once: their calls reach the log in any order.
    scps.sort_by_key(|c| worker_of(c));
    for (host, call) in scps.iter().enumerate() {
        // The config and the host's launch file (its environment and the lease's secret,
        // which never go into a command line) in one copy.
        assert_eq!(call.len(), 11, "{call:?}");
        assert!(call[4].ends_with("-exp01a.yaml"), "{call:?}");
        assert!(call[5].ends_with(&format!("-launch-{host}.sh")), "{call:?}");
        assert_eq!(call[6], "stable-1:/tmp/", "{call:?}");
        assert_eq!(
            call[7..],
            strings(&[
                "--zone=us-central2-b",
                "--project=podq-test",
                &format!("--worker={host}"),
                "--strict-host-key-checking=no"
            ])
        );
    }
    assert!(before.contains(&strings(&[
        "storage",
        "ls",
        "gs://sculptor-tpu-experiments/data/sudoku-extreme-1k-aug-1000"
    ])));
    let launches = ssh_calls(&before, "launch", 0);
    assert_eq!(hosts_of(&launches), vec![0, 1, 2, 3]);
    let first = server.job(&id).await;
    let lease = attempts(&first)[0]["lease_id"].as_str().unwrap().to_owned();
    for (i, host) in &launches {
        let call = &before[*i];
        assert_eq!(&call[..call.len() - 1], ssh_prefix(*host).as_slice());
        let command = call.last().unwrap();
        for needle in [
            // Outside values are shell words, set once and used quoted.
            format!("lease={lease}\n"),
            "--pgid-file \"/tmp/podq-trainer-$lease.pgid\"".to_owned(),
            "setsid nohup \"$agent\" agent".to_owned(),
            "--config-path /tmp/podq/configs --config-name exp01a".to_owned(),
            // The config is checked in the same call, before the agent starts.
            "name=exp01a.yaml\n".to_owned(),
            "sha256sum 2>/dev/null < \"$dir/$name\"".to_owned(),
            // The environment and the secret come from the launch file copied with scp.
            ". \"$dir/$lease.env\"".to_owned(),
        ] {
            assert!(command.contains(&needle), "{needle:?} not in {command}");
        }
        assert!(!command.contains("export "), "{command}");
        // The host's launch file, kept 0600 beside the agent's files, holds them.
        let env_file = cloud.home(*host).join(format!(".podq/agent/{lease}.env"));
        let env = std::fs::read_to_string(&env_file).unwrap();
        for needle in [
            format!("export JAX_PROCESS_INDEX={host}\n"),
            "export JAX_PROCESS_COUNT=4\n".to_owned(),
            format!("export PODQ_HOST_INDEX={host}\n"),
            format!("export PODQ_LEASE_ID={lease}\n"),
            format!("export PODQ_JOB_ID={id}\n"),
            format!("export COORDINATOR_ADDRESS={}:", cloud.address(0)),
        ] {
            assert!(env.contains(&needle), "{needle:?} not in {env}");
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&env_file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", env_file.display());
    }
    // The first start on each host also moved the copied config into place (the second,
    // after the agent was installed, finds it there).
    for host in 0..HOSTS {
        assert!(
            launches.iter().any(|(i, h)| *h == host
                && before[*i]
                    .last()
                    .unwrap()
                    .contains("mv -f /tmp/podq-stage-")),
            "host {host}"
        );
    }
    // The config is on every host, identical.
    let staged: Vec<String> = (0..HOSTS)
        .map(|h| {
            std::fs::read_to_string(cloud.host(h).join("tmp/podq/configs/exp01a.yaml")).unwrap()
        })
        .collect();
    assert!(staged
        .iter()
        .all(|s| s == &staged[0] && s.contains("data_paths")));

    // The node is preempted: every host's trainer dies with it.
    let mark = cloud.calls().len();
    cloud.control("preempt", "");
    let job = wait_job(&server, &id, "succeeded", &log).await;
    let all = attempts(&job);
    assert_eq!(all.len(), 2, "{job}");
    assert_eq!(all[0]["outcome"], "preempted", "{job}");
    let resumed = all[1]["start_step"].as_i64().unwrap();
    assert!(
        resumed >= kept,
        "resumed at {resumed}; {kept} was committed"
    );
    assert_eq!(job["preemptions"], 1);
    assert_eq!(job["failures"], 0);
    assert_eq!(job["last_step"], 8138);

    // After the preemption: delete and create (a slice of 4 hosts is never started), setup
    // on every host, preflight, a new launch, in order.
    let after = cloud.calls();
    let delete = tpu_vm("delete", &["--quiet"]);
    let create = tpu_vm(
        "create",
        &[
            "--accelerator-type=v4-64",
            "--version=tpu-ubuntu2204-base",
            "--preemptible",
            "--network=projects/podq-test/global/networks/default",
        ],
    );
    let deleted = (mark..after.len())
        .find(|i| after[*i] == delete)
        .unwrap_or_else(|| panic!("no delete after the preemption: {:?}", &after[mark..]));
    let started = (deleted..after.len())
        .find(|i| after[*i] == create)
        .unwrap_or_else(|| panic!("no create after the delete: {:?}", &after[mark..]));
    assert!(
        !after.iter().any(|c| c.get(3).is_some_and(|v| v == "start")),
        "a multi-host node is never started"
    );
    let setups = ssh_calls(&after, "setup", started);
    assert_eq!(hosts_of(&setups), vec![0, 1, 2, 3]);
    let preflights = ssh_calls(&after, "preflight", setups.last().unwrap().0);
    assert_eq!(hosts_of(&preflights), vec![0, 1, 2, 3]);
    let relaunch = ssh_calls(&after, "launch", preflights.last().unwrap().0);
    assert_eq!(hosts_of(&relaunch), vec![0, 1, 2, 3]);
    let lease2 = all[1]["lease_id"].as_str().unwrap();
    assert!(after[relaunch[0].0]
        .last()
        .unwrap()
        .contains(&format!("lease={lease2}\n")));
    // A recreated node has fresh disks: the setup ran once more, on empty hosts.
    for host in 0..HOSTS {
        let setup_log = std::fs::read_to_string(cloud.home(host).join("setup.log")).unwrap();
        assert_eq!(setup_log.lines().count(), 1, "host {host}: {setup_log}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("a slice of 4 hosts cannot be started again")
            && text.contains("deleting node stable-1 (it is PREEMPTED)"),
        "{text}"
    );
    assert!(
        text.contains("running the setup command on 4 hosts"),
        "{text}"
    );
}

#[tokio::test]
async fn a_cancelled_run_is_stopped_on_the_hosts_by_their_agents() {
    let cloud = FakeCloud::new(json!({"node": node("READY", json!({"preemptible": true}))}));
    let server = Server::start().await;
    let id = server.submit_one("exp01b", json!({})).await;
    let config = cloud.worker_config(
        &server.url,
        json!({}),
        json!({"trainer_env": {"PODQ_SIM_RUN_SECS": "300"}}),
    );
    let (_worker, log) = cloud.worker(&config);
    wait_job(&server, &id, "running", &log).await;
    let groups = eventually(SHORT, "a tagged trainer on every host", || async {
        let groups = trainer_groups(&cloud);
        (groups.len() == HOSTS as usize
            && groups
                .iter()
                .all(|(host, pg)| cloud.group_alive_on(*host, *pg)))
        .then_some(groups)
    })
    .await;
    eventually(SHORT, "step progress", || async {
        server.job(&id).await["last_step"]
            .as_i64()
            .filter(|s| *s > 0)
    })
    .await;

    let mark = cloud.calls().len();
    let (status, body) = server.post(&format!("/jobs/{id}/cancel"), json!({})).await;
    assert!(status == 200 || status == 202, "{status} {body}");
    let job = eventually(RUN, "the attempt to end cancelled", || async {
        let job = server.job(&id).await;
        attempts(&job)
            .first()
            .filter(|a| a["outcome"] == "cancelled")
            .map(|_| job)
    })
    .await;
    for (host, pgid) in &groups {
        assert!(
            !cloud.group_alive_on(*host, *pgid),
            "host {host}: trainer group {pgid} outlived the stop"
        );
    }
    // The trainers got SIGTERM from their agents and said so with their own exit status
    // (128 + 15), which the agents reported.
    let first = &attempts(&job)[0];
    assert_eq!(first["exit_codes"], json!([143, 143, 143, 143]), "{first}");
    assert!(
        first["message"]
            .as_str()
            .unwrap()
            .contains("every host exited within the grace period"),
        "{first}"
    );
    // No ssh call was needed to stop them: not the TERM, not the last-resort KILL.
    let calls = cloud.calls();
    assert!(
        ssh_calls(&calls, "term", mark).is_empty(),
        "{:?}",
        &calls[mark..]
    );
    assert!(
        ssh_calls(&calls, "kill", mark).is_empty(),
        "{:?}",
        &calls[mark..]
    );
}

#[tokio::test]
async fn preflight_names_the_host_and_the_check_that_failed() {
    let cloud = FakeCloud::new(json!({"node": node("READY", json!({"preemptible": true}))}));
    // Hosts provisioned by hand: host 2 is at another commit, host 1 has another JAX,
    // host 3 lacks the dataset.
    let provision = |host: u32, message: &str, jax: &str, dataset: bool| {
        let home = cloud.home(host);
        let code = home.join("trm");
        if dataset {
            std::fs::create_dir_all(code.join("data/sudoku")).unwrap();
        }
        std::fs::create_dir_all(&code).unwrap();
        let git = |args: &[&str]| {
            let status = Command::new("git")
                .args(args)
                .current_dir(&code)
                .env("HOME", &home)
                .env("GIT_AUTHOR_DATE", "2025-01-01T00:00:00Z")
                .env("GIT_COMMITTER_DATE", "2025-01-01T00:00:00Z")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
        };
        if !code.join(".git").exists() {
            git(&["-c", "init.defaultBranch=main", "init", "-q"]);
        }
        git(&[
            "-c",
            "user.name=podq",
            "-c",
            "user.email=podq@example.com",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            message,
        ]);
        std::fs::write(home.join("jax_version"), format!("{jax}\n")).unwrap();
    };
    provision(0, "pinned", "0.4.35", true);
    provision(1, "pinned", "0.4.30", true);
    provision(2, "something else", "0.4.35", true);
    provision(3, "pinned", "0.4.35", false);

    let server = Server::start().await;
    let config = cloud.worker_config(
        &server.url,
        json!({"setup_command": null, "setup_on_start": false}),
        json!({}),
    );
    let (_worker, log) = cloud.worker(&config);
    let preflight = eventually(SHORT, "a failed preflight on the pod", || async {
        let (status, pod) = server.get("/pods/stable-1").await;
        (status == 200 && pod["preflight"]["passed"] == false).then(|| pod["preflight"].clone())
    })
    .await;
    let failed: Vec<(Option<u64>, String)> = preflight["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["host"].as_u64(), f["check"].as_str().unwrap().to_owned()))
        .collect();
    for expected in [
        (Some(2), "code_commit"),
        (Some(1), "jax_version"),
        (Some(3), "dataset"),
    ] {
        assert!(
            failed.contains(&(expected.0, expected.1.to_owned())),
            "{expected:?} not in {preflight}"
        );
    }
    assert_eq!(failed.len(), 3, "{preflight}");
    let commit = preflight["failures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "code_commit")
        .unwrap();
    assert!(
        commit["message"].as_str().unwrap().contains("differs from"),
        "{commit}"
    );

    // Fixed by hand, the pod passes at the next try and is offered work.
    for host in [1, 2] {
        std::fs::remove_dir_all(cloud.home(host).join("trm")).unwrap();
        provision(host, "pinned", "0.4.35", true);
    }
    std::fs::create_dir_all(cloud.home(3).join("trm/data/sudoku")).unwrap();
    let id = server.submit_one("exp01c", json!({})).await;
    wait_job(&server, &id, "running", &log).await;
}

#[tokio::test]
async fn a_preempted_spot_node_is_deleted_and_created_again_with_its_spec() {
    let mut lost = node("PREEMPTED", json!({"spot": true}));
    lost["labels"] = json!({"team": "trm"});
    // Autocheckpoint was on: it is carried through the recreate, on gcloud's alpha track,
    // the only one whose create takes --autocheckpoint-enabled.
    lost["autocheckpointEnabled"] = json!(true);
    // The first create finds no capacity; the next one succeeds.
    let cloud = FakeCloud::new(json!({"node": lost, "create_fails": 1, "settle_describes": 2}));
    let server = Server::start().await;
    let config = cloud.worker_config(&server.url, json!({"capacity": "spot"}), json!({}));
    let (_worker, log) = cloud.worker(&config);
    eventually(SHORT, "the recreated pod to pass preflight", || async {
        let (_, pod) = server.get("/pods/stable-1").await;
        let calls = cloud.calls();
        // A passed preflight is sent with the lease request that follows it.
        (pod["state"] == "READY" && !ssh_calls(&calls, "preflight", 0).is_empty()).then_some(())
    })
    .await;
    let calls = cloud.calls();
    let delete = tpu_vm("delete", &["--quiet"]);
    let mut create = tpu_vm(
        "create",
        &[
            "--accelerator-type=v4-64",
            "--version=tpu-ubuntu2204-base",
            "--spot",
            "--autocheckpoint-enabled",
            "--network=projects/podq-test/global/networks/default",
            "--labels=team=trm",
        ],
    );
    create.insert(0, "alpha".into());
    assert_eq!(
        calls.iter().filter(|c| **c == delete).count(),
        1,
        "{calls:?}"
    );
    assert_eq!(
        calls.iter().filter(|c| **c == create).count(),
        2,
        "the create that found no capacity was tried again: {calls:?}"
    );
    assert!(
        !calls.iter().any(|c| c.get(3).is_some_and(|v| v == "start")),
        "a spot node is not restarted"
    );
    let created = calls.iter().rposition(|c| *c == create).unwrap();
    let setups = ssh_calls(&calls, "setup", created);
    assert_eq!(hosts_of(&setups), vec![0, 1, 2, 3]);
    assert!(ssh_calls(&calls, "preflight", setups.last().unwrap().0).len() >= 4);
    let state = cloud.state();
    assert_eq!(state["node"]["state"], "READY");
    assert_eq!(state["node"]["labels"]["team"], "trm");
    assert_eq!(state["node"]["autocheckpointEnabled"], true);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("no more capacity"), "{text}");
}

#[tokio::test]
async fn a_suspended_queued_resource_is_deleted_and_created_again() {
    let mut lost = node("PREEMPTED", json!({"spot": true}));
    lost["queuedResource"] = json!(format!(
        "projects/{PROJECT}/locations/{ZONE}/queuedResources/stable-1-qr"
    ));
    let cloud = FakeCloud::new(json!({
        "node": lost,
        "qr": {
            "name": format!("projects/{PROJECT}/locations/{ZONE}/queuedResources/stable-1-qr"),
            "state": {"state": "SUSPENDED"},
        },
        "settle_describes": 3,
    }));
    let server = Server::start().await;
    let config = cloud.worker_config(
        &server.url,
        json!({"capacity": "queued", "queued_resource": "stable-1-qr"}),
        json!({}),
    );
    let (_worker, log) = cloud.worker(&config);
    eventually(
        SHORT,
        "the node of the new queued resource to pass preflight",
        || async {
            let (_, pod) = server.get("/pods/stable-1").await;
            (pod["state"] == "READY" && !ssh_calls(&cloud.calls(), "preflight", 0).is_empty())
                .then_some(())
        },
    )
    .await;
    let calls = cloud.calls();
    let delete = queued_resources("delete", &["--force", "--quiet"]);
    let create = queued_resources(
        "create",
        &[
            "--node-id=stable-1",
            "--accelerator-type=v4-64",
            "--runtime-version=tpu-ubuntu2204-base",
            "--spot",
            "--network=projects/podq-test/global/networks/default",
        ],
    );
    let deleted = calls.iter().position(|c| *c == delete).expect("delete");
    let created = calls.iter().position(|c| *c == create).expect("create");
    assert!(deleted < created);
    assert!(calls.contains(&queued_resources("describe", &["--format=json"])));
    let setups = ssh_calls(&calls, "setup", created);
    assert_eq!(hosts_of(&setups), vec![0, 1, 2, 3]);
    let text = std::fs::read_to_string(&log).unwrap();
    for progress in [
        "waiting for queued resource stable-1-qr: WAITING_FOR_RESOURCES",
        "waiting for queued resource stable-1-qr: PROVISIONING",
    ] {
        assert!(
            text.contains(progress),
            "{progress:?} not in the log:\n{text}"
        );
    }
    assert_eq!(cloud.state()["qr"]["state"]["state"], "ACTIVE");
}

#[tokio::test]
async fn gcs_discovery_never_takes_an_uncommitted_step() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("podq-bucket/checkpoints/g/e");
    orbax_step(&dir, "step_100", true);
    orbax_step(&dir, "step_200", true);
    orbax_step(&dir, "step_300", false);
    std::fs::create_dir_all(dir.join("metrics")).unwrap();
    std::fs::write(dir.join("metrics/log.txt"), b"x").unwrap();
    let gcs = FakeGcs::start(root.path());

    let uri = "gs://podq-bucket/checkpoints/g/e";
    let store = CheckpointStore::open_with(uri, &StoreOptions::gcs_emulator(&gcs.url)).unwrap();
    let found = store.list().await.unwrap();
    let seen: Vec<(i64, bool, String)> = found
        .iter()
        .map(|c| (c.step, c.committed, c.uri.clone()))
        .collect();
    assert_eq!(
        seen,
        vec![
            (100, true, format!("{uri}/step_100")),
            (200, true, format!("{uri}/step_200")),
            (300, false, format!("{uri}/step_300")),
        ]
    );
    let newest = store.newest_committed().await.unwrap().unwrap();
    assert_eq!(newest.step, 200, "the newest step lacks commit_success.txt");
    assert!(!store.verify(&format!("{uri}/step_300")).await.unwrap());
    assert!(store.verify(&format!("{uri}/step_200")).await.unwrap());
    assert!(!store.verify(&format!("{uri}/step_400")).await.unwrap());
    // A marker that goes away (a step being rewritten) stops the step from counting.
    std::fs::remove_file(dir.join("step_200/commit_success.txt")).unwrap();
    assert!(!store.verify(&format!("{uri}/step_200")).await.unwrap());
    assert_eq!(store.newest_committed().await.unwrap().unwrap().step, 100);
    let requests = std::fs::read_to_string(root.path().join("requests.log")).unwrap();
    assert!(requests.contains("list-type=2"), "{requests}");
    drop(gcs);
}

#[tokio::test]
async fn a_job_on_gcs_resumes_from_the_newest_committed_step_only() {
    let root = tempfile::tempdir().unwrap();
    let objects = root.path().join("gcs");
    let dir = objects.join("podq-bucket/checkpoints/exp01-model-scaling/exp01a");
    orbax_step(&dir, "step_100", true);
    orbax_step(&dir, "step_200", true);
    orbax_step(&dir, "step_300", false);
    let gcs = FakeGcs::start(&objects);
    let (_server, url) = gs_server(root.path(), "gs://podq-bucket");
    let client = reqwest::Client::new();
    let answer: Value = client
        .post(format!("{url}/api/v1/jobs"))
        .json(&json!({"experiments": ["exp01a"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = answer["created"][0]["job_id"].as_str().unwrap().to_owned();

    // A trainer that fails its first attempt (after the store was scanned) and reports one
    // step past what it was given on the second.
    let trainer = root.path().join("trainer.sh");
    std::fs::write(
        &trainer,
        "echo \"load_checkpoint=$1\"\n\
         if [ \"$PODQ_ATTEMPT\" = 1 ]; then sleep 1; exit 3; fi\n\
         echo 'PODQ {\"event\":\"metrics\",\"step\":201,\"values\":{\"train/lm_loss\":0.5}}'\n",
    )
    .unwrap();
    let mut cmd = Command::new(PODQ);
    for (key, _) in std::env::vars() {
        if key.starts_with("PODQ_") || key.starts_with("GOOGLE_") {
            cmd.env_remove(key);
        }
    }
    let worker = cmd
        .args([
            "worker", "--server", &url, "--pod", "gcs-pod", "--hosts", "1",
        ])
        .arg("--pod-root")
        .arg(root.path().join("pod"))
        .args(["--status-poll-s", "0.2", "--checkpoint-scan-s", "0.2"])
        .args(["--metrics-flush-s", "0.2", "--lease-wait-s", "2"])
        .arg("--trainer-command")
        .arg(format!("sh '{}' {{resume_from}}", trainer.display()))
        .env("GOOGLE_BASE_URL", &gcs.url)
        .env("GOOGLE_SKIP_SIGNATURE", "true")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.path().join("worker.log")).unwrap())
        .spawn()
        .unwrap();
    let _worker = Process {
        child: worker,
        name: "gcs worker".into(),
    };
    let job: Value = eventually(RUN, "the job to succeed", || async {
        let job: Value = client
            .get(format!("{url}/api/v1/jobs/{id}"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (job["state"] == "succeeded").then_some(job)
    })
    .await;
    let checkpoints: Vec<(i64, bool)> = job["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["step"].as_i64().unwrap(), c["committed"] == true))
        .collect();
    assert!(checkpoints.contains(&(300, false)), "{job}");
    assert!(checkpoints.contains(&(200, true)), "{job}");
    assert!(!checkpoints.contains(&(300, true)), "{job}");
    let all = attempts(&job);
    assert_eq!(all.len(), 2, "{job}");
    assert_eq!(all[1]["start_step"], 200, "{job}");
    let tail = all[1]["log_tail"].as_str().unwrap_or_default();
    assert!(
        tail.contains(
            "load_checkpoint=gs://podq-bucket/checkpoints/exp01-model-scaling/exp01a/step_200"
        ),
        "{tail}"
    );
    drop(gcs);
}

#[tokio::test]
async fn a_preempted_eight_host_slice_is_deleted_and_created_again_whole_never_started() {
    const EIGHT: u32 = 8;
    let cloud = FakeCloud::with_hosts(
        json!({"node": full_node("READY", EIGHT), "settle_describes": 2}),
        EIGHT,
    );
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    // Fewer looks at the node than the other tests take: eight hosts are load enough.
    let config = cloud.worker_config(
        &server.url,
        json!({"poll_s": 0.3}),
        json!({"hosts": EIGHT, "status_poll_s": 1}),
    );
    let (_worker, log) = cloud.worker(&config);
    wait_job(&server, &id, "running", &log).await;
    let kept = server.committed_at_least(&id, 1, RUN).await;

    // The spec was captured from the READY node and kept where a restarted worker finds it.
    let saved: Value = serde_json::from_str(
        &std::fs::read_to_string(
            cloud
                .root()
                .join("state/gcloud-us-central2-b-stable-1.node-spec.json"),
        )
        .expect("the node's spec in the state directory"),
    )
    .unwrap();
    assert_eq!(saved["capturedState"], "READY", "{saved}");
    assert_eq!(
        spec_of(&saved["spec"]),
        spec_of(&full_node("READY", EIGHT)),
        "{saved}"
    );

    let mark = cloud.calls().len();
    cloud.control("preempt", "");
    let job = wait_job(&server, &id, "succeeded", &log).await;
    let all = attempts(&job);
    assert_eq!(all.len(), 2, "{job}");
    assert_eq!(all[0]["outcome"], "preempted", "{job}");
    assert!(all[1]["start_step"].as_i64().unwrap() >= kept, "{job}");
    assert_eq!(job["preemptions"], 1);
    assert_eq!(job["failures"], 0);

    let calls = cloud.calls();
    let after = &calls[mark..];
    assert!(
        !calls.iter().any(|c| verb(c) == Some("start")),
        "a slice of 8 hosts is never started: {after:?}"
    );
    let actions: Vec<&Vec<String>> = after
        .iter()
        .filter(|c| matches!(verb(c), Some("delete" | "create")))
        .collect();
    assert_eq!(
        actions,
        [&tpu_vm("delete", &["--quiet"]), &full_create(),],
        "one delete, then one create with every flag of the spec"
    );
    // The node that came back is the node that was lost.
    let state = cloud.state();
    assert_eq!(
        spec_of(&state["node"]),
        spec_of(&full_node("READY", EIGHT)),
        "{state}"
    );
    let created = calls.iter().rposition(|c| *c == full_create()).unwrap();
    let setups = ssh_calls(&calls, "setup", created);
    assert_eq!(hosts_of(&setups), (0..EIGHT).collect::<Vec<_>>());
    assert_eq!(hosts_of(&ssh_calls(&calls, "preflight", created)).len(), 8);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("a slice of 8 hosts cannot be started again"),
        "{}",
        log_tail(&log)
    );
}

#[tokio::test]
async fn a_restarted_worker_creates_a_node_that_is_gone_from_the_spec_it_saved() {
    let cloud = FakeCloud::new(json!({"node": full_node("READY", HOSTS), "settle_describes": 1}));
    let server = Server::start().await;
    let config = cloud.worker_config(&server.url, json!({}), json!({}));
    let (mut first, _) = cloud.worker(&config);
    let spec_file = cloud
        .root()
        .join("state/gcloud-us-central2-b-stable-1.node-spec.json");
    eventually(SHORT, "the node's spec saved", || async {
        spec_file.exists().then_some(())
    })
    .await;
    first.kill();

    // The node is deleted while no worker runs: no describe can tell what it was.
    let mut state = cloud.state();
    state["node"] = Value::Null;
    std::fs::write(cloud.root().join("state.json"), state.to_string()).unwrap();
    let mark = cloud.calls().len();
    let (_second, log) = cloud.worker(&config);
    eventually(SHORT, "the node created again and READY", || async {
        let (_, pod) = server.get("/pods/stable-1").await;
        (pod["state"] == "READY" && cloud.state()["node"]["state"] == "READY").then_some(())
    })
    .await;
    let calls = cloud.calls();
    let creates: Vec<&Vec<String>> = calls[mark..]
        .iter()
        .filter(|c| verb(c) == Some("create"))
        .collect();
    assert_eq!(creates, [&full_create()], "{}", log_tail(&log));
    assert!(!calls[mark..].iter().any(|c| verb(c) == Some("delete")));
}

#[tokio::test]
async fn a_queued_resource_that_failed_for_quota_is_held_not_recreated_in_a_loop() {
    let mut lost = node("PREEMPTED", json!({"spot": true}));
    lost["queuedResource"] = json!(format!(
        "projects/{PROJECT}/locations/{ZONE}/queuedResources/stable-1-qr"
    ));
    let quota = "Quota limit 'TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI' has been \
                 exceeded. Limit: 0 in zone us-central2-b.";
    let cloud = FakeCloud::new(json!({
        "node": lost,
        "qr": {
            "name": format!("projects/{PROJECT}/locations/{ZONE}/queuedResources/stable-1-qr"),
            "state": {"state": "SUSPENDED", "stateInitiator": "SERVICE"},
        },
        // The first new request finds no capacity, the second runs into the quota.
        "qr_create_fails": [
            {"code": 8, "message": "There is no more capacity in the zone \"us-central2-b\""},
            {"code": 8, "message": quota},
        ],
        "settle_describes": 2,
    }));
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    let config = cloud.worker_config(
        &server.url,
        json!({"capacity": "queued", "queued_resource": "stable-1-qr", "poll_s": 0.3}),
        json!({}),
    );
    let (_worker, log) = cloud.worker(&config);
    let recovery = eventually(SHORT, "the pod to show why it is held", || async {
        let (_, pod) = server.get("/pods/stable-1").await;
        pod["recovery"]
            .as_str()
            .filter(|r| r.contains("Quota limit"))
            .map(str::to_owned)
    })
    .await;
    assert!(
        recovery.contains("held: queued resource stable-1-qr FAILED, over quota")
            && recovery.contains("delete it"),
        "{recovery}"
    );
    let qr_calls = |kind: &str| {
        cloud
            .calls()
            .iter()
            .filter(|c| c.get(2).is_some_and(|g| g == "queued-resources") && verb(c) == Some(kind))
            .count()
    };
    // Held: many looks later (poll_s is 0.3), nothing more was deleted or created.
    let describes = qr_calls("describe");
    eventually(SHORT, "the worker to keep looking", || async {
        (qr_calls("describe") >= describes + 10).then_some(())
    })
    .await;
    assert_eq!(qr_calls("create"), 2, "{:?}", cloud.calls());
    assert_eq!(qr_calls("delete"), 2, "{:?}", cloud.calls());
    let job = server.job(&id).await;
    assert_eq!(job["state"], "queued", "{job}");
    assert!(attempts(&job).is_empty(), "{job}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("queued resource stable-1-qr FAILED, no capacity"),
        "{}",
        log_tail(&log)
    );

    // A person raises the quota and deletes the failed request: podq creates it anew and
    // the job runs.
    let deleted = Command::new(format!("{FAKE_DIR}/gcloud"))
        .args(queued_resources("delete", &["--force", "--quiet"]))
        .env("FAKE_GCLOUD_ROOT", cloud.root())
        .status()
        .unwrap();
    assert!(deleted.success());
    wait_job(&server, &id, "running", &log).await;
    assert_eq!(qr_calls("create"), 3);
}

/// The two texts pools and pods once read differently (issue 67), read as a pool reads them
/// (worker/src/pod/gcloud/errors.rs): a per-minute request quota is waited out and asked
/// again, never held; billing disabled, with no code at all, is held for a person, never
/// retried as capacity.
#[tokio::test]
async fn a_per_minute_quota_is_retried_and_billing_disabled_is_held() {
    let mut lost = node("PREEMPTED", json!({"spot": true}));
    lost["queuedResource"] = json!(format!(
        "projects/{PROJECT}/locations/{ZONE}/queuedResources/stable-1-qr"
    ));
    let billing = "Project my-project (#123456789) has billing disabled. Please enable it.";
    let cloud = FakeCloud::new(json!({
        "node": lost,
        "qr": {
            "name": format!("projects/{PROJECT}/locations/{ZONE}/queuedResources/stable-1-qr"),
            "state": {"state": "SUSPENDED", "stateInitiator": "SERVICE"},
        },
        // The first request is over the per-minute limit; the next one is made, and fails
        // for billing.
        "qr_create_refusals": [
            "ERROR: (gcloud.compute.tpus.queued-resources.create) RESOURCE_EXHAUSTED: Quota \
             exceeded for quota metric 'Create requests' and limit 'Create requests per \
             minute' of service 'tpu.googleapis.com' for consumer 'project_number:123456789'."
        ],
        "qr_create_fails": [{"message": billing}],
        "settle_describes": 2,
    }));
    let server = Server::start().await;
    server.submit_one("exp01a", json!({})).await;
    let config = cloud.worker_config(
        &server.url,
        json!({"capacity": "queued", "queued_resource": "stable-1-qr", "poll_s": 0.3}),
        json!({}),
    );
    let (_worker, log) = cloud.worker(&config);
    let recovery = eventually(SHORT, "the pod to show why it is held", || async {
        let (_, pod) = server.get("/pods/stable-1").await;
        pod["recovery"]
            .as_str()
            .filter(|r| r.contains("billing disabled"))
            .map(str::to_owned)
    })
    .await;
    assert!(
        recovery.contains("held: queued resource stable-1-qr FAILED, not allowed"),
        "{recovery}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("over a per-minute request limit") && !text.contains("held: cannot create"),
        "{}",
        log_tail(&log)
    );
    let qr_creates = || {
        cloud
            .calls()
            .iter()
            .filter(|c| {
                c.get(2).is_some_and(|g| g == "queued-resources") && verb(c) == Some("create")
            })
            .count()
    };
    // The refused create was asked again; the failed one is held, not created again.
    let describes = cloud.calls().len();
    eventually(SHORT, "the worker to keep looking", || async {
        (cloud.calls().len() >= describes + 10).then_some(())
    })
    .await;
    assert_eq!(qr_creates(), 2, "{:?}", cloud.calls());
}

#[tokio::test]
async fn a_node_that_still_says_ready_after_its_hosts_vanished_is_looked_at_again() {
    use podq_worker::pod::gcloud::{GcloudPod, GcloudSettings};
    use podq_worker::pod::PodDriver;

    let cloud = FakeCloud::new(json!({"node": node("READY", json!({"preemptible": true}))}));
    let pod = GcloudPod::new(
        "stable-1",
        "v4-64",
        HOSTS,
        GcloudSettings {
            binary: gcloud_wrapper(&cloud).display().to_string(),
            zone: ZONE.into(),
            project: Some(PROJECT.into()),
            state_dir: Some(cloud.root().join("state")),
            host_loss_grace_s: 2.0,
            host_loss_checks: 8,
            retries: 0,
            ..GcloudSettings::default()
        },
    )
    .unwrap();
    // A healthy node is READY however often it is asked.
    let healthy = GcloudPod::new(
        "stable-1",
        "v4-64",
        HOSTS,
        GcloudSettings {
            host_loss_grace_s: 0.05,
            ..pod.settings().clone()
        },
    )
    .unwrap();
    assert!(healthy.confirm_status().await.unwrap().is_ready());

    // The hosts die; the API says PREEMPTED only 8 s later.
    cloud.control("vanish", r#"{"preempt_after_s": 8, "mode": "refuse"}"#);
    let started = std::time::Instant::now();
    assert_eq!(pod.status().await.unwrap().state, "READY");
    let ssh = Command::new(gcloud_wrapper(&cloud))
        .args(["compute", "tpus", "tpu-vm", "ssh", "stable-1"])
        .args([format!("--zone={ZONE}"), format!("--project={PROJECT}")])
        .args(["--worker=2", "--command=true"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(ssh.code(), Some(255), "a vanished host refuses ssh");
    let confirmed = pod.confirm_status().await.unwrap();
    assert_eq!(confirmed.state, "PREEMPTED", "{confirmed:?}");
    assert!(confirmed.is_preempted());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(7500) && waited < Duration::from_secs(30),
        "{waited:?}"
    );
}

#[tokio::test]
async fn the_fake_gcloud_behaves_like_gcloud_where_it_hurts() {
    let cloud = FakeCloud::new(json!({"node": node("READY", json!({"preemptible": true}))}));
    let gcloud = gcloud_wrapper(&cloud);
    let run = |args: &[&str]| {
        let output = Command::new(&gcloud)
            .args(["compute", "tpus"])
            .args(args)
            .args([format!("--zone={ZONE}"), format!("--project={PROJECT}")])
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let ssh = |host: u32, command: &str| {
        run(&[
            "tpu-vm",
            "ssh",
            "stable-1",
            &format!("--worker={host}"),
            &format!("--command={command}"),
        ])
    };
    // Connection attempts that fail are retried by gcloud itself.
    cloud.control("ssh-flaky-1", "3");
    let (code, out, err) = ssh(1, "echo $USER");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), whoami());
    assert_eq!(
        err.matches("Retrying: SSH command error").count(),
        3,
        "{err}"
    );
    // `user@node` picks the remote user.
    let (_, out, _) = run(&[
        "tpu-vm",
        "ssh",
        "trainer@stable-1",
        "--worker=0",
        "--command=echo $USER:$HOME",
    ]);
    assert!(out.trim() == "trainer:/home/trainer", "{out}");
    // A dropped connection runs the command again.
    cloud.control("ssh-drop-0", "0.3");
    let (code, _, err) = ssh(0, "echo run >> ~/runs; sleep 1");
    assert_eq!(code, Some(0), "{err}");
    let runs = std::fs::read_to_string(cloud.home(0).join("runs")).unwrap();
    assert_eq!(runs.lines().count(), 2, "{runs}");
    // Each host has its own /tmp; a lock file owned by someone else needs sudo.
    cloud.control("lock-owner-3", "root2");
    let (code, _, err) = ssh(3, "rm -f /tmp/libtpu_lockfile");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("Operation not permitted"), "{err}");
    assert!(!cloud.host(2).join("tmp/libtpu_lockfile").exists());
    let (code, _, _) = ssh(3, "sudo rm -f /tmp/libtpu_lockfile");
    assert_eq!(code, Some(0));
    assert!(!cloud.host(3).join("tmp/libtpu_lockfile").exists());
    // A slice of several hosts cannot be started.
    let (code, _, err) = run(&["tpu-vm", "start", "stable-1"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("only single-host TPU VMs"), "{err}");
    // Maintenance shows in health while the node stays READY.
    cloud.control("maintenance", "2");
    let describe = || {
        let (_, out, _) = run(&["tpu-vm", "describe", "stable-1", "--format=json"]);
        serde_json::from_str::<Value>(&out).unwrap()
    };
    let under = describe();
    assert_eq!(
        (under["state"].as_str(), under["health"].as_str()),
        (Some("READY"), Some("UNHEALTHY_MAINTENANCE"))
    );
    // ssh to a preempted node is refused at once, with gcloud's words.
    cloud.control("preempt", "");
    let (code, _, err) = ssh(0, "true");
    assert_eq!(code, Some(1));
    assert!(err.contains("terminal state \"PREEMPTED\""), "{err}");
    // A node being created has no endpoints yet.
    run(&["tpu-vm", "delete", "stable-1", "--quiet"]);
    let (code, _, err) = run(&[
        "tpu-vm",
        "create",
        "stable-1",
        "--accelerator-type=v4-64",
        "--version=tpu-ubuntu2204-base",
        "--spot",
        "--metadata=^;^a=1,2;b=3",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let creating = describe();
    assert_eq!(creating["state"], "CREATING");
    assert!(creating.get("networkEndpoints").is_none(), "{creating}");
    assert_eq!(creating["metadata"], json!({"a": "1,2", "b": "3"}));
    // A flag gcloud does not have is refused.
    let (code, _, err) = run(&["tpu-vm", "create", "other", "--version=v", "--preemptable"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("unrecognized arguments: --preemptable"),
        "{err}"
    );
}

#[tokio::test]
async fn a_single_host_node_is_started_and_a_slice_is_recreated() {
    use podq_worker::pod::PodDriver;

    let said = std::sync::Mutex::new(Vec::<String>::new());
    let progress = |what: String| said.lock().unwrap().push(what);

    // One host: `tpu-vm start` brings a preempted node back as it was.
    let single = FakeCloud::with_hosts(
        json!({"node": node_of("PREEMPTED", json!({"preemptible": true}), 1),
               "settle_describes": 1}),
        1,
    );
    let pod = local_driver(&single, 1);
    assert!(pod.status().await.unwrap().is_preempted());
    pod.recover(&progress).await.unwrap();
    let verbs: Vec<String> = single
        .calls()
        .iter()
        .filter_map(|c| verb(c).map(str::to_owned))
        .filter(|v| v != "describe")
        .collect();
    assert_eq!(verbs, ["start"], "{:?}", single.calls());

    // Four hosts: never started; deleted and created again.
    let slice = FakeCloud::new(json!({
        "node": node("PREEMPTED", json!({"preemptible": true})),
        "settle_describes": 1,
    }));
    let pod = local_driver(&slice, HOSTS);
    assert!(pod.status().await.unwrap().is_preempted());
    pod.recover(&progress).await.unwrap();
    let verbs: Vec<String> = slice
        .calls()
        .iter()
        .filter_map(|c| verb(c).map(str::to_owned))
        .filter(|v| v != "describe")
        .collect();
    assert_eq!(verbs, ["delete", "create"], "{:?}", slice.calls());
    assert!(pod.status().await.unwrap().is_ready());
    let said = said.lock().unwrap();
    assert!(
        said.iter()
            .any(|s| s.contains("a slice of 4 hosts cannot be started again")),
        "{said:?}"
    );
}

/// What a dropped connection makes gcloud do: run the command again. Every ssh call that
/// starts an agent is hit, after the command ran, so each host gets its start twice.
#[tokio::test]
async fn a_launch_whose_every_ssh_is_run_twice_still_runs_one_trainer_per_host() {
    let cloud = FakeCloud::new(json!({"node": node("READY", json!({"preemptible": true}))}));
    let server = Server::start().await;
    // The hosts already have this podq, so the first ssh of the launch starts the agent
    // (rather than finding it missing); its connection then drops and gcloud runs it again.
    for host in 0..HOSTS {
        let bin = cloud.home(host).join(".podq/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(PODQ, bin.join("podq")).unwrap();
        // Dropped once the command has run (or 20 s into it): a fixed 0.3 s raced the
        // start itself on a loaded machine, hanging up before any agent began.
        cloud.control(&format!("ssh-drop-{host}"), "20 agent --worker-url");
    }
    let id = server.submit_one("exp01a", json!({})).await;
    let config = cloud.worker_config(&server.url, json!({}), json!({}));
    let (_worker, log) = cloud.worker(&config);
    wait_job(&server, &id, "running", &log).await;
    eventually(SHORT, "a tagged trainer on every host", || async {
        (trainer_groups(&cloud).len() == HOSTS as usize).then_some(())
    })
    .await;
    let calls = cloud.calls();
    let launches = ssh_calls(&calls, "launch", 0);
    for host in 0..HOSTS {
        assert!(
            !cloud
                .root()
                .join(format!("control/ssh-drop-{host}"))
                .exists(),
            "host {host}: the drop was used"
        );
        assert!(launches.iter().any(|(_, h)| *h == host), "{launches:?}");
    }
    let job = wait_job(&server, &id, "succeeded", &log).await;
    assert_eq!(attempts(&job).len(), 1, "{job}");
    assert_eq!(job["failures"], 0);
    // One trainer per host: the group each host's agent started is the only one, and
    // each host's log holds one run.
    let lease = attempts(&job)[0]["lease_id"].as_str().unwrap().to_owned();
    for host in 0..HOSTS {
        let agent_dir = cloud.home(host).join(".podq/agent").join(&lease);
        let log = std::fs::read_to_string(agent_dir.join("trainer.log")).unwrap();
        let starts = log.matches(&format!("(host {host} of {HOSTS})")).count();
        assert_eq!(starts, 1, "host {host} ran {starts} trainers:\n{log}");
        let agent_log = std::fs::read_to_string(
            cloud
                .home(host)
                .join(format!(".podq/agent/{lease}.agent.log")),
        )
        .unwrap_or_default();
        // The repeated start found the lease's agent and left.
        assert!(
            agent_log.contains("already has an agent"),
            "host {host}: {agent_log}"
        );
        assert!(!agent_log.contains("adopting"), "{agent_log}");
    }
    // (The preflight before the next lease removes the tags of ended trainers, so they
    // are not counted again here; each host's one run in its log is the proof.)
    let steps = server.metric_steps(&id, "train/lm_loss").await;
    assert_eq!(steps.len(), 813, "every step once");
}

#[tokio::test]
async fn a_lockfile_of_another_user_makes_preflight_name_its_owner_and_the_fix() {
    let cloud = FakeCloud::new(json!({"node": node("READY", json!({"preemptible": true}))}));
    cloud.control("lock-owner-2", "kellen");
    let server = Server::start().await;
    let config = cloud.worker_config(&server.url, json!({}), json!({}));
    let (_worker, log) = cloud.worker(&config);
    let pod = eventually(SHORT, "the pod to report its preflight", || async {
        let (_, pod) = server.get("/pods/stable-1").await;
        let failures = pod["preflight"]["failures"].as_array()?.clone();
        failures
            .iter()
            .any(|f| f["check"] == "tpu_lockfile")
            .then_some(pod)
    })
    .await;
    let failure = pod["preflight"]["failures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "tpu_lockfile")
        .unwrap()
        .clone();
    assert_eq!(failure["host"], 2, "{failure}");
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.contains("belongs to kellen")
            // (the fake writes each host's /tmp elsewhere)
            && message.contains("run 'sudo rm -f ")
            && message.contains("libtpu_lockfile' on this host")
            && message.contains("gcloud.user"),
        "{message}\n{}",
        log_tail(&log)
    );
    // Once a person removed it, the pod passes and leases.
    std::fs::remove_file(cloud.host(2).join("tmp/libtpu_lockfile")).unwrap();
    let id = server.submit_one("exp01a", json!({})).await;
    wait_job(&server, &id, "running", &log).await;
}
