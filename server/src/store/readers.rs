//! Reads: a pool of read-only connections beside the writer, and snapshots, so that
//! everything one answer reads comes from the same state of the database.

use futures::future::BoxFuture;

use super::backend::dialect;
use super::{Conn, Store, StoreError};

impl Store {
    /// A read-only connection from the pool: for queries that change nothing.
    pub async fn read(&self) -> Result<Conn, StoreError> {
        Ok(self.readers.acquire().await?)
    }

    /// Runs `op` on one read connection inside one transaction, so that everything it reads
    /// comes from the same snapshot of the database.
    pub async fn read_snapshot<T, E, F>(&self, op: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: for<'c> FnOnce(&'c mut Conn) -> BoxFuture<'c, Result<T, E>>,
    {
        let mut snapshot = Snapshot {
            conn: self.read().await?,
            open: false,
        };
        let begin = dialect(snapshot.conn.backend()).begin_snapshot;
        snapshot.open = true;
        snapshot.conn.batch(begin).await.map_err(StoreError::from)?;
        let result = op(&mut snapshot.conn).await;
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        let ended = snapshot.conn.batch(end).await;
        snapshot.open = ended.is_err();
        match ended {
            Err(e) if result.is_ok() => Err(StoreError::from(e).into()),
            _ => result,
        }
    }
}

/// A pooled connection inside a read transaction. One dropped before its transaction ended
/// (the request was cancelled, or COMMIT failed) is closed instead of going back to the pool
/// with the transaction open.
struct Snapshot {
    conn: Conn,
    open: bool,
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if self.open {
            self.conn.close_on_drop();
        }
    }
}
