//! The shell the worker runs on the hosts through `gcloud ... ssh --command=...`.
//!
//! The trainer of lease `L` is started by the host's `podq agent` for that lease (see
//! `start_agent`) in a process group of its own, whose id the agent writes to
//! `/tmp/podq-trainer-L.pgid` on the host; the agent's pid goes to
//! `/tmp/podq-agent-L.pid`. The pgid file is podq's tag: stops and cleanups read it, and before signalling a group they check
//! that one of its processes still carries `PODQ_LEASE_ID=L` in its environment (a pgid
//! can be reused once its group is gone). Nothing is ever found by matching process names.
//!
//! The scripts are POSIX sh run by the login shell of the TPU VM user; the trainer command
//! itself runs under bash, like the commands of the hand-written launcher it replaces.
//!
//! Every outside value (a path, a name, a URL, the trainer command, an environment value, a
//! lease id) enters a script as one word of `crate::shell::word`; a builder given a value
//! with a NUL byte answers `NulByte` and builds nothing. The setup command and the python
//! check are the operator's own shell and go in as written.

use std::collections::BTreeMap;

use crate::shell::{word, NulByte};

/// Where a host keeps the tag of the trainer of a lease.
pub const PGID_DIR: &str = "/tmp";
pub const PGID_PREFIX: &str = "podq-trainer-";
pub const PGID_SUFFIX: &str = ".pgid";

/// Lines the scripts print for the driver to read.
pub const FAIL: &str = "podq-fail";
pub const INFO: &str = "podq-info";
pub const DONE: &str = "podq-done";

/// A path on the host as a shell word: `~` and `~/...` are the login user's home, a
/// relative path is taken from `base` (itself a shell word), anything else as is. `what`
/// names the path in the error of one with a NUL byte.
pub fn path_word(path: &str, base: Option<&str>, what: &str) -> Result<String, NulByte> {
    Ok(if path == "~" {
        "\"$HOME\"".to_owned()
    } else if let Some(rest) = path.strip_prefix("~/") {
        format!("\"$HOME\"/{}", word(rest, what)?)
    } else if path.starts_with('/') {
        word(path, what)?.into_owned()
    } else {
        match base {
            Some(base) => format!("{base}/{}", word(path, what)?),
            None => word(path, what)?.into_owned(),
        }
    })
}

/// `lease=<the lease as one word>`: the scripts name the lease as `$lease` from here on.
fn lease_line(lease: &str) -> Result<String, NulByte> {
    Ok(format!("lease={}\n", word(lease, "the lease id")?))
}

/// Whether `lease` can be put in a file name and a pattern as is (the agent's rule).
pub use crate::agent::valid_lease;

fn valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `podq_tagged PGID LEASE`: whether a live process of group PGID carries the lease's tag;
/// `podq_live PGID`: whether any process of the group is left (zombies do not count: they
/// are gone, only not yet reaped); `podq_pgid FILE`: the pgid a tag file holds.
const TAGGED_FN: &str = r#"podq_tagged() {
  for p in $(pgrep -g "$1" 2>/dev/null); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "PODQ_LEASE_ID=$2"; then return 0; fi
  done
  return 1
}
podq_live() {
  for p in $(pgrep -g "$1" 2>/dev/null); do
    grep -qs '^State:[[:space:]]*Z' "/proc/$p/status" || return 0
  done
  return 1
}
podq_pgid() {
  pg=$(cat "$1" 2>/dev/null)
  case "$pg" in ''|*[!0-9]*) return 1;; esac
  echo "$pg"
}
"#;

/// What starting one host's agent needs. Nothing secret: the lease's secret and the
/// trainer's environment reach the host in a file (`launch_file`), never in the command line
/// that gcloud logs and `ps` shows.
pub struct AgentScript<'a> {
    pub agent_path: &'a str,
    pub agent_dir: &'a str,
    /// What `podq build-id` must print on the host (the sha256 of the binary podq installs).
    pub build_id: &'a str,
    pub worker_url: &'a str,
    pub lease: &'a str,
    pub host: u32,
    /// Where the launch file was copied, when this call brings a new one.
    pub launch_tmp: Option<&'a str>,
    pub command: &'a str,
}

