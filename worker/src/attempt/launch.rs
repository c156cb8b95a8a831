//! Preparing an attempt on the hosts: where to resume, cleaning up after earlier attempts,
//! the config and each host's command and environment, and starting the agents.

use std::collections::BTreeMap;

use podq_api::Lease;
use sha2::{Digest, Sha256};

use super::lines::Routes;
use super::supervise::Hosts;
use super::{AttemptSettings, Context};
use crate::checkpoints::CheckpointStore;
use crate::client::ServerClient;
use crate::pod::{AgentStart, HostLaunch, PodDriver, StagedConfig};
use crate::shell::{word, NulByte};

/// What a launch gives the supervision loop.
pub(super) struct Launched {
    pub hosts: Hosts,
    pub resume_step: Option<i64>,
    /// Kept to start a new agent on a host whose agent went silent.
    pub start: AgentStart,
}

/// Prepares the hosts and starts the lease's agents: verify where to resume, clean up
/// after earlier attempts, stage the config on every host and start the agents (one step
/// of the driver's, so a TPU host costs one copy and one ssh). The
/// attempt is written down once its agents run, so a restarted worker reattaches.
pub(super) async fn launch(
    ctx: &Context<'_>,
    lease: &Lease,
    store: Option<&CheckpointStore>,
    secret: &str,
    routes: Routes,
) -> Result<Launched, String> {
    let (client, driver, settings) = (ctx.client, ctx.driver, ctx.settings);
    let lease_id = lease.lease_id;
    let (resume_from, resume_step) = choose_resume(client, lease, store).await;

    let cleaned = driver
        .clean_hosts()
        .await
        .unwrap_or_else(|e| vec![format!("cleanup failed: {e:#}")]);
    if !cleaned.is_empty() {
        // One event per attempt, not one per host and file: the timeline stays readable.
        let _ = client
            .event(
                lease_id,
                podq_api::WorkerEventKind::HostCleanup,
                cleaned.join("; "),
            )
            .await;
    }

    let mut config = lease.config.clone();
    if let Some(map) = config.as_object_mut() {
        map.insert(
            "checkpoint_path".into(),
            lease.checkpoint_dir.clone().into(),
        );
        map.insert("load_checkpoint".into(), resume_from.clone().into());
    }
    let yaml = serde_yaml::to_string(&config)
        .map_err(|e| format!("cannot write the config as YAML: {e}"))?;
    let config = StagedConfig {
        file_name: format!("{}.yaml", lease.experiment),
        sha256: hex::encode(Sha256::digest(yaml.as_bytes())),
        contents: yaml.into_bytes(),
    };
    let coordinator = driver
        .coordinator_address()
        .await
        .map_err(|e| format!("no coordinator address: {e:#}"))?;
    let launches: Vec<HostLaunch> = (0..driver.hosts())
        .map(|host| {
            Ok(HostLaunch {
                host,
                command: fill_template(
                    &settings.trainer_command,
                    driver,
                    host,
                    lease,
                    resume_from.as_deref(),
                )?,
                env: trainer_env(
                    settings,
                    driver,
                    host,
                    lease,
                    resume_from.as_deref(),
                    &config.sha256,
                    &coordinator,
                ),
            })
        })
        .collect::<Result<_, NulByte>>()
        .map_err(|e| format!("cannot build the trainer command: {e}"))?;
    let start = AgentStart {
        config,
        lease: lease_id.to_string(),
        secret: secret.to_owned(),
        worker_url: ctx.hub.url().to_owned(),
        launches,
    };
    // Written before the agents start: a worker killed in between reattaches to agents
    // that may exist, and learns from silence if they do not.
    ctx.running.save(&crate::running::Saved {
        lease: lease.clone(),
        secret: secret.to_owned(),
        hosts: driver.hosts(),
        resume_step,
        start: Some(start.clone()),
    });
    let routes = Routes {
        resume_step,
        ..routes
    };
    let hosts = Hosts::launch(driver, ctx.hub, &start, routes)
        .await
        .map_err(|e| format!("launch failed: {e:#}"))?;
    Ok(Launched {
        hosts,
        resume_step,
        start,
    })
}

