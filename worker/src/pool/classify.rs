//! What a failed slice create means for the waterfall, read from what gcloud printed.
//!
//! The creates are `gcloud compute tpus tpu-vm create`, `gcloud compute tpus
//! queued-resources create` (a `FAILED` queued resource's `failedData.error`) and a Compute
//! Engine MIG's creation (`lastProgressCheck` errors, `QUOTA_EXCEEDED` and the like). What
//! each kind makes the pool do is `zones.rs`'s: a stockout backs its zone off, a quota error
//! blocks the zone or region it names, a denial or an invalid request pauses the pool until a
//! person looks, a transient error retries the same zone.
//!
//! `ROWS` is read top to bottom and the first row whose sign is in the message decides. The
//! order is the policy:
//!
//! 1. Capacity words first. Both stockouts and quota errors come as `RESOURCE_EXHAUSTED`
//!    (code 8, HTTP 429), so the status alone cannot tell them apart; the words can. Users of
//!    Iris and of Cloud Build report "quota exceeded" texts that meant "no capacity"
//!    (marin-community/marin#3200, GoogleCloudPlatform/ai-on-gke#849), so when a message
//!    says both, the capacity words win: a stockout text is never printed for a quota
//!    problem. What #3200 actually showed, once the raw error was read, was a real quota
//!    (`Quota limit 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' has been exceeded.
//!    Limit: 0 in region us-east5`): the project had zone quota and no region quota
//!    (marin-community/marin#1612). A text that names a quota is therefore taken at its
//!    word, scoped to what it names, and blocked for only 5 minutes, so a mislabelled
//!    stockout costs one short block, never a pause.
//! 2. Per-minute request limits before quotas: Google words them as quotas ("Quota exceeded
//!    for quota metric ... per minute") but they clear by themselves within the minute.
//! 3. Quota words, then denial words, then invalid-request words.
//! 4. Last the bare status: a `google.rpc.Code` name or number, or an HTTP status.
//!
//! A message no row reads is treated as a stockout of its zone, as SkyPilot blocks the zone
//! of an error it cannot parse (`_gcp_handler` in `sky/backends/cloud_vm_ray_backend.py`):
//! the waterfall moves on and comes back with backoff, neither hammering one zone nor
//! pausing the pool on a message nobody has seen.

/// What a failed create means, how far it reaches, and the cloud's own words: what a
/// driver answers, classified where it read the text (or built from what it knows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateError {
    pub kind: ErrorKind,
    pub scope: Scope,
    pub text: String,
}

impl CreateError {
    /// An error the driver knows the meaning of without reading a cloud's text.
    pub fn new(kind: ErrorKind, scope: Scope, text: impl Into<String>) -> CreateError {
        CreateError {
            kind,
            scope,
            text: text.into(),
        }
    }

    /// A failure on the way to the cloud (a timeout, a process that would not start): the
    /// same request may well succeed, in the same zone.
    pub fn transient(text: impl Into<String>) -> CreateError {
        CreateError::new(ErrorKind::Transient, Scope::Zone, text)
    }
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The zone has no capacity for the slice now.
    Stockout,
    /// The project may not have more of this accelerator where `scope` says.
    Quota,
    /// Credentials, permissions, billing or a disabled API: a person must act.
    Denied,
    /// The request itself is wrong (accelerator, version, flags): a person must act.
    Invalid,
    /// The call failed on its way; the same request may well succeed.
    Transient,
    /// The name is another owner's slice (another podq installation's, or a person's): the
    /// zone is fine, the pool asks again under another name.
    NameTaken,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The zone the create was tried in.
    Zone,
    /// Every zone of the region (e.g. `us-central2`).
    Region(String),
    /// Every zone: a global quota.
    AllRegions,
    /// The whole pool, whatever its zones.
    Pool,
}

