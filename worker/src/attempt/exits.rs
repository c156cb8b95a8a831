//! How a host's trainer ended and how a stop went: what supervision finds, and what the
//! watch and the outcome judge. A leaf, so that those three need not import each other.

use nix::sys::signal::Signal;

/// How a host's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostExit {
    pub host: u32,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Gone without an exit status: the host restarted under it.
    pub vanished: bool,
}

impl HostExit {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    pub fn describe(&self) -> String {
        if self.vanished {
            return format!(
                "host {}'s trainer is gone and left no exit status (the host restarted)",
                self.host
            );
        }
        match (self.code, self.signal) {
            (Some(code), _) => format!("host {} exited with code {code}", self.host),
            (None, Some(signal)) => {
                let name = Signal::try_from(signal)
                    .map_or_else(|_| signal.to_string(), |s| s.as_str().to_owned());
                format!("host {} was killed by {name}", self.host)
            }
            _ => format!("host {} ended", self.host),
        }
    }
}

/// How a stop went: which hosts needed SIGKILL after the grace period.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StopReport {
    pub killed: Vec<u32>,
}

impl StopReport {
    pub fn describe(&self) -> String {
        if self.killed.is_empty() {
            "every host exited within the grace period".to_owned()
        } else {
            format!(
                "SIGKILL after the grace period on host(s) {}",
                self.killed
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    }
}
