//! Lock-step between the processes of a run, like JAX's coordination service and collectives.
//!
//! Process 0 listens on `COORDINATOR_ADDRESS`; the others connect to it. At a barrier each
//! follower sends `barrier <tag>` and waits for `go <tag>`; process 0 reads every follower's
//! arrival in turn, then releases them all. When a peer is gone the barrier can never
//! complete, and, like a JAX collective, nobody notices by giving up: the process blocks
//! forever and the supervisor has to kill it.

use std::io::{self, BufRead, BufReader, ErrorKind, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::env::JaxProcess;
use crate::fatal::Fatal;
use crate::report::log;

/// How long a follower keeps trying to reach process 0.
const FOLLOWER_JOIN_TIMEOUT: Duration = Duration::from_secs(60);
/// How long process 0 waits for everybody: JAX's default `initialization_timeout`.
const LEADER_JOIN_TIMEOUT: Duration = Duration::from_secs(300);
const CONNECT_RETRY: Duration = Duration::from_millis(200);
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// One end of a line-based connection.
struct Link {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Link {
    fn new(stream: TcpStream) -> io::Result<Self> {
        stream.set_nodelay(true)?;
        Ok(Self {
            writer: stream.try_clone()?,
            reader: BufReader::new(stream),
        })
    }

    fn send(&mut self, line: &str) -> io::Result<()> {
        self.writer.write_all(format!("{line}\n").as_bytes())
    }

    /// `Ok(None)` when the peer closed the connection.
    fn recv(&mut self) -> io::Result<Option<String>> {
        let mut line = String::new();
        match self.reader.read_line(&mut line)? {
            0 => Ok(None),
            _ => Ok(Some(line.trim_end().to_owned())),
        }
    }

    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.writer.set_read_timeout(timeout)
    }
}

struct Peer {
    index: usize,
    link: Link,
}

/// This process's place in the run.
pub struct Group(Role);

enum Role {
    Solo,
    Leader { followers: Vec<Peer> },
    Follower { leader: Link },
}

impl Group {
    /// Joins the run and agrees on the step to start from. Each process proposes the step it
    /// could restore; if they do not all agree, everyone starts from 0 (a restore is
    /// collective: one host that cannot load sends the whole run back to the start).
    pub fn join(process: &JaxProcess, proposal: u64) -> anyhow::Result<(Self, u64)> {
        if process.count == 1 {
            return Ok((Self(Role::Solo), proposal));
        }
        let address = process
            .coordinator
            .as_deref()
            .context("COORDINATOR_ADDRESS is required")?;
        if process.is_leader() {
            lead(address, process.count, proposal)
        } else {
            follow(address, process, proposal)
        }
    }

    /// Returns once every process has reached the barrier `tag`; blocks forever when a peer
    /// is gone. Fails only when the processes are out of step with each other, which means
    /// they are not running the same schedule.
    pub fn barrier(&mut self, tag: &str) -> anyhow::Result<()> {
        match &mut self.0 {
            Role::Solo => Ok(()),
            Role::Leader { followers } => {
                for peer in followers.iter_mut() {
                    match peer.link.recv() {
                        Ok(Some(line)) if line.strip_prefix("barrier ") == Some(tag) => {}
                        Ok(Some(line)) => bail!(out_of_step(peer.index, &line, tag)),
                        Ok(None) => stall(&format!("process {} closed its connection", peer.index)),
                        Err(e) => {
                            stall(&format!("connection to process {} failed: {e}", peer.index))
                        }
                    }
                }
                for peer in followers.iter_mut() {
                    // A follower that died after arriving is noticed at the next barrier.
                    let _ = peer.link.send(&format!("go {tag}"));
                }
                Ok(())
            }
            Role::Follower { leader } => {
                if let Err(e) = leader.send(&format!("barrier {tag}")) {
                    stall(&format!("connection to process 0 failed: {e}"));
                }
                match leader.recv() {
                    Ok(Some(line)) if line.strip_prefix("go ") == Some(tag) => Ok(()),
                    Ok(Some(line)) => bail!(out_of_step(0, &line, tag)),
                    Ok(None) => stall("process 0 closed its connection"),
                    Err(e) => stall(&format!("connection to process 0 failed: {e}")),
                }
            }
        }
    }
}

fn out_of_step(peer: usize, line: &str, tag: &str) -> Fatal {
    Fatal::failure(format!(
        "processes out of lock-step: process {peer} sent '{line}' while this one is at '{tag}' \
         (do all hosts run the same config?)"
    ))
}

/// What a JAX collective does when a participant is gone: nothing, forever.
fn stall(reason: &str) -> ! {
    log!("{reason}; blocked in a collective that cannot complete (waiting to be killed)");
    loop {
        std::thread::park();
    }
}

fn lead(address: &str, count: usize, proposal: u64) -> anyhow::Result<(Group, u64)> {
    let listener = bind(address)?;
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + LEADER_JOIN_TIMEOUT;
    let mut joined: Vec<Option<(Link, u64)>> = (1..count).map(|_| None).collect();
    while joined.iter().any(Option::is_none) {
        match listener.accept() {
            Ok((stream, from)) => {
                if let Err(e) = admit(stream, count, &mut joined) {
                    log!("refused a connection from {from}: {e}");
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    let missing: Vec<_> = joined
                        .iter()
                        .enumerate()
                        .filter(|(_, slot)| slot.is_none())
                        .map(|(i, _)| i + 1)
                        .collect();
                    bail!(Fatal::failure(format!(
                        "coordination service: processes {missing:?} did not join within {} s",
                        LEADER_JOIN_TIMEOUT.as_secs()
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e).context("accepting on the coordinator port"),
        }
    }
    // Closing the port lets the next attempt's process 0 bind it even if this one lingers.
    drop(listener);

    let agreed = if joined.iter().flatten().all(|(_, p)| *p == proposal) {
        proposal
    } else {
        0
    };
    let mut followers = Vec::with_capacity(count - 1);
    for (slot, index) in joined.into_iter().zip(1..) {
        let (mut link, _) = slot.expect("every slot is filled");
        let _ = link.send(&format!("start {agreed}"));
        followers.push(Peer { index, link });
    }
    log!("all {count} processes joined");
    Ok((Group(Role::Leader { followers }), agreed))
}

fn bind(address: &str) -> anyhow::Result<TcpListener> {
    let addrs: Vec<SocketAddr> = address
        .to_socket_addrs()
        .map_err(|e| Fatal::usage(format!("invalid COORDINATOR_ADDRESS '{address}': {e}")))?
        .collect();
    let port = addrs.first().map(SocketAddr::port).unwrap_or_default();
    match TcpListener::bind(&addrs[..]) {
        Ok(listener) => Ok(listener),
        // The address may name this host by an IP it does not own locally (NAT, a test's
        // alias); listening on every interface at the given port still serves it.
        Err(e) if e.kind() == ErrorKind::AddrNotAvailable => {
            TcpListener::bind(("0.0.0.0", port)).map_err(|e| bind_error(address, e))
        }
        Err(e) => Err(bind_error(address, e)),
    }
}

fn bind_error(address: &str, e: io::Error) -> anyhow::Error {
    Fatal::failure(format!(
        "coordination service: cannot listen on {address}: {e}"
    ))
    .into()
}

/// Reads a follower's `hello <index> <count> <proposal>` and keeps its connection.
fn admit(
    stream: TcpStream,
    count: usize,
    joined: &mut [Option<(Link, u64)>],
) -> anyhow::Result<()> {
    stream.set_nonblocking(false)?;
    let mut link = Link::new(stream)?;
    link.set_read_timeout(Some(HELLO_TIMEOUT))?;
    let hello = link.recv()?.context("closed before saying hello")?;
    let fields: Vec<&str> = hello.split_whitespace().collect();
    let parsed = match fields[..] {
        ["hello", index, their_count, proposal] => index
            .parse::<usize>()
            .ok()
            .zip(their_count.parse::<usize>().ok())
            .zip(proposal.parse::<u64>().ok()),
        _ => None,
    };
    let Some(((index, their_count), proposal)) = parsed else {
        bail!("unexpected greeting '{hello}'");
    };
    let refusal = if their_count != count {
        Some(format!(
            "process count {their_count} differs from process 0's {count}"
        ))
    } else if index == 0 || index >= count {
        Some(format!("process index {index} is out of range"))
    } else if joined[index - 1].is_some() {
        Some(format!("process index {index} has already joined"))
    } else {
        None
    };
    if let Some(reason) = refusal {
        let _ = link.send(&format!("error {reason}"));
        bail!(reason);
    }
    link.set_read_timeout(None)?;
    joined[index - 1] = Some((link, proposal));
    Ok(())
}

fn follow(address: &str, process: &JaxProcess, proposal: u64) -> anyhow::Result<(Group, u64)> {
    let deadline = Instant::now() + FOLLOWER_JOIN_TIMEOUT;
    let stream = loop {
        match connect(address) {
            Ok(stream) => break stream,
            Err(e) if Instant::now() > deadline => bail!(Fatal::failure(format!(
                "coordination service unavailable at {address} after {} s: {e}",
                FOLLOWER_JOIN_TIMEOUT.as_secs()
            ))),
            Err(_) => std::thread::sleep(CONNECT_RETRY),
        }
    };
    let mut leader = Link::new(stream)?;
    let unavailable =
        |why: String| Fatal::failure(format!("coordination service unavailable: {why}"));
    leader
        .send(&format!(
            "hello {} {} {proposal}",
            process.index, process.count
        ))
        .map_err(|e| unavailable(e.to_string()))?;
    match leader.recv() {
        Ok(Some(line)) => {
            if let Some(reason) = line.strip_prefix("error ") {
                bail!(Fatal::failure(format!(
                    "process 0 refused this process: {reason}"
                )));
            }
            let agreed = line
                .strip_prefix("start ")
                .and_then(|s| s.parse().ok())
                .with_context(|| format!("unexpected answer from process 0: '{line}'"))?;
            Ok((Group(Role::Follower { leader }), agreed))
        }
        Ok(None) => bail!(unavailable(
            "process 0 closed the connection during start-up".into()
        )),
        Err(e) => bail!(unavailable(e.to_string())),
    }
}

fn connect(address: &str) -> io::Result<TcpStream> {
    let mut last = io::Error::new(ErrorKind::NotFound, "address resolved to nothing");
    for addr in address.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(count: usize, index: usize, port: u16) -> JaxProcess {
        JaxProcess {
            count,
            index,
            coordinator: Some(format!("127.0.0.1:{port}")),
        }
    }

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn three_processes_agree_and_pass_barriers() {
        let port = free_port();
        let handles: Vec<_> = (0..3)
            .map(|i| {
                std::thread::spawn(move || {
                    let (mut group, start) = Group::join(&process(3, i, port), 120).unwrap();
                    for step in [10, 20, 30] {
                        group.barrier(&format!("step {step}")).unwrap();
                    }
                    start
                })
            })
            .collect();
        for handle in handles {
            assert_eq!(handle.join().unwrap(), 120);
        }
    }

    #[test]
    fn disagreeing_restores_start_everyone_from_zero() {
        let port = free_port();
        let handles: Vec<_> = [(0, 814), (1, 0)]
            .into_iter()
            .map(|(i, proposal)| {
                std::thread::spawn(move || Group::join(&process(2, i, port), proposal).unwrap().1)
            })
            .collect();
        for handle in handles {
            assert_eq!(handle.join().unwrap(), 0);
        }
    }

    #[test]
    fn a_single_process_needs_no_network() {
        let solo = JaxProcess {
            count: 1,
            index: 0,
            coordinator: None,
        };
        let (mut group, start) = Group::join(&solo, 42).unwrap();
        assert_eq!(start, 42);
        group.barrier("step 10").unwrap();
    }
}