/// The checkpoint to resume from: the lease's, if the store confirms it is committed and
/// complete, else the newest older one that is; an event says when it fell back.
pub(super) async fn choose_resume(
    client: &ServerClient,
    lease: &Lease,
    store: Option<&CheckpointStore>,
) -> (Option<String>, Option<i64>) {
    let Some(wanted) = lease.resume_from.clone() else {
        return (None, None);
    };
    let Some(store) = store else {
        // Unverifiable, yet still only ever a plain step directory of the job's own.
        return match podq_api::orbax::resume_point_in(&lease.checkpoint_dir, &wanted) {
            Ok(found) => (Some(wanted), Some(found.step)),
            Err(why) => {
                let _ = client
                    .event(
                        lease.lease_id,
                        podq_api::WorkerEventKind::ResumeFallback,
                        format!("{wanted} is no resume point ({why}); starting from step 0"),
                    )
                    .await;
                (None, None)
            }
        };
    };
    let candidates =
        std::iter::once(wanted.clone()).chain(lease.fallback_checkpoints.iter().cloned());
    for candidate in candidates {
        // The store's own name for the step directory, never the server's string.
        if let Ok(Some(found)) = store.resume_point(&candidate).await {
            if candidate != wanted {
                let _ = client
                    .event(
                        lease.lease_id,
                        podq_api::WorkerEventKind::ResumeFallback,
                        format!(
                            "{wanted} is missing or incomplete; resuming from {} instead",
                            found.uri
                        ),
                    )
                    .await;
            }
            return (Some(found.uri), Some(found.step));
        }
    }
    let _ = client
        .event(
            lease.lease_id,
            podq_api::WorkerEventKind::ResumeFallback,
            format!(
                "no committed checkpoint could be verified (wanted {wanted}); starting from step 0"
            ),
        )
        .await;
    (None, None)
}

/// The trainer command for `host`: every placeholder's value shell-quoted, so that no
/// value (a name, a path, a URI) is ever read by the shell as more than one word of data.
/// A value with a NUL byte cannot be one word: the attempt fails with [`NulByte`] naming
/// the placeholder, and no command is built.
fn fill_template(
    template: &str,
    driver: &dyn PodDriver,
    host: u32,
    lease: &Lease,
    resume: Option<&str>,
) -> Result<String, NulByte> {
    let config_dir = driver.config_dir(host).display().to_string();
    let slice = slice_of(lease, driver);
    let values = [
        ("{config_dir}", config_dir.as_str()),
        ("{accelerator}", slice.accelerator.as_str()),
        ("{experiment}", lease.experiment.as_str()),
        ("{checkpoint_dir}", lease.checkpoint_dir.as_str()),
        ("{resume_from}", resume.unwrap_or("null")),
        ("{host_index}", &host.to_string()),
        ("{host_count}", &driver.hosts().to_string()),
    ];
    fill_quoted(template, &values)
}

/// Every placeholder of the trainer command (docs/trainer.md, "The command").
pub const PLACEHOLDERS: [&str; 7] = [
    "{config_dir}",
    "{accelerator}",
    "{experiment}",
    "{checkpoint_dir}",
    "{resume_from}",
    "{host_index}",
    "{host_count}",
];

/// The first placeholder `template` writes inside quotes (`'{x}'`, `"{x}"`), if any. Each
/// value is filled in as one shell word already quoted; inside the operator's own quotes
/// that quoting is undone (`'{x}'` with `a b` is `''a b''`, two words) or read as text
/// (inside `"…"` a `$(…)` in the value would run). The worker refuses such a template.
pub fn quoted_placeholder(template: &str) -> Option<&'static str> {
    #[derive(PartialEq)]
    enum In {
        Bare,
        Single,
        Double,
    }
    let mut state = In::Bare;
    let mut rest = template;
    while let Some(c) = rest.chars().next() {
        if state != In::Bare {
            if let Some(name) = PLACEHOLDERS.iter().find(|p| rest.starts_with(**p)) {
                return Some(name);
            }
        }
        let mut step = c.len_utf8();
        match (&state, c) {
            (In::Bare, '\\') | (In::Double, '\\') => {
                // The next character is escaped: skip it too.
                step += rest[step..].chars().next().map_or(0, char::len_utf8);
            }
            (In::Bare, '\'') => state = In::Single,
            (In::Bare, '"') => state = In::Double,
            (In::Single, '\'') | (In::Double, '"') => state = In::Bare,
            _ => {}
        }
        rest = &rest[step..];
    }
    None
}