/// The host's launch file: the trainer's environment and the lease's secret, sourced by
/// `start_agent`. Written 0600 here and copied with scp, which keeps the mode.
pub fn launch_file(env: &BTreeMap<String, String>, secret: &str) -> Result<String, NulByte> {
    let mut text = String::from("# podq: this host's launch environment (0600)\n");
    for (name, value) in env {
        if valid_env_name(name) {
            let value = word(value, format_args!("environment variable {name}"))?;
            text.push_str(&format!("export {name}={value}\n"));
        } else {
            tracing::warn!(name, "not a valid environment variable name; left out");
        }
    }
    let secret = word(secret, "the lease's secret")?;
    text.push_str(&format!("podq_secret={secret}\n"));
    Ok(text)
}

/// Starts the lease's agent on one host, detached (`setsid`, `nohup`, no terminal, its
/// output in a file) so it outlives this ssh call, and returns at once. Prints
/// `podq-fail agent_version ...` (and `podq-info glibc <version>`) instead when the host's
/// `podq` is missing or another build. Running it twice starts one agent: the second finds
/// the lease's lock taken. The trainer's pgid goes to the lease's tag file, which cleanup
/// and preflight read.
pub fn start_agent(a: &AgentScript) -> Result<String, NulByte> {
    let agent = path_word(a.agent_path, None, "the agent path")?;
    let dir = path_word(a.agent_dir, None, "the agent directory")?;
    let mut script = format!(
        "agent={agent}\ndir={dir}\n{lease}mkdir -p \"$dir\"\n",
        lease = lease_line(a.lease)?
    );
    if let Some(tmp) = a.launch_tmp {
        script.push_str(&format!(
            "if [ -f {tmp} ]; then mv -f {tmp} \"$dir/$lease.env\"; fi\n",
            tmp = word(tmp, "the launch file's copy")?
        ));
    }
    script.push_str(&format!(
        "want={want}\n\
         have=$(\"$agent\" build-id 2>/dev/null)\n\
         if [ \"$have\" != \"$want\" ]; then echo \"podq-info glibc $(getconf GNU_LIBC_VERSION 2>/dev/null | cut -d' ' -f2)\"; \
         echo \"podq-fail agent_version the host has ${{have:-no podq build}} at $agent, not $want\"; exit 0; fi\n\
         [ -f \"$dir/$lease.env\" ] || {{ echo \"podq-fail launch_file $dir/$lease.env is missing\"; exit 0; }}\n\
         . \"$dir/$lease.env\"\n\
         (umask 077; printf %s \"$podq_secret\" > \"$dir/$lease.secret\")\n\
         unset podq_secret\n\
         setsid nohup \"$agent\" agent --worker-url {url} --lease \"$lease\" --host {host} \\\n  \
         --dir \"$dir\" --secret-file \"$dir/$lease.secret\" --pgid-file \"{PGID_DIR}/{PGID_PREFIX}$lease{PGID_SUFFIX}\" \\\n  \
         --pid-file \"{PGID_DIR}/podq-agent-$lease.pid\" \\\n  \
         --command {command} >> \"$dir/$lease.agent.log\" 2>&1 < /dev/null &\n\
         echo \"podq-done started the agent of lease $lease (pid $!)\"",
        want = word(a.build_id, "the agent's build id")?,
        url = word(a.worker_url, "the worker URL")?,
        host = a.host,
        command = word(a.command, "the trainer command")?,
    ));
    Ok(script)
}

/// Moves an uploaded `podq` into place as the hosts' agent binary.
pub fn install_agent(uploaded: &str, agent_path: &str) -> Result<String, NulByte> {
    let path = path_word(agent_path, None, "the agent path")?;
    Ok(format!(
        "set -e\n\
         path={path}\n\
         mkdir -p \"$(dirname \"$path\")\"\n\
         chmod 755 {uploaded}\n\
         mv -f {uploaded} \"$path\"\n\
         \"$path\" build-id",
        uploaded = word(uploaded, "the uploaded agent's path")?,
    ))
}

/// Sends SIGTERM (and SIGCONT, so a stopped process sees it) or SIGKILL to the trainer of
/// `lease` on this host, if it is still there and still carries the tag.
pub fn signal(lease: &str, kill: bool) -> Result<String, NulByte> {
    let lease = lease_line(lease)?;
    let send = if kill {
        "kill -KILL -\"$pg\" 2>/dev/null\n  \
         n=0; while podq_live \"$pg\" && [ $n -lt 50 ]; do sleep 0.1; n=$((n+1)); done\n  \
         echo \"podq-done sent SIGKILL to trainer process group $pg\""
    } else {
        "kill -TERM -\"$pg\" 2>/dev/null; kill -CONT -\"$pg\" 2>/dev/null\n  \
         echo \"podq-done sent SIGTERM to trainer process group $pg\""
    };
    Ok(format!(
        "{TAGGED_FN}{lease}pf=\"{PGID_DIR}/{PGID_PREFIX}$lease{PGID_SUFFIX}\"\n\
         if pg=$(podq_pgid \"$pf\") && podq_tagged \"$pg\" \"$lease\"; then\n  \
         {send}\n\
         else\n  \
         echo 'podq-done no trainer of this lease is running'\n\
         fi"
    ))
}

