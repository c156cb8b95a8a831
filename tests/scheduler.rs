//! The scheduler's methods driven one step at a time, on a real store and the real experiment
//! catalog: no HTTP, no clock but the one each step is given. Every test runs twice: on a
//! SQLite file in a temporary directory, and on a fresh PostgreSQL database
//! (`PODQ_TEST_DATABASE_URL`, which `scripts/test` provides).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::postgres::PostgresDatabase;
use podq_api::{
    AttemptOutcome, FinishRequest, HeartbeatRequest, JobState, LeasePhase, LeaseRequest,
    PodDescription, SubmitRequest,
};
use podq_server::catalog::Catalog;
use podq_server::scheduler::control::JobChange;
use podq_server::scheduler::{Scheduler, SchedulerError};
use podq_server::store::{db, Location, Store};
use podq_server::team::Acting;
use podq_server::ServerConfig;
use sqlx::Connection;
use tempfile::TempDir;

struct Fixture {
    scheduler: Scheduler,
    store: Store,
    config: Arc<ServerConfig>,
    database: Database,
}

/// Where a fixture's state lives; kept until the test ends.
struct Database {
    location: Location,
    _dir: TempDir,
    _postgres: Option<PostgresDatabase>,
}

#[derive(Clone, Copy)]
enum Backend {
    Sqlite,
    Postgres,
}

/// Each `async fn name(backend: Backend)` below becomes the tests `name::sqlite` and
/// `name::postgres`.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name(super::Backend::Sqlite).await
            }
            #[tokio::test]
            async fn postgres() {
                super::$name(super::Backend::Postgres).await
            }
        }
    )*};
}

on_both_stores!(
    two_pods_asking_at_once_get_one_job_once,
    a_waiting_pod_is_woken_by_a_submission,
    reap_once_ends_only_leases_past_their_ttl,
    maintained_counts_match_the_rows_after_every_kind_of_transition,
    a_job_says_why_its_last_attempt_ended,
    a_restarted_server_wakes_a_waiting_pod_for_every_backoff_that_ends,
    a_pods_time_between_attempts_goes_to_recovery_or_idleness_once,
    a_metrics_batch_that_repeats_a_step_keeps_its_last_value,
    a_pod_whose_cancelled_job_still_holds_its_lease_claims_nothing,
);

async fn fixture(backend: Backend) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let database = match backend {
        Backend::Sqlite => Database {
            location: Location::Sqlite(dir.path().join("podq.db")),
            _dir: dir,
            _postgres: None,
        },
        Backend::Postgres => {
            let postgres = PostgresDatabase::create().await;
            Database {
                location: Location::Postgres(postgres.url.clone()),
                _dir: dir,
                _postgres: Some(postgres),
            }
        }
    };
    fixture_on(database).await
}

/// A scheduler over `database` (a second call is a restarted server). Failures back off
/// 200 to 400 ms.
async fn fixture_on(database: Database) -> Fixture {
    let mut config = ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        database._dir.path().join("podq.db"),
        common::experiments_dir(),
    );
    config.database = Some(database.location.clone());
    config.backoff_base = Duration::from_millis(400);
    config.backoff_cap = Duration::from_millis(400);
    let catalog = Catalog::load(&config.experiments, &config.catalog);
    assert!(catalog.errors().is_empty(), "the repo's catalog loads");
    let store = Store::open_at(&config.location()).await.unwrap();
    // A restarted fixture's PostgreSQL store may start as a standby while the previous one's
    // connection (and lead lock) closes: it takes the lead within a second.
    tokio::time::timeout(
        Duration::from_secs(10),
        store
            .role()
            .wait_for(|role| *role == podq_server::store::Role::Active),
    )
    .await
    .expect("the store takes the lead")
    .unwrap();
    let config = Arc::new(config);
    let scheduler = Scheduler::load(store.clone(), Arc::new(catalog), config.clone())
        .await
        .unwrap();
    Fixture {
        scheduler,
        store,
        config,
        database,
    }
}

/// A worker's calls made as podq itself, a caller any pod allows.
static PODQ: std::sync::LazyLock<Acting> = std::sync::LazyLock::new(Acting::podq);

/// The scheduler called as podq itself: an admin, so no job is another's.
fn podq() -> Acting {
    Acting::podq()
}

fn priority(priority: i64) -> JobChange {
    JobChange {
        priority: Some(priority),
        class: None,
    }
}

