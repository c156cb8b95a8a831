//! The podq server: catalog, store, scheduler and HTTP API.

pub mod catalog;
pub mod config;
pub mod http;
pub mod names;
pub mod scheduler;
pub mod store;
pub mod team;
pub mod telemetry;
pub mod tls;
pub mod webhooks;

use std::sync::Arc;

use anyhow::{bail, Context};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use config::ServerConfig;

use catalog::Catalog;
use scheduler::Scheduler;
use store::Store;

pub use http::AppState;

/// Loads the catalog (refusing one with errors), opens the store, checks the listen
/// address is safe for the tokens configured and the TLS files (warning when a server that
/// listens beyond loopback has none).
pub async fn prepare(config: ServerConfig) -> anyhow::Result<AppState> {
    match &config.tls {
        // Refused now, naming the file, rather than at the first connection.
        Some(files) => drop(files.acceptor()?),
        None if !config.listen.ip().is_loopback() => tracing::warn!(
            listen = %config.listen,
            "serving plain HTTP beyond loopback: tokens cross the network in clear text; \
             give --tls-cert and --tls-key (PODQ_TLS_CERT, PODQ_TLS_KEY) to serve HTTPS"
        ),
        None => {}
    }
    let catalog = Catalog::load(&config.experiments, &config.catalog);
    let errors = catalog.errors();
    if !errors.is_empty() {
        // The grouped report `podq validate` prints: each root cause once, with its count,
        // its fix and its first places.
        let causes: Vec<String> = catalog
            .summary()
            .into_iter()
            .filter(|group| group.severity == podq_api::Severity::Error)
            .map(|group| group.text)
            .collect();
        bail!(
            "the experiment catalog in {dir} has {} errors from {} {}:\n\n{}\n\n\
             `podq validate --experiments {dir}` prints the whole report",
            errors.len(),
            causes.len(),
            if causes.len() == 1 { "cause" } else { "causes" },
            causes.join("\n"),
            dir = config.experiments.display(),
        );
    }
    let location = config.location();
    if let store::Location::Sqlite(file) = &location {
        if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
    }
    let store = Store::open_at(&location)
        .await
        .with_context(|| format!("cannot open the database {location}"))?;
    let catalog = Arc::new(catalog);
    let config = Arc::new(config);
    let scheduler = Scheduler::load(store.clone(), catalog.clone(), config.clone()).await?;
    // Beyond loopback every call needs a token, so an admin and a worker must be able to
    // present one: the built-in tokens, or people in the store or in --users FILE.
    let roles = [
        (team::Role::Admin, "PODQ_ADMIN_TOKEN"),
        (team::Role::Worker, "PODQ_WORKER_TOKEN"),
    ];
    for (role, variable) in roles {
        if !config.listen.ip().is_loopback() && !scheduler.tokens_exist_for(&[role]) {
            bail!(
                "refusing to listen on {} without tokens: no {role} token exists; set {variable} \
                 (or add an {role} with `podq users add`, or list one in --users FILE), or listen \
                 on a loopback address",
                config.listen
            );
        }
    }
    // The server that leads records the catalog and registers the webhook receivers before
    // it serves, so no event of its first requests misses a receiver; a standby writes
    // nothing, and does this when it takes the lead (`run_while_active`).
    if store.is_active() {
        scheduler.record_catalog().await?;
        webhooks::register(&scheduler, &config.webhooks).await?;
    }
    Ok(AppState {
        catalog,
        config,
        scheduler: Arc::new(scheduler),
        shutdown: CancellationToken::new(),
    })
}

