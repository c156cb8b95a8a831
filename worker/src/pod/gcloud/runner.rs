//! Running the gcloud CLI: one process per call, in its own process group (gcloud runs
//! Python, which runs ssh), killed whole when a call outlives its timeout, and retried with
//! backoff when it failed in a way that may pass.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::errors;

/// ssh's own exit status when it could not reach the host (as opposed to the remote
/// command's status, which it passes through).
pub const SSH_CONNECTION_FAILED: i32 = 255;

/// How a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("cannot run `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("gave no answer within {}s", .0.as_secs())]
    Timeout(Duration),
    #[error("the resource does not exist: {0}")]
    NotFound(String),
    #[error("exited with {}: {stderr}", code.map_or("a signal".to_owned(), |c| format!("code {c}")))]
    Failed { code: Option<i32>, stderr: String },
}

impl CallError {
    /// How the one reading of gcloud (`errors.rs`) takes this failure: its stderr, or what
    /// failed on the way (a timeout, a gcloud that would not start) as transient.
    pub fn reading(&self) -> errors::CloudError {
        match self {
            CallError::Failed { stderr, .. } => errors::classify(stderr),
            CallError::NotFound(text) => errors::CloudError {
                kind: errors::Kind::NotFound,
                ..errors::classify(text)
            },
            CallError::Timeout(_) | CallError::Spawn { .. } => {
                errors::CloudError::transient(self.to_string())
            }
        }
    }

    /// Worth another try: the network, the API or ssh may let the next one through.
    fn transient(&self, kind: Retry) -> bool {
        match (self, kind) {
            (_, Retry::Never) => false,
            (CallError::Spawn { .. } | CallError::NotFound(_), _) => false,
            (CallError::Timeout(_), _) => true,
            // gcloud answers 1 for API errors of every kind (quota, 503, auth refresh): its
            // words, read once (`errors.rs`), tell them apart.
            (CallError::Failed { .. }, Retry::Api) => self.reading().kind.may_pass_soon(),
            (CallError::Failed { code, .. }, Retry::Ssh) => *code == Some(SSH_CONNECTION_FAILED),
        }
    }
}

/// Why `Runner::ensure` could not make sure a resource exists.
#[derive(Debug)]
pub enum EnsureError {
    /// The resource could not be looked at.
    Describe(CallError),
    /// It was not there, and could not be made.
    Create(CallError),
}

/// Which failures a call retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Control-plane calls (describe, queued-resources describe): any failure but NOT_FOUND.
    Api,
    /// ssh/scp: a connection failure (exit 255) or a timeout; the remote command's own
    /// failure is an answer, not a transient error.
    Ssh,
    /// Calls that must not run twice on their own (create, setup).
    Never,
}

#[derive(Debug, Clone)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
}

#[derive(Debug, Clone)]
pub struct Runner {
    /// The gcloud program (a name looked up on PATH, or a path).
    pub program: String,
    /// Further attempts after a transient failure.
    pub retries: u32,
    /// First pause between attempts; doubles, capped at a minute.
    pub backoff: Duration,
}

const MAX_BACKOFF: Duration = Duration::from_secs(60);
const STDERR_TAIL: usize = 2000;

impl Runner {
    /// A `gcloud` command with the given arguments, stdin closed, output piped, in a process
    /// group of its own so everything it starts can be killed together.
    pub fn command(&self, args: &[String]) -> Command {
        let mut cmd = Command::new(&self.program);
        // gcloud logs every command's arguments at DEBUG into files it keeps for 30 days
        // (calliope/base.py, core/log.py); nothing podq passes needs to outlive the call.
        cmd.env("CLOUDSDK_CORE_DISABLE_FILE_LOGGING", "1")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        cmd
    }

    /// Makes with `create` the resource `describe` does not find (a workload policy, an
    /// instance template); one that another call made meanwhile (`errors::already_exists`)
    /// is as good. `read` and `write` are the two calls' timeouts.
    pub async fn ensure(
        &self,
        describe: &[String],
        create: &[String],
        read: Duration,
        write: Duration,
    ) -> Result<(), EnsureError> {
        match self.call(describe, read, Retry::Api).await {
            Ok(_) => Ok(()),
            Err(CallError::NotFound(_)) => match self.call(create, write, Retry::Never).await {
                Ok(_) => Ok(()),
                Err(CallError::Failed { stderr, .. }) if errors::already_exists(&stderr) => Ok(()),
                Err(e) => Err(EnsureError::Create(e)),
            },
            Err(e) => Err(EnsureError::Describe(e)),
        }
    }

