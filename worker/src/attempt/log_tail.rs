//! The hosts' log lines, as the worker holds them: the tail sent with the attempt's finish,
//! and the lines waiting for the reporter.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use podq_api::HostLogLine;

/// What the hosts printed: the last lines, for the attempt's log tail, and every line not
/// yet sent to the server (the reporter takes them each flush).
#[derive(Clone, Default)]
pub struct LogTail {
    inner: Arc<Mutex<LogLines>>,
}

#[derive(Default)]
struct LogLines {
    tail: VecDeque<String>,
    unsent: VecDeque<HostLogLine>,
    /// Lines dropped from `unsent` while the server could not take them.
    dropped: u64,
}

const LOG_TAIL_LINES: usize = 200;
#[cfg(test)]
use podq_api::MAX_LOG_LINE_BYTES as MAX_LINE_BYTES;
/// Lines held for the server while it is away, at most: about 10 minutes of 8 hosts
/// printing 50 lines a second. The oldest go first, as on the server.
const UNSENT_LINES: usize = 250_000;

impl LogTail {
    pub(super) fn push(&self, host: u32, offset: u64, mut text: String) {
        // Cut before it is held or sent, at the length the server cuts at.
        podq_api::cut_long_log_line(&mut text);
        let mut lines = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if lines.tail.len() == LOG_TAIL_LINES {
            lines.tail.pop_front();
        }
        lines.tail.push_back(format!("[host {host}] {text}"));
        if lines.unsent.len() == UNSENT_LINES {
            lines.unsent.pop_front();
            lines.dropped += 1;
        }
        lines.unsent.push_back(HostLogLine {
            host,
            offset,
            at: chrono::Utc::now(),
            text,
        });
    }

    pub fn text(&self) -> String {
        let lines = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        lines
            .tail
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The lines not sent yet, oldest first, up to `max_lines` and about `max_bytes` of
    /// text (at least one line), and how many were dropped since the last call because the
    /// server was away too long.
    pub fn take_unsent(&self, max_lines: usize, max_bytes: usize) -> (Vec<HostLogLine>, u64) {
        let mut lines = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut bytes = 0;
        let n = lines
            .unsent
            .iter()
            .take(max_lines)
            .take_while(|line| {
                bytes += line.text.len() + 64;
                bytes <= max_bytes
            })
            .count()
            .max(usize::from(!lines.unsent.is_empty()));
        let taken = lines.unsent.drain(..n).collect();
        (taken, std::mem::take(&mut lines.dropped))
    }

    pub fn has_unsent(&self) -> bool {
        !self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unsent
            .is_empty()
    }

    /// Puts back lines a call could not deliver, ahead of any that came since.
    pub fn put_back(&self, batch: Vec<HostLogLine>) {
        let mut lines = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let room = UNSENT_LINES.saturating_sub(lines.unsent.len());
        let oldest = batch.len().saturating_sub(room);
        lines.dropped += oldest as u64;
        for line in batch.into_iter().skip(oldest).rev() {
            lines.unsent.push_front(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsent_lines_go_oldest_first_in_batches_bounded_by_size_and_come_back_in_order() {
        let log = LogTail::default();
        for n in 0..10u64 {
            log.push(1, n * 100, format!("line {n} {}", "x".repeat(90)));
        }
        // Each line counts its text (97 bytes) and 64 for its framing: 500 bytes take 3.
        let (first, dropped) = log.take_unsent(100, 500);
        assert_eq!((first.len(), dropped), (3, 0));
        assert_eq!(first[0].offset, 0);
        log.put_back(first);
        let (all, _) = log.take_unsent(100, usize::MAX);
        let offsets: Vec<u64> = all.iter().map(|l| l.offset).collect();
        assert_eq!(offsets, (0..10).map(|n| n * 100).collect::<Vec<_>>());
        // One line is always taken, however long.
        log.push(0, 0, "y".repeat(MAX_LINE_BYTES * 2));
        let (long, _) = log.take_unsent(100, 10);
        assert_eq!(long.len(), 1);
        assert!(long[0].text.len() < MAX_LINE_BYTES + 64);
        assert!(long[0]
            .text
            .ends_with(&format!("[... {MAX_LINE_BYTES} more bytes cut by podq]")));
        assert!(!log.has_unsent());
        assert!(log.text().contains("[host 1] line 9"));
    }
}
