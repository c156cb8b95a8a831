//! Submission: turning a request for experiments into jobs, without running any training
//! config twice.

use std::collections::HashMap;

use crate::store::events::{self, Actor};
use crate::store::Conn;
use crate::team::Acting;
use podq_api::{
    CreatedJob, JobId, JobState, LinkedJob, SkippedExperiment, SubmitRequest, SubmitResponse,
};

use futures::FutureExt;

use super::{IdempotencyKey, Result, Scheduler, SchedulerError};
use crate::catalog::{Catalog, Experiment};
use crate::names;
use crate::store::jobs::{self, NewJob};
use crate::store::StoreError;

pub const DEFAULT_MAX_FAILURES: u32 = 3;
/// The priorities a submitter may give a job (an admin's may be anything).
pub const DEFAULT_PRIORITY_RANGE: std::ops::RangeInclusive<i64> = 0..=100;
pub const MAX_MAX_FAILURES: u32 = 100;

/// The experiments a request names, in catalog order, or why the request is wrong.
pub fn select<'c>(catalog: &'c Catalog, req: &SubmitRequest) -> Result<Vec<&'c Experiment>> {
    let chosen = [
        req.group.is_some(),
        req.experiments.is_some(),
        req.all.is_some(),
    ]
    .into_iter()
    .filter(|x| *x)
    .count();
    if chosen != 1 {
        return Err(SchedulerError::invalid(
            "invalid_selection",
            "give exactly one of `group` (a group name), `experiments` (a list of names) or `all` (true)",
        ));
    }
    if let Some(max) = req.max_failures {
        if max > MAX_MAX_FAILURES {
            return Err(SchedulerError::invalid(
                "invalid_max_failures",
                format!("max_failures must be between 0 and {MAX_MAX_FAILURES}, got {max}"),
            ));
        }
    }
    if let Some(all) = req.all {
        if !all {
            return Err(SchedulerError::invalid(
                "invalid_selection",
                "`all` must be true when given; to submit part of the catalog use `group` or `experiments`",
            ));
        }
        return Ok(catalog.experiments.iter().collect());
    }
    if let Some(group) = &req.group {
        let Some(group) = catalog.group(group) else {
            return Err(unknown_group(catalog, group));
        };
        return Ok(catalog
            .experiments
            .iter()
            .filter(|e| e.group == group.name)
            .collect());
    }
    let names = req.experiments.as_deref().unwrap_or_default();
    if names.is_empty() {
        return Err(SchedulerError::invalid(
            "empty_selection",
            "`experiments` is empty: name at least one experiment",
        ));
    }
    let known = || catalog.experiments.iter().map(|e| e.name.as_str());
    if let Some(long) = names.iter().find(|n| names::longer_than_all(n, known())) {
        return Err(too_long("unknown_experiment", "experiment", long, known()));
    }
    let unknown: Vec<&String> = names
        .iter()
        .filter(|n| catalog.experiment(n).is_none())
        .collect();
    if !unknown.is_empty() {
        return Err(unknown_experiments(catalog, &unknown));
    }
    Ok(catalog
        .experiments
        .iter()
        .filter(|e| names.contains(&e.name))
        .collect())
}

/// `code` for a name longer than every `known` one by more than a typo: refused before any
/// did-you-mean, quoting only its start.
fn too_long<'a>(
    code: &'static str,
    what: &str,
    name: &str,
    known: impl Iterator<Item = &'a str>,
) -> SchedulerError {
    let longest = known.map(str::len).max().unwrap_or(0);
    SchedulerError::invalid(
        code,
        format!(
            "no {what} `{}`: no {what} name is longer than {longest} bytes",
            names::shown(name)
        ),
    )
    .with_details(serde_json::json!({ "unknown": [names::shown(name)], "did_you_mean": [] }))
}

/// `unknown_group`, with the closest group names and every group.
pub fn unknown_group(catalog: &Catalog, name: &str) -> SchedulerError {
    let groups = catalog.groups.iter().map(|g| g.name.as_str());
    if names::longer_than_all(name, groups.clone()) {
        return too_long("unknown_group", "group", name, groups);
    }
    let suggestions = names::did_you_mean(name, groups.clone());
    SchedulerError::invalid(
        "unknown_group",
        format!("no group `{name}`{}", names::phrase(&suggestions)),
    )
    .with_details(serde_json::json!({
        "did_you_mean": suggestions,
        "groups": groups.collect::<Vec<_>>(),
    }))
}

