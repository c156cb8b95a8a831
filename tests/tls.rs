//! Encrypted connections: a server started with `--tls-cert`/`--tls-key` holding
//! a certificate from a private CA; the CLI, a worker and `podq up` that trust that CA with
//! `--ca`, and what each says without it; plain HTTP to the TLS port; the checks at start;
//! and the PostgreSQL store reached with `sslmode=verify-full`.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::postgres::PostgresDatabase;
use common::tls::{path, pki, tls_server, trusting, unrelated_ca};
use common::{eventually, pids_matching, Process, Server, PODQ};
use serde_json::json;

const RUN: Duration = Duration::from_secs(90);

/// What one `podq` run printed, and how it ended.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn podq(server: &Server, args: &[&str], env: &[(&str, &str)]) -> Run {
    let output = Command::new(PODQ)
        .args(args)
        .env("PODQ_SERVER", &server.url)
        .env_remove("PODQ_ADMIN_TOKEN")
        .env_remove("PODQ_CA")
        .envs(env.iter().copied())
        .output()
        .expect("run podq");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[tokio::test]
async fn the_cli_trusting_the_ca_submits_and_reads_and_without_it_names_the_certificate() {
    let pki = pki();
    let server = tls_server(&pki, &[], &[]).await;
    let ca = path(&pki.ca);

    let run = podq(
        &server,
        &["submit", "--experiment", "exp07a", "--ca", &ca],
        &[],
    );
    assert_eq!(
        run.code, 0,
        "stdout: {}\nstderr: {}",
        run.stdout, run.stderr
    );
    assert!(run.stdout.contains(" exp07a"), "{}", run.stdout);
    let run = podq(&server, &["job", "exp07a", "--ca", &ca], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("exp07a (exp07-precision)") && run.stdout.contains("queued"),
        "{}",
        run.stdout
    );
    // PODQ_CA does the same.
    let run = podq(&server, &["jobs"], &[("PODQ_CA", &ca)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("exp07a"), "{}", run.stdout);

    // Without the CA, or with one that did not sign the server's certificate: refused,
    // saying why and what to give, and nothing reaches the server.
    let unrelated = path(&unrelated_ca(pki.dir.path()));
    for extra in [vec![], vec!["--ca", unrelated.as_str()]] {
        let mut args = vec!["submit", "--experiment", "exp07b"];
        args.extend(extra.iter().copied());
        let run = podq(&server, &args, &[]);
        assert_eq!(run.code, 1, "{args:?}: {}", run.stdout);
        assert!(
            run.stderr.contains(&format!(
                "the podq server at {} presented a certificate podq does not trust",
                server.url
            )) && run.stderr.contains("--ca FILE (PODQ_CA)"),
            "{args:?}: {}",
            run.stderr
        );
    }
    let jobs = server.jobs().await;
    assert_eq!(jobs.len(), 1, "only the first submission arrived: {jobs:?}");

    // A CA file that cannot be read is refused before anything is sent, by its name.
    let run = podq(&server, &["jobs", "--ca", "/nonexistent/ca.crt"], &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("cannot read the CA file /nonexistent/ca.crt"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn a_worker_trusting_the_ca_runs_a_job_to_success_and_one_without_it_says_why() {
    let pki = pki();
    let server = tls_server(&pki, &[], &[]).await;
    let id = server.submit_one("exp07a", json!({})).await;

    // A worker without the CA never reaches the server, and warns why.
    let mut untrusting = server.worker("pod-u", 2, &[]);
    eventually(
        Duration::from_secs(30),
        "the untrusting worker's warning",
        || async {
            let log = untrusting.log_text();
            log.contains("presented a certificate podq does not trust")
                .then_some(())
        },
    )
    .await;
    untrusting.process.kill();
    let (status, pods) = server.get("/pods").await;
    assert_eq!(status, 200, "{pods}");
    assert!(
        !pods.to_string().contains("pod-u"),
        "the untrusting worker never reported: {pods}"
    );
    assert_eq!(server.job(&id).await["state"], "queued");

    let ca = path(&pki.ca);
    let _worker = server.worker(
        "pod-t",
        2,
        &["--ca", &ca, "--trainer-env", "PODQ_SIM_RUN_SECS=3"],
    );
    let job = server.wait_state(&id, "succeeded", RUN).await;
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{job}");
    assert_eq!(attempts[0]["outcome"], "succeeded", "{job}");
    assert_eq!(attempts[0]["pod"], "pod-t", "{job}");
}

#[tokio::test]
async fn plain_http_to_the_tls_port_fails_and_the_server_carries_on() {
    let pki = pki();
    let server = tls_server(
        &pki,
        &["--metrics-listen", "127.0.0.1:0"],
        &[("PODQ_LOG", "info,podq_server::tls=debug")],
    )
    .await;
    let port = server.url.rsplit(':').next().unwrap().to_owned();

    // A client that connects and never speaks holds up no one.
    let _silent = tokio::net::TcpStream::connect(format!("127.0.0.1:{port}"))
        .await
        .expect("connect");

    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await;
    assert!(
        plain.is_err(),
        "plain HTTP to the TLS port got an answer: {plain:?}"
    );
    let log = server.dir.path().join("server.log");
    eventually(
        Duration::from_secs(10),
        "the failed handshake in the server's debug log",
        || async {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("TLS handshake failed")
                .then_some(())
        },
    )
    .await;

    let answer = server
        .client
        .get(format!("{}/healthz", server.url))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("HTTPS after a failed handshake, beside a silent connection");
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.text().await.unwrap().trim(), "ok");
    // By name too: the certificate names localhost.
    let (status, _) = server.get("/status").await;
    assert_eq!(status, 200);
    let by_name = server
        .client
        .get(format!("https://localhost:{port}/healthz"))
        .send()
        .await
        .expect("HTTPS by name");
    assert_eq!(by_name.status(), 200);

    // --metrics-listen serves HTTPS too.
    let metrics = eventually(
        Duration::from_secs(10),
        "the /metrics address in the server's log",
        || async {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            let line = log.lines().find(|l| l.contains("serving /metrics"))?;
            let at = line.find("address=")? + "address=".len();
            Some(line[at..].split_whitespace().next()?.to_owned())
        },
    )
    .await;
    let answer = server
        .client
        .get(format!("https://{metrics}/metrics"))
        .send()
        .await
        .expect("/metrics over HTTPS");
    assert_eq!(answer.status(), 200);
    assert!(answer.text().await.unwrap().contains("podq_"));
    let plain = reqwest::Client::new()
        .get(format!("http://{metrics}/metrics"))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP to /metrics: {plain:?}");
}

/// Starts `podq server ARGS` and, once it says it listens, stops it: its stdout line and
/// everything it logged. Panics with its log if it does not start.
fn start_and_stop(dir: &Path, args: &[&str]) -> (String, String) {
    let log = dir.join(format!("server-{}.log", uuid::Uuid::new_v4().simple()));
    let mut child = Command::new(PODQ)
        .arg("server")
        .args(["--db", &path(&dir.join("warn.db"))])
        .args(["--experiments", &path(&common::experiments_dir())])
        .args(args)
        .env_remove("PODQ_LOG")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start the server");
    let stdout = child.stdout.take().unwrap();
    let mut process = Process {
        child,
        name: "server".into(),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("podq server listening on ") {
                let _ = tx.send(line);
            }
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| {
            panic!(
                "the server did not start: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
    process.kill();
    (line, std::fs::read_to_string(&log).unwrap_or_default())
}

/// Runs `podq server ARGS`, which must refuse to start: its stderr.
fn refused(dir: &Path, args: &[&str]) -> String {
    let output = Command::new(PODQ)
        .arg("server")
        .args(["--db", &path(&dir.join("refused.db"))])
        .args(["--experiments", &path(&common::experiments_dir())])
        .args(args)
        .output()
        .expect("run the server");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{args:?} started: {stderr}");
    stderr
}

#[tokio::test]
async fn tls_files_are_checked_at_start_and_plain_http_beyond_loopback_warns_once() {
    let pki = pki();
    let dir = pki.dir.path();
    let (cert, key) = (path(&pki.cert), path(&pki.key));
    let (other_cert, other_key) = {
        let other = self::pki();
        let files = (dir.join("other.crt"), dir.join("other.key"));
        std::fs::copy(&other.cert, &files.0).unwrap();
        std::fs::copy(&other.key, &files.1).unwrap();
        (path(&files.0), path(&files.1))
    };

    let stderr = refused(dir, &["--tls-cert", &cert, "--tls-key", &other_key]);
    assert!(
        stderr.contains(&format!(
            "the TLS key {other_key} is not the key of the certificate {cert}"
        )),
        "{stderr}"
    );
    let stderr = refused(dir, &["--tls-cert", &other_cert, "--tls-key", &cert]);
    assert!(
        stderr.contains(&format!("{cert} holds no private key")),
        "{stderr}"
    );
    let stderr = refused(dir, &["--tls-cert", "/nonexistent.crt", "--tls-key", &key]);
    assert!(
        stderr.contains("cannot read the TLS certificate /nonexistent.crt"),
        "{stderr}"
    );
    let stderr = refused(dir, &["--tls-cert", &cert]);
    assert!(stderr.contains("--tls-key"), "{stderr}");

    // Beyond loopback (with the tokens it needs there): plain HTTP warns once, naming the
    // flags; HTTPS does not.
    let tokens = ["--admin-token", "a", "--worker-token", "w"];
    let mut args = vec!["--listen", "0.0.0.0:0"];
    args.extend(tokens);
    let (line, log) = start_and_stop(dir, &args);
    assert!(line.contains("http://0.0.0.0:"), "{line}");
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("--tls-cert and --tls-key"))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning: {log}");
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains("plain HTTP"),
        "{log}"
    );
    args.extend(["--tls-cert", &cert, "--tls-key", &key]);
    let (line, log) = start_and_stop(dir, &args);
    assert!(line.contains("https://0.0.0.0:"), "{line}");
    assert!(!log.contains("--tls-cert"), "no warning with TLS: {log}");
    // On loopback, none either.
    let (_, log) = start_and_stop(dir, &["--listen", "127.0.0.1:0"]);
    assert!(!log.contains("--tls-cert"), "no warning on loopback: {log}");
}

#[tokio::test]
async fn podq_up_serves_https_and_its_own_worker_and_calls_use_it() {
    let pki = pki();
    let data = pki.dir.path().join("up");
    let up = |extra: &[&str]| {
        let mut command = Command::new(PODQ);
        command
            .arg("up")
            .args(["--listen", "127.0.0.1:0", "--data-dir", &path(&data)])
            .args(["--experiments", &path(&common::experiments_dir())])
            .args([
                "--hosts",
                "2",
                "--sim-run-secs",
                "3",
                "--submit",
                "exp07-precision",
            ])
            .args(["--tls-cert", &path(&pki.cert), "--tls-key", &path(&pki.key)])
            .args(extra)
            .env_remove("PODQ_CA")
            .env_remove("PODQ_LISTEN");
        command
    };

    // The certificate alone is not self-signed: `up` cannot trust it without its CA.
    let output = up(&[]).output().expect("run podq up");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("the certificate {}", path(&pki.cert))) && stderr.contains("--ca"),
        "{stderr}"
    );

    let mut child = up(&["--ca", &path(&pki.ca)])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(pki.dir.path().join("up.log")).unwrap())
        .spawn()
        .expect("start podq up");
    let stdout = child.stdout.take().unwrap();
    let process = Process {
        child,
        name: "podq up".into(),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Its banner: the dashboard's address, then what it submitted (over HTTPS).
    let mut printed: Vec<String> = Vec::new();
    while !printed.iter().any(|l| l.contains("Ctrl-C")) {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                panic!(
                    "podq up did not print its banner: {printed:?}\n{}",
                    std::fs::read_to_string(pki.dir.path().join("up.log")).unwrap_or_default()
                )
            });
        printed.push(line);
    }
    let base = printed
        .iter()
        .find_map(|l| l.trim().strip_prefix("dashboard"))
        .map(|url| url.trim().trim_end_matches('/').to_owned())
        .unwrap_or_else(|| panic!("no dashboard address: {printed:?}"));
    assert!(base.starts_with("https://127.0.0.1:"), "{base}");
    assert!(
        printed
            .iter()
            .any(|l| l.contains("submitted `exp07-precision`: 3 jobs created")),
        "{printed:?}"
    );
    assert!(
        printed
            .iter()
            .any(|l| l.contains(&format!("curl -s --cacert {}", path(&pki.ca)))),
        "the curl lines name the CA: {printed:?}"
    );

    // Its own worker, over HTTPS, runs the submitted jobs.
    let client = trusting(&pki.ca);
    eventually(RUN, "a job run by up's own worker", || async {
        let jobs: serde_json::Value = client
            .get(format!("{base}/api/v1/jobs"))
            .header("accept", "application/json")
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        jobs["jobs"]
            .as_array()?
            .iter()
            .any(|j| j["state"] == "succeeded")
            .then_some(())
    })
    .await;

    // SIGTERM: `up` stops its trainers with itself.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(process.pid()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    drop(process);
    for pid in pids_matching(&path(&data)) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// `url` with its query parameter `key` set to `value` (added when missing).
fn with_param(url: &str, key: &str, value: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut pairs: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty() && p.split('=').next() != Some(key))
        .map(str::to_owned)
        .collect();
    pairs.push(format!("{key}={value}"));
    format!("{base}?{}", pairs.join("&"))
}