fn submit(body: serde_json::Value) -> SubmitRequest {
    serde_json::from_value(body).unwrap()
}

fn ask(wait_s: u64) -> LeaseRequest {
    LeaseRequest {
        pod: PodDescription {
            accelerator: "v4-64".into(),
            hosts: 8,
            state: "READY".into(),
            health: "HEALTHY".into(),
            preflight: None,
            recovery: None,
        },
        wait_s: Some(wait_s),
    }
}

fn finished(outcome: AttemptOutcome) -> FinishRequest {
    FinishRequest {
        outcome,
        exit_codes: vec![Some(0); 8],
        start_step: None,
        end_step: None,
        log_tail: None,
        message: None,
        phases: None,
        stopping_s: None,
        knows_stopped: true,
    }
}

async fn job_state(f: &Fixture, id: podq_api::JobId) -> String {
    db::query_scalar("SELECT state FROM jobs WHERE id = ?")
        .bind(id.to_string())
        .fetch_one(&mut f.store.read().await.unwrap())
        .await
        .unwrap()
}

async fn two_pods_asking_at_once_get_one_job_once(backend: Backend) {
    let f = fixture(backend).await;
    let created = f
        .scheduler
        .submit(
            &podq(),
            submit(serde_json::json!({"experiments": ["exp07a"]})),
            None,
        )
        .await
        .unwrap()
        .created;
    assert_eq!(created.len(), 1);
    let (a, b) = tokio::join!(
        f.scheduler.lease("a", ask(0), &PODQ),
        f.scheduler.lease("b", ask(0), &PODQ)
    );
    let granted: Vec<_> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
    assert_eq!(granted.len(), 1, "one job, one lease");
    assert_eq!(Some(granted[0].job_id), created[0].job_id);
    assert_eq!(job_state(&f, created[0].job_id.unwrap()).await, "leased");
}

/// A cancelled job keeps its lease until its worker has stopped every host: until then the
/// pod runs it, and the claim (the guard every lease call ends in, whatever the in-memory
/// table saw) gives that pod nothing else.
async fn a_pod_whose_cancelled_job_still_holds_its_lease_claims_nothing(backend: Backend) {
    use futures::FutureExt;
    let f = fixture(backend).await;
    let body = serde_json::json!({"experiments": ["exp07a", "exp07b"]});
    f.scheduler
        .submit(&podq(), submit(body), None)
        .await
        .unwrap();
    let lease = f
        .scheduler
        .lease("p", ask(0), &PODQ)
        .await
        .unwrap()
        .expect("a lease");
    f.scheduler
        .cancel(&podq(), lease.job_id, None)
        .await
        .unwrap();
    assert_eq!(job_state(&f, lease.job_id).await, "cancelled");
    let claim = |pod: &'static str| {
        f.store.write(move |conn| {
            async move {
                let worker = podq_server::store::events::Actor::podq();
                let lease_id = podq_api::LeaseId::new_random();
                podq_server::store::leases::claim(conn, lease_id, pod, "v4-64", &worker).await
            }
            .boxed()
        })
    };
    let second: Option<_> = claim("p").await.unwrap();
    assert!(
        second.is_none(),
        "pod p was granted a second live lease while its cancelled job's lease lived"
    );
    let other: Option<_> = claim("q").await.unwrap();
    assert!(other.is_some(), "another pod still gets the queued job");
}

