//! The reading's tests: real texts, every row through both of its callers, and the texts
//! the pool and the pod once read differently.

use super::*;
use crate::pod::gcloud::node::QueuedResource;
use crate::pod::gcloud::recovery::{queued_failure, refusal, Refused};
use crate::pod::gcloud::CallError;
use crate::pool::classify::{classify_create_error, ErrorKind};

fn region(name: &str) -> Scope {
    Scope::Region(name.to_owned())
}

/// One row per real text (its source in `ROWS`' comments), and what it must read as.
#[test]
fn real_messages_are_classified() {
    let cases: Vec<(&str, Kind, Scope)> = vec![
            // Stockouts.
            (
                r#"ERROR: (gcloud.compute.tpus.tpu-vm.create) {"code": 8, "message": "There is no more capacity in the zone \"us-central2-b\"; you can try in another zone where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x1f2e3d4c5b6a7988]"}"#,
                Stockout,
                Scope::Zone,
            ),
            (
                "ERROR: (gcloud.compute.tpus.execution-groups.create) There is no more capacity in the zone \"europe-west4-a\"; you can try in another zone where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0xba393c906974e61]",
                Stockout,
                Scope::Zone,
            ),
            (
                "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS: The zone 'projects/p/zones/us-east5-b' does not have enough resources available to fulfill the request.  '(resource type:compute)'.",
                Stockout,
                Scope::Zone,
            ),
            (
                "ERROR: (gcloud.compute.instances.create) Could not fetch resource:\n---\ncode: ZONE_RESOURCE_POOL_EXHAUSTED\nmessage: A e2-standard-2 VM instance is currently unavailable in the europe-west4-a zone.",
                Stockout,
                Scope::Zone,
            ),
            (
                "The zone 'projects/p/zones/us-central1-a' does not have enough resources available to fulfill the request. Try a different zone, or try again later.",
                Stockout,
                Scope::Zone,
            ),
            (r#"HTTP 503 "reason": "insufficientCapacity""#, Stockout, Scope::Zone),
            (
                "Got return code 8 in us-central1-a: 'Insufficient reserved capacity. Contact customer support to increase your reservation. [EID: 0x7adf6d58c08b0aa4]'",
                Stockout,
                Scope::Zone,
            ),
            (
                "{'code': 3, 'message': 'Cloud TPU received a bad request. update is not supported while in state PREEMPTED [EID: 0x73013519f5b7feb2]'}",
                Preempted,
                Scope::Zone,
            ),
            ("UNSUPPORTED_OPERATION: instance preempted", Preempted, Scope::Zone),
            // A quota word beside a capacity text: the capacity text wins (#3200, ai-on-gke#849).
            (
                "Code: QUOTA_EXCEEDED ... code: ZONE_RESOURCE_POOL_EXHAUSTED",
                Stockout,
                Scope::Zone,
            ),
            // Request-rate limits.
            (
                "RESOURCE_EXHAUSTED: Maximum number of CreateNode requests per minute exceeded",
                RateLimited,
                Scope::Zone,
            ),
            (
                "Quota exceeded for quota metric 'Mutate requests' and limit 'Mutate requests per minute' of service 'compute.googleapis.com'",
                RateLimited,
                Scope::Zone,
            ),
            (r#"HTTP 403 "reason": "rateLimitExceeded""#, RateLimited, Scope::Zone),
            // Quotas, scoped by what they name.
            (
                r#"ERROR: (gcloud.compute.tpus.tpu-vm.create) HttpError accessing <https://tpu.googleapis.com/v2/projects/p/locations/us-east5-b/nodes?alt=json>: response: <{'status': 429}>, content <{ "error": { "code": 429, "message": "Quota limit 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' has been exceeded. Limit: 0 in region us-east5.", "status": "RESOURCE_EXHAUSTED" } }>"#,
                Quota,
                region("us-east5"),
            ),
            (
                "ERROR: (gcloud.compute.tpus.create) RESOURCE_EXHAUSTED: Quota limit 'TPUV2sPodPerProjectPerRegionForTPUAPI,TPUV2sPodPerProjectPerZoneForTPUAPI' has been exceeded. Limit: 0,0 in region us-central1,zone us-central1-a.",
                Quota,
                region("us-central1"),
            ),
            (
                r#"{"code": 8, "message": "Quota limit 'TPUV4sPodPerProjectPerZoneForTPUAPI' has been exceeded."}"#,
                Quota,
                Scope::Zone,
            ),
            (
                "Quota 'TPUV2sPreemptiblePodPerProjectPerZoneForTPUAPI' exhausted. Limit 32 in zone europe-west4-a",
                Quota,
                Scope::Zone,
            ),
            (
                "ERROR: (gcloud.compute.tpus.queued-resources.create) RESOURCE_EXHAUSTED: Quota 'TPUS_PER_TPU_FAMILY' exhausted. Limit 0 in region us-central2",
                Quota,
                region("us-central2"),
            ),
            (
                "QUOTA_EXCEEDED: Quota 'PREEMPTIBLE_TPU_V6E_CHIPS' exceeded. Limit: 0.0 in region us-east5.",
                Quota,
                region("us-east5"),
            ),
            (
                "ERROR: (gcloud.compute.instances.create) Could not fetch resource:\n - Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally.",
                Quota,
                Scope::AllRegions,
            ),
            (
                r#"HTTP 403 "reason": "quotaExceeded""#,
                Quota,
                Scope::Zone,
            ),
            (
                "type.googleapis.com/google.rpc.QuotaFailure: TPU pod quota",
                Quota,
                Scope::Zone,
            ),
            (
                "Error 403: (1) insufficient regional quota to satisfy request: resource \"CPUS\": request requires '72.0' and is short '48.0'., forbidden",
                Quota,
                Scope::Zone,
            ),
            (
                r#"{"code":403,"message":"Insufficient project quota to satisfy request: resource \"CPUS_ALL_REGIONS\": request requires '16.0'","status":"PERMISSION_DENIED"}"#,
                Quota,
                Scope::AllRegions,
            ),
            (
                "429 The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_tpu_v2",
                Quota,
                Scope::Zone,
            ),
            // Denied.
            (
                "googleapi: Error 403: cannot create a TPU Node on a project linked to a free-trial billing account, forbidden",
                Denied,
                Scope::Pool,
            ),
            (
                "Project charming-module-137923 (#808448574146) has billing disabled. Please enable it.",
                Denied,
                Scope::Pool,
            ),
            (
                "HTTPError 403: The billing account for the owning project is disabled in state absent",
                Denied,
                Scope::Pool,
            ),
            (
                "FAILED_PRECONDITION: Billing account for project '522837608576' is not found. Billing must be enabled for activation of service(s) 'compute.googleapis.com' to proceed.",
                Denied,
                Scope::Pool,
            ),
            (
                "This API method requires billing to be enabled. Please enable billing on project #58906374421",
                Denied,
                Scope::Pool,
            ),
            (
                "<HttpError 403 when requesting https://tpu.googleapis.com/v1alpha1/projects/p/locations/europe-west1-c/nodes/laktpu?alt=json returned \"Cloud TPU API has not been used in project 1032299714650 before or it is disabled. Enable it by visiting https://console.developers.google.com/apis/api/tpu.googleapis.com/overview?project=1032299714650 then retry.\">",
                Denied,
                Scope::Pool,
            ),
            (
                "ERROR: (gcloud.compute.tpus.list) PERMISSION_DENIED: Read access to project 'annotator-1286' was denied",
                Denied,
                Scope::Pool,
            ),
            (
                "<HttpError 403 when requesting https://tpu.googleapis.com/v1alpha1/projects/p/locations/us-central1-b/nodes/ai?alt=json returned \"Permission 'tpu.nodes.get' denied on 'projects/p/locations/us-central1-b/nodes/ai'\">",
                Denied,
                Scope::Pool,
            ),
            ("IAM_PERMISSION_DENIED: Policy update access denied.", Denied, Scope::Pool),
            (
                "ERROR: (gcloud.compute.instance-groups.managed.create) Could not fetch resource:\n - Required 'compute.instanceGroupManagers.create' permission for 'projects/p/zones/us-east5-b/instanceGroupManagers/t-1'",
                Denied,
                Scope::Pool,
            ),
            (
                "QUOTA_EXCEEDED: Quota 'PREEMPTIBLE_TPU_V6E_CHIPS' exceeded. Limit: 0.0 in region us-east5.",
                Quota,
                Scope::Region("us-east5".into()),
            ),
            (
                "ERROR: (gcloud.compute.tpus.tpu-vm.create) User [a@b.c] does not have permission to access projects instance [p] (or it may not exist)",
                Denied,
                Scope::Pool,
            ),
            (
                "<HttpError 403 when requesting ... returned \"Location us-east1-d is not found or access is unauthorized.\">",
                Denied,
                Scope::Pool,
            ),
            (
                "ERROR: (gcloud.compute.tpus.tpu-vm.create) There was a problem refreshing your current auth tokens: Reauthentication failed. cannot prompt during non-interactive execution.",
                Denied,
                Scope::Pool,
            ),
            (r#"{"code": 7, "message": "The caller does not have permission"}"#, Denied, Scope::Pool),
            ("UNAUTHENTICATED: Request had invalid authentication credentials.", Denied, Scope::Pool),
            // Invalid.
            (
                "Got return code 'CREATION_FAILED' in us-central2-b: 'Cloud TPU received a bad request. the accelerator v4-128 was not found in zone us-central2-b [EID: 0x945ef875d10e8e13]'",
                Invalid,
                Scope::Pool,
            ),
            (
                "ERROR: (gcloud.compute.tpus.tpu-vm.create) INVALID_ARGUMENT: Cloud TPU received a bad request. the accelerator v4-128 was not found",
                Invalid,
                Scope::Pool,
            ),
            (
                "googleapi: Error 400: Cloud TPU received an invalid argument. The field \"TensorflowVersion\" cannot be \"2.4\". [EID: 0x90dfdfda32f61e59], badRequest",
                Invalid,
                Scope::Pool,
            ),
            (
                "ERROR: (gcloud.compute.tpus.tpu-vm.create) unrecognized arguments: --colour",
                Invalid,
                Scope::Pool,
            ),
            (
                "ERROR: (gcloud.compute.instance-templates.create) argument --provisioning-model: Invalid choice: 'CHEAP'.",
                Invalid,
                Scope::Pool,
            ),
            (
                "ERROR: (gcloud.compute.resource-policies.create.workload-policy) argument --type: Must be specified.",
                Invalid,
                Scope::Pool,
            ),
            ("VPC_NOT_FOUND: network 'x' not found", Invalid, Scope::Pool),
            (
                "ERROR: (gcloud.compute.tpus.tpu-vm.create) NOT_FOUND: Resource 'projects/p/global/networks/nope' was not found",
                NotFound,
                Scope::Pool,
            ),
            (
                r#"{"code": 9, "message": "The TPU is not in a state to accept this request"}"#,
                Invalid,
                Scope::Pool,
            ),
            // Bare statuses.
            (
                r#"ERROR: (gcloud.compute.tpus.queued-resources.create) {"code": 8, "message": "RESOURCE_EXHAUSTED"}"#,
                Stockout,
                Scope::Zone,
            ),
            ("HttpError 429 when requesting https://tpu.googleapis.com/...", Stockout, Scope::Zone),
            // Transient.
            (
                "ERROR: (gcloud.compute.tpus.tpu-vm.create) UNAVAILABLE: The service is currently unavailable.",
                Transient,
                Scope::Zone,
            ),
            (
                "ERROR: (gcloud.compute.tpus.tpu-vm.create) DEADLINE_EXCEEDED: Deadline expired before operation could complete.",
                Transient,
                Scope::Zone,
            ),
            (
                "ERROR: (gcloud.artifacts.repositories.describe) INTERNAL: Internal error encountered.",
                Transient,
                Scope::Zone,
            ),
            (r#"{"code": 13, "message": "An internal error has occurred"}"#, Transient, Scope::Zone),
            (r#"{"code": 4, "message": "Deadline exceeded"}"#, Transient, Scope::Zone),
            (r#"{"code": 14, "message": "The service is unavailable"}"#, Transient, Scope::Zone),
            ("googleapi: Error 503: Backend Error, backendError", Transient, Scope::Zone),
            (
                "ERROR: gcloud crashed (ConnectionError): ('Connection aborted.', RemoteDisconnected('Remote end closed connection without response'))",
                Transient,
                Scope::Zone,
            ),
            ("connection reset", Transient, Scope::Zone),
            ("ERROR: (gcloud.compute.tpus.tpu-vm.create) The read operation timed out", Transient, Scope::Zone),
            // Billing disabled with no code at all: a denial (the pod path once read it as
            // capacity), and its ErrorInfo reason.
            (
                "ERROR: (gcloud.compute.tpus.tpu-vm.create) Project p (#123) has billing disabled. Please enable it.",
                Denied,
                Scope::Pool,
            ),
            ("reason: BILLING_DISABLED", Denied, Scope::Pool),
            ("reason: RATE_LIMIT_EXCEEDED", RateLimited, Scope::Zone),
            // Missing, or there already.
            (
                "ERROR: (gcloud.compute.tpus.tpu-vm.describe) NOT_FOUND: Resource 'projects/p/locations/z/nodes/n' was not found",
                NotFound,
                Scope::Pool,
            ),
            (
                "ERROR: (gcloud.compute.instance-groups.managed.describe) Could not fetch resource:\n - The resource 'projects/p/zones/z/instanceGroupManagers/g' was not found",
                NotFound,
                Scope::Pool,
            ),
            ("ERROR: (gcloud.compute.tpus.tpu-vm.create) ALREADY_EXISTS: stable-1", AlreadyExists, Scope::Zone),
            (
                "ERROR: (gcloud.compute.instance-templates.create) Could not fetch resource:\n - The resource 'projects/p/global/instanceTemplates/t' already exists",
                AlreadyExists,
                Scope::Zone,
            ),
            // In use is not "exists already".
            (
                "ERROR: (gcloud.compute.instance-templates.delete) Could not fetch resource:\n - The instance_template resource 'projects/p/global/instanceTemplates/t' is already being used by 'projects/p/zones/z/instanceGroupManagers/g'",
                Kind::Unknown,
                Scope::Zone,
            ),
            (
                "ERROR: (gcloud.compute.tpus.tpu-vm.ssh) This TPU has terminal state \"PREEMPTED\", so it cannot be used anymore.",
                Preempted,
                Scope::Zone,
            ),
            // Read by no row: answered as no capacity in its zone, as SkyPilot does.
            ("something nobody has seen before", Kind::Unknown, Scope::Zone),
        ];

    let mut wrong = Vec::new();
    for (message, kind, scope) in cases {
        let got = classify(message);
        let want = CloudError::new(kind, scope, message);
        if got != want {
            wrong.push(format!("{message}\n  wanted {want:?}, got {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A text that carries `sign`, and nothing else a row reads.
fn sample(sign: Sign) -> String {
    match sign {
        Words(words) => format!("ERROR: (gcloud.compute.tpus.tpu-vm.create) {words}"),
        Status(name) => format!("ERROR: (gcloud.compute.tpus.tpu-vm.create) {name}: refused"),
        Code(code) if code < 100 => format!(r#"{{"code": {code}, "message": "refused"}}"#),
        Code(code) => format!("googleapi: Error {code}: refused"),
    }
}

/// The pool's word for what it does, as the response all callers share.
fn pool_response(kind: ErrorKind) -> Response {
    match kind {
        ErrorKind::Stockout => Response::Capacity,
        ErrorKind::Quota => Response::Quota,
        ErrorKind::Transient => Response::Retry,
        ErrorKind::Denied | ErrorKind::Invalid => Response::Person,
        ErrorKind::NameTaken => unreachable!("never read from a text"),
    }
}

/// What a pod's recovery does with a refused create of `text`, as the runner hands it over.
fn pod_holds(text: &str) -> bool {
    let error = if is_not_found(text) {
        CallError::NotFound(text.to_owned())
    } else {
        CallError::Failed {
            code: Some(1),
            stderr: text.to_owned(),
        }
    };
    match refusal("node stable-1", &error) {
        Refused::Held(why) => {
            assert!(
                why.starts_with("held: cannot create node stable-1"),
                "{why}"
            );
            true
        }
        Refused::Failed(_) => false,
    }
}

/// What a pod's recovery does with a `FAILED` queued resource whose error says `message`.
fn queued_holds(code: Option<i64>, message: &str) -> bool {
    let json = serde_json::json!({"name": "qr", "state": {"state": "FAILED",
        "failedData": {"error": {"code": code, "message": message}}}});
    let qr = QueuedResource::parse(&json.to_string()).unwrap();
    queued_failure(&qr).0.response().holds()
}

/// Every row of the table, fed to the pool's create path and to a pod's recovery (a refused
/// create call, a `FAILED` queued resource, a Compute Engine group's creation error): one
/// answer. And no row is hidden behind an earlier one.
#[test]
fn every_row_gives_pools_and_pods_one_answer() {
    let mut wrong = Vec::new();
    for (at, row) in ROWS.iter().enumerate() {
        let text = sample(row.sign);
        let lower = text.to_ascii_lowercase();
        let first = ROWS.iter().position(|r| r.sign.is_in(&text, &lower));
        if first != Some(at) {
            wrong.push(format!(
                "row {at} {:?} is read by row {first:?} first",
                row.sign
            ));
            continue;
        }
        let read = classify(&text);
        let response = row.kind.response();
        let pool = classify_create_error(&text);
        let item = classify_item("ERROR", &text);
        let answers = (
            read.kind,
            pool_response(pool.kind),
            pool.scope == read.scope,
            pod_holds(&text),
            queued_holds(None, &text),
            item.response().holds(),
        );
        let want = (
            row.kind,
            response,
            true,
            response.holds(),
            response.holds(),
            response.holds(),
        );
        if answers != want {
            wrong.push(format!(
                "row {at} {:?}: {text}\n  wanted {want:?}, got {answers:?}",
                row.sign
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The two texts the pool and the pod's recovery used to read differently (issue 67).
#[test]
fn a_per_minute_quota_and_billing_disabled_read_the_same_for_pods_and_pools() {
    // A rate quota clears within the minute: both wait and ask again, neither stops.
    for text in [
        "ERROR: (gcloud.compute.tpus.tpu-vm.create) RESOURCE_EXHAUSTED: Quota exceeded for \
         quota metric 'Create requests' and limit 'Create requests per minute' of service \
         'tpu.googleapis.com' for consumer 'project_number:123'.",
        "Quota exceeded for quota metric 'Mutate requests' and limit 'Mutate requests per minute' of service 'compute.googleapis.com'",
    ] {
        assert_eq!(classify(text).kind, Kind::RateLimited, "{text}");
        assert_eq!(classify_create_error(text).kind, ErrorKind::Transient, "{text}");
        assert!(!pod_holds(text), "{text}");
        assert!(!queued_holds(Some(8), text), "{text}");
        assert!(!classify_item("RATE_LIMIT_EXCEEDED", text).response().holds());
    }
    // Billing disabled, with or without a code: a denial a person fixes. Shown, not retried.
    for (code, text) in [
        (None, "Project charming-module-137923 (#808448574146) has billing disabled. Please enable it."),
        (Some(7), "This API method requires billing to be enabled. Please enable billing on project #58906374421"),
        (None, "The billing account for the owning project is disabled in state absent"),
    ] {
        assert_eq!(classify(text).kind, Kind::Denied, "{text}");
        assert_eq!(classify_status(code, text).kind, Kind::Denied, "{text}");
        assert_eq!(classify_create_error(text).kind, ErrorKind::Denied, "{text}");
        assert!(pod_holds(text), "{text}");
        assert!(queued_holds(code, text), "{text}");
        assert!(classify_item("BILLING_DISABLED", text).response().holds());
    }
}

#[test]
fn a_status_is_read_by_its_words_then_its_code() {
    let quota = "Quota limit 'TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI' has been exceeded.";
    assert_eq!(classify_status(Some(8), quota).kind, Kind::Quota);
    assert_eq!(classify_status(Some(8), quota).text, quota);
    assert_eq!(classify_status(Some(8), "").kind, Kind::Stockout);
    assert_eq!(
        classify_status(Some(3), "the accelerator is wrong").kind,
        Kind::Invalid
    );
    assert_eq!(
        classify_status(Some(4), "valid until expired").kind,
        Kind::Transient
    );
    assert_eq!(classify_status(None, "").kind, Kind::Unknown);
    // A failure with no reason at all is waited out, as no capacity.
    let qr = QueuedResource::parse(r#"{"state": {"state": "FAILED"}}"#).unwrap();
    let (read, why) = queued_failure(&qr);
    assert_eq!(
        (read.response(), why.as_str()),
        (Response::Capacity, "it gave no reason")
    );
}

#[test]
fn calls_that_failed_on_the_way_are_transient() {
    let timeout = CallError::Timeout(std::time::Duration::from_secs(5)).reading();
    assert_eq!(timeout.kind, Kind::Transient);
    let gone = CallError::NotFound("Resource 'n' is gone".into()).reading();
    assert_eq!(gone.kind, Kind::NotFound);
    assert!(is_not_found(
        "NOT_FOUND: Resource 'projects/p/locations/z/nodes/n' was not found"
    ));
    assert!(!is_not_found(
        "Cloud TPU received a bad request. the accelerator v4-128 was not found"
    ));
    assert!(already_exists("ALREADY_EXISTS: stable-1"));
    assert!(!already_exists(
        "The instance_template resource 't' is already being used by 'g'"
    ));
    let read = classify("connection reset").during("tpu-vm list in z");
    assert_eq!(read.text, "tpu-vm list in z: connection reset");
    assert_eq!(read.to_string(), read.text);
}

#[test]
fn tokens_and_codes_are_matched_whole() {
    // `--internal-ips` is not INTERNAL, `RESOURCE_NOT_FOUND` is not NOT_FOUND, code 80 is
    // not code 8, and a 4 inside 429 is not DEADLINE_EXCEEDED.
    assert!(!Status("INTERNAL").is_in("--internal-ips INTERNALS", "--internal-ips internals"));
    assert!(!Status("NOT_FOUND").is_in("RESOURCE_NOT_FOUND", "resource_not_found"));
    assert!(Status("NOT_FOUND").is_in("x NOT_FOUND: y", "x not_found: y"));
    assert!(!has_code(r#"{"code": 80}"#, 8));
    assert!(has_code(r#"{"code":8}"#, 8));
    assert!(!has_code("httperror 429", 4));
    assert!(has_code("error 403: forbidden", 403));
}

#[test]
fn a_region_is_read_up_to_its_end() {
    assert_eq!(
        name_after("limit: 0 in region us-east5.", "in region "),
        Some("us-east5".into())
    );
    assert_eq!(
        name_after("in region us-central1,zone x", "in region "),
        Some("us-central1".into())
    );
    assert_eq!(name_after("in region .", "in region "), None);
}
