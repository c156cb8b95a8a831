//! What every handler can reach. Reads and writes go through the scheduler: the store is
//! not here.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::catalog::Catalog;
use crate::config::ServerConfig;
use crate::scheduler::Scheduler;

#[derive(Clone)]
pub struct AppState {
    pub catalog: Arc<Catalog>,
    pub config: Arc<ServerConfig>,
    pub scheduler: Arc<Scheduler>,
    /// Cancelled when the server shuts down: long-lived answers (the event stream) end then.
    pub shutdown: CancellationToken,
}