/// How a row recognises a message.
#[derive(Debug, Clone, Copy)]
enum Sign {
    /// Words anywhere in the message, in any case.
    Words(&'static str),
    /// A status or error-code name as a whole token, in capitals (`INTERNAL` must not match
    /// `--internal-ips`).
    Status(&'static str),
    /// A `google.rpc.Code` or HTTP status number: `"code": 8`, `'code': 8`, `HttpError 429`,
    /// `Error 403`. The two never collide (0-16 against 400-599).
    Code(u16),
}

struct Row {
    sign: Sign,
    kind: ErrorKind,
}

use ErrorKind::{Denied, Invalid, Quota, Stockout, Transient};
use Sign::{Code, Status, Words};

const fn row(sign: Sign, kind: ErrorKind) -> Row {
    Row { sign, kind }
}

/// Where a row cites "code.proto": the `google.rpc.Code` names, numbers and their HTTP
/// mapping, googleapis/googleapis `google/rpc/code.proto`.
const ROWS: &[Row] = &[
    // ---- 1. Capacity ----
    // The Cloud TPU API's stockout, code 8: `{"code": 8, "message": "There is no more capacity
    // in the zone \"europe-west4-a\"; you can try in another zone where Cloud TPU Nodes are
    // offered ..."}`. Read in skypilot-org/skypilot `sky/backends/cloud_vm_ray_backend.py`
    // (`_gcp_handler`, blocks the zone), github.com/thevasudevgupta/gsoc-wav2vec2/issues/11,
    // github.com/marin-community/marin/issues/4664; the repo's fake prints it
    // (tests/fake_gcloud/gcloud `STOCKOUT`).
    row(Words("there is no more capacity in the zone"), Stockout),
    // Compute Engine's stockout codes, `ZONE_RESOURCE_POOL_EXHAUSTED` and
    // `ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS` (a MIG's `lastProgressCheck` error, an
    // instance insert): https://cloud.google.com/compute/docs/resource-error ; SkyPilot
    // `_gcp_handler` (per zone); tests/fake_gcloud/gcloud `create_instances`.
    row(Words("zone_resource_pool_exhausted"), Stockout),
    // Their message: "The zone 'projects/P/zones/Z' does not have enough resources available
    // to fulfill the request. Try a different zone, or try again later."
    // (https://cloud.google.com/compute/docs/resource-error ; tests/fake_gcloud/gcloud).
    row(
        Words("does not have enough resources available to fulfill the request"),
        Stockout,
    ),
    // "A e2-standard-2 VM instance is currently unavailable in the europe-west4-a zone."
    // (https://cloud.google.com/compute/docs/resource-error ;
    // github.com/GoogleCloudPlatform/ai-on-gke/issues/849, where Cloud Build had shown it as
    // QUOTA_EXCEEDED).
    row(Words("is currently unavailable in the"), Stockout),
    // Bulk creation's HTTP 503 `"reason": "insufficientCapacity"`
    // (https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-bulk-vm-creation);
    // SkyPilot `_gcp_handler` blocks the zone on it.
    row(Words("insufficientcapacity"), Stockout),
    // Code 8/9 "Insufficient reserved capacity. Contact customer support to increase your
    // reservation.", seen with no reservation in use: SkyPilot `_gcp_handler` (blocks the
    // zone), github.com/skypilot-org/skypilot/issues/4579.
    row(Words("insufficient reserved capacity"), Stockout),
    // Code 3 "Cloud TPU received a bad request. update is not supported while in state
    // PREEMPTED": the slice was preempted while being created, so the zone is reclaiming,
    // not the request wrong (SkyPilot `_gcp_handler`'s comment on code 3). Before the
    // bad-request row below.
    row(Words("while in state preempted"), Stockout),
    // Compute Engine `UNSUPPORTED_OPERATION`, "observed empirically when VM is preempted
    // during creation" (SkyPilot `_gcp_handler`, per zone).
    row(Status("UNSUPPORTED_OPERATION"), Stockout),
    //
    // ---- 2. Request-rate limits ----
    // "Maximum number of CreateNode requests per minute" once creates passed the project's
    // `tpu.googleapis.com/qps/create` (github.com/marin-community/marin/pull/6198), and the
    // general "Quota exceeded for quota metric 'Mutate requests' and limit 'Mutate requests
    // per minute'" (github.com/opstrace/opstrace/issues/1213): it clears within the minute.
    row(Words("requests per minute"), Transient),
    // Bulk creation's HTTP 403 `"reason": "rateLimitExceeded"`: "wait until some requests
    // complete and try your request again"
    // (https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-bulk-vm-creation).
    row(Words("ratelimitexceeded"), Transient),
    //
    // ---- 3. Quota ----
    // The Cloud TPU API: "Quota limit 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' has been
    // exceeded. Limit: 0 in region us-east5." (github.com/marin-community/marin/issues/3200
    // and /pull/1612); "RESOURCE_EXHAUSTED: Quota limit 'TPUV2sPodPerProjectPerRegionForTPUAPI,
    // TPUV2sPodPerProjectPerZoneForTPUAPI' has been exceeded. Limit: 0,0 in region
    // us-central1,zone us-central1-a." (github.com/BioMedBERT/biomedbert `nohup.out`); a
    // queued resource's failedData (worker/src/pod/gcloud/node.rs tests).
    row(Words("quota limit"), Quota),
    // "Quota 'TPUV2sPreemptiblePodPerProjectPerRegionForTPUAPI' exhausted. Limit 32 in region
    // europe-west4" (SkyPilot `_gcp_handler`, `google.rpc.QuotaFailure`); Compute Engine's
    // "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 1.0 globally." (SkyPilot `_gcp_handler`;
    // github.com/fastai/course-v3/pull/165) and "Quota 'CPUS' exceeded. Limit: 24.0 in region
    // us-central1." (SkyPilot `_gcp_handler`); `Quota 'TPUS_PER_TPU_FAMILY' exceeded`; the
    // repo's fake MIG (tests/fake_gcloud/gcloud `create_instances`).
    row(Words("quota '"), Quota),
    // Compute Engine's error code `QUOTA_EXCEEDED` (a MIG's `lastProgressCheck`:
    // COMPUTE_ENGINE_TPU_FACTS.md [16]; SkyPilot `_gcp_handler`; tests/fake_gcloud/gcloud).
    row(Words("quota_exceeded"), Quota),
    // Its HTTP form, 403 `"reason": "quotaExceeded"`
    // (https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-bulk-vm-creation;
    // SkyPilot `_gcp_handler`).
    row(Words("quotaexceeded"), Quota),
    // The detail type `type.googleapis.com/google.rpc.QuotaFailure` of a TPU pod quota error
    // (SkyPilot `_gcp_handler`).
    row(Words("quotafailure"), Quota),
    // "insufficient regional quota to satisfy request: resource \"CPUS\"" and "Insufficient
    // project quota to satisfy request: resource \"CPUS_ALL_REGIONS\"", both with status
    // PERMISSION_DENIED, which must not read as a denial
    // (github.com/kaiwaehner/hivemq-mqtt-tensorflow-kafka-realtime-iot-machine-learning-training-inference/issues/48,
    // github.com/kubeflow/examples/issues/597).
    row(Words("quota to satisfy"), Quota),
    // "The following quota metrics exceed quota limits: ..." with 429 RESOURCE_EXHAUSTED
    // (github.com/google-deepmind/xmanager/issues/29).
    row(Words("exceed quota limits"), Quota),
    //
    // ---- 4. Denied: a person must fix credentials, permissions or billing ----
    // "googleapi: Error 403: cannot create a TPU Node on a project linked to a free-trial
    // billing account, forbidden" (github.com/tensorflow/tpu/issues/124); "The billing
    // account for the owning project is disabled in state absent"
    // (github.com/swiss-ai-center/a-guide-to-mlops/pull/102).
    row(Words("billing account"), Denied),
    // "Project charming-module-137923 (#808448574146) has billing disabled. Please enable it."
    // (github.com/GoogleCloudPlatform/java-docs-samples/issues/276).
    row(Words("billing disabled"), Denied),
    // "This API method requires billing to be enabled" (github.com/pgmichael/wavenet-for-chrome/issues/83);
    // "Billing must be enabled for activation of service(s)" (github.com/kyegomez/zeta/issues/71).
    row(Words("billing to be enabled"), Denied),
    row(Words("billing must be enabled"), Denied),
    // SERVICE_DISABLED: "Cloud TPU API has not been used in project 1032299714650 before or it
    // is disabled. Enable it by visiting ..." (HTTP 403; the same text for every Google API:
    // github.com/GoogleCloudPlatform/emblem/issues/757,
    // github.com/GoogleCloudPlatform/vertex-ai-samples/issues/476).
    row(Words("has not been used in project"), Denied),
    // "PERMISSION_DENIED: Read access to project 'annotator-1286' was denied"
    // (github.com/tensorflow/tpu/issues/227); "Permission 'tpu.nodes.get' denied on
    // 'projects/...'" (github.com/tensorflow/tpu/issues/296); `IAM_PERMISSION_DENIED` and
    // "Policy update access denied." (SkyPilot `_gcp_handler`, skips every region).
    row(Words("permission_denied"), Denied),
    row(Words("permission denied"), Denied),
    row(Words("was denied"), Denied),
    row(Words("' denied"), Denied),
    row(Words("access denied"), Denied),
    // Compute Engine's 403, as gcloud prints it: "Could not fetch resource: - Required
    // 'compute.instances.create' permission for 'projects/P/zones/Z/instances/N'" (a
    // gcloud transcript quoted in GoogleCloudPlatform's training labs and many issues).
    row(Words("' permission for '"), Denied),
    // gcloud's "User [a@b.c] does not have permission to access projects instance [p] (or
    // it may not exist): The client is not authorized to make this request." (quoted from
    // `gcloud sql instances create`, `gcloud projects add-iam-policy-binding` and
    // `gcloud services enable` in several public READMEs found through the code index;
    // Google words a disabled billing account the same way).
    row(Words("does not have permission"), Denied),
    // "Location us-east1-d is not found or access is unauthorized." (HTTP 403; SkyPilot
    // `_gcp_handler`): a zone the project may not use, which the pool file must drop.
    row(Words("access is unauthorized"), Denied),
    // gcloud's own credentials: "There was a problem refreshing your current auth tokens:
    // Reauthentication failed. ..." (gcloud's `TokenRefreshError`, google-cloud-sdk
    // `googlecloudsdk/core/credentials`, as read through the code index).
    row(Words("problem refreshing your current auth tokens"), Denied),
    row(Words("reauthentication"), Denied),
    //
    // ---- 5. Invalid: the request is wrong ----
    // "Cloud TPU received a bad request. the accelerator v4-128 was not found in zone
    // us-central2-b" (github.com/skypilot-org/skypilot/issues/3840; node.rs tests).
    row(Words("cloud tpu received a bad request"), Invalid),
    // "Error 400: Cloud TPU received an invalid argument. The field \"TensorflowVersion\"
    // cannot be \"2.4\"." (github.com/tensorflow/tpu/issues/877).
    row(Words("cloud tpu received an invalid argument"), Invalid),
    // gcloud's own argument parser, exit 2: "unrecognized arguments: --x", "argument --x:
    // Invalid choice: 'y'", "Must be specified.", "Invalid value for [--worker]"
    // (tests/fake_gcloud/gcloud mirrors them from gcloud's calliope parser).
    row(Words("unrecognized arguments"), Invalid),
    row(Words("invalid choice"), Invalid),
    row(Words("must be specified"), Invalid),
    row(Words("invalid value for"), Invalid),
    // Compute Engine `VPC_NOT_FOUND`: the network does not exist anywhere (SkyPilot
    // `_gcp_handler` skips the whole cloud).
    row(Status("VPC_NOT_FOUND"), Invalid),
    //
    // ---- 6. The bare status (code.proto; node.rs `error_code` reads the same forms) ----
    // PERMISSION_DENIED 7 / HTTP 403 and UNAUTHENTICATED 16 / HTTP 401.
    row(Status("UNAUTHENTICATED"), Denied),
    row(Code(7), Denied),
    row(Code(16), Denied),
    row(Code(401), Denied),
    row(Code(403), Denied),
    // INVALID_ARGUMENT 3 / 400, NOT_FOUND 5 / 404 (a network, image or accelerator type),
    // FAILED_PRECONDITION 9, OUT_OF_RANGE 11, UNIMPLEMENTED 12: node.rs `classify_error`
    // holds on the same codes.
    row(Status("INVALID_ARGUMENT"), Invalid),
    row(Status("NOT_FOUND"), Invalid),
    row(Status("FAILED_PRECONDITION"), Invalid),
    row(Status("OUT_OF_RANGE"), Invalid),
    row(Status("UNIMPLEMENTED"), Invalid),
    row(Code(3), Invalid),
    row(Code(5), Invalid),
    row(Code(9), Invalid),
    row(Code(11), Invalid),
    row(Code(12), Invalid),
    row(Code(400), Invalid),
    row(Code(404), Invalid),
    // RESOURCE_EXHAUSTED 8 / HTTP 429 with no quota words: the TPU API's stockout is code 8
    // (the first row's text), so a bare 8 is read as one. Iris blocks on "resource_exhausted"
    // as a quota (CAPACITY_FACTS.md, `backoff_detector.py`); the words above already caught
    // every quota text seen.
    row(Status("RESOURCE_EXHAUSTED"), Stockout),
    row(Code(8), Stockout),
    row(Code(429), Stockout),
    // UNAVAILABLE 14 / 503, DEADLINE_EXCEEDED 4 / 504, INTERNAL 13 / 500, ABORTED 10 / 409:
    // code.proto says the caller may retry; e.g. "INTERNAL: Internal error encountered."
    row(Status("UNAVAILABLE"), Transient),
    row(Status("DEADLINE_EXCEEDED"), Transient),
    row(Status("INTERNAL"), Transient),
    row(Status("ABORTED"), Transient),
    row(Code(14), Transient),
    row(Code(4), Transient),
    row(Code(13), Transient),
    row(Code(10), Transient),
    row(Code(500), Transient),
    row(Code(502), Transient),
    row(Code(503), Transient),
    row(Code(504), Transient),
    //
    // ---- 7. No answer at all ----
    // gcloud never reached the API: "ERROR: gcloud crashed (ConnectionError): ('Connection
    // aborted.', RemoteDisconnected(...))" (SkyPilot retries it in its GCP reservation
    // listing, as read through the code index), "connection reset" (node.rs tests), and
    // timeouts.
    row(Words("gcloud crashed (connectionerror)"), Transient),
    row(Words("connection aborted"), Transient),
    row(Words("connection reset"), Transient),
    row(Words("timed out"), Transient),
    row(Words("timeout"), Transient),
];

/// What a failed create's message means. Pure: the same text always reads the same.
pub fn classify_create_error(message: &str) -> CreateError {
    let lower = message.to_ascii_lowercase();
    let kind = ROWS
        .iter()
        .find(|row| row.sign.is_in(message, &lower))
        .map_or(Stockout, |row| row.kind);
    let scope = match kind {
        Stockout | Transient | ErrorKind::NameTaken => Scope::Zone,
        Quota => quota_scope(&lower),
        Denied | Invalid => Scope::Pool,
    };
    CreateError {
        kind,
        scope,
        text: message.to_owned(),
    }
}

/// The reach of a quota error, from the place it names. A Compute Engine quota is regional
/// unless it is an `*_ALL_REGIONS` one ("... Limit: 1.0 globally."); a TPU API quota says
/// "in region R" or "in zone Z" (SkyPilot `_gcp_handler` scopes them the same way). When
/// both are named ("in region us-central1,zone us-central1-a") the region is the wider and
/// is taken. A text naming no place blocks the zone tried: without the zone's name the
/// region cannot be spelled, and a sibling zone over the same quota blocks itself on its
/// first try.
fn quota_scope(lower: &str) -> Scope {
    if lower.contains("_all_regions") || lower.contains("globally") {
        return Scope::AllRegions;
    }
    if let Some(region) = name_after(lower, "in region ") {
        return Scope::Region(region);
    }
    Scope::Zone
}

/// The location name that follows `words`: `us-east5` out of "in region us-east5." or
/// "in region us-central1,zone ...".
fn name_after(text: &str, words: &str) -> Option<String> {
    let at = text.find(words)? + words.len();
    let name: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    let name = name.trim_end_matches('-');
    (!name.is_empty()).then(|| name.to_owned())
}

impl Sign {
    fn is_in(self, message: &str, lower: &str) -> bool {
        match self {
            Words(words) => lower.contains(words),
            Status(name) => message.match_indices(name).any(|(at, _)| {
                let token_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
                !message[..at].chars().next_back().is_some_and(token_char)
                    && !message[at + name.len()..]
                        .chars()
                        .next()
                        .is_some_and(token_char)
            }),
            Code(code) => has_code(lower, code),
        }
    }
}

/// Whether the (lower-cased) message carries `code` where gcloud and Google's client
/// libraries put one.
fn has_code(lower: &str, code: u16) -> bool {
    const BEFORE: [&str; 5] = ["\"code\":", "'code':", "httperror ", "error ", "'status':"];
    BEFORE.iter().any(|before| {
        lower.match_indices(before).any(|(at, _)| {
            let digits: String = lower[at + before.len()..]
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse() == Ok(code)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(name: &str) -> Scope {
        Scope::Region(name.to_owned())
    }

    /// One row per real message (source in `ROWS`' comments), and what it must read as.
    #[test]
    fn real_messages_are_classified() {
        let cases: Vec<(&str, ErrorKind, Scope)> = vec![
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
                Stockout,
                Scope::Zone,
            ),
            ("UNSUPPORTED_OPERATION: instance preempted", Stockout, Scope::Zone),
            // A quota word beside a capacity text: the capacity text wins (#3200, ai-on-gke#849).
            (
                "Code: QUOTA_EXCEEDED ... code: ZONE_RESOURCE_POOL_EXHAUSTED",
                Stockout,
                Scope::Zone,
            ),
            // Request-rate limits.
            (
                "RESOURCE_EXHAUSTED: Maximum number of CreateNode requests per minute exceeded",
                Transient,
                Scope::Zone,
            ),
            (
                "Quota exceeded for quota metric 'Mutate requests' and limit 'Mutate requests per minute' of service 'compute.googleapis.com'",
                Transient,
                Scope::Zone,
            ),
            (r#"HTTP 403 "reason": "rateLimitExceeded""#, Transient, Scope::Zone),
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
                Invalid,
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
            // Read by no row: the zone backs off, as SkyPilot does.
            ("something nobody has seen before", Stockout, Scope::Zone),
        ];
        let mut wrong = Vec::new();
        for (message, kind, scope) in cases {
            let got = classify_create_error(message);
            let want = CreateError {
                kind,
                scope,
                text: message.to_owned(),
            };
            if got != want {
                wrong.push(format!("{message}\n  wanted {want:?}, got {got:?}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
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
}
