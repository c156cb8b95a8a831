//! The user's original layout (`experiments/*.yaml`, no group docs), read so `podq
//! validate` can say what is wrong with it: an experiment's group is the directory its
//! checkpoints go to.

use std::path::PathBuf;

use podq_api::ExperimentDocs;
use serde_json::Value;

use super::{source, yaml_stems, Candidate, Catalog, CatalogOptions, Group};

impl Catalog {
    pub(super) fn discover_legacy(&mut self, options: &CatalogOptions) -> Vec<Candidate> {
        let mut candidates = Vec::new();
        for name in yaml_stems(&self.root.join("experiments")) {
            let file = PathBuf::from(format!("experiments/{name}.yaml"));
            // The group of a legacy experiment is the directory its checkpoints go to.
            let raw = std::fs::read_to_string(self.root.join(&file)).unwrap_or_default();
            let raw = source::parse_yaml_mapping(&raw).unwrap_or_default();
            let project_name = raw
                .get("project_name")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let group = raw
                .get("checkpoint_path")
                .and_then(Value::as_str)
                .and_then(group_of_checkpoint_path)
                .or_else(|| project_name.clone())
                .unwrap_or_else(|| "ungrouped".into());
            candidates.push(Candidate {
                name,
                group,
                file,
                docs: ExperimentDocs::default(),
                est_hours: options.default_est_hours,
                accelerators: vec![options.accelerator.clone()],
                checkpoint_interval: super::CheckpointInterval::Config,
                stop_when: Vec::new(),
                project_name,
                legacy: true,
                listed: true,
            });
        }
        let mut groups: Vec<Group> = Vec::new();
        for c in &candidates {
            match groups.iter_mut().find(|g| g.name == c.group) {
                Some(group) => group.experiments.push(c.name.clone()),
                None => groups.push(Group {
                    name: c.group.clone(),
                    title: c.project_name.clone().unwrap_or_else(|| c.group.clone()),
                    experiments: vec![c.name.clone()],
                    baseline_row: None,
                    planned_hours: 0.0,
                    rungs: None,
                }),
            }
        }
        for group in &mut groups {
            group.planned_hours = group.experiments.len() as f64 * options.default_est_hours;
        }
        self.groups = groups;
        candidates
    }
}

/// `gs://bucket/checkpoints/<group>/<experiment>` -> `<group>`.
fn group_of_checkpoint_path(path: &str) -> Option<String> {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let at = parts.iter().rposition(|p| *p == "checkpoints")?;
    parts
        .get(at + 1)
        .filter(|_| parts.len() > at + 2)
        .map(|s| (*s).to_owned())
}
