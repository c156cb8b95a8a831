//! SQLite's write-ahead log, kept from growing without bound.
//!
//! SQLite checkpoints inside the commit that leaves its log 1,000 pages long
//! (`wal_autocheckpoint`), and the next write starts the log over once the checkpoint copied
//! all of it and no reader still reads it. Under a fleet's load that moment may never come:
//! writes never pause, some reader is always at work, and the log grows without bound, the
//! "checkpoint starvation" of
//! <https://www.sqlite.org/wal.html#avoiding_excessively_large_wal_files>. It did: 243 MB
//! after ten minutes at 1,000 pods with SQLite's default page cache (benches/fleet.rs).
//!
//! So the writer looks at the log's file at most every [`CHECK_EVERY`], and once it is past
//! [`RESTART_BYTES`] it runs a RESTART checkpoint between two transactions
//! (<https://www.sqlite.org/c3ref/wal_checkpoint_v2.html>): it copies what is left, waits
//! for the readers of the old log ([`RESTART_WAIT`] at most), and the next write starts the
//! log over; `journal_size_limit` then cuts the file back. The writer writes nothing
//! meanwhile, which is why this is a bound and not the policy: a checkpointer of its own
//! that restarted the log every second, tried first, held the writer 64 to 128 ms each
//! time, and under readers that never all stopped its restarts failed while the log grew to
//! 489 MB.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::store::db::Conn;

/// How often, at most, the writer looks at the log's size.
const CHECK_EVERY: Duration = Duration::from_secs(10);
/// A log past this is started over; the file is cut back to it after (`journal_size_limit`).
pub(super) const RESTART_BYTES: u64 = 128 * 1024 * 1024;
/// How long a RESTART waits for the readers of the old log (the status view takes up to
/// some 160 ms under a thousand pods), then back to the writer's own (`BUSY_TIMEOUT`).
const RESTART_WAIT: &str = "PRAGMA busy_timeout = 250";
const WRITER_WAIT: &str = "PRAGMA busy_timeout = 5000";

/// The writer's view of its log.
pub(in crate::store) struct WalLog {
    file: PathBuf,
    checked: Instant,
}

/// What a RESTART did, for the writer's instruments.
pub(in crate::store) struct Restarted {
    pub took: Duration,
    pub started_over: bool,
}

impl WalLog {
    /// The log of the database file `db`.
    pub fn of(db: &Path) -> WalLog {
        let mut file = db.as_os_str().to_owned();
        file.push("-wal");
        WalLog {
            file: file.into(),
            checked: Instant::now(),
        }
    }

    /// After a commit: whether the log has grown past its bound (looked at every
    /// [`CHECK_EVERY`] at most: a `stat` of the file).
    pub fn due(&mut self) -> bool {
        if self.checked.elapsed() < CHECK_EVERY {
            return false;
        }
        self.checked = Instant::now();
        std::fs::metadata(&self.file).is_ok_and(|m| m.len() > RESTART_BYTES)
    }

    /// Runs a RESTART checkpoint on the writer's connection, between transactions.
    pub async fn restart(&mut self, conn: &mut Conn) -> Result<Restarted, sqlx::Error> {
        let started = Instant::now();
        conn.batch(RESTART_WAIT).await?;
        let checkpoint =
            crate::store::db::query_as::<(i64, i64, i64)>("PRAGMA wal_checkpoint(RESTART)")
                .fetch_one(conn)
                .await;
        conn.batch(WRITER_WAIT).await?;
        let (busy, _pages, _copied) = checkpoint?;
        Ok(Restarted {
            took: started.elapsed(),
            started_over: busy == 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
    use sqlx::{ConnectOptions, Connection};

    use super::*;

    #[test]
    fn a_restart_gives_the_writer_back_its_own_busy_timeout() {
        let ms = super::super::sqlite::BUSY_TIMEOUT.as_millis();
        assert_eq!(WRITER_WAIT, format!("PRAGMA busy_timeout = {ms}"));
    }

    /// A log no checkpoint reset, with a reader holding a snapshot in it: the RESTART waits
    /// for the reader, fails while it reads, and starts the log over once it is done.
    #[tokio::test]
    async fn a_restart_starts_the_log_over_once_its_readers_are_done() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("wal.db");
        let options = SqliteConnectOptions::from_str("sqlite:")
            .unwrap()
            .filename(&db)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .pragma("wal_autocheckpoint", "0")
            .pragma("journal_size_limit", "0");
        let mut writer = Conn::Sqlite(options.clone().connect().await.unwrap());
        writer
            .batch("CREATE TABLE t (x BLOB); INSERT INTO t VALUES (zeroblob(1000000))")
            .await
            .unwrap();
        let mut reader = options.connect().await.unwrap();
        sqlx::raw_sql("BEGIN; SELECT COUNT(*) FROM t")
            .execute(&mut reader)
            .await
            .unwrap();
        let mut log = WalLog::of(&db);
        let wal_len = || {
            std::fs::metadata(dir.path().join("wal.db-wal"))
                .unwrap()
                .len()
        };
        assert!(wal_len() > 1_000_000);

        let held = log.restart(&mut writer).await.unwrap();
        assert!(!held.started_over, "a reader still reads the old log");
        assert!(held.took >= Duration::from_millis(200), "{:?}", held.took);

        sqlx::raw_sql("COMMIT").execute(&mut reader).await.unwrap();
        reader.close().await.unwrap();
        let restarted = log.restart(&mut writer).await.unwrap();
        assert!(restarted.started_over);
        writer.batch("INSERT INTO t VALUES (1)").await.unwrap();
        assert!(
            wal_len() < 100_000,
            "the next write started the log over: {} bytes",
            wal_len()
        );
    }
}