/// The most unknown names one answer names (and looks for near misses of).
const MAX_NAMED_UNKNOWN: usize = 20;

/// `unknown_experiment`, with the closest experiment names: a list for one name, per name
/// for several (the first [`MAX_NAMED_UNKNOWN`], and how many more).
pub fn unknown_experiments(catalog: &Catalog, unknown: &[&String]) -> SchedulerError {
    let known = || catalog.experiments.iter().map(|e| e.name.as_str());
    let suggestions: Vec<(String, Vec<String>)> = unknown
        .iter()
        .take(MAX_NAMED_UNKNOWN)
        .map(|name| (names::shown(name), names::did_you_mean(name, known())))
        .collect();
    let more = unknown.len() - suggestions.len();
    let unknown: Vec<&str> = suggestions.iter().map(|(name, _)| name.as_str()).collect();
    let mut message = match suggestions.as_slice() {
        [(name, s)] => format!("no experiment `{name}`{}", names::phrase(s)),
        many => format!(
            "no experiments {}",
            many.iter()
                .map(|(name, s)| match names::question(s) {
                    Some(q) => format!("`{name}` ({q})"),
                    None => format!("`{name}`"),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    if more > 0 {
        message.push_str(&format!(" and {more} more"));
    }
    let did_you_mean = match suggestions.as_slice() {
        [(_, one)] => serde_json::json!(one),
        many => serde_json::Value::Object(
            many.iter()
                .map(|(name, s)| (name.clone(), serde_json::json!(s)))
                .collect(),
        ),
    };
    SchedulerError::invalid("unknown_experiment", message).with_details(serde_json::json!({
        "unknown": unknown,
        "unknown_count": unknown.len() + more,
        "did_you_mean": did_you_mean,
    }))
}

impl Scheduler {
    /// Submits the experiments `req` names: creates, links or skips a job for each, in one
    /// transaction, and wakes one waiting worker per job created.
    pub async fn submit(
        &self,
        acting: &Acting,
        req: SubmitRequest,
        key: Option<IdempotencyKey>,
    ) -> Result<SubmitResponse> {
        let experiments: Vec<Experiment> =
            select(&self.catalog, &req)?.into_iter().cloned().collect();
        let class = self.class_of(&req)?;
        self.check_class_allowed(acting, &class.name)?;
        self.check_priority(acting, req.priority)?;
        let actor = acting.actor.clone();
        let answer = self
            .idempotent_write(key, move |conn| {
                async move { submit(conn, &actor, &class, &experiments, &req).await }.boxed()
            })
            .await?;
        if !answer.dry_run {
            self.wake_for(answer.created.iter().map(|c| c.experiment.as_str()));
        }
        Ok(answer)
    }

    /// The class a submission names (the suite's default when it names none), with its
    /// rank; an unknown name is 422 with the closest.
    pub(super) fn class_of(&self, req: &SubmitRequest) -> Result<Class> {
        let (rank, class) = self.resolve_class(req.priority_class.as_deref())?;
        Ok(Class {
            name: class.name.clone(),
            rank,
        })
    }

    /// The class `name` names (the default when None) and its rank; an unknown name is 422
    /// `unknown_class` with the closest, and one longer than every class's is refused
    /// before any is looked for, quoting only its start.
    pub(super) fn resolve_class(
        &self,
        name: Option<&str>,
    ) -> Result<(i64, &crate::catalog::classes::PriorityClass)> {
        let classes = &self.catalog.classes;
        if let Some(name) = name {
            let known = || classes.all().iter().map(|c| c.name.as_str());
            if names::longer_than_all(name, known()) {
                return Err(SchedulerError::unprocessable(
                    "unknown_class",
                    format!(
                        "no priority class `{}`; the suite's classes are {}",
                        names::shown(name),
                        known().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        }
        classes
            .resolve(name)
            .map_err(|message| SchedulerError::unprocessable("unknown_class", message))
    }

    /// The suite's classes in queue order, and whether `caller` may use each.
    pub fn classes_for(&self, caller: &crate::team::Caller) -> Vec<podq_api::ClassUse> {
        let classes = &self.catalog.classes;
        let default = &classes.default_class().name;
        classes
            .all()
            .iter()
            .map(|class| podq_api::ClassUse {
                name: class.name.clone(),
                default: class.name == *default,
                allowed: self.class_admits(class, caller).is_ok(),
            })
            .collect()
    }

    /// Whether `caller` may put a job in `class`, or who the class is for. An admin always
    /// may. A class's `allowed:` names who else may. Without it, the suite's default class
    /// and the classes below it are every submitter's, except one whose jobs are never
    /// evicted; a class ranked above the default, or never evicted, is for admins (a class
    /// that may evict is too, `catalog/classes.rs`). A class that runs ahead of others, or
    /// keeps its pod for good, is not every submitter's to choose.
    fn class_admits(
        &self,
        class: &crate::catalog::classes::PriorityClass,
        caller: &crate::team::Caller,
    ) -> std::result::Result<(), String> {
        if let Some(allowed) = &class.allowed {
            return if class.allows(caller) {
                Ok(())
            } else {
                Err(allowed.join(", "))
            };
        }
        if caller.role == crate::team::Role::Admin {
            return Ok(());
        }
        let classes = &self.catalog.classes;
        let default = classes.default_class();
        if class.name == default.name {
            return Ok(());
        }
        let rank_of = |name: &str| classes.get(name).map_or(0, |(rank, _)| rank);
        if rank_of(&class.name) < rank_of(&default.name) {
            return Err(format!(
                "admins: it runs ahead of the suite's default class, {}",
                default.name
            ));
        }
        if !class.evictable {
            return Err("admins: its jobs are never evicted".to_owned());
        }
        Ok(())
    }

    /// 403 `class_not_allowed` unless `acting` may put a job in class `name`
    /// ([`Self::class_admits`]).
    pub(super) fn check_class_allowed(&self, acting: &Acting, name: &str) -> Result<()> {
        let Some((_, class)) = self.catalog.classes.get(name) else {
            return Ok(());
        };
        self.class_admits(class, &acting.caller).map_err(|who| {
            SchedulerError::forbidden(
                "class_not_allowed",
                format!(
                    "{} may not put a job in class {name}: it is for {who}",
                    acting.caller.name
                ),
            )
        })
    }

    /// The priorities a submitter may give a job: the suite's `priority_range`, else
    /// [`DEFAULT_PRIORITY_RANGE`].
    pub fn priority_range(&self) -> std::ops::RangeInclusive<i64> {
        match self.catalog.priority_range {
            Some((low, high)) => low..=high,
            None => DEFAULT_PRIORITY_RANGE,
        }
    }

    /// 403 `priority_not_allowed` when a caller other than an admin gives a job a priority
    /// outside [`Self::priority_range`]: a priority orders jobs within their class, and one
    /// submitter's `i64::MAX` would put their jobs ahead of everyone's.
    pub(super) fn check_priority(&self, acting: &Acting, priority: Option<i64>) -> Result<()> {
        let range = self.priority_range();
        match priority {
            Some(p) if !range.contains(&p) && acting.caller.role != crate::team::Role::Admin => {
                Err(SchedulerError::forbidden(
                    "priority_not_allowed",
                    format!(
                        "{} may give a job a priority from {} to {}, not {p}; a priority \
                         beyond that is an admin's to give",
                        acting.caller.name,
                        range.start(),
                        range.end()
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Wakes one waiting pod of each slice type an experiment may lease, per experiment whose
    /// job was just made leasable: the first to claim it wins, the others wait again.
    pub(super) fn wake_for<'a>(&self, experiments: impl Iterator<Item = &'a str>) {
        for name in experiments {
            match self.catalog.experiment(name) {
                Some(e) => {
                    for accelerator in &e.accelerators {
                        self.waiters.leasable(accelerator, 1);
                    }
                }
                None => self.waiters.leasable(&self.config.catalog.accelerator, 1),
            }
        }
    }
}

/// A priority class as a job stores it: its name and its place in the queue order.
#[derive(Debug, Clone)]
pub struct Class {
    pub name: String,
    pub rank: i64,
}

/// Creates, links or skips a job for each experiment, in one transaction, as `by` submitted
/// them. With `dry_run` it decides the same way and writes nothing.
pub async fn submit(
    conn: &mut Conn,
    by: &Actor,
    class: &Class,
    experiments: &[Experiment],
    req: &SubmitRequest,
) -> Result<SubmitResponse> {
    let mut answer = SubmitResponse {
        dry_run: req.dry_run,
        created: Vec::new(),
        linked: Vec::new(),
        skipped: Vec::new(),
    };
    // Runs decided in this request, by config hash, so a dry run links like a real one. A
    // dry run gives no job an id: its answer names no job that does not exist.
    let mut runs_in_request: HashMap<&str, (Option<JobId>, &str)> = HashMap::new();
    let priority = req.priority.unwrap_or(0);
    let max_failures = i64::from(req.max_failures.unwrap_or(DEFAULT_MAX_FAILURES));
    for e in experiments {
        if !req.force {
            if let Some(existing) = jobs::live_or_succeeded_job_of_experiment(conn, &e.name).await?
            {
                answer.skipped.push(SkippedExperiment {
                    experiment: e.name.clone(),
                    existing_job: existing.id,
                    reason: format!(
                        "already has job {} in state {}; submit with \"force\": true to run it again",
                        existing.id, existing.state
                    ),
                });
                continue;
            }
        }
        let run = if req.force {
            None
        } else if let Some((id, experiment)) = runs_in_request.get(e.config_sha256.as_str()) {
            Some((*id, experiment.to_string(), JobState::Queued))
        } else {
            jobs::live_or_succeeded_run_of_config(conn, &e.config_sha256)
                .await?
                .map(|row| Ok::<_, SchedulerError>((Some(row.id), row.experiment, row.state)))
                .transpose()?
        };
        let id = if req.dry_run {
            None
        } else {
            let id = JobId::new_random();
            insert(
                conn,
                by,
                id,
                e,
                run.as_ref().map(|r| (r.0, r.1.as_str())),
                Ordering {
                    priority,
                    class,
                    max_failures,
                },
            )
            .await?;
            Some(id)
        };
        match run {
            Some((run_id, experiment, state)) => answer.linked.push(LinkedJob {
                job_id: id,
                experiment: e.name.clone(),
                group: e.group.clone(),
                same_as: run_id,
                same_as_experiment: experiment.clone(),
                reason: format!(
                    "same training config (sha256 {}) as {experiment}, whose job is {state}: it shares that run",
                    &e.config_sha256[..12]
                ),
            }),
            None => {
                runs_in_request.insert(&e.config_sha256, (id, &e.name));
                answer.created.push(CreatedJob {
                    job_id: id,
                    experiment: e.name.clone(),
                    group: e.group.clone(),
                });
            }
        }
    }
    Ok(answer)
}

/// Where a new job goes in the queue, and its failure budget.
struct Ordering<'a> {
    priority: i64,
    class: &'a Class,
    max_failures: i64,
}

/// Stores one job and its `submitted` event; `run` is the run it shares, if any.
async fn insert(
    conn: &mut Conn,
    by: &Actor,
    id: JobId,
    e: &Experiment,
    run: Option<(Option<JobId>, &str)>,
    ordering: Ordering<'_>,
) -> Result<()> {
    let Ordering {
        priority,
        class,
        max_failures,
    } = ordering;
    let config_json = serde_json::to_string(&e.config)
        .map_err(|err| StoreError::Corrupt(format!("the config of {}: {err}", e.name)))?;
    // Outside a dry run every run has a job id: the run's own, or one made earlier in this
    // request.
    let run = run
        .map(|(run_id, experiment)| {
            run_id.map(|run_id| (run_id, experiment)).ok_or_else(|| {
                StoreError::Corrupt(format!("{experiment}: a run decided without a job"))
            })
        })
        .transpose()?;
    let same_as = run.map(|(run_id, _)| run_id);
    jobs::insert_job(
        conn,
        NewJob {
            id,
            experiment: &e.name,
            group: &e.group,
            priority,
            accelerators: &e.accelerators,
            config_json: &config_json,
            config_sha256: &e.config_sha256,
            est_hours: e.est_hours,
            checkpoint_dir: &e.checkpoint_dir,
            max_failures,
            same_as,
            total_steps: podq_api::trainer::total_steps_of_config(&e.config)
                .and_then(|s| i64::try_from(s).ok()),
            submitted_by: &by.by,
            priority_class: &class.name,
            class_rank: class.rank,
        },
    )
    .await?;
    let message = match run {
        Some((run_id, experiment)) => {
            format!(
                "submitted; shares the run of {experiment} (job {run_id}): same training config"
            )
        }
        None => format!("submitted with priority {priority}, class {}", class.name),
    };
    events::insert_event(conn, by, Some(id), None, "submitted", &message).await?;
    Ok(())
}
