//! The worker's side of the agents: one HTTP endpoint the agents on the hosts push to.
//!
//! The agents connect to the worker, not the other way round: a TPU VM then needs no
//! inbound port, only a route to the worker, which the VPC's internal firewall rule
//! already gives (docs/agent.md says why).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::json;
use tokio::sync::mpsc;

use super::wire::{AgentExit, StopCommand, SyncAnswer, SyncRequest, PROTOCOL, SYNC_PATH};

/// One line a host's trainer printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLine {
    pub host: u32,
    /// Where the line starts in the host's output for the lease, in bytes: the same line
    /// pushed again (after a worker restart) has the same offset.
    pub offset: u64,
    pub line: String,
}

/// How a host's trainer ended, as its agent saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostEnded {
    pub host: u32,
    pub exit: AgentExit,
}

/// What the supervisor of one lease receives from its agents.
pub struct LeaseStreams {
    pub lines: mpsc::UnboundedReceiver<HostLine>,
    pub exits: mpsc::UnboundedReceiver<HostEnded>,
}

#[derive(Clone)]
pub struct AgentHub {
    leases: Arc<Mutex<HashMap<String, LeaseSlot>>>,
    url: String,
    local: SocketAddr,
}

struct LeaseSlot {
    secret: String,
    hosts: Vec<HostSlot>,
    stop: Option<StopCommand>,
    /// `None` once the attempt is over: late agents are told to stop and quit.
    streams: Option<(
        mpsc::UnboundedSender<HostLine>,
        mpsc::UnboundedSender<HostEnded>,
    )>,
}

#[derive(Clone)]
struct HostSlot {
    offset: u64,
    exit: Option<AgentExit>,
    contacted: bool,
    /// The agent's last call, or when the slot was made (or its agent restarted).
    heard: std::time::Instant,
    /// The last call of any agent of this host, or when the slot was made: restarts do not
    /// move it.
    called: std::time::Instant,
}

impl Default for HostSlot {
    fn default() -> Self {
        HostSlot {
            offset: 0,
            exit: None,
            contacted: false,
            heard: std::time::Instant::now(),
            called: std::time::Instant::now(),
        }
    }
}

