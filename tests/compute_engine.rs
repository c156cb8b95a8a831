//! TPU slices through Compute Engine: a real server and worker driving a v6e
//! slice that the fake gcloud (tests/fake_gcloud/gcloud) emulates as a managed instance
//! group of 4 TPU VMs, each a machine of its own on the emulated pod, with Compute Engine's
//! documented faults: Spot preemption with its 30 s ACPI notice (shortened here), the
//! service's own repair, a stockout, quota, and flex-start's wait and max run duration.
//!
//! Each fault test prints a `FAULT` line: the outcomes, failures charged, steps trained
//! again, and the seconds from the fault to the run moving again.

mod common;
mod fake_cloud;

use std::time::{Duration, Instant};

use common::{eventually, Process, Server};
use fake_cloud::*;
use serde_json::{json, Value};

const POD: &str = "trillium-1";
const ACCELERATOR: &str = "v6e-16";

/// A worker's `gcloud:` section for a 4x4 v6e slice (4 VMs of 4 chips) bought as `model`.
fn slice_settings(model: &str, compute: Value) -> Value {
    let mut settings = json!({
        "machine_type": "ct6e-standard-4t",
        "topology": "4x4",
        "provisioning_model": model,
    });
    settings
        .as_object_mut()
        .unwrap()
        .extend(compute.as_object().cloned().unwrap_or_default());
    json!({"api": "compute", "compute": settings})
}

/// A server whose exp01 group runs on v6e-16, a worker for the slice, and one run.
struct Slice {
    cloud: FakeCloud,
    server: Server,
    _catalog: tempfile::TempDir,
    id: String,
    _worker: Process,
    log: std::path::PathBuf,
}

async fn slice(model: &str, compute: Value, state: Value, top: Value) -> Slice {
    let cloud = FakeCloud::with_hosts(state, HOSTS);
    let catalog = catalog_with_accelerator("exp01-model-scaling", ACCELERATOR);
    let server = Server::start_with(common::ServerOptions {
        experiments: catalog.path().to_owned(),
        ..common::ServerOptions::default()
    })
    .await;
    let id = server.submit_one("exp01a", json!({})).await;
    assert_eq!(server.job(&id).await["accelerator"], ACCELERATOR);
    let mut top_level = json!({"pod": POD, "accelerator": ACCELERATOR});
    top_level
        .as_object_mut()
        .unwrap()
        .extend(top.as_object().cloned().unwrap_or_default());
    let config = cloud.worker_config(&server.url, slice_settings(model, compute), top_level);
    let (worker, log) = cloud.worker(&config);
    Slice {
        cloud,
        server,
        _catalog: catalog,
        id,
        _worker: worker,
        log,
    }
}

fn run_secs(secs: u32) -> Value {
    json!({"trainer_env": {"PODQ_SIM_RUN_SECS": secs.to_string()}})
}

/// The `gcloud compute ...` calls whose words (after `compute`) start with `words`.
fn calls_of(calls: &[Vec<String>], words: &[&str], from: usize) -> Vec<usize> {
    (from..calls.len())
        .filter(|&i| {
            let call = &calls[i];
            call.first().map(String::as_str) == Some("compute")
                && call.len() > words.len()
                && call[1..=words.len()].iter().zip(words).all(|(a, b)| a == b)
        })
        .collect()
}

/// The seconds from now until a second attempt trains past the step it resumed from.
async fn second_attempt_moving(run: &Slice) -> Duration {
    let fault = Instant::now();
    second_attempt_trains(&run.server, &run.id).await;
    fault.elapsed()
}