async fn a_waiting_pod_is_woken_by_a_submission(backend: Backend) {
    let f = fixture(backend).await;
    let waiting = f.scheduler.lease("a", ask(30), &PODQ);
    let submitted = async {
        // The job arrives once the waiter has registered its pod, i.e. is about to wait.
        let deadline = Instant::now() + Duration::from_secs(10);
        while f.scheduler.pods().await.unwrap().is_empty() {
            assert!(
                Instant::now() < deadline,
                "the waiting pod never registered"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        f.scheduler
            .submit(
                &podq(),
                submit(serde_json::json!({"experiments": ["exp07a"]})),
                None,
            )
            .await
            .unwrap()
    };
    let started = Instant::now();
    let (lease, answer) = tokio::join!(waiting, submitted);
    let lease = lease.unwrap().expect("the waiting pod gets the job");
    assert_eq!(Some(lease.job_id), answer.created[0].job_id);
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "woken by the submission, not by its 30 s wait running out"
    );
}

async fn reap_once_ends_only_leases_past_their_ttl(backend: Backend) {
    let f = fixture(backend).await;
    f.scheduler
        .submit(
            &podq(),
            submit(serde_json::json!({"experiments": ["exp07a"]})),
            None,
        )
        .await
        .unwrap();
    let lease = f
        .scheduler
        .lease("a", ask(0), &PODQ)
        .await
        .unwrap()
        .unwrap();
    f.scheduler
        .heartbeat(
            lease.lease_id,
            HeartbeatRequest {
                phase: LeasePhase::Running,
                step: Some(3),
                hosts_alive: vec![true; 8],
            },
            &PODQ,
        )
        .unwrap();

    let tick = f.scheduler.reap_once(Instant::now()).await.unwrap();
    assert_eq!((tick.running, tick.lost.len()), (1, 0), "{tick:?}");
    assert_eq!(job_state(&f, lease.job_id).await, "running");
    let again = f.scheduler.reap_once(Instant::now()).await.unwrap();
    assert_eq!(again.running, 0, "running is recorded once");

    let later = Instant::now() + f.config.lease_ttl + Duration::from_secs(1);
    let tick = f.scheduler.reap_once(later).await.unwrap();
    assert_eq!(tick.lost, vec![lease.lease_id]);
    assert_eq!(job_state(&f, lease.job_id).await, "queued");
    let outcome: String = db::query_scalar("SELECT outcome FROM attempts WHERE lease_id = ?")
        .bind(lease.lease_id.to_string())
        .fetch_one(&mut f.store.read().await.unwrap())
        .await
        .unwrap();
    assert_eq!(outcome, "lost");
    let late = f.scheduler.heartbeat(
        lease.lease_id,
        HeartbeatRequest {
            phase: LeasePhase::Running,
            step: None,
            hosts_alive: vec![],
        },
        &PODQ,
    );
    assert!(
        matches!(late, Err(SchedulerError::LeaseLost(_))),
        "{late:?}"
    );
}

/// SQLite's `data_version` changes for a connection when any other connection commits.
async fn data_version(conn: &mut sqlx::SqliteConnection) -> i64 {
    sqlx::query_scalar("PRAGMA data_version")
        .fetch_one(&mut *conn)
        .await
        .unwrap()
}

/// SQLite only: PostgreSQL has no per-connection counter of other connections' commits.
#[tokio::test]
async fn pods_asking_again_and_again_with_nothing_queued_write_nothing() {
    let f = fixture(Backend::Sqlite).await;
    f.scheduler.lease("a", ask(0), &PODQ).await.unwrap();
    f.scheduler.lease("b", ask(0), &PODQ).await.unwrap();
    let mut watcher =
        sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=ro", f.config.db.display()))
            .await
            .unwrap();
    let before = data_version(&mut watcher).await;
    for _ in 0..5 {
        assert!(f
            .scheduler
            .lease("a", ask(0), &PODQ)
            .await
            .unwrap()
            .is_none());
        assert!(f
            .scheduler
            .lease("b", ask(0), &PODQ)
            .await
            .unwrap()
            .is_none());
        f.scheduler.reap_once(Instant::now()).await.unwrap();
    }
    assert_eq!(data_version(&mut watcher).await, before, "no commit");
    // A pod whose description changes is written.
    let mut changed = ask(0);
    changed.pod.health = "UNHEALTHY_MAINTENANCE".into();
    f.scheduler.lease("a", changed, &PODQ).await.unwrap();
    assert_ne!(data_version(&mut watcher).await, before);
}

/// The counts the triggers keep, against the same counts computed from the rows, after
/// transitions of runs and of jobs linked to them.
async fn maintained_counts_match_the_rows_after_every_kind_of_transition(backend: Backend) {
    let f = fixture(backend).await;
    let answer = f
        .scheduler
        .submit(&podq(), submit(serde_json::json!({"all": true})), None)
        .await
        .unwrap();
    assert!(
        !answer.linked.is_empty(),
        "the real suite shares runs between groups"
    );
    let linked = &answer.linked[0];
    let another_link = answer
        .linked
        .iter()
        .find(|l| l.same_as != linked.same_as)
        .expect("two runs with links");
    let check = |when: &'static str| {
        let store = f.store.clone();
        async move {
            let maintained: Vec<(String, String, i64)> = db::query_as(
                "SELECT group_name, state, n FROM job_counts WHERE n <> 0 ORDER BY 1, 2",
            )
            .fetch_all(&mut store.read().await.unwrap())
            .await
            .unwrap();
            let computed: Vec<(String, String, i64)> = db::query_as(
                "SELECT j.group_name, CASE WHEN j.same_as IS NOT NULL AND j.link_cancelled = 0 \
                 THEN r.state ELSE j.state END AS shown, COUNT(*) FROM jobs j \
                 LEFT JOIN jobs r ON r.id = j.same_as GROUP BY 1, 2 ORDER BY 1, 2",
            )
            .fetch_all(&mut store.read().await.unwrap())
            .await
            .unwrap();
            assert_eq!(maintained, computed, "after {when}");
            let fresh: (i64, f64) = db::query_as("SELECT n, hours FROM fresh_queue")
                .fetch_one(&mut store.read().await.unwrap())
                .await
                .unwrap();
            let counted: (i64, f64) = db::query_as(
                "SELECT COUNT(*), COALESCE(SUM(est_hours), 0.0) FROM jobs \
                 WHERE state = 'queued' AND same_as IS NULL AND last_step IS NULL",
            )
            .fetch_one(&mut store.read().await.unwrap())
            .await
            .unwrap();
            assert_eq!(fresh.0, counted.0, "fresh queue after {when}");
            assert!(
                (fresh.1 - counted.1).abs() < 1e-6,
                "fresh hours after {when}: {fresh:?} {counted:?}"
            );
        }
    };
    check("submitting the suite").await;

    // Run the first run with a link to success, through a lease.
    f.scheduler
        .change_job(&podq(), linked.same_as.unwrap(), priority(100))
        .await
        .unwrap();
    let lease = f
        .scheduler
        .lease("a", ask(0), &PODQ)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(Some(lease.job_id), linked.same_as);
    check("leasing a run with links").await;
    f.scheduler
        .finish(lease.lease_id, finished(AttemptOutcome::Succeeded), &PODQ)
        .await
        .unwrap();
    check("a run with links succeeding").await;
    assert_eq!(job_state(&f, linked.job_id.unwrap()).await, "succeeded");

    // Cancel one link, then its run goes on without it.
    f.scheduler
        .cancel(&podq(), another_link.job_id.unwrap(), None)
        .await
        .unwrap();
    check("cancelling a link").await;
    f.scheduler
        .cancel(&podq(), another_link.same_as.unwrap(), None)
        .await
        .unwrap();
    check("cancelling a run").await;
    f.scheduler
        .requeue(&podq(), another_link.same_as.unwrap(), false, None)
        .await
        .unwrap();
    check("requeueing a run").await;
    assert_eq!(
        job_state(&f, another_link.job_id.unwrap()).await,
        "cancelled"
    );
    f.scheduler
        .requeue(&podq(), another_link.job_id.unwrap(), false, None)
        .await
        .unwrap();
    check("requeueing a link").await;
    assert_eq!(job_state(&f, another_link.job_id.unwrap()).await, "queued");

    let status = f.scheduler.status().await.unwrap();
    let total: i64 = status.jobs.values().sum();
    assert_eq!(total, 67, "{:?}", status.jobs);
    assert_eq!(
        status.jobs[&JobState::Succeeded],
        1 + answer
            .linked
            .iter()
            .filter(|l| l.same_as == linked.same_as)
            .count() as i64
    );
}