impl AgentHub {
    /// Listens on `listen`; agents are told to call `advertised` (default: the address
    /// actually bound, which suits agents on this machine).
    pub async fn bind(listen: SocketAddr, advertised: Option<String>) -> anyhow::Result<AgentHub> {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen for agents on {listen}"))?;
        let local = listener.local_addr()?;
        let url = advertised
            .map(|u| u.trim_end_matches('/').to_owned())
            .unwrap_or_else(|| format!("http://{local}"));
        let hub = AgentHub {
            leases: Arc::default(),
            url,
            local,
        };
        let router = Router::new()
            .route(SYNC_PATH, post(sync))
            .fallback(|| async { refuse(StatusCode::NOT_FOUND, "not_found", "no such path") })
            .with_state(hub.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::error!(error = %e, "the agent endpoint stopped");
            }
        });
        tracing::info!(url = %hub.url, listen = %local, "listening for agents");
        Ok(hub)
    }

    /// The URL agents are given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The address the endpoint is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, LeaseSlot>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts taking pushes for `lease` from `hosts` agents holding `secret`. Every host's
    /// log is taken from offset 0: after a worker restart the agents send it all again, and
    /// the server keeps one value per metric and step, so nothing is doubled.
    pub fn register(&self, lease: &str, secret: &str, hosts: u32) -> LeaseStreams {
        let (lines_tx, lines) = mpsc::unbounded_channel();
        let (exits_tx, exits) = mpsc::unbounded_channel();
        self.slots().insert(
            lease.to_owned(),
            LeaseSlot {
                secret: secret.to_owned(),
                hosts: vec![HostSlot::default(); hosts as usize],
                stop: None,
                streams: Some((lines_tx, exits_tx)),
            },
        );
        LeaseStreams { lines, exits }
    }

    /// Tells the lease's agents to deliver `stop` to their trainers.
    pub fn command(&self, lease: &str, stop: StopCommand) {
        if let Some(slot) = self.slots().get_mut(lease) {
            slot.stop = Some(stop);
        }
    }

    /// Hosts whose trainer has not ended and whose agent has not called for `silence`
    /// (counted from registration, or from the last restart of its agent).
    pub fn silent(&self, lease: &str, silence: std::time::Duration) -> Vec<u32> {
        self.slots()
            .get(lease)
            .map(|slot| {
                (0..slot.hosts.len() as u32)
                    .filter(|h| {
                        let host = &slot.hosts[*h as usize];
                        host.exit.is_none() && host.heard.elapsed() >= silence
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// For each host whose trainer has not ended: how long since any of its agents called.
    pub fn quiet(&self, lease: &str) -> Vec<(u32, std::time::Duration)> {
        self.slots()
            .get(lease)
            .map(|slot| {
                slot.hosts
                    .iter()
                    .enumerate()
                    .filter(|(_, h)| h.exit.is_none())
                    .map(|(i, h)| (i as u32, h.called.elapsed()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A new agent was started on `host`: its silence counts from now.
    pub fn agent_restarted(&self, lease: &str, host: u32) {
        if let Some(slot) = self.slots().get_mut(lease) {
            if let Some(host) = slot.hosts.get_mut(host as usize) {
                host.heard = std::time::Instant::now();
            }
        }
    }

    /// Hosts whose agent has pushed at least once.
    pub fn contacted(&self, lease: &str) -> Vec<bool> {
        self.slots()
            .get(lease)
            .map(|slot| slot.hosts.iter().map(|h| h.contacted).collect())
            .unwrap_or_default()
    }

    /// A lease this worker will not supervise (it ended while the worker was away): its
    /// agents are told to kill their trainers and quit.
    pub fn abandon(&self, lease: &str, secret: &str, hosts: u32) {
        drop(self.register(lease, secret, hosts));
        self.finish(lease);
    }

    /// The attempt is over: agents that still call are told to kill what is left and quit.
    pub fn finish(&self, lease: &str) {
        let mut slots = self.slots();
        // One finished lease is kept for its late agents; older ones are forgotten.
        slots.retain(|id, slot| id == lease || slot.streams.is_some());
        if let Some(slot) = slots.get_mut(lease) {
            slot.stop = Some(StopCommand::Kill);
            slot.streams = None;
        }
    }
}

fn refuse(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"code": code, "message": message.into()}});
    (status, Json(body)).into_response()
}

/// Compares without stopping at the first difference, so timing tells nothing.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

async fn sync(
    State(hub): State<AgentHub>,
    headers: HeaderMap,
    body: Result<Json<SyncRequest>, JsonRejection>,
) -> Response {
    let Json(request) = match body {
        Ok(body) => body,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, "bad_request", e.body_text()),
    };
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    match hub.accept(&request, presented) {
        Ok(answer) => Json(answer).into_response(),
        Err((status, code, message)) => refuse(status, code, message),
    }
}

type Refusal = (StatusCode, &'static str, String);

impl AgentHub {
    fn accept(&self, request: &SyncRequest, secret: &str) -> Result<SyncAnswer, Refusal> {
        let mut slots = self.slots();
        let Some(slot) = slots.get_mut(&request.lease) else {
            return Err((
                StatusCode::NOT_FOUND,
                "unknown_lease",
                format!("this worker supervises no lease {}", request.lease),
            ));
        };
        if !same_secret(&slot.secret, secret) {
            return Err((
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the lease's secret is missing or wrong".into(),
            ));
        }
        if request.protocol != PROTOCOL {
            return Err((
                StatusCode::BAD_REQUEST,
                "protocol",
                format!(
                    "the agent speaks protocol {}, this worker {PROTOCOL}: install the worker's podq on the host",
                    request.protocol
                ),
            ));
        }
        let hosts = slot.hosts.len();
        let Some(host) = slot.hosts.get_mut(request.host as usize) else {
            return Err((
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("host {} is not one of the lease's {hosts}", request.host),
            ));
        };
        if request.end < request.offset {
            return Err((
                StatusCode::BAD_REQUEST,
                "bad_request",
                "end is before offset".into(),
            ));
        }
        host.contacted = true;
        host.heard = std::time::Instant::now();
        host.called = host.heard;
        let Some((lines, exits)) = &slot.streams else {
            return Ok(SyncAnswer {
                ack: request.end,
                stop: Some(StopCommand::Kill),
                done: request.exit.is_some(),
            });
        };
        // Only the chunk that starts where our copy ends is taken: anything else is a
        // resend of what we have, or comes after a gap the agent will fill from `ack`.
        if request.offset == host.offset && request.end > request.offset {
            let mut offset = request.offset;
            for piece in request.data.split_inclusive('\n') {
                let line = piece.strip_suffix('\n').unwrap_or(piece);
                let _ = lines.send(HostLine {
                    host: request.host,
                    offset,
                    line: line.strip_suffix('\r').unwrap_or(line).to_owned(),
                });
                offset += piece.len() as u64;
            }
            host.offset = request.end;
        }
        if let (Some(exit), None) = (request.exit, host.exit) {
            if request.end == host.offset {
                host.exit = Some(exit);
                let _ = exits.send(HostEnded {
                    host: request.host,
                    exit,
                });
            }
        }
        Ok(SyncAnswer {
            ack: host.offset,
            stop: slot.stop,
            done: host.exit.is_some(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(offset: u64, data: &str) -> SyncRequest {
        SyncRequest {
            protocol: PROTOCOL,
            lease: "l-1".into(),
            host: 0,
            offset,
            end: offset + data.len() as u64,
            data: data.into(),
            exit: None,
        }
    }

    #[tokio::test]
    async fn every_line_arrives_once_whatever_is_resent() {
        let hub = AgentHub::bind("127.0.0.1:0".parse().unwrap(), None)
            .await
            .unwrap();
        let mut streams = hub.register("l-1", "s", 1);
        assert_eq!(hub.accept(&request(0, "a\nb\n"), "s").unwrap().ack, 4);
        // The answer was lost: the agent sends the same chunk again.
        assert_eq!(hub.accept(&request(0, "a\nb\n"), "s").unwrap().ack, 4);
        // A chunk after a gap is not taken.
        assert_eq!(hub.accept(&request(9, "x\n"), "s").unwrap().ack, 4);
        assert_eq!(hub.accept(&request(4, "c\n"), "s").unwrap().ack, 6);
        let mut got = Vec::new();
        while let Ok(line) = streams.lines.try_recv() {
            got.push(line.line);
        }
        assert_eq!(got, ["a", "b", "c"]);

        let exit = AgentExit {
            code: Some(0),
            signal: None,
            vanished: false,
        };
        let mut last = request(6, "");
        last.exit = Some(exit);
        let answer = hub.accept(&last, "s").unwrap();
        assert!(answer.done);
        assert_eq!(streams.exits.try_recv().unwrap().exit, exit);

        assert_eq!(hub.accept(&request(0, "a\n"), "wrong").unwrap_err().0, 401);
        let mut other = request(0, "a\n");
        other.lease = "l-2".into();
        assert_eq!(hub.accept(&other, "s").unwrap_err().0, 404);
        let mut far = request(0, "a\n");
        far.host = 3;
        assert_eq!(hub.accept(&far, "s").unwrap_err().0, 400);

        hub.command("l-1", StopCommand::Term);
        assert_eq!(
            hub.accept(&request(6, ""), "s").unwrap().stop,
            Some(StopCommand::Term)
        );
        hub.finish("l-1");
        let late = hub.accept(&request(6, ""), "s").unwrap();
        assert_eq!(late.stop, Some(StopCommand::Kill));
    }
}