/// The pod as `/status` shows it.
async fn pod_status(server: &Server) -> Value {
    let (_, status) = server.get("/status").await;
    status["pods"]
        .as_array()
        .and_then(|pods| pods.iter().find(|p| p["name"] == POD).cloned())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_run_succeeds_on_a_four_host_v6e_slice_podq_creates() {
    let run = slice("spot", json!({}), json!({}), run_secs(8)).await;
    wait_job(&run.server, &run.id, "running", &run.log).await;
    // Every instance RUNNING and the topology ACTIVE is what podq calls a READY pod.
    let pod = pod_status(&run.server).await;
    assert_eq!(
        (pod["state"].as_str(), pod["hosts"].as_u64()),
        (Some("READY"), Some(4)),
        "{pod}"
    );
    let job = wait_job(&run.server, &run.id, "succeeded", &run.log).await;
    assert_eq!(job["failures"], 0, "{job}");
    assert_eq!(attempts(&job).len(), 1, "{job}");

    // The three resources, created in the order each needs the last, as documented.
    let calls = run.cloud.calls();
    let policy = calls_of(
        &calls,
        &["resource-policies", "create", "workload-policy"],
        0,
    );
    let template = calls_of(&calls, &["instance-templates", "create"], 0);
    let group = calls_of(&calls, &["instance-groups", "managed", "create"], 0);
    assert_eq!(
        (policy.len(), template.len(), group.len()),
        (1, 1, 1),
        "{calls:?}"
    );
    assert!(policy[0] < template[0] && template[0] < group[0]);
    let policy_name = &calls[policy[0]][4];
    let template_name = &calls[template[0]][3];
    for flag in [
        "--region=us-central2",
        "--type=HIGH_THROUGHPUT",
        "--accelerator-topology=4x4",
    ] {
        assert!(
            calls[policy[0]].contains(&flag.to_owned()),
            "{:?}",
            calls[policy[0]]
        );
    }
    for flag in [
        "--machine-type=ct6e-standard-4t",
        "--provisioning-model=SPOT",
        "--instance-termination-action=STOP",
        "--maintenance-policy=TERMINATE",
    ] {
        assert!(
            calls[template[0]].contains(&flag.to_owned()),
            "{:?}",
            calls[template[0]]
        );
    }
    assert_eq!(
        calls[group[0]][4..],
        strings(&[
            POD,
            &format!("--zone={ZONE}"),
            &format!("--project={PROJECT}"),
            &format!("--template={template_name}"),
            "--size=4",
            &format!("--workload-policy=projects/{PROJECT}/regions/us-central2/resourcePolicies/{policy_name}"),
            "--target-size-policy-mode=bulk",
            "--default-action-on-vm-failure=do-nothing",
        ])
    );

    // Each host is the instance whose TPU_WORKER_ID says so, not the n-th name: the fake
    // never numbers them in name order.
    let instances: Vec<String> = (0..HOSTS)
        .map(|h| run.cloud.instance_of(h).expect("an instance per host"))
        .collect();
    let mut by_name = instances.clone();
    by_name.sort();
    assert_ne!(
        by_name, instances,
        "the fake numbered the instances in name order"
    );
    let lease = attempts(&job)[0]["lease_id"].as_str().unwrap().to_owned();
    for (host, instance) in instances.iter().enumerate() {
        // ssh and scp once per instance, without --worker (there is none on Compute Engine).
        let ssh = calls_of(&calls, &["ssh"], 0);
        assert!(
            ssh.iter().any(|&i| calls[i][2] == *instance),
            "no ssh to {instance}: {calls:?}"
        );
        let scp = calls_of(&calls, &["scp"], 0);
        assert!(scp
            .iter()
            .any(|&i| calls[i].contains(&format!("{instance}:/tmp/"))));
        let env = std::fs::read_to_string(
            run.cloud
                .home(host as u32)
                .join(format!(".podq/agent/{lease}.env")),
        )
        .unwrap();
        assert!(
            env.contains(&format!("export JAX_PROCESS_INDEX={host}\n")),
            "{env}"
        );
        assert!(
            env.contains(&format!(
                "export COORDINATOR_ADDRESS={}:",
                run.cloud.address(0)
            )),
            "host 0's internal address: {env}"
        );
    }
    assert!(!calls
        .iter()
        .flatten()
        .any(|arg| arg.starts_with("--worker")));
    assert!(!calls.iter().any(|c| c.get(1).is_some_and(|w| w == "tpus")));
}

#[tokio::test]
async fn a_spot_preemption_recreates_the_group_and_the_run_resumes_uncharged() {
    let run = slice("spot", json!({}), json!({}), run_secs(25)).await;
    wait_job(&run.server, &run.id, "running", &run.log).await;
    let kept = run.server.committed_at_least(&run.id, 1, RUN).await;
    let mark = run.cloud.calls().len();
    // Compute Engine's notice is 30 s for Spot; 3 s keeps the test short.
    run.cloud.control("ce-spot-preempt", r#"{"notice_s": 3}"#);
    let moving = second_attempt_moving(&run).await;
    let job = wait_job(&run.server, &run.id, "succeeded", &run.log).await;
    report_fault("Spot preemption (3 s notice)", &job, moving);
    assert_eq!(job["failures"], 0, "{job}");
    let tries = attempts(&job);
    assert_eq!(tries[0]["outcome"], "preempted", "{job}");
    // Nothing was killed through the notice: every trainer ended on the guest's SIGTERM.
    assert_eq!(tries[0]["exit_codes"], json!([143, 143, 143, 143]), "{job}");
    assert!(
        tries[1]["start_step"].as_i64().unwrap_or(0) >= kept,
        "resumed before the newest committed checkpoint {kept}: {job}"
    );
    // The group is deleted and created again; the template and policy are kept.
    let calls = run.cloud.calls();
    let deleted = calls_of(&calls, &["instance-groups", "managed", "delete"], mark);
    let created = calls_of(&calls, &["instance-groups", "managed", "create"], mark);
    assert_eq!(
        (deleted.len(), created.len()),
        (1, 1),
        "{:?}",
        &calls[mark..]
    );
    assert!(deleted[0] < created[0]);
    assert!(calls_of(&calls, &["instance-templates", "delete"], 0).is_empty());
    assert!(calls_of(&calls, &["resource-policies", "delete"], 0).is_empty());
    // New VMs have blank disks: the setup ran again on every host.
    for host in 0..HOSTS {
        let setups =
            std::fs::read_to_string(run.cloud.home(host).join("setup.log")).unwrap_or_default();
        assert_eq!(setups.lines().count(), 1, "host {host}: {setups}");
    }
}

#[tokio::test]
async fn a_repair_is_waited_out_without_deleting_the_group_and_costs_nothing() {
    let run = slice("standard", json!({}), json!({}), run_secs(25)).await;
    wait_job(&run.server, &run.id, "running", &run.log).await;
    let kept = run.server.committed_at_least(&run.id, 1, RUN).await;
    let mark = run.cloud.calls().len();
    run.cloud.control("ce-repair", r#"{"duration_s": 30}"#);
    let moving = second_attempt_moving(&run).await;
    let job = wait_job(&run.server, &run.id, "succeeded", &run.log).await;
    report_fault("Compute Engine repair (30 s)", &job, moving);
    assert_eq!(job["failures"], 0, "{job}");
    let tries = attempts(&job);
    assert_eq!(tries[0]["outcome"], "lost", "{job}");
    assert!(
        tries[0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("repaired"),
        "{job}"
    );
    assert!(
        tries[1]["start_step"].as_i64().unwrap_or(0) >= kept,
        "{job}"
    );
    let calls = run.cloud.calls();
    let deletes: Vec<&Vec<String>> = calls[mark..]
        .iter()
        .filter(|c| c.iter().any(|a| a == "delete"))
        .collect();
    assert!(
        deletes.is_empty(),
        "podq deleted during a repair: {deletes:?}"
    );
    let text = std::fs::read_to_string(&run.log).unwrap();
    assert!(
        text.contains("Compute Engine is repairing slice"),
        "{}",
        log_tail(&run.log)
    );
    // The repaired hosts kept their disks: no second setup.
    for host in 0..HOSTS {
        let setups =
            std::fs::read_to_string(run.cloud.home(host).join("setup.log")).unwrap_or_default();
        assert_eq!(setups.lines().count(), 1, "host {host}: {setups}");
    }
}

#[tokio::test]
async fn a_stockout_is_shown_and_retried_and_quota_is_held_until_a_person_raises_it() {
    let run = slice(
        "standard",
        json!({}),
        // Once the quota is raised, the zone has no v6e for 4 progress checks.
        json!({"ce_quota_exceeded": true, "ce_stockout_checks": 4}),
        run_secs(5),
    )
    .await;
    // Quota: the pod says why nothing runs and that a person must act.
    let held = eventually(SHORT, "the pod held for quota", || async {
        let pod = pod_status(&run.server).await;
        let text = pod["recovery"].as_str()?.to_owned();
        (text.contains("QUOTA_EXCEEDED") && text.contains("held")).then_some(text)
    })
    .await;
    assert!(held.contains("raise the quota"), "{held}");
    // Held: the group is left to Compute Engine's own retries, never recreated in a loop,
    // however many times podq looks.
    let describes = |calls: &[Vec<String>]| {
        calls_of(calls, &["instance-groups", "managed", "describe"], 0).len()
    };
    let looked = describes(&run.cloud.calls());
    eventually(SHORT, "five more looks at the held group", || async {
        (describes(&run.cloud.calls()) >= looked + 5).then_some(())
    })
    .await;
    let calls = run.cloud.calls();
    assert_eq!(
        calls_of(&calls, &["instance-groups", "managed", "create"], 0).len(),
        1,
        "{calls:?}"
    );
    assert!(calls_of(&calls, &["instance-groups", "managed", "delete"], 0).is_empty());
    assert_eq!(run.server.job(&run.id).await["state"], "queued");

    // A person raises the quota; then the zone runs out of v6e: shown, looked at again
    // with a pause that doubles, and the run starts once capacity comes.
    run.cloud.set_state("ce_quota_exceeded", json!(false));
    eventually(SHORT, "the stockout shown", || async {
        let pod = pod_status(&run.server).await;
        let text = pod["recovery"].as_str()?.to_owned();
        text.contains("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")
            .then_some(())
    })
    .await;
    let job = wait_job(&run.server, &run.id, "succeeded", &run.log).await;
    assert_eq!(job["failures"], 0, "{job}");
    let text = std::fs::read_to_string(&run.log).unwrap();
    assert!(
        text.contains("waiting for capacity for slice") && text.contains("trying again in"),
        "{}",
        log_tail(&run.log)
    );
}

#[tokio::test]
async fn flex_start_stops_the_run_before_its_max_run_duration_and_resumes_on_the_next_slice() {
    // Each slice lives 40 s from its VMs' start and the worker stops the run 10 s before its
    // end, so no slice trains for 30 s: a run of 32 s of training on this slice cannot end on
    // the first, however fast the machine (the sim paces its steps, never faster), and the
    // next slices finish it. The sim trainer's PODQ_SIM_RUN_SECS is the length on a v4-64 (a
    // v6e-16, of more peak FLOPs, runs it sooner), so the 32 s go through the sim's own rule.
    let on_slice = 32.0 / podq_sim_trainer::run_secs_on_slice(1.0, Some(ACCELERATOR));
    let run = slice(
        "flex_start",
        json!({"max_run_duration_s": 40}),
        json!({"ce_flex_wait_checks": 3}),
        json!({
            "trainer_env": {"PODQ_SIM_RUN_SECS": format!("{on_slice:.1}")},
            "maintenance_lead_s": 10,
        }),
    )
    .await;
    let first = eventually(RUN, "the first slice's run stopped", || async {
        let job = run.server.job(&run.id).await;
        attempts(&job)
            .first()
            .filter(|a| !a["outcome"].is_null())
            .cloned()
    })
    .await;
    // Said now, not as a wait for a second attempt that a finished run never makes.
    assert_eq!(
        first["outcome"],
        "preempted",
        "the first slice's run was not stopped ahead of its end: {first}\n{}",
        log_tail(&run.log)
    );
    let moving = second_attempt_moving(&run).await;
    // A loaded machine sets up each slice slower and trains less on it: the run may need a
    // third slice, each some 50 s from create to its end.
    let job = wait_job_within(&run.server, &run.id, "succeeded", &run.log, 2 * RUN).await;
    report_fault("flex-start slice of 40 s, stopped 10 s ahead", &job, moving);
    let tries = attempts(&job);
    assert_eq!(job["failures"], 0, "{job}");
    assert!(tries.len() >= 2, "{job}");
    let first = &tries[0];
    assert_eq!(first["outcome"], "preempted", "{job}");
    assert!(
        first["message"]
            .as_str()
            .unwrap_or_default()
            .contains("capacity ends at"),
        "{job}"
    );
    // Stopped by SIGTERM within the grace, before the VMs were deleted: the trainers exited
    // 143 themselves, and the next slice resumed from the newest checkpoint they committed.
    assert_eq!(first["exit_codes"], json!([143, 143, 143, 143]), "{job}");
    let newest = job["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["attempt"] == 1 && c["committed"] == true)
        .filter_map(|c| c["step"].as_i64())
        .max();
    assert_eq!(tries[1]["start_step"].as_i64(), newest, "{job}");
    let calls = run.cloud.calls();
    let template = calls_of(&calls, &["instance-templates", "create"], 0);
    for flag in [
        "--provisioning-model=FLEX_START",
        "--instance-termination-action=DELETE",
        "--max-run-duration=40s",
    ] {
        assert!(
            calls[template[0]].contains(&flag.to_owned()),
            "{:?}",
            calls[template[0]]
        );
    }
    assert!(calls_of(&calls, &["instance-groups", "managed", "create"], 0).len() >= 2);
}

#[tokio::test]
async fn two_pods_of_two_kinds_take_the_jobs_of_their_own_accelerator_type() {
    let tpu = FakeCloud::new(json!({"node": named_node("stable-1", "v4-64", HOSTS)}));
    let compute = FakeCloud::with_hosts(json!({}), HOSTS);
    let catalog = catalog_with_accelerator("exp02a-l-cycles", ACCELERATOR);
    let server = Server::start_with(common::ServerOptions {
        experiments: catalog.path().to_owned(),
        ..common::ServerOptions::default()
    })
    .await;
    let v4 = server.submit_one("exp01a", json!({})).await;
    let v6e = [
        server.submit_one("exp02a_01", json!({})).await,
        server.submit_one("exp02a_02", json!({})).await,
    ];
    let secs = run_secs(4);
    let tpu_config = tpu.worker_config(&server.url, json!({}), secs.clone());
    let mut top = secs;
    top["pod"] = json!(POD);
    top["accelerator"] = json!(ACCELERATOR);
    let compute_config = compute.worker_config(&server.url, slice_settings("spot", json!({})), top);
    let (_tpu_worker, tpu_log) = tpu.worker(&tpu_config);
    let (_compute_worker, compute_log) = compute.worker(&compute_config);
    let pods_of = |job: &Value| -> Vec<String> {
        attempts(job)
            .iter()
            .map(|a| a["pod"].as_str().unwrap().to_owned())
            .collect()
    };
    let job = wait_job(&server, &v4, "succeeded", &tpu_log).await;
    assert_eq!(pods_of(&job), ["stable-1"], "{job}");
    for id in &v6e {
        let job = wait_job(&server, id, "succeeded", &compute_log).await;
        assert_eq!(pods_of(&job), [POD], "{job}");
    }
    // Each worker spoke only its own API.
    assert!(tpu
        .calls()
        .iter()
        .all(|c| c.first().map(String::as_str) != Some("compute")
            || c.get(1).is_some_and(|w| w == "tpus")));
    assert!(!compute
        .calls()
        .iter()
        .any(|c| c.get(1).is_some_and(|w| w == "tpus")));
}

/// The isolation and secrets tests of tests/emulated_pod.rs, on a slice: the hosts reached
/// through `compute ssh` to their instances are separate machines, and no secret is on a
/// command line or in gcloud's log.
#[tokio::test]
async fn a_slices_hosts_are_separate_machines_and_no_secret_is_on_a_command_line() {
    let token = "wandb-sekrit-4242";
    let run = slice(
        "spot",
        json!({}),
        json!({}),
        json!({"trainer_env": {"PODQ_SIM_RUN_SECS": "20", "WANDB_API_KEY": token}}),
    )
    .await;
    wait_job(&run.server, &run.id, "running", &run.log).await;
    eventually(SHORT, "a trainer on every host", || async {
        (trainer_groups(&run.cloud).len() == HOSTS as usize).then_some(())
    })
    .await;
    // The trainers run for 20 s: their environments are read before the slower checks.
    no_secret_on_a_command_line(&run.cloud, POD, token);
    hosts_are_separate_machines(&run.cloud, &run.server);
    let job = wait_job(&run.server, &run.id, "succeeded", &run.log).await;
    assert_eq!(job["failures"], 0, "{job}");
}