fn without_param(url: &str, key: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let pairs: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty() && p.split('=').next() != Some(key))
        .collect();
    if pairs.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", pairs.join("&"))
    }
}

/// Whether every session on `url`'s database is encrypted, and how many there are.
async fn sessions_encrypted(url: &str) -> (bool, i64) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .expect("connect to the database");
    sqlx::query_as(
        "SELECT bool_and(s.ssl), count(*) FROM pg_stat_ssl s \
         JOIN pg_stat_activity a USING (pid) WHERE a.datname = current_database()",
    )
    .fetch_one(&mut conn)
    .await
    .expect("read pg_stat_ssl")
}

#[tokio::test]
async fn the_postgres_store_connects_with_verify_full_and_refuses_a_certificate_it_cannot_verify() {
    let database = PostgresDatabase::create().await;
    assert!(
        database.url.contains("sslmode=verify-full") && database.url.contains("sslrootcert="),
        "PODQ_TEST_DATABASE_URL should ask for sslmode=verify-full with its sslrootcert, as \
         scripts/postgres-cluster's URL does: {}",
        database.url
    );

    let server = Server::start_on_url(&database.url).await;
    let id = server.submit_one("exp07a", json!({})).await;
    assert_eq!(server.job(&id).await["state"], "queued");
    let (encrypted, sessions) = sessions_encrypted(&database.url).await;
    assert!(
        encrypted && sessions >= 3,
        "the server's writer and readers and this test's session, all over TLS: \
         {sessions} sessions, all encrypted: {encrypted}"
    );
    drop(server);

    // A CA that did not sign the PostgreSQL server's certificate: refused at start.
    let dir = common::shared_tempdir();
    let wrong = with_param(
        &database.url,
        "sslrootcert",
        &path(&unrelated_ca(dir.path())),
    );
    let stderr = refused(dir.path(), &["--database", &wrong]);
    assert!(
        stderr.contains("cannot open the database") && stderr.contains("certificate"),
        "{stderr}"
    );

    // `require` encrypts without verifying: no root certificate is needed.
    let require = with_param(
        &without_param(&database.url, "sslrootcert"),
        "sslmode",
        "require",
    );
    let server = Server::start_on_url(&require).await;
    assert_eq!(server.jobs().await.len(), 1);
    let (encrypted, _) = sessions_encrypted(&require).await;
    assert!(encrypted, "sslmode=require encrypts");
}
