//! Process groups as Linux shows them in `/proc`.

/// Whether any live (not zombie) process belongs to process group `pgid`.
///
/// A trainer is over when its whole group is, not when the shell that started it returns:
/// `bash -c 'cd x && python train.py'` dies on SIGTERM at once while the Python process it
/// started is still saving its checkpoint.
pub fn group_alive(pgid: i32) -> bool {
    !group_members(pgid).is_empty()
}

/// The live (not zombie) processes of process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| stat_state_and_pgrp(&stat))
                .is_some_and(|(state, pgrp)| pgrp == pgid && state != 'Z' && state != 'X')
        })
        .collect()
}

/// The state letter and process group of a `/proc/<pid>/stat` line. The command name sits
/// in parentheses and may itself hold spaces and parentheses, so fields are counted from
/// the last `)`.
fn stat_state_and_pgrp(stat: &str) -> Option<(char, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names_are_read() {
        assert_eq!(
            stat_state_and_pgrp("42 (py (train) x) S 1 4242 4242 0 -1"),
            Some(('S', 4242))
        );
        assert_eq!(stat_state_and_pgrp("garbage"), None);
    }

    #[test]
    fn a_group_lives_until_its_last_member_ends() {
        use std::os::unix::process::CommandExt;
        // The shell leads the group and returns at once; its background sleep lives on.
        let mut shell = std::process::Command::new("sh")
            .arg("-c")
            .arg("sleep 1 & exit 0")
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = shell.id() as i32;
        shell.wait().unwrap();
        assert!(group_alive(pgid), "the background sleep still runs");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while group_alive(pgid) {
            assert!(
                std::time::Instant::now() < deadline,
                "the group never ended"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}