    /// Runs `args` to completion within `timeout`, retrying as `retry` allows.
    pub async fn call(
        &self,
        args: &[String],
        timeout: Duration,
        retry: Retry,
    ) -> Result<Output, CallError> {
        let mut attempt = 0;
        loop {
            match self.call_once(args, timeout).await {
                Ok(output) => return Ok(output),
                Err(e) if attempt < self.retries && e.transient(retry) => {
                    let pause = podq_api::backoff::exponential(self.backoff, attempt, MAX_BACKOFF);
                    attempt += 1;
                    tracing::warn!(
                        command = %summary(args),
                        attempt,
                        error = %e,
                        "gcloud call failed; retrying in {}s",
                        pause.as_secs_f64()
                    );
                    tokio::time::sleep(pause).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn call_once(&self, args: &[String], timeout: Duration) -> Result<Output, CallError> {
        tracing::debug!(command = %summary(args), "gcloud");
        let child = self
            .command(args)
            .spawn()
            .map_err(|source| CallError::Spawn {
                program: self.program.clone(),
                source,
            })?;
        let pgid = child.id();
        match tokio::time::timeout(timeout, collect(child)).await {
            Ok(Ok((status, stdout, stderr))) => {
                if status.success() {
                    return Ok(Output { stdout, stderr });
                }
                let tail = tail(&stderr);
                if errors::is_not_found(&stderr) {
                    Err(CallError::NotFound(tail))
                } else {
                    Err(CallError::Failed {
                        code: status.code(),
                        stderr: tail,
                    })
                }
            }
            Ok(Err(source)) => Err(CallError::Spawn {
                program: self.program.clone(),
                source,
            }),
            Err(_) => {
                if let Some(pgid) = pgid {
                    let _ = killpg(Pid::from_raw(pgid as i32), Signal::SIGKILL);
                }
                Err(CallError::Timeout(timeout))
            }
        }
    }
}

async fn collect(child: Child) -> std::io::Result<(std::process::ExitStatus, String, String)> {
    let output = child.wait_with_output().await?;
    Ok((
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

fn tail(text: &str) -> String {
    let text = text.trim();
    if text.len() <= STDERR_TAIL {
        return text.to_owned();
    }
    let mut start = text.len() - STDERR_TAIL;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &text[start..])
}

/// The call for logs: the subcommand and the node, not the (long) remote command.
pub fn summary(args: &[String]) -> String {
    args.iter()
        .take_while(|a| !a.starts_with("--command="))
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runner(program: &str) -> Runner {
        Runner {
            program: program.into(),
            retries: 2,
            backoff: Duration::from_millis(10),
        }
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn a_connection_failure_is_retried_and_a_remote_failure_is_not() {
        let dir = std::env::temp_dir().join(format!("podq-runner-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let count = dir.join("count");
        let script = format!(
            "echo x >> {c}; [ $(wc -l < {c}) -ge 3 ] && exit 0; exit $1",
            c = count.display()
        );
        let r = runner("sh");
        let out = r
            .call(
                &args(&["-c", &script, "sh", "255"]),
                Duration::from_secs(5),
                Retry::Ssh,
            )
            .await;
        assert!(out.is_ok(), "{out:?}");
        std::fs::remove_file(&count).unwrap();
        let err = r
            .call(
                &args(&["-c", &script, "sh", "7"]),
                Duration::from_secs(5),
                Retry::Ssh,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, CallError::Failed { code: Some(7), .. }),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 1);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_call_past_its_timeout_is_killed_with_its_children() {
        let r = Runner {
            retries: 0,
            ..runner("sh")
        };
        let started = std::time::Instant::now();
        let err = r
            .call(
                &args(&["-c", "sleep 30 & sleep 30"]),
                Duration::from_millis(300),
                Retry::Ssh,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, CallError::Timeout(_)), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn an_api_call_retries_what_may_pass_and_not_a_wrong_request() {
        let dir = std::env::temp_dir().join(format!("podq-runner-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let count = dir.join("count");
        let script = format!(
            "echo x >> {c}; echo \"$1\" >&2; exit 1",
            c = count.display()
        );
        let r = runner("sh");
        for (stderr, calls) in [
            ("ERROR: (gcloud.compute.tpus.tpu-vm.describe) UNAVAILABLE: try again", 3),
            (
                "ERROR: (gcloud.compute.tpus.tpu-vm.describe) INVALID_ARGUMENT: Invalid value for field 'zone'",
                1,
            ),
        ] {
            let _ = std::fs::remove_file(&count);
            let err = r
                .call(
                    &args(&["-c", &script, "sh", stderr]),
                    Duration::from_secs(5),
                    Retry::Api,
                )
                .await
                .unwrap_err();
            assert!(matches!(err, CallError::Failed { .. }), "{err}");
            let made = std::fs::read_to_string(&count).unwrap().lines().count();
            assert_eq!(made, calls, "{stderr}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn not_found_is_told_apart() {
        let err = runner("sh")
            .call(
                &args(&[
                    "-c",
                    "echo 'ERROR: NOT_FOUND: node was not found' >&2; exit 1",
                ]),
                Duration::from_secs(5),
                Retry::Api,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, CallError::NotFound(_)), "{err}");
    }
}