/// Removes a stale libtpu lock file, or says whose it is and how to remove it: in a
/// sticky `/tmp`, a file of another user cannot be removed by this one, and every launch
/// would fail on it.
const REMOVE_LOCKFILE: &str = concat!(
    "if [ -e /tmp/libtpu_lockfile ]; then\n",
    "  if rm -f /tmp/libtpu_lockfile 2>/dev/null && [ ! -e /tmp/libtpu_lockfile ]; then\n",
    "    echo 'podq-done removed stale /tmp/libtpu_lockfile'\n",
    "  else\n",
    "    owner=$(stat -c %U /tmp/libtpu_lockfile 2>/dev/null || echo 'another user')\n",
    "    echo \"podq-fail tpu_lockfile /tmp/libtpu_lockfile belongs to $owner and podq runs as $(id -un), ",
    "so it cannot remove it: run 'sudo rm -f /tmp/libtpu_lockfile' on this host (after stopping $owner's TPU process), ",
    "or set gcloud.user to $owner so podq runs as the user that launches trainers\"\n",
    "  fi\n",
    "fi\n",
);

/// Kills every trainer group of any earlier lease that is still tagged, waits for them to
/// go, drops their pgid files, and removes libtpu's lock file.
pub fn clean() -> String {
    format!(
        "{TAGGED_FN}for pf in {PGID_DIR}/{PGID_PREFIX}*{PGID_SUFFIX}; do\n  \
         [ -f \"$pf\" ] || continue\n  \
         lease=${{pf#{PGID_DIR}/{PGID_PREFIX}}}; lease=${{lease%{PGID_SUFFIX}}}\n  \
         if pg=$(podq_pgid \"$pf\") && podq_tagged \"$pg\" \"$lease\"; then\n    \
         kill -CONT -\"$pg\" 2>/dev/null; kill -KILL -\"$pg\" 2>/dev/null\n    \
         n=0; while podq_live \"$pg\" && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done\n    \
         echo \"podq-done killed leftover trainer process group $pg (lease $lease)\"\n  \
         fi\n  \
         rm -f \"$pf\"\n\
         done\n\
         for af in {PGID_DIR}/podq-agent-*.pid; do\n  \
         [ -f \"$af\" ] || continue\n  \
         p=$(cat \"$af\" 2>/dev/null)\n  \
         case \"$p\" in ''|*[!0-9]*) ;; *) if grep -qs agent \"/proc/$p/cmdline\"; then kill -KILL \"$p\" 2>/dev/null && echo \"podq-done killed leftover agent $p\"; fi;; esac\n  \
         rm -f \"$af\"\n\
         done\n\
         {REMOVE_LOCKFILE}\
         true"
    )
}

/// What preflight needs to know on one host.
pub struct PreflightScript<'a> {
    pub code_dir: &'a str,
    pub python_check: &'a str,
    /// Dataset paths on the host's disk (gs:// ones are checked from the worker).
    pub dataset_paths: &'a [String],
}