/// The slice this attempt runs on: as the lease says, else (an older server) as this
/// worker's pod is configured.
fn slice_of(lease: &Lease, driver: &dyn PodDriver) -> podq_api::SliceShape {
    lease.slice.clone().unwrap_or_else(|| podq_api::SliceShape {
        accelerator: driver.accelerator().to_owned(),
        hosts: driver.hosts(),
        devices: podq_api::accelerators::devices_of(driver.accelerator()),
    })
}

/// `template` with each placeholder replaced by its value, shell-quoted, in one pass: a
/// value that holds another placeholder's name is not filled in again.
fn fill_quoted(template: &str, values: &[(&str, &str)]) -> Result<String, NulByte> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    'scan: while !rest.is_empty() {
        for (name, value) in values {
            if let Some(after) = rest.strip_prefix(name) {
                out.push_str(&word(value, format_args!("the value of {name}"))?);
                rest = after;
                continue 'scan;
            }
        }
        let c = rest.chars().next().expect("not empty");
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    Ok(out)
}

fn trainer_env(
    settings: &AttemptSettings,
    driver: &dyn PodDriver,
    host: u32,
    lease: &Lease,
    resume: Option<&str>,
    file_sha: &str,
    coordinator: &str,
) -> BTreeMap<String, String> {
    let mut env = settings.trainer_env.clone();
    let hosts = driver.hosts().to_string();
    let slice = slice_of(lease, driver);
    for (key, value) in [
        // What a trainer needs to build its mesh and restore a checkpoint saved on another
        // slice type onto it (podq_trainer.slice_info, docs/trainer.md).
        ("PODQ_ACCELERATOR", slice.accelerator),
        ("PODQ_SLICE_HOSTS", slice.hosts.to_string()),
        ("PODQ_SLICE_DEVICES", slice.devices.to_string()),
        ("PODQ_JOB_ID", lease.job_id.to_string()),
        ("PODQ_ATTEMPT", lease.attempt.to_string()),
        ("PODQ_LEASE_ID", lease.lease_id.to_string()),
        ("PODQ_HOST_INDEX", host.to_string()),
        ("PODQ_HOST_COUNT", hosts.clone()),
        ("PODQ_CHECKPOINT_DIR", lease.checkpoint_dir.clone()),
        ("PODQ_RESUME_FROM", resume.unwrap_or_default().to_owned()),
        ("PODQ_CONFIG_SHA256", file_sha.to_owned()),
        ("JAX_PROCESS_COUNT", hosts.clone()),
        ("JAX_PROCESS_INDEX", host.to_string()),
        ("COORDINATOR_ADDRESS", coordinator.to_owned()),
    ] {
        env.insert(key.to_owned(), value);
    }
    // Only when the experiment sets `checkpoint_interval`: the trainer keeps its own otherwise.
    if let Some(steps) = lease.checkpoint_interval_steps {
        env.insert(
            "PODQ_CHECKPOINT_INTERVAL_STEPS".to_owned(),
            steps.to_string(),
        );
    }
    if settings.compile_cache {
        if let Some(dir) = &lease.compile_cache_dir {
            with_compile_cache(&mut env, dir);
        }
    }
    env
}

/// JAX's persistent compilation cache at `dir`, unless the trainer's environment names its
/// own, with every program written however small or quick to compile: JAX's defaults skip
/// programs that compiled in under a second (`jax_persistent_cache_min_compile_time_secs`)
/// and leave the size floor to the filesystem (`..._min_entry_size_bytes`, 0); -1 lifts it
/// (docs.jax.dev, "Persistent compilation cache"). Only JAX process 0 writes an entry;
/// the others read it (jax/_src/compiler.py, `_cache_write`).
fn with_compile_cache(env: &mut BTreeMap<String, String>, dir: &str) {
    if env.contains_key(COMPILE_CACHE_DIR) {
        return;
    }
    env.insert(COMPILE_CACHE_DIR.to_owned(), dir.to_owned());
    for (key, value) in [
        ("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0"),
        ("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1"),
    ] {
        env.entry(key.to_owned())
            .or_insert_with(|| value.to_owned());
    }
}

