//! The TPU lock file libtpu takes on each host. A process killed hard leaves it behind, and
//! then every later launch on that host fails until someone removes it: the worker's cleanup
//! before a launch must be exercised against exactly that.

use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use crate::fatal::Fatal;

/// Held for the life of the run; removed on drop (normal exit and every error path).
/// The SIGTERM/SIGINT handler removes it itself because it ends the process without
/// unwinding; nothing removes it on SIGKILL.
#[derive(Debug)]
pub struct TpuLock {
    path: PathBuf,
}

impl TpuLock {
    pub fn acquire(path: &Path) -> Result<Self, Fatal> {
        // create_new is atomic: two trainers started on one host cannot both win. A stale
        // file blocks exactly like a live one, as with libtpu.
        let mut file = match OpenOptions::new().write(true).create_new(true).open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                return Err(Fatal::failure(format!(
                    "TPU in use: lock file {} exists",
                    path.display()
                )))
            }
            Err(e) => {
                return Err(Fatal::failure(format!(
                    "cannot create TPU lock file {}: {e}",
                    path.display()
                )))
            }
        };
        let lock = Self {
            path: path.to_owned(),
        };
        writeln!(file, "{}", std::process::id()).map_err(|e| {
            Fatal::failure(format!(
                "cannot write TPU lock file {}: {e}",
                path.display()
            ))
        })?;
        Ok(lock)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TpuLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_acquire_fails_until_release() {
        let path = std::env::temp_dir().join(format!("podq-sim-lock-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let lock = TpuLock::acquire(&path).unwrap();
        let pid = std::fs::read_to_string(&path).unwrap();
        assert_eq!(pid.trim(), std::process::id().to_string());
        let err = TpuLock::acquire(&path).unwrap_err();
        assert_eq!(
            err.message,
            format!("TPU in use: lock file {} exists", path.display())
        );
        assert_eq!(err.code, 1);
        drop(lock);
        assert!(!path.exists());
        drop(TpuLock::acquire(&path).unwrap());
    }

    #[test]
    fn a_stale_file_blocks_and_is_left_alone() {
        let path = std::env::temp_dir().join(format!("podq-sim-stale-{}", std::process::id()));
        std::fs::write(&path, "12345\n").unwrap();
        assert!(TpuLock::acquire(&path).is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "12345\n");
        std::fs::remove_file(&path).unwrap();
    }
}
