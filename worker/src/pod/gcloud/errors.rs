//! What gcloud's error text means: the one reading of every answer gcloud gives, for every
//! call (create, delete, describe, list, ssh) and for every caller (a pool making slices in
//! `pool/`, a pod bringing its node or group back in `pod/gcloud/recovery.rs` and
//! `pod/gcloud/compute/recovery.rs`, the runner telling a missing resource from a failure).
//!
//! The answers read are those of `gcloud compute tpus tpu-vm ...`, `gcloud compute tpus
//! queued-resources ...` (a `FAILED` queued resource's `failedData.error`, a
//! `google.rpc.Status`) and Compute Engine's (`gcloud compute instance-groups managed ...`,
//! a MIG's `lastProgressCheck` errors such as `QUOTA_EXCEEDED`).
//!
//! `classify` gives a `CloudError`: a `Kind` (what the cloud said), a `Scope` (how far it
//! reaches, where it matters: a quota's region) and the words. `Kind::response` is the one
//! policy every caller acts on:
//!
//! | kind | response | a pool | a pod's recovery |
//! |---|---|---|---|
//! | stockout, preempted, unknown | `Capacity` | backs the zone off, tries the next | asks again after a pause that doubles |
//! | quota | `Quota` | blocks the zone or region named, 5 minutes | holds: its one zone is over quota |
//! | rate-limited, transient, already-exists | `Retry` | asks the same zone again | asks again after a pause that doubles |
//! | denied, invalid, not-found | `Person` | pauses until a person looks | holds, and says why |
//!
//! So a per-minute request quota ("... requests per minute") is rate-limited: it clears
//! within the minute, so nobody stops for it, and it is waited out with backoff. Billing
//! disabled, with or without a status code, is a denial a person must fix: shown, never
//! retried as capacity.
//!
//! `ROWS` is read top to bottom and the first row whose sign is in the text decides. The
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
//!    word, scoped to what it names; a pool blocks it for only 5 minutes, so a mislabelled
//!    stockout costs one short block, never a pause.
//! 2. Per-minute request limits before quotas: Google words them as quotas ("Quota exceeded
//!    for quota metric ... per minute") but they clear by themselves within the minute.
//! 3. Quota words, then denial words, then invalid-request words, then a resource that is
//!    missing or exists already.
//! 4. Then the bare status: a `google.rpc.Code` name or number, or an HTTP status.
//! 5. Last the failures on the way: gcloud never reached the API.
//!
//! A text no row reads is `Unknown`, and answered as no capacity in its zone, as SkyPilot
//! blocks the zone of an error it cannot parse (`_gcp_handler` in
//! `sky/backends/cloud_vm_ray_backend.py`): a pool moves on and comes back with backoff, a
//! pod asks again after a pause, neither hammering one zone nor stopping on a message nobody
//! has seen.
//!
//! Where a row cites "code.proto": the `google.rpc.Code` names, numbers and their HTTP
//! mapping, googleapis/googleapis `google/rpc/code.proto`; "error_reason.proto": the
//! `google.rpc.ErrorInfo` reasons Google APIs put in an error's details (`reason:
//! BILLING_DISABLED`), googleapis/googleapis `google/api/error_reason.proto`; "AIP-193":
//! Google's API error guide, https://cloud.google.com/apis/design/errors (its codes, HTTP
//! statuses and example messages). Every text is cited where it was seen.

/// What a gcloud answer said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The zone has no capacity for the request now.
    Stockout,
    /// The capacity was taken back while the request ran (a slice preempted while created).
    Preempted,
    /// The project may not have more of this resource where the scope says.
    Quota,
    /// Over a per-minute request limit: it clears by itself within the minute.
    RateLimited,
    /// The call failed on its way or the service faltered; the same call may well pass.
    Transient,
    /// Credentials, permissions, billing or a disabled API: a person must act.
    Denied,
    /// The request itself is wrong (accelerator, version, flags): a person must act.
    Invalid,
    /// The resource the call names does not exist (for a create: something it needs).
    NotFound,
    /// The resource the call would make exists already.
    AlreadyExists,
    /// No row reads the text.
    Unknown,
}

/// What whoever made a refused request does about it (the table in the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response {
    /// No capacity where it was asked: ask elsewhere, or here again after a pause that
    /// doubles.
    Capacity,
    /// Over a quota where `Scope` reaches: nothing more is asked there until it is raised.
    Quota,
    /// Ask again, in the same place, after a pause that doubles.
    Retry,
    /// A person must act: say why, and ask nothing again until then.
    Person,
}

