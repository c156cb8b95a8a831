//! Whether the hosts need the setup command, kept in `state_dir` so no worker restart loses
//! it: a node recreated with blank disks is always set up before its preflight.
//!
//! The file holds either `pending` (a recreate happened, or setup failed) or the id of the
//! node incarnation the hosts were last set up on. A node whose id differs (recreated while
//! no worker watched, or by someone else) needs setup too: its disks are new.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub struct SetupState {
    path: PathBuf,
    /// What the file says, or what the worker was started with when there is no file.
    state: Mutex<Recorded>,
}

#[derive(Debug, Clone, PartialEq)]
enum Recorded {
    /// Nothing recorded: the hosts are as the user left them.
    Unknown,
    Pending,
    /// Set up, on the node incarnation with this id (`None`: its id was not known).
    SetUp(Option<String>),
}

impl SetupState {
    /// `setup_on_start`: run the setup once when this worker starts, whatever the file says.
    pub fn load(state_dir: &Path, zone: &str, node: &str, setup_on_start: bool) -> SetupState {
        let path = state_dir.join(format!("{zone}-{node}.setup"));
        let recorded = match std::fs::read_to_string(&path) {
            Ok(text) if text.trim() == "pending" => Recorded::Pending,
            Ok(text) if !text.trim().is_empty() => Recorded::SetUp(Some(text.trim().to_owned())),
            Ok(_) => Recorded::SetUp(None),
            Err(_) => Recorded::Unknown,
        };
        let state = if setup_on_start {
            Recorded::Pending
        } else {
            recorded
        };
        SetupState {
            path,
            state: Mutex::new(state),
        }
    }

    /// Whether the hosts of node incarnation `node_id` (when known) need the setup command.
    pub fn needed(&self, node_id: Option<&str>) -> bool {
        match &*self.lock() {
            Recorded::Pending => true,
            Recorded::SetUp(Some(done)) => node_id.is_some_and(|id| id != done),
            // Set up without knowing which node it was: any node with an id may be another.
            Recorded::SetUp(None) => node_id.is_some(),
            Recorded::Unknown => false,
        }
    }

    /// The hosts must be set up before the next preflight (written before anything else
    /// happens, so a worker killed now still sets them up).
    pub fn require(&self) {
        *self.lock() = Recorded::Pending;
        self.write("pending");
    }

    /// The hosts of `node_id` are set up.
    pub fn done(&self, node_id: Option<&str>) {
        *self.lock() = Recorded::SetUp(node_id.map(str::to_owned));
        self.write(node_id.unwrap_or(""));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self, text: &str) {
        let tmp = self.path.with_extension("partial");
        let written = std::fs::create_dir_all(self.path.parent().unwrap_or(Path::new(".")))
            .and_then(|_| std::fs::write(&tmp, text))
            .and_then(|_| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            tracing::error!(path = %self.path.display(), error = %e, "cannot record whether the hosts need setup");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_setup_survives_a_restart_and_a_new_node_needs_one() {
        let dir = std::env::temp_dir().join(format!("podq-setup-{}", uuid::Uuid::new_v4()));
        let state = SetupState::load(&dir, "z", "n", false);
        assert!(
            !state.needed(Some("1")),
            "nothing recorded, not asked at start"
        );
        state.require();
        // The worker is restarted between the recreate and the setup.
        let restarted = SetupState::load(&dir, "z", "n", false);
        assert!(restarted.needed(Some("2")));
        restarted.done(Some("2"));
        let again = SetupState::load(&dir, "z", "n", false);
        assert!(!again.needed(Some("2")));
        // The node was recreated while no worker watched: a new id, blank disks.
        assert!(again.needed(Some("3")));
        assert!(
            !again.needed(None),
            "an unknown id is not taken as a new node"
        );
        assert!(SetupState::load(&dir, "z", "n", true).needed(Some("2")));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