/// Serves the API on `listener` until `shutdown` is cancelled, with the background tasks
/// (the lease reaper, the cron submissions, webhook delivery) alongside while this server is
/// the active one.
pub async fn serve(
    state: AppState,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let state = AppState {
        shutdown: shutdown.clone(),
        ..state
    };
    let tls = match &state.config.tls {
        Some(files) => Some(files.acceptor()?),
        None => None,
    };
    let leading = tokio::spawn(run_while_active(state.clone(), shutdown.clone()));
    let metrics = match state.config.metrics_listen {
        Some(listen) => {
            let listener = TcpListener::bind(listen)
                .await
                .with_context(|| format!("cannot listen on {listen} for /metrics"))?;
            tracing::info!(address = %listener.local_addr()?, "serving /metrics");
            let app = http::metrics_router(state.clone());
            Some(tokio::spawn(serve_on(
                listener,
                tls.clone(),
                app,
                shutdown.clone(),
            )))
        }
        None => None,
    };
    let app = http::router(state);
    serve_on(listener, tls, app, shutdown.clone())
        .await
        .context("HTTP server failed")?;
    shutdown.cancel();
    let _ = leading.await;
    if let Some(metrics) = metrics {
        let _ = metrics.await;
    }
    Ok(())
}

/// Serves `app` on `listener`, over TLS when there is an acceptor, until `shutdown`.
async fn serve_on(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: axum::Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    match tls {
        Some(acceptor) => {
            // axum gives the peer address of a listener of its own kind only; a `tap_io`
            // wrapper (doing nothing) makes it one.
            use axum::serve::ListenerExt;
            let listener = tls::TlsListener::new(listener, acceptor).tap_io(|_| {});
            axum::serve(listener, with_address(app))
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await
        }
        None => {
            axum::serve(listener, with_address(app))
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await
        }
    }
}

/// The app with each connection's peer address, which the audit records beside a change.
fn with_address(
    app: axum::Router,
) -> axum::extract::connect_info::IntoMakeServiceWithConnectInfo<axum::Router, std::net::SocketAddr>
{
    app.into_make_service_with_connect_info::<std::net::SocketAddr>()
}

/// How often a standby reloads the team's people from the database: a token disabled or
/// rotated on the active server is refused here within about this long.
const DIRECTORY_REFRESH: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs what must happen once among the servers sharing a database (the lease reaper, cron
/// submissions, webhook delivery) while this server is the active one. Each time it becomes
/// active it first does what a restarted server does: records the catalog, registers the
/// webhook receivers and re-derives the live leases from the database. (At start that
/// repeats what `prepare` did, harmlessly; deciding here once is what keeps a server that
/// took the lead while starting from missing it.)
async fn run_while_active(state: AppState, shutdown: CancellationToken) {
    let mut role = state.scheduler.store_role();
    // A standby answers reads: it checks their tokens against the people the active server
    // keeps, reloaded this often.
    let mut refresh = tokio::time::interval(DIRECTORY_REFRESH);
    loop {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                // Only whether it changed: the watch's guard must not live across an await.
                active = async { role.wait_for(|r| *r == store::Role::Active).await.is_ok() } => {
                    if !active { return }
                    break;
                }
                _ = refresh.tick() => {
                    if let Err(e) = state.scheduler.reload_directory().await {
                        tracing::warn!(error = %e, "a standby could not reload the team's tokens");
                    }
                }
            }
        }
        let receivers = match take_over(&state).await {
            Ok(receivers) => receivers,
            Err(e) => {
                tracing::error!(error = %e, "took the lead but cannot take over; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        let tasks = shutdown.child_token();
        let reaper = tokio::spawn(state.scheduler.clone().run_reaper(tasks.clone()));
        let cron = tokio::spawn(state.scheduler.clone().run_schedules(tasks.clone()));
        let notices = tokio::spawn(webhooks::deliver(
            state.scheduler.clone(),
            receivers,
            tasks.clone(),
        ));
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = role.wait_for(|r| *r == store::Role::Standby) => {}
        }
        state.scheduler.stand_by();
        tasks.cancel();
        let _ = tokio::join!(reaper, cron, notices);
        if shutdown.is_cancelled() {
            return;
        }
    }
}

async fn take_over(state: &AppState) -> anyhow::Result<Vec<webhooks::Receiver>> {
    state.scheduler.record_catalog().await?;
    let receivers = webhooks::register(&state.scheduler, &state.config.webhooks).await?;
    state.scheduler.take_over().await?;
    tracing::info!("took over: the live leases are re-derived from the database");
    Ok(receivers)
}
