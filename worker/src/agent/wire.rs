//! What a host's agent and the worker say to each other (agent → worker, see
//! `docs/agent.md`).
//!
//! The agent pushes its trainer's log in chunks of whole lines, each chunk tagged with the
//! byte offset in the host's log file where it starts. The worker accepts a chunk only when
//! it starts exactly where the worker's copy ends, and answers how far it has: a lost answer,
//! a retry, or a worker that restarted and starts over at 0 all end with every byte
//! delivered once, in order.

use serde::{Deserialize, Serialize};

/// The path of the one call, relative to the worker's agent URL.
pub const SYNC_PATH: &str = "/agent/v1/sync";

/// The agent's protocol version; the worker refuses an agent of another.
pub const PROTOCOL: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SyncRequest {
    pub protocol: u32,
    pub lease: String,
    pub host: u32,
    /// Byte offset in the host's log file where `data` starts.
    pub offset: u64,
    /// Byte offset where `data` ends: `data` is decoded leniently, so its length in UTF-8
    /// may differ from the bytes it came from.
    pub end: u64,
    /// Whole lines (each ending in `\n`) of the trainer's stdout and stderr.
    #[serde(default)]
    pub data: String,
    /// Set once the trainer's process group is empty and every line before it was sent.
    #[serde(default)]
    pub exit: Option<AgentExit>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct AgentExit {
    /// The command's exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// The trainer is gone and left no exit status: its host restarted under it (or it was
    /// killed together with its agent). Not the trainer's doing.
    #[serde(default)]
    pub vanished: bool,
}

impl AgentExit {
    /// Ended, how is not known.
    pub const UNKNOWN: AgentExit = AgentExit {
        code: None,
        signal: None,
        vanished: false,
    };
    pub const VANISHED: AgentExit = AgentExit {
        code: None,
        signal: None,
        vanished: true,
    };
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StopCommand {
    /// SIGTERM (and SIGCONT) to the trainer's process group: JAX's preemption notice.
    Term,
    /// SIGKILL to the group: what is left after the grace period.
    Kill,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SyncAnswer {
    /// The offset up to which the worker holds the log; the next chunk starts here.
    pub ack: u64,
    pub stop: Option<StopCommand>,
    /// The worker has the exit: the agent's work is done.
    pub done: bool,
}