impl Response {
    /// Whether a pod, whose node or group has one zone and nowhere else to go, stops asking
    /// and holds until a person acts: for a quota and for what only a person can fix.
    pub fn holds(self) -> bool {
        matches!(self, Response::Quota | Response::Person)
    }
}

impl Kind {
    /// What a refused request of this kind asks of its caller, pool or pod alike.
    pub fn response(self) -> Response {
        match self {
            Kind::Stockout | Kind::Preempted | Kind::Unknown => Response::Capacity,
            Kind::Quota => Response::Quota,
            // A resource that exists already is found by the next look.
            Kind::RateLimited | Kind::Transient | Kind::AlreadyExists => Response::Retry,
            Kind::Denied | Kind::Invalid | Kind::NotFound => Response::Person,
        }
    }

    /// Whether a read-only call (a describe, a list) that failed this way is worth making
    /// again within seconds (`runner::Retry::Api`). A denial is: its texts include gcloud's
    /// failed token refresh, which lasts only as long as the metadata server's hiccup. A
    /// quota, a wrong request or a missing resource answers the same until a person acts.
    pub fn may_pass_soon(self) -> bool {
        match self {
            Kind::Transient | Kind::RateLimited | Kind::Denied | Kind::Unknown => true,
            Kind::Stockout
            | Kind::Preempted
            | Kind::Quota
            | Kind::Invalid
            | Kind::NotFound
            | Kind::AlreadyExists => false,
        }
    }

    /// In words, for what podq shows.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Stockout => "no capacity",
            Kind::Preempted => "no capacity (preempted while being created)",
            Kind::Quota => "over quota",
            Kind::RateLimited => "over a per-minute request limit, which clears by itself",
            Kind::Transient => "a passing failure",
            Kind::Denied => {
                "not allowed (credentials, permissions, billing or a disabled API): a person \
                 must fix it"
            }
            Kind::Invalid => "the request is invalid or not allowed",
            Kind::NotFound => "something the request names does not exist",
            Kind::AlreadyExists => "it exists already",
            Kind::Unknown => "no capacity, as far as podq can tell (an error it does not know)",
        }
    }
}

/// How far an error reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The zone the request was made in.
    Zone,
    /// Every zone of the region (e.g. `us-central2`).
    Region(String),
    /// Every zone: a global quota.
    AllRegions,
    /// The whole project, whatever the zone: credentials, billing, a wrong request.
    Pool,
}

/// A gcloud answer, read: what it means, how far it reaches, and gcloud's own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudError {
    pub kind: Kind,
    pub scope: Scope,
    pub text: String,
}

impl CloudError {
    /// An error whose meaning is known without reading a cloud's text.
    pub fn new(kind: Kind, scope: Scope, text: impl Into<String>) -> CloudError {
        CloudError {
            kind,
            scope,
            text: text.into(),
        }
    }

    /// A failure on the way to the cloud (a timeout, a process that would not start, a
    /// file that could not be written): the same request may well succeed.
    pub fn transient(text: impl Into<String>) -> CloudError {
        CloudError::new(Kind::Transient, Scope::Zone, text)
    }

    pub fn response(&self) -> Response {
        self.kind.response()
    }

    /// The same error, its words led by `what` (e.g. "tpu-vm list in us-central2-b").
    pub fn during(mut self, what: &str) -> CloudError {
        self.text = format!("{what}: {}", self.text);
        self
    }
}

impl std::fmt::Display for CloudError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for CloudError {}