/// Checks one host, printing `podq-fail <check> <message>` per failed check and
/// `podq-info <key> <value>` for what the driver compares across hosts.
pub fn preflight(p: &PreflightScript) -> Result<String, NulByte> {
    let code = path_word(p.code_dir, None, "the code directory")?;
    let mut script = format!(
        "{TAGGED_FN}code={code}\n\
         if [ -d \"$code\" ]; then\n  \
         if commit=$(git -C \"$code\" rev-parse HEAD 2>&1); then echo \"podq-info commit $commit\";\n  \
         else echo \"podq-fail code_commit $code is not a git checkout: $(echo \"$commit\" | tail -n 1)\"; fi\n  \
         if out=$(cd \"$code\" && ( {check} ) 2>&1); then echo \"podq-info jax $(echo \"$out\" | tail -n 1)\";\n  \
         else echo \"podq-fail python_imports $(echo \"$out\" | tail -n 1)\"; fi\n  \
         where=\"$code\"\n\
         else\n  \
         echo \"podq-fail code_dir $code does not exist\"\n  \
         where=\"$HOME\"\n\
         fi\n",
        check = p.python_check,
    );
    for path in p.dataset_paths {
        let at = path_word(path, Some("\"$code\""), "a dataset path")?;
        script.push_str(&format!(
            "[ -e {at} ] || printf 'podq-fail dataset %s does not exist\\n' {}\n",
            word(path, "a dataset path")?
        ));
    }
    script.push_str(&format!(
        "echo \"podq-info disk_free_kb $(df -Pk \"$where\" | awk 'NR==2 {{print $4}}')\"\n\
         for pf in {PGID_DIR}/{PGID_PREFIX}*{PGID_SUFFIX}; do\n  \
         [ -f \"$pf\" ] || continue\n  \
         lease=${{pf#{PGID_DIR}/{PGID_PREFIX}}}; lease=${{lease%{PGID_SUFFIX}}}\n  \
         if pg=$(podq_pgid \"$pf\") && podq_tagged \"$pg\" \"$lease\"; then echo \"podq-fail stale_trainer trainer process group $pg of lease $lease is still running\"; fi\n\
         done\n\
         for fd in /proc/[0-9]*/fd/*; do\n  \
         t=$(readlink \"$fd\" 2>/dev/null) || continue\n  \
         case \"$t\" in /dev/accel*|/dev/vfio/[0-9]*)\n    \
         p=${{fd#/proc/}}; p=${{p%%/*}}\n    \
         echo \"podq-fail stale_trainer process $p ($(tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null | cut -c1-80)) holds $t\";;\n  \
         esac\n\
         done 2>/dev/null | sort -u\n\
         {REMOVE_LOCKFILE}\
         true"
    ));
    Ok(script)
}

/// Where the config copied to a host goes, and what it must hold.
pub struct StageScript<'a> {
    /// Where the copy landed (`None`: it is already in place, from an earlier run).
    pub tmp: Option<&'a str>,
    pub dir: &'a str,
    pub name: &'a str,
    pub sha256: &'a str,
    pub code_dir: &'a str,
    /// Dataset paths the config names (relative ones from `code_dir`).
    pub datasets: &'a [String],
}

/// Moves the copied config into `dir/name` (when the copy is still there: a run of this
/// script that gcloud repeats finds it moved already), checks it holds `sha256` and that
/// the datasets exist, and stops there with `podq-fail` lines if not: nothing is started
/// on a host whose config differs, since hosts would train different configs.
pub fn stage(s: &StageScript) -> Result<String, NulByte> {
    let dir = path_word(s.dir, None, "the config directory")?;
    let code = path_word(s.code_dir, None, "the code directory")?;
    let name = word(s.name, "the config's file name")?;
    let mut script = format!(
        "dir={dir}\n\
         code={code}\n\
         mkdir -p \"$dir\"\n"
    );
    if let Some(tmp) = s.tmp {
        let tmp = word(tmp, "the config's copy")?;
        script.push_str(&format!(
            "if [ -f {tmp} ]; then mv -f {tmp} \"$dir\"/{name}; fi\n"
        ));
    }
    script.push_str(&format!(
        "name={name}\n\
         sha={sha}\n\
         have=$(sha256sum 2>/dev/null < \"$dir/$name\" | cut -d' ' -f1)\n\
         if [ \"$have\" != \"$sha\" ]; then echo \"podq-fail config_sha256 $dir/$name has sha256 ${{have:-(missing)}}, expected $sha: hosts would train different configs\"; exit 0; fi\n\
         missing=\n",
        sha = word(s.sha256, "the config's sha256")?,
    ));
    for path in s.datasets {
        let at = path_word(path, Some("\"$code\""), "a dataset path")?;
        script.push_str(&format!(
            "[ -e {at} ] || {{ printf 'podq-fail dataset %s does not exist\\n' {}; missing=1; }}\n",
            word(path, "a dataset path")?
        ));
    }
    script.push_str("[ -z \"$missing\" ] || exit 0\n");
    Ok(script)
}

/// The setup command of one host, told which host it runs on.
pub fn setup(host: u32, hosts: u32, command: &str) -> String {
    format!("export PODQ_HOST_INDEX={host} PODQ_HOST_COUNT={hosts}\ncd && {command}")
}

