//! A fake GCS endpoint for checkpoint discovery: tests/fake_gcloud/fake_gcs.py serving a
//! directory as buckets, killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use super::Process;

pub struct FakeGcs {
    _process: Process,
    pub url: String,
}

impl FakeGcs {
    /// Serves `root/<bucket>/<object>` as object `<object>` of bucket `<bucket>`.
    pub fn start(root: &Path) -> FakeGcs {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_gcloud/fake_gcs.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(root)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 for the fake GCS");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("the fake GCS did not start: {line:?}"))
            .to_owned();
        FakeGcs {
            _process: Process {
                child,
                name: "fake gcs".into(),
            },
            url,
        }
    }
}

/// Copies the tree at `from` to `to` (the fake GCS does not follow symlinks).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