async fn a_job_says_why_its_last_attempt_ended(backend: Backend) {
    let f = fixture(backend).await;
    f.scheduler
        .submit(
            &podq(),
            submit(serde_json::json!({"experiments": ["exp07a"]})),
            None,
        )
        .await
        .unwrap();
    let lease = f
        .scheduler
        .lease("a", ask(0), &PODQ)
        .await
        .unwrap()
        .unwrap();
    let mut failed = finished(AttemptOutcome::Failed);
    failed.message = Some("host 3 exited 1".into());
    f.scheduler
        .finish(lease.lease_id, failed, &PODQ)
        .await
        .unwrap();
    let message: String = db::query_scalar("SELECT message FROM jobs WHERE id = ?")
        .bind(lease.job_id.to_string())
        .fetch_one(&mut f.store.read().await.unwrap())
        .await
        .unwrap();
    assert!(
        message.starts_with("attempt 1 failed: host 3 exited 1; retry in "),
        "{message}"
    );
}

async fn a_restarted_server_wakes_a_waiting_pod_for_every_backoff_that_ends(backend: Backend) {
    let f = fixture(backend).await;
    f.scheduler
        .submit(
            &podq(),
            submit(serde_json::json!({"experiments": ["exp07a", "exp07c"]})),
            None,
        )
        .await
        .unwrap();
    for pod in ["a", "b"] {
        let lease = f
            .scheduler
            .lease(pod, ask(0), &PODQ)
            .await
            .unwrap()
            .unwrap();
        f.scheduler
            .finish(lease.lease_id, finished(AttemptOutcome::Failed), &PODQ)
            .await
            .unwrap();
    }
    // Restart: both jobs are in backoff, nobody is told when they end but the reaper.
    let Fixture {
        database,
        scheduler,
        store,
        ..
    } = f;
    // A restarted server's predecessor is gone (on PostgreSQL, with its lead lock).
    drop((scheduler, store));
    let f = fixture_on(database).await;
    let reaper = async {
        loop {
            f.scheduler.reap_once(Instant::now()).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let started = Instant::now();
    let waiting = async {
        tokio::join!(
            f.scheduler.lease("c", ask(30), &PODQ),
            f.scheduler.lease("d", ask(30), &PODQ)
        )
    };
    let (c, d) = tokio::select! {
        both = waiting => both,
        _ = reaper => unreachable!(),
    };
    assert!(
        c.unwrap().is_some() && d.unwrap().is_some(),
        "both jobs leased"
    );
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "woken when each backoff ended, not when the 30 s waits ran out"
    );
}

fn recovering() -> podq_api::PodReport {
    let mut pod = ask(0).pod;
    pod.state = "PREEMPTED".into();
    pod.recovery = Some("recreating the node".into());
    podq_api::PodReport { pod, event: None }
}

/// The pod's ledger: the recovery right after a preempted attempt is that
/// attempt's; one after the pod was ready again is the pod's alone; a report while a lease
/// is live changes nothing; and every second is counted once.
async fn a_pods_time_between_attempts_goes_to_recovery_or_idleness_once(backend: Backend) {
    let f = fixture(backend).await;
    f.scheduler
        .submit(
            &podq(),
            submit(serde_json::json!({"experiments": ["exp07a"]})),
            None,
        )
        .await
        .unwrap();
    let lease = f
        .scheduler
        .lease("p", ask(0), &PODQ)
        .await
        .unwrap()
        .unwrap();
    let leased = Instant::now();
    // A report while the lease is live (a restarted worker) is the attempt's time.
    f.scheduler
        .report_pod("p", recovering(), &PODQ)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut preempted = finished(AttemptOutcome::Preempted);
    preempted.stopping_s = Some(0.1);
    f.scheduler
        .finish(lease.lease_id, preempted, &PODQ)
        .await
        .unwrap();
    // Nothing to lease afterwards, so the pod idles once ready.
    f.scheduler
        .cancel(&podq(), lease.job_id, None)
        .await
        .unwrap();
    f.scheduler
        .report_pod("p", recovering(), &PODQ)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    f.scheduler
        .report_pod("p", recovering(), &PODQ)
        .await
        .unwrap();
    // Ready, with nothing to lease.
    assert!(f
        .scheduler
        .lease("p", ask(0), &PODQ)
        .await
        .unwrap()
        .is_none());
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Preempted while idle: the pod's recovery, not the attempt's.
    f.scheduler
        .report_pod("p", recovering(), &PODQ)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    f.scheduler
        .report_pod("p", recovering(), &PODQ)
        .await
        .unwrap();

    let detail = f.scheduler.job_detail(lease.job_id).await.unwrap();
    let attempt = detail.attempts[0].pod_time;
    assert!(
        (0.25..0.6).contains(&attempt.provisioning_s),
        "only the recovery right after it: {attempt:?}"
    );
    assert!((attempt.stopping_s - 0.1).abs() < 1e-9, "{attempt:?}");
    let report = f.scheduler.pod_time().await.unwrap();
    let wall = leased.elapsed().as_secs_f64();
    let pod = report.pods["p"];
    assert!(
        pod.provisioning_s >= attempt.provisioning_s + 0.15,
        "the idle pod's recovery is the pod's: {pod:?}"
    );
    assert!(pod.idle_s >= 0.15, "{pod:?}");
    let sum: f64 = pod.causes().iter().map(|(_, s)| s).sum();
    assert!((sum - pod.total_s).abs() < 1e-9, "{pod:?}");
    // The pod's time is its attempt's lease to end and what followed, counted once: no more
    // than the wall time since the lease (the pod was first seen just before it).
    assert!(
        pod.total_s <= wall + 0.05,
        "{} s in {wall} s: {pod:?}",
        pod.total_s
    );
    assert_eq!(
        report.groups["exp07-precision"].provisioning_s,
        attempt.provisioning_s
    );
}

/// PostgreSQL reads each hot query through an index. Its planner would scan a table this
/// small whatever the indexes, so sequential scans are priced out and the plan is the
/// generic one (no parameter values to lean on): what it then still scans, or sorts for an
/// ordered page, no index serves.
#[tokio::test]
async fn the_hot_reads_use_indexes_on_postgres() {
    const SMALL_TABLES: [&str; 4] = ["job_counts", "goodput_totals", "pods", "fresh_queue"];
    let database = PostgresDatabase::create().await;
    let location = Location::Postgres(database.url.clone());
    let _migrated = Store::open_at(&location).await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&database.url).await.unwrap();
    sqlx::raw_sql("SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan")
        .execute(&mut conn)
        .await
        .unwrap();
    let partial: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE indexdef LIKE '% WHERE %'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    for (index, (what, sql, ordered)) in
        podq_server::store::hot_reads(podq_server::store::Backend::Postgres)
            .into_iter()
            .enumerate()
    {
        let sql = db::numbered_placeholders(sql);
        let parameters = (1..=20).filter(|n| sql.contains(&format!("${n}"))).count();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("PREPARE hot{index} AS {sql}")))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let nulls = vec!["NULL"; parameters].join(", ");
        let execute = if parameters == 0 {
            format!("EXPLAIN EXECUTE hot{index}")
        } else {
            format!("EXPLAIN EXECUTE hot{index}({nulls})")
        };
        let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(execute))
            .fetch_all(&mut conn)
            .await
            .unwrap();
        for (at, line) in plan.iter().enumerate() {
            if let Some((_, rest)) = line.split_once("Seq Scan on ") {
                assert!(
                    SMALL_TABLES.iter().any(|t| rest.starts_with(t)),
                    "{what}: a full scan in {plan:#?}"
                );
            }
            // With sequential scans priced out, a full scan shows as an index read without a
            // condition: fine only on a partial index, whose predicate is the condition.
            if let Some((_, rest)) = line.split_once(" Scan using ") {
                let index_name = rest.split_whitespace().next().unwrap_or_default();
                let table = rest.split(" on ").nth(1).unwrap_or_default();
                let details = plan[at + 1..].iter().take_while(|l| !l.contains("->"));
                let conditioned = details.into_iter().any(|l| l.contains("Index Cond:"));
                assert!(
                    conditioned
                        || partial.contains(&index_name.to_owned())
                        || SMALL_TABLES.iter().any(|t| table.starts_with(t)),
                    "{what}: reads all of {index_name} in {plan:#?}"
                );
            }
            assert!(
                !(ordered
                    && line
                        .trim_start()
                        .trim_start_matches("-> ")
                        .starts_with("Sort")),
                "{what}: sorts every match in {plan:#?}"
            );
        }
    }
}