/// `podq-fail <check> <message>` lines of a script's output.
pub fn failures(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix(FAIL)?.trim_start().split_once(' '))
        .map(|(check, message)| (check.to_owned(), message.trim().to_owned()))
        .collect()
}

/// The value of a `podq-info <key> <value>` line.
pub fn info<'a>(stdout: &'a str, key: &str) -> Option<&'a str> {
    stdout.lines().find_map(|line| {
        let rest = line.strip_prefix(INFO)?.trim_start();
        let (k, v) = rest.split_once(' ').unwrap_or((rest, ""));
        (k == key).then(|| v.trim())
    })
}

/// The messages of `podq-done ...` lines.
pub fn done(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix(DONE))
        .map(|m| m.trim().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn sh(script: &str, home: &std::path::Path) -> (i32, String) {
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .env("HOME", home)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    #[test]
    fn words_survive_the_shell() {
        let dir = std::env::temp_dir();
        for word in ["plain", "with space", "it's", "$HOME `x` \"q\"", ""] {
            let (_, out) = sh(
                &format!("printf %s {}", path_word(word, None, "w").unwrap()),
                &dir,
            );
            assert_eq!(out, word);
        }
        let p = |path, base| path_word(path, base, "p").unwrap();
        assert_eq!(p("~/trm", None), "\"$HOME\"/trm");
        assert_eq!(p("data/x", Some("\"$code\"")), "\"$code\"/data/x");
        assert_eq!(p("/abs/x y", None), "'/abs/x y'");
        assert!(path_word("~/a\0b", None, "p").is_err());
    }

    /// What an attacker or an odd config could put in a value: every shell metacharacter
    /// that matters, each alone and all at once.
    const HOSTILE: [&str; 7] = [
        "two words",
        "line\nbreak",
        "it's",
        "say \"hi\"",
        "$(touch /tmp/podq-pwned)",
        "`touch /tmp/podq-pwned`",
        "all of it: 'a' \"b\" $(c) `d` ${HOME} \\ ; | & \n end",
    ];

    /// The script a builder made from `value` in one field, with the word that value must
    /// come back as (e.g. `agent=/abs/<value>` for `agent={path}`).
    type Case = (
        &'static str,
        fn(&str) -> Result<String, NulByte>,
        fn(&str) -> String,
    );

    fn agent_with<'a>(f: impl FnOnce(&mut AgentScript<'a>)) -> Result<String, NulByte> {
        let mut a = AgentScript {
            agent_path: "~/.podq/bin/podq",
            agent_dir: "~/.podq/agent",
            build_id: "sha256:ab12",
            worker_url: "http://10.0.0.2:7433",
            lease: "l-1",
            host: 3,
            launch_tmp: Some("/tmp/podq-stage-1-launch-3.sh"),
            command: "cd ~/x && exec python3 'train.py' a=b",
        };
        f(&mut a);
        start_agent(&a)
    }

    fn stage_with<'a>(f: impl FnOnce(&mut StageScript<'a>)) -> Result<String, NulByte> {
        const DATASETS: &[String] = &[];
        let mut s = StageScript {
            tmp: Some("/tmp/podq-stage-1.yaml"),
            dir: "/tmp/podq/configs",
            name: "e.yaml",
            sha256: "ab12",
            code_dir: "~/t",
            datasets: DATASETS,
        };
        f(&mut s);
        stage(&s)
    }

    fn preflight_with(code_dir: &str, dataset: &str) -> Result<String, NulByte> {
        preflight(&PreflightScript {
            code_dir,
            python_check: "python3 -c 'print(1)'",
            dataset_paths: &[dataset.to_owned()],
        })
    }

    fn cases() -> Vec<Case> {
        vec![
            (
                "start_agent agent_path",
                |v| {
                    let p = format!("/abs/{v}");
                    agent_with(|a| a.agent_path = &p)
                },
                |v| format!("agent=/abs/{v}"),
            ),
            (
                "start_agent agent_path ~",
                |v| {
                    let p = format!("~/{v}");
                    agent_with(|a| a.agent_path = &p)
                },
                |v| format!("agent=$HOME/{v}"),
            ),
            (
                "start_agent agent_dir",
                |v| agent_with(|a| a.agent_dir = v),
                |v| format!("dir={v}"),
            ),
            (
                "start_agent build_id",
                |v| agent_with(|a| a.build_id = v),
                |v| format!("want={v}"),
            ),
            (
                "start_agent worker_url",
                |v| agent_with(|a| a.worker_url = v),
                str::to_owned,
            ),
            (
                "start_agent lease",
                |v| agent_with(|a| a.lease = v),
                |v| format!("lease={v}"),
            ),
            (
                "start_agent launch_tmp",
                |v| agent_with(|a| a.launch_tmp = Some(v)),
                str::to_owned,
            ),
            (
                "start_agent command",
                |v| agent_with(|a| a.command = v),
                str::to_owned,
            ),
            (
                "launch_file env",
                |v| launch_file(&BTreeMap::from([("FOO".to_owned(), v.to_owned())]), "s"),
                |v| format!("FOO={v}"),
            ),
            (
                "launch_file secret",
                |v| launch_file(&BTreeMap::new(), v),
                |v| format!("podq_secret={v}"),
            ),
            (
                "install_agent uploaded",
                |v| install_agent(v, "~/.podq/bin/podq"),
                str::to_owned,
            ),
            (
                "install_agent agent_path",
                |v| install_agent("/tmp/u", &format!("/abs/{v}")),
                |v| format!("path=/abs/{v}"),
            ),
            (
                "signal lease",
                |v| signal(v, false),
                |v| format!("lease={v}"),
            ),
            (
                "signal lease kill",
                |v| signal(v, true),
                |v| format!("lease={v}"),
            ),
            (
                "preflight code_dir",
                |v| preflight_with(&format!("~/{v}"), "data/x"),
                |v| format!("code=$HOME/{v}"),
            ),
            (
                "preflight dataset",
                |v| preflight_with("~/t", v),
                |v| format!("$code/{v}"),
            ),
            (
                "preflight dataset named",
                |v| preflight_with("~/t", v),
                str::to_owned,
            ),
            (
                "stage tmp",
                |v| stage_with(|s| s.tmp = Some(v)),
                str::to_owned,
            ),
            (
                "stage dir",
                |v| {
                    let p = format!("/abs/{v}");
                    stage_with(|s| s.dir = &p)
                },
                |v| format!("dir=/abs/{v}"),
            ),
            (
                "stage name",
                |v| stage_with(|s| s.name = v),
                |v| format!("name={v}"),
            ),
            (
                "stage sha256",
                |v| stage_with(|s| s.sha256 = v),
                |v| format!("sha={v}"),
            ),
            (
                "stage code_dir",
                |v| stage_with(|s| s.code_dir = v),
                |v| format!("code={v}"),
            ),
            (
                "stage dataset",
                |v| {
                    let d = [v.to_owned()];
                    stage_with(|s| s.datasets = &d)
                },
                |v| format!("$code/{v}"),
            ),
        ]
    }

    /// Every outside value a remote script is built from comes back as the same one word
    /// when a POSIX word-splitter reads the script, the script stays valid sh, and a value
    /// with a NUL byte is refused, naming the value, instead of being cut short.
    #[test]
    fn every_outside_value_is_one_word_or_refused_for_a_nul() {
        for (case, build, expect) in cases() {
            for value in HOSTILE {
                let script = build(value).unwrap_or_else(|e| panic!("{case}: {e}"));
                let words =
                    shlex::split(&script).unwrap_or_else(|| panic!("{case}: not split:\n{script}"));
                let want = expect(value);
                assert!(
                    words.contains(&want),
                    "{case}: {want:?} is not one word of\n{script}\n{words:?}"
                );
                let status = Command::new("sh")
                    .arg("-n")
                    .arg("-c")
                    .arg(&script)
                    .status()
                    .unwrap();
                assert!(status.success(), "{case}: not valid sh:\n{script}");
            }
            let err = build("a\0b").expect_err(case);
            assert!(err.to_string().contains("NUL byte"), "{case}: {err}");
        }
    }

    /// The launch file, sourced by a real shell, gives back each value and the secret.
    #[test]
    fn the_launch_file_gives_back_every_value() {
        let dir = tempfile::tempdir().unwrap();
        let env: BTreeMap<String, String> = HOSTILE
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("V{i}"), (*v).to_owned()))
            .collect();
        let secret = HOSTILE[6];
        let file = dir.path().join("launch.sh");
        std::fs::write(&file, launch_file(&env, secret).unwrap()).unwrap();
        let names: String = env.keys().map(|k| format!(" \"${k}\"")).collect();
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(". \"$1\"; printf '%s\\0'{names} \"$podq_secret\""))
            .arg("sh")
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success());
        let got: Vec<&[u8]> = out.stdout.split(|&b| b == 0).collect();
        let mut want: Vec<&str> = env.values().map(String::as_str).collect();
        want.push(secret);
        want.push("");
        assert_eq!(got, want.iter().map(|w| w.as_bytes()).collect::<Vec<_>>());
    }

    /// Staging run by a real shell, in a directory and under names made of every
    /// metacharacter: the config lands where it should and the missing dataset is named.
    #[test]
    fn staging_runs_with_odd_names() {
        let root = tempfile::tempdir().unwrap();
        let odd = HOSTILE[6].replace('/', "_");
        let dir = root.path().join(format!("configs {odd}"));
        let copy = root.path().join(format!("copy {odd}"));
        std::fs::write(&copy, b"x: 1\n").unwrap();
        let sha = "d09edadd173a8bbc233d47dcafc30cc876af2fb569812f2bbe0e92a1905bbce8";
        let name = format!("{odd}.yaml");
        let plain = odd.replace('\n', " ");
        let datasets = [format!("missing {plain}")];
        let script = stage(&StageScript {
            tmp: Some(copy.to_str().unwrap()),
            dir: dir.to_str().unwrap(),
            name: &name,
            sha256: sha,
            code_dir: root.path().to_str().unwrap(),
            datasets: &datasets,
        })
        .unwrap();
        let (code, out) = sh(&script, root.path());
        assert_eq!(code, 0, "{out}");
        assert_eq!(std::fs::read(dir.join(&name)).unwrap(), b"x: 1\n");
        assert!(!copy.exists());
        assert_eq!(
            failures(&out),
            vec![(
                "dataset".to_owned(),
                format!("missing {plain} does not exist")
            )]
        );
    }

    #[test]
    fn leases_are_checked_before_use_in_paths() {
        assert!(valid_lease("0b4ad3de-3f4e-4b8e-9a39-0d1f1d0c5a11"));
        assert!(!valid_lease("../x"));
        assert!(!valid_lease("a b"));
        assert!(!valid_lease(""));
    }

    #[test]
    fn lines_are_read() {
        let out = "podq-info commit abc\npodq-fail dataset data/x does not exist\nnoise\npodq-info jax 0.4.35\npodq-done removed it\n";
        assert_eq!(info(out, "commit"), Some("abc"));
        assert_eq!(info(out, "jax"), Some("0.4.35"));
        assert_eq!(info(out, "disk_free_kb"), None);
        assert_eq!(
            failures(out),
            vec![("dataset".into(), "data/x does not exist".into())]
        );
        assert_eq!(done(out), vec!["removed it".to_owned()]);
    }

    #[test]
    fn the_scripts_are_valid_shell() {
        let env = BTreeMap::from([("PODQ_LEASE_ID".to_owned(), "l-1".to_owned())]);
        for script in [
            start_agent(&AgentScript {
                agent_path: "~/.podq/bin/podq",
                agent_dir: "~/.podq/agent",
                build_id: "sha256:ab12",
                worker_url: "http://10.0.0.2:7433",
                lease: "l-1",
                host: 3,
                launch_tmp: Some("/tmp/podq-stage-1-launch-3.sh"),
                command: "cd ~/x && exec python3 'train.py' a=b",
            })
            .unwrap(),
            launch_file(&env, "s3cret").unwrap(),
            install_agent("/tmp/podq-agent-x", "~/.podq/bin/podq").unwrap(),
            signal("l-1", false).unwrap(),
            signal("l-1", true).unwrap(),
            clean(),
            preflight(&PreflightScript {
                code_dir: "~/trm",
                python_check: "python3 -c 'print(1)'",
                dataset_paths: &["data/x".into(), "/abs".into()],
            })
            .unwrap(),
            stage(&StageScript {
                tmp: Some("/tmp/podq-stage-1.yaml"),
                dir: "/tmp/podq/configs",
                name: "e.yaml",
                sha256: "ab12",
                code_dir: "~/t",
                datasets: &["data/x".into()],
            })
            .unwrap(),
            setup(1, 2, "echo set up"),
        ] {
            let status = Command::new("sh")
                .arg("-n")
                .arg("-c")
                .arg(&script)
                .status()
                .unwrap();
            assert!(status.success(), "not valid sh:\n{script}");
        }
    }
}
