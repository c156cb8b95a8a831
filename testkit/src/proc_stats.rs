//! A running process's CPU time and memory, from `/proc` (proc(5)).

use std::time::Duration;

/// Linux reports CPU times in /proc in USER_HZ, 100 on every architecture it runs on.
const CLOCK_TICKS_PER_S: f64 = 100.0;

/// User + system CPU time process `pid` has used so far.
pub fn cpu_time(pid: u32) -> Result<Duration, String> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    // The command name may hold spaces and parentheses: the fields start after its last `)`.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = |i: usize| -> Result<u64, String> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("{path}: no field {}", i + 3))
    };
    Ok(Duration::from_secs_f64(
        (ticks(11)? + ticks(12)?) as f64 / CLOCK_TICKS_PER_S,
    ))
}

/// A `/proc/PID/status` field in kB (`VmRSS:`, `VmHWM:`).
pub fn status_kb(pid: u32, field: &str) -> Result<u64, String> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse().ok())
        .ok_or_else(|| format!("no {field} in {path}"))
}

/// Resets process `pid`'s peak RSS (`VmHWM`) to its current RSS, and returns that, in kB.
pub fn reset_peak_kb(pid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/clear_refs");
    std::fs::write(&path, "5").map_err(|e| format!("{path}: {e}"))?;
    status_kb(pid, "VmRSS:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_used_cpu_and_memory() {
        let pid = std::process::id();
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_millis(30) {
            std::hint::black_box(0);
        }
        assert!(cpu_time(pid).unwrap() > Duration::ZERO);
        assert!(status_kb(pid, "VmRSS:").unwrap() > 0);
        assert!(status_kb(pid, "NoSuchField:").is_err());
        assert!(cpu_time(u32::MAX).is_err());
    }
}
