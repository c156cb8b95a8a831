//! `podq validate`: load a catalog and report what is wrong with it.
//!
//! The text report prints each root cause once (the catalog's grouping of findings by code
//! and fix): its count, its fix and its first places, so a mistake repeated in every file is
//! one line, not one per file. `--json` lists every finding as well.

use std::io::Write;
use std::path::Path;

use podq_api::Severity;
use podq_server::catalog::{Catalog, CatalogOptions};

/// Prints the report and says whether the catalog has no errors.
pub fn run(dir: &Path, options: &CatalogOptions, json: bool) -> bool {
    let catalog = Catalog::load(dir, options);
    let valid = catalog.errors().is_empty();
    // A reader that stops early (`| head`) is no reason to panic.
    let _ = report(&catalog, dir, json, &mut std::io::stdout().lock());
    valid
}

fn report(catalog: &Catalog, dir: &Path, json: bool, out: &mut impl Write) -> std::io::Result<()> {
    let summary = catalog.summary();
    if json {
        let report = serde_json::json!({
            "experiments": catalog.experiments.len(),
            "groups": catalog.groups.len(),
            "distinct_configs": catalog.distinct_configs(),
            "duplicate_sets": catalog.duplicate_sets(),
            "summary": summary,
            "findings": catalog.findings().collect::<Vec<_>>(),
        });
        return writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    }
    writeln!(
        out,
        "{}: {} experiments in {} groups, {} distinct training configs",
        dir.display(),
        catalog.experiments.len(),
        catalog.groups.len(),
        catalog.distinct_configs()
    )?;
    if !summary.is_empty() {
        writeln!(out)?;
    }
    for group in &summary {
        writeln!(out, "{}", group.text)?;
    }
    // The counts are of the lines above, one per root cause.
    let count = |severity| summary.iter().filter(|g| g.severity == severity).count();
    let (errors, warnings) = (count(Severity::Error), count(Severity::Warning));
    let findings: usize = summary.iter().map(|g| g.count).sum();
    write!(
        out,
        "\n{errors} {}, {warnings} {}",
        plural(errors, "error", "errors"),
        plural(warnings, "warning", "warnings")
    )?;
    if findings > errors + warnings {
        write!(
            out,
            " (one line per root cause, for {findings} findings; --json lists each)"
        )?;
    }
    writeln!(out)
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}