/// How a row recognises a text.
#[derive(Debug, Clone, Copy)]
enum Sign {
    /// Words anywhere in the text, in any case.
    Words(&'static str),
    /// A status, reason or error-code name as a whole token, in capitals (`INTERNAL` must
    /// not match `--internal-ips`).
    Status(&'static str),
    /// A `google.rpc.Code` or HTTP status number: `"code": 8`, `'code': 8`, `HttpError 429`,
    /// `Error 403`. The two never collide (0-16 against 400-599).
    Code(u16),
}

struct Row {
    sign: Sign,
    kind: Kind,
}

use Kind::{
    AlreadyExists, Denied, Invalid, NotFound, Preempted, Quota, RateLimited, Stockout, Transient,
};
use Sign::{Code, Status, Words};

const fn row(sign: Sign, kind: Kind) -> Row {
    Row { sign, kind }
}

const ROWS: &[Row] = &[
    // ---- 1. Capacity ----
    // The Cloud TPU API's stockout, code 8 (RESOURCE_EXHAUSTED, code.proto): `{"code": 8,
    // "message": "There is no more capacity in the zone \"europe-west4-a\"; you can try in
    // another zone where Cloud TPU Nodes are offered ..."}`. Read in skypilot-org/skypilot
    // `sky/backends/cloud_vm_ray_backend.py` (`_gcp_handler`, blocks the zone),
    // github.com/thevasudevgupta/gsoc-wav2vec2/issues/11,
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
    // zone), github.com/skypilot-org/skypilot/issues/4579; a reservation's capacity is
    // Compute Engine's (https://cloud.google.com/compute/docs/instances/reservations-overview).
    row(Words("insufficient reserved capacity"), Stockout),
    // Code 3 "Cloud TPU received a bad request. update is not supported while in state
    // PREEMPTED": the slice was preempted while being created, so the zone is reclaiming,
    // not the request wrong (SkyPilot `_gcp_handler`'s comment on code 3; the TPU API's node
    // states, https://cloud.google.com/tpu/docs/reference/rest/v2/projects.locations.nodes).
    // Before the bad-request row below.
    row(Words("while in state preempted"), Preempted),
    // Compute Engine `UNSUPPORTED_OPERATION`, "observed empirically when VM is preempted
    // during creation" (SkyPilot `_gcp_handler`, per zone;
    // https://cloud.google.com/compute/docs/instances/preemptible).
    row(Status("UNSUPPORTED_OPERATION"), Preempted),
    // gcloud's ssh and scp refuse a node whose capacity is gone before connecting: "This TPU
    // has terminal state \"PREEMPTED\", so it cannot be used anymore." (google-cloud-sdk
    // `googlecloudsdk/command_lib/compute/tpus/tpu_vm/ssh.py`, `ValidateTPUState`;
    // tests/fake_gcloud/gcloud mirrors it).
    row(Words("has terminal state"), Preempted),
    //
    // ---- 2. Request-rate limits ----
    // "Maximum number of CreateNode requests per minute" once creates passed the project's
    // `tpu.googleapis.com/qps/create` (github.com/marin-community/marin/pull/6198; the TPU
    // API's request quotas, https://cloud.google.com/tpu/docs/quota), and the general "Quota
    // exceeded for quota metric 'Mutate requests' and limit 'Mutate requests per minute'"
    // (github.com/opstrace/opstrace/issues/1213; Compute Engine's API rate limits,
    // https://cloud.google.com/compute/api-quota): it clears within the minute.
    row(Words("requests per minute"), RateLimited),
    // Bulk creation's HTTP 403 `"reason": "rateLimitExceeded"`: "wait until some requests
    // complete and try your request again"
    // (https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-bulk-vm-creation).
    row(Words("ratelimitexceeded"), RateLimited),
    // The `ErrorInfo` reason of the same (error_reason.proto `RATE_LIMIT_EXCEEDED`).
    row(Status("RATE_LIMIT_EXCEEDED"), RateLimited),
    //
    // ---- 3. Quota (https://cloud.google.com/tpu/docs/quota,
    //      https://cloud.google.com/compute/resource-usage) ----
    // The Cloud TPU API: "Quota limit 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' has been
    // exceeded. Limit: 0 in region us-east5." (github.com/marin-community/marin/issues/3200
    // and /pull/1612); "RESOURCE_EXHAUSTED: Quota limit 'TPUV2sPodPerProjectPerRegionForTPUAPI,
    // TPUV2sPodPerProjectPerZoneForTPUAPI' has been exceeded. Limit: 0,0 in region
    // us-central1,zone us-central1-a." (github.com/BioMedBERT/biomedbert `nohup.out`); AIP-193's
    // example for RESOURCE_EXHAUSTED, "Quota limit 'xxx' exceeded."; a queued resource's
    // failedData (this module's tests; tests/fake_gcloud/gcloud `QUOTA`). The same words
    // read "The following quota metrics exceed quota limits: ..." with 429
    // RESOURCE_EXHAUSTED (github.com/google-deepmind/xmanager/issues/29).
    row(Words("quota limit"), Quota),
    // "Quota 'TPUV2sPreemptiblePodPerProjectPerRegionForTPUAPI' exhausted. Limit 32 in region
    // europe-west4" (SkyPilot `_gcp_handler`, `google.rpc.QuotaFailure`); Compute Engine's
    // "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 1.0 globally." (SkyPilot `_gcp_handler`;
    // github.com/fastai/course-v3/pull/165) and "Quota 'CPUS' exceeded. Limit: 24.0 in region
    // us-central1." (SkyPilot `_gcp_handler`; https://cloud.google.com/compute/resource-usage);
    // `Quota 'TPUS_PER_TPU_FAMILY' exceeded`; the repo's fake MIG
    // (tests/fake_gcloud/gcloud `create_instances`).
    row(Words("quota '"), Quota),
    // Compute Engine's error code `QUOTA_EXCEEDED` (a MIG's `lastProgressCheck`:
    // https://cloud.google.com/compute/docs/instance-groups/view-cancel-vm-bulk-creation-in-migs ;
    // SkyPilot `_gcp_handler`; tests/fake_gcloud/gcloud).
    row(Words("quota_exceeded"), Quota),
    // Its HTTP form, 403 `"reason": "quotaExceeded"`
    // (https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-bulk-vm-creation;
    // SkyPilot `_gcp_handler`).
    row(Words("quotaexceeded"), Quota),
    // The detail type `type.googleapis.com/google.rpc.QuotaFailure` of a TPU pod quota error
    // (SkyPilot `_gcp_handler`; googleapis/googleapis `google/rpc/error_details.proto`).
    row(Words("quotafailure"), Quota),
    // "insufficient regional quota to satisfy request: resource \"CPUS\"" and "Insufficient
    // project quota to satisfy request: resource \"CPUS_ALL_REGIONS\"", both with status
    // PERMISSION_DENIED, which must not read as a denial
    // (github.com/kaiwaehner/hivemq-mqtt-tensorflow-kafka-realtime-iot-machine-learning-training-inference/issues/48,
    // github.com/kubeflow/examples/issues/597; https://cloud.google.com/compute/resource-usage).
    row(Words("quota to satisfy"), Quota),
    //
    // ---- 4. Denied: a person must fix credentials, permissions or billing ----
    // "googleapi: Error 403: cannot create a TPU Node on a project linked to a free-trial
    // billing account, forbidden" (github.com/tensorflow/tpu/issues/124); "The billing
    // account for the owning project is disabled in state absent"
    // (github.com/swiss-ai-center/a-guide-to-mlops/pull/102). Billing is a project's
    // (https://cloud.google.com/billing/docs/how-to/modify-project).
    row(Words("billing account"), Denied),
    // "Project charming-module-137923 (#808448574146) has billing disabled. Please enable it."
    // with no code (github.com/GoogleCloudPlatform/java-docs-samples/issues/276), and its
    // `ErrorInfo` reason, error_reason.proto `BILLING_DISABLED`.
    row(Words("billing disabled"), Denied),
    row(Status("BILLING_DISABLED"), Denied),
    // "This API method requires billing to be enabled" (github.com/pgmichael/wavenet-for-chrome/issues/83);
    // "Billing must be enabled for activation of service(s)" (github.com/kyegomez/zeta/issues/71).
    row(Words("billing to be enabled"), Denied),
    row(Words("billing must be enabled"), Denied),
    // SERVICE_DISABLED (error_reason.proto): "Cloud TPU API has not been used in project
    // 1032299714650 before or it is disabled. Enable it by visiting ..." (HTTP 403; the same
    // text for every Google API: github.com/GoogleCloudPlatform/emblem/issues/757,
    // github.com/GoogleCloudPlatform/vertex-ai-samples/issues/476;
    // https://cloud.google.com/tpu/docs/setup-gcp-account enables it).
    row(Words("has not been used in project"), Denied),
    row(Status("SERVICE_DISABLED"), Denied),
    // "PERMISSION_DENIED: Read access to project 'annotator-1286' was denied"
    // (github.com/tensorflow/tpu/issues/227); "Permission 'tpu.nodes.get' denied on
    // 'projects/...'" (github.com/tensorflow/tpu/issues/296; AIP-193's PERMISSION_DENIED
    // example, "Permission 'xxx' denied on resource 'yyy'."); `IAM_PERMISSION_DENIED` and
    // "Policy update access denied." (SkyPilot `_gcp_handler`, skips every region).
    row(Words("permission_denied"), Denied),
    row(Words("permission denied"), Denied),
    row(Words("was denied"), Denied),
    row(Words("' denied"), Denied),
    row(Words("access denied"), Denied),
    // Compute Engine's 403, as gcloud prints it: "Could not fetch resource: - Required
    // 'compute.instances.create' permission for 'projects/P/zones/Z/instances/N'" (a
    // gcloud transcript quoted in GoogleCloudPlatform's training labs and many issues;
    // https://cloud.google.com/compute/docs/access/iam).
    row(Words("' permission for '"), Denied),
    // gcloud's "User [a@b.c] does not have permission to access projects instance [p] (or
    // it may not exist): The client is not authorized to make this request." (quoted from
    // `gcloud sql instances create`, `gcloud projects add-iam-policy-binding` and
    // `gcloud services enable` in several public READMEs found through the code index;
    // google-cloud-sdk `googlecloudsdk/api_lib/util/exceptions.py` words a 403 so).
    row(Words("does not have permission"), Denied),
    // "Location us-east1-d is not found or access is unauthorized." (HTTP 403; SkyPilot
    // `_gcp_handler`): a zone the project may not use (https://cloud.google.com/tpu/docs/regions-zones).
    row(Words("access is unauthorized"), Denied),
    // gcloud's own credentials: "There was a problem refreshing your current auth tokens:
    // Reauthentication failed. ..." (gcloud's `TokenRefreshError`, google-cloud-sdk
    // `googlecloudsdk/core/credentials/store.py`, as read through the code index).
    row(Words("problem refreshing your current auth tokens"), Denied),
    row(Words("reauthentication"), Denied),
    //
    // ---- 5. Invalid: the request is wrong ----
    // "Cloud TPU received a bad request. the accelerator v4-128 was not found in zone
    // us-central2-b" (github.com/skypilot-org/skypilot/issues/3840; this module's tests;
    // the zones' types, https://cloud.google.com/tpu/docs/regions-zones).
    row(Words("cloud tpu received a bad request"), Invalid),
    // "Error 400: Cloud TPU received an invalid argument. The field \"TensorflowVersion\"
    // cannot be \"2.4\"." (github.com/tensorflow/tpu/issues/877; INVALID_ARGUMENT, code.proto).
    row(Words("cloud tpu received an invalid argument"), Invalid),
    // gcloud's own argument parser, exit 2: "unrecognized arguments: --x", "argument --x:
    // Invalid choice: 'y'", "Must be specified.", "Invalid value for [--worker]"
    // (google-cloud-sdk `googlecloudsdk/calliope/parser_errors.py` and `arg_parsers.py`;
    // tests/fake_gcloud/gcloud mirrors them).
    row(Words("unrecognized arguments"), Invalid),
    row(Words("invalid choice"), Invalid),
    row(Words("must be specified"), Invalid),
    row(Words("invalid value for"), Invalid),
    // Compute Engine `VPC_NOT_FOUND`: the network does not exist anywhere (SkyPilot
    // `_gcp_handler` skips the whole cloud; https://cloud.google.com/vpc/docs/vpc).
    row(Status("VPC_NOT_FOUND"), Invalid),
    //
    // ---- 6. Missing, or there already ----
    // NOT_FOUND 5 / HTTP 404 (code.proto; AIP-193's example "Resource 'xxx' not found."):
    // "NOT_FOUND: Resource 'projects/p/locations/z/nodes/n' was not found" (the TPU API, as
    // tests/fake_gcloud/gcloud prints it) and Compute Engine's "Could not fetch resource: -
    // The resource 'projects/p/zones/z/instanceGroupManagers/g' was not found"
    // (https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-vm-creation).
    // A delete or describe takes it as gone; a create as something it needs that is missing
    // (a network, image or accelerator type).
    row(Words("was not found"), NotFound),
    row(Status("NOT_FOUND"), NotFound),
    row(Code(5), NotFound),
    row(Code(404), NotFound),
    // ALREADY_EXISTS 6 (code.proto; AIP-193's "Resource 'xxx' already exists."): the TPU
    // API's `ALREADY_EXISTS: NAME` and Compute Engine's "The resource '...' already exists"
    // (tests/fake_gcloud/gcloud prints both). HTTP 409 is ABORTED's too, so it is not read.
    row(Words("already exists"), AlreadyExists),
    row(Status("ALREADY_EXISTS"), AlreadyExists),
    row(Code(6), AlreadyExists),
    //
    // ---- 7. The bare status (code.proto) ----
    // PERMISSION_DENIED 7 / HTTP 403 and UNAUTHENTICATED 16 / HTTP 401.
    row(Status("UNAUTHENTICATED"), Denied),
    row(Code(7), Denied),
    row(Code(16), Denied),
    row(Code(401), Denied),
    row(Code(403), Denied),
    // INVALID_ARGUMENT 3 / 400, FAILED_PRECONDITION 9, OUT_OF_RANGE 11, UNIMPLEMENTED 12:
    // code.proto says not to retry them until the system or the request changes.
    row(Status("INVALID_ARGUMENT"), Invalid),
    row(Status("FAILED_PRECONDITION"), Invalid),
    row(Status("OUT_OF_RANGE"), Invalid),
    row(Status("UNIMPLEMENTED"), Invalid),
    row(Code(3), Invalid),
    row(Code(9), Invalid),
    row(Code(11), Invalid),
    row(Code(12), Invalid),
    row(Code(400), Invalid),
    // RESOURCE_EXHAUSTED 8 / HTTP 429 with no quota words: the TPU API's stockout is code 8
    // (the first row's text), so a bare 8 is read as one. Iris blocks on "resource_exhausted"
    // as a quota (`backoff_detector.py`); the words above already caught every quota text
    // seen.
    row(Status("RESOURCE_EXHAUSTED"), Stockout),
    row(Code(8), Stockout),
    row(Code(429), Stockout),
    // UNAVAILABLE 14 / 503, DEADLINE_EXCEEDED 4 / 504, INTERNAL 13 / 500, ABORTED 10:
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
    // ---- 8. No answer at all ----
    // gcloud never reached the API: "ERROR: gcloud crashed (ConnectionError): ('Connection
    // aborted.', RemoteDisconnected(...))" (google-cloud-sdk `googlecloudsdk/gcloud_main.py`
    // prints "gcloud crashed"; SkyPilot retries it in its GCP reservation listing, as read
    // through the code index), "connection reset" (this module's tests), and timeouts.
    row(Words("gcloud crashed (connectionerror)"), Transient),
    row(Words("connection aborted"), Transient),
    row(Words("connection reset"), Transient),
    row(Words("timed out"), Transient),
    row(Words("timeout"), Transient),
];

/// What gcloud's `text` (its stderr, an error's `code: message`) means. Pure: the same text
/// always reads the same.
pub fn classify(text: &str) -> CloudError {
    let lower = text.to_ascii_lowercase();
    let kind = ROWS
        .iter()
        .find(|row| row.sign.is_in(text, &lower))
        .map_or(Kind::Unknown, |row| row.kind);
    let scope = match kind {
        Quota => quota_scope(&lower),
        Denied | Invalid | NotFound => Scope::Pool,
        _ => Scope::Zone,
    };
    CloudError {
        kind,
        scope,
        text: text.to_owned(),
    }
}

/// A `google.rpc.Status` (a `FAILED` queued resource's `failedData.error`): its message,
/// with its code where the message says nothing the table reads.
pub fn classify_status(code: Option<i64>, message: &str) -> CloudError {
    let text = match code {
        Some(code) => format!("{message} {{\"code\": {code}}}"),
        None => message.to_owned(),
    };
    CloudError {
        text: message.to_owned(),
        ..classify(&text)
    }
}

/// One error of a Compute Engine group's `lastProgressCheck` (`QUOTA_EXCEEDED: Quota
/// 'CPUS' exceeded. ...`), read as a pool reads all of them together.
pub fn classify_item(code: &str, message: &str) -> CloudError {
    classify(&format!("{code}: {message}"))
}

/// Whether gcloud answered that the resource does not exist.
pub fn is_not_found(text: &str) -> bool {
    classify(text).kind == NotFound
}

/// Whether gcloud refused to make a resource because it exists already.
pub fn already_exists(text: &str) -> bool {
    classify(text).kind == AlreadyExists
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
    fn is_in(self, text: &str, lower: &str) -> bool {
        match self {
            Words(words) => lower.contains(words),
            Status(name) => text.match_indices(name).any(|(at, _)| {
                let token_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
                !text[..at].chars().next_back().is_some_and(token_char)
                    && !text[at + name.len()..]
                        .chars()
                        .next()
                        .is_some_and(token_char)
            }),
            Code(code) => has_code(lower, code),
        }
    }
}

/// Whether the (lower-cased) text carries `code` where gcloud and Google's client libraries
/// put one.
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
mod tests;
