//! `podq validate`: load a catalog and report what is wrong with it.

use std::path::Path;

use podq_api::Severity;
use podq_server::catalog::{Catalog, CatalogOptions};

/// Prints the report and says whether the catalog has no errors.
pub fn run(dir: &Path, options: &CatalogOptions, json: bool) -> bool {
    let catalog = Catalog::load(dir, options);
    let errors = catalog.errors().len();
    if json {
        let report = serde_json::json!({
            "experiments": catalog.experiments.len(),
            "groups": catalog.groups.len(),
            "distinct_configs": catalog.distinct_configs(),
            "duplicate_sets": catalog.duplicate_sets(),
            "findings": catalog.findings().collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
        return errors == 0;
    }
    println!(
        "{}: {} experiments in {} groups, {} distinct training configs",
        dir.display(),
        catalog.experiments.len(),
        catalog.groups.len(),
        catalog.distinct_configs()
    );
    let sets = catalog.duplicate_sets();
    if !sets.is_empty() {
        println!("\nIdentical training configs (each set is one run; podq runs it once):");
        for set in &sets {
            println!("  - {}", set.join(" "));
        }
    }
    // Errors are listed one by one with their place. Warnings repeat across experiments (every
    // file carries `use_tpu`), so identical ones are listed once with the experiments they hit.
    for finding in catalog.findings().filter(|f| f.severity == Severity::Error) {
        println!(
            "error: {}: {} ({})",
            place(finding),
            finding.message,
            finding.code
        );
    }
    let mut warnings: Vec<((&str, &str), Vec<String>)> = Vec::new();
    for finding in catalog
        .findings()
        .filter(|f| f.severity == Severity::Warning)
    {
        let key = (finding.code.as_str(), finding.message.as_str());
        let who = finding.experiment.clone().unwrap_or_else(|| place(finding));
        match warnings.iter_mut().find(|(k, _)| *k == key) {
            Some((_, who_list)) => who_list.push(who),
            None => warnings.push((key, vec![who])),
        }
    }
    for ((code, message), who) in &warnings {
        println!("warning: {} ({code}): {message}", who.join(" "));
    }
    let warnings = catalog
        .findings()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    println!("\n{errors} errors, {warnings} warnings");
    errors == 0
}

fn place(finding: &podq_api::Finding) -> String {
    let mut place = finding.file.clone().unwrap_or_default();
    if let Some(line) = finding.line {
        place.push_str(&format!(":{line}"));
    }
    if let Some(key) = &finding.key {
        place.push_str(&format!(" [{key}]"));
    }
    place
}