const COMPILE_CACHE_DIR: &str = "JAX_COMPILATION_CACHE_DIR";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compile_cache_is_set_unless_the_trainer_environment_names_its_own() {
        let mut env = BTreeMap::new();
        with_compile_cache(&mut env, "gs://b/compile-cache/v4-64");
        assert_eq!(env[COMPILE_CACHE_DIR], "gs://b/compile-cache/v4-64");
        assert_eq!(env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"], "0");
        assert_eq!(env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"], "-1");
        let mut own = BTreeMap::from([(COMPILE_CACHE_DIR.to_owned(), "/mine".to_owned())]);
        with_compile_cache(&mut own, "gs://b/compile-cache/v4-64");
        assert_eq!(own.len(), 1, "{own:?}");
        assert_eq!(own[COMPILE_CACHE_DIR], "/mine");
        let mut threshold = BTreeMap::from([(
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS".to_owned(),
            "5".to_owned(),
        )]);
        with_compile_cache(&mut threshold, "/c");
        assert_eq!(threshold["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"], "5");
    }

    #[test]
    fn a_placeholder_inside_quotes_is_found() {
        for template in [
            "run '{experiment}'",
            "run --dir=\"{checkpoint_dir}\"",
            "run \"a b {resume_from} c\"",
            "run $'{host_index}'",
            "cd \"$HOME\" && run 'x{accelerator}'",
        ] {
            assert!(quoted_placeholder(template).is_some(), "{template}");
        }
        for template in [
            "exec run --config-path {config_dir} --config-name {experiment} \
             checkpoint_path={checkpoint_dir} load_checkpoint={resume_from}",
            "cd 'my dir' && exec run {experiment} \"$HOME\" {host_index}/{host_count}",
            "echo \\'{experiment} \\\"{accelerator}",
            "run '{' experiment '}'",
        ] {
            assert_eq!(quoted_placeholder(template), None, "{template}");
        }
        // Every placeholder filled in is one of the list.
        for name in PLACEHOLDERS {
            assert_eq!(quoted_placeholder(&format!("x \"{name}\"")), Some(name));
        }
    }

    /// Every placeholder's value, whatever it holds, reaches the trainer as the one argument
    /// it was, as bash (which runs the trainer command) and a POSIX word-splitter read it; a
    /// value with a NUL byte is refused, naming its placeholder.
    #[test]
    fn odd_values_reach_the_trainer_as_one_argument_each() {
        let hostile = [
            "two words",
            "line\nbreak",
            "it's",
            "say \"hi\"",
            "$(touch /tmp/podq-pwned)",
            "`touch /tmp/podq-pwned`",
            "all of it: 'a' \"b\" $(c) `d` ${HOME} \\ ; | & \n end {experiment}",
        ];
        let template = format!("printf '%s\\0' {}", PLACEHOLDERS.join(" "));
        for value in hostile {
            let values: Vec<(&str, &str)> = PLACEHOLDERS.iter().map(|p| (*p, value)).collect();
            let filled = fill_quoted(&template, &values).unwrap();
            let words = shlex::split(&filled).unwrap();
            assert_eq!(words[2..], [value; PLACEHOLDERS.len()], "{filled}");
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(&filled)
                .output()
                .unwrap();
            assert!(out.status.success(), "{filled}");
            let args: Vec<&[u8]> = out.stdout.split(|&b| b == 0).collect();
            let mut want = vec![value.as_bytes(); PLACEHOLDERS.len()];
            want.push(b"");
            assert_eq!(args, want, "{filled}");
        }
        for name in PLACEHOLDERS {
            let err = fill_quoted(&template, &[(name, "a\0b")]).unwrap_err();
            assert_eq!(err.what, format!("the value of {name}"));
        }
    }

    #[test]
    fn every_placeholder_is_one_shell_word_of_data() {
        let filled = fill_quoted(
            "run --name {experiment} load={resume_from} to={checkpoint_dir}",
            &[
                ("{experiment}", "exp01"),
                ("{resume_from}", "gs://b/x$(touch /tmp/m)/814"),
                ("{checkpoint_dir}", "/data/it's {experiment}"),
            ],
        )
        .unwrap();
        let words = shlex::split(&filled).unwrap();
        assert_eq!(
            words,
            [
                "run",
                "--name",
                "exp01",
                "load=gs://b/x$(touch /tmp/m)/814",
                "to=/data/it's {experiment}"
            ]
        );
    }
}