/// A trainer may report a step twice within one flush; PostgreSQL refuses an upsert that
/// touches one row twice, and a refused batch would be retried by the worker forever.
async fn a_metrics_batch_that_repeats_a_step_keeps_its_last_value(backend: Backend) {
    let f = fixture(backend).await;
    f.scheduler
        .submit(
            &podq(),
            submit(serde_json::json!({"experiments": ["exp07a"]})),
            None,
        )
        .await
        .unwrap();
    let lease = f
        .scheduler
        .lease("a", ask(0), &PODQ)
        .await
        .unwrap()
        .unwrap();
    let point = |step: i64, loss: f64| podq_api::MetricStep {
        step,
        values: [("train/loss".to_owned(), loss)].into(),
    };
    let batch = podq_api::MetricsBatch {
        points: vec![point(10, 1.0), point(20, 0.9), point(10, 0.5)],
        phases: None,
    };
    f.scheduler
        .record_metrics(lease.lease_id, batch, &PODQ)
        .await
        .unwrap();
    let metrics = f
        .scheduler
        .job_metrics(lease.job_id, None, 100)
        .await
        .unwrap();
    let points: Vec<(i64, f64)> = metrics.series[0]
        .points
        .iter()
        .map(|p| (p.step, p.value))
        .collect();
    assert_eq!(points, vec![(10, 0.5), (20, 0.9)]);
}
