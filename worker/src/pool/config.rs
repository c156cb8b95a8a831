//! The pool file: which pools there are, what each makes and where it tries.
//!
//! ```yaml
//! pools:
//!   - name: v4-spot
//!     accelerator: v4-64
//!     max_slices: 2
//!     idle_after: 20s          # or 10m, 1h, 2d, never
//!     spares: 1                # ready idle slices kept while it runs jobs, or auto
//!     provisioning: spot       # spot | standard | flex_start | reservation_bound
//!     driver: local            # local | gcloud
//!     zones:                   # tried in this order
//!       - {zone: zone-a, sim: {fault: stockout}}
//!       - {zone: zone-c, sim: {capacity: 1}}
//! ```
//!
//! Every refusal names the file and the line, so a bad file stops `podq` at start and says
//! where. serde places type errors and unknown fields; a duplicate or a zero is a valid value
//! that only its place makes wrong, so `Layout` finds that place in the text.

use std::collections::HashSet;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// A pool file, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolFile {
    pub pools: Vec<Pool>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    pub name: String,
    /// e.g. `v4-64`.
    pub accelerator: String,
    pub max_slices: u32,
    /// Creates in flight at once, in the pool and in any one zone: `max_creating:`,
    /// default `max_slices`.
    pub max_creating: u32,
    /// `None`: `never`, a slice is kept however long it idles.
    pub idle_after: Option<Duration>,
    /// `spares:`: ready, idle slices kept while the pool runs jobs (`auto`: one, while the
    /// server judges it pays). Default 0.
    pub spares: podq_api::Spares,
    /// In the order they are tried.
    pub zones: Vec<ZoneEntry>,
    pub provisioning: Provisioning,
    pub driver: PoolDriver,
    pub api: PoolApi,
    pub project: Option<String>,
    /// Hosts of each slice the local driver simulates.
    pub hosts: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ZoneEntry {
    pub zone: String,
    /// What the local driver's zone does; never set for gcloud.
    pub sim: Option<SimScript>,
}

/// A simulated zone's behaviour, so tests and `podq up --pool` can stage stockouts, quota
/// errors and young preemptions without a cloud.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SimScript {
    /// Slices the zone holds at once; a create beyond it is a stockout.
    pub capacity: Option<u32>,
    /// Every create fails so (until `clears_after`, when given).
    pub fault: Option<SimFault>,
    /// From the first create tried in the zone.
    pub clears_after: Option<Duration>,
    /// The zone's first N slices are preempted within a minute of their creation.
    pub preempt_young: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SimFault {
    Stockout,
    Quota,
    Denied,
}

/// How a slice's capacity is bought.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provisioning {
    #[default]
    Spot,
    Standard,
    FlexStart,
    ReservationBound,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolDriver {
    #[default]
    Local,
    Gcloud,
}

/// The Google Cloud API that owns a gcloud pool's slices (as `gcloud.api` in a worker's
/// config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolApi {
    #[default]
    Tpu,
    Compute,
}

/// A refused pool file: `pools.yaml:7: pool "v4-spot": max_slices must be at least 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolFileError {
    /// The file as the person named it.
    pub origin: String,
    /// 1-based; `None` when the file could not be read at all.
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for PoolFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.origin, self.message),
            None => write!(f, "{}: {}", self.origin, self.message),
        }
    }
}

impl std::error::Error for PoolFileError {}

/// What a pool's name may be: it is part of every slice's name and label, and GCP
/// resource names and label values take only these.
pub const POOL_NAME_RULE: &str = "1 to 40 lowercase letters, digits or `-`, starting with a letter";

/// A slice is named `{pool}-{tag}-{n}` (`journal::Journal::ask`), and a pod name is at most
/// 63 characters: 40 leave room for the tag and any number a pool will reach.
const MAX_POOL_NAME: usize = 40;

pub fn valid_pool_name(name: &str) -> bool {
    name.len() <= MAX_POOL_NAME
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn valid_zone_name(zone: &str) -> bool {
    !zone.is_empty()
        && zone
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// `20s`, `10m`, `1h`, `2d`: a whole number and one unit.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let refuse = || {
        format!(
            "`{text}` is not a duration: a whole number and a unit, as `20s`, `10m`, `1h`, `2d`"
        )
    };
    let text = text.trim();
    let unit_at = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(refuse)?;
    let (number, unit) = text.split_at(unit_at);
    let number: u64 = number.parse().map_err(|_| refuse())?;
    let seconds_per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(refuse()),
    };
    number
        .checked_mul(seconds_per)
        .map(Duration::from_secs)
        .ok_or_else(refuse)
}

/// A duration, or `never` (`None`).
pub fn parse_idle_after(text: &str) -> Result<Option<Duration>, String> {
    if text.trim() == "never" {
        return Ok(None);
    }
    parse_duration(text)
        .map(Some)
        .map_err(|e| format!("{e}, or `never`"))
}

impl PoolFile {
    pub fn load(path: &Path) -> Result<PoolFile, PoolFileError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| PoolFileError {
            origin: origin.clone(),
            line: None,
            message: format!("cannot read the pool file: {e}"),
        })?;
        PoolFile::parse(&text, &origin)
    }

    /// `origin` names the text in errors (the file's path as given).
    pub fn parse(text: &str, origin: &str) -> Result<PoolFile, PoolFileError> {
        let refuse = |line: usize, message: String| PoolFileError {
            origin: origin.to_owned(),
            line: Some(line),
            message,
        };
        let raw: RawFile = serde_yaml::from_str(text).map_err(|e| {
            let (line, message) = serde_message(&e);
            refuse(line, message)
        })?;
        let layout = Layout::of(text);
        if raw.pools.is_empty() {
            return Err(refuse(
                layout.pools_line(),
                "`pools:` lists no pool".to_owned(),
            ));
        }
        let mut names = HashSet::new();
        let mut pools = Vec::with_capacity(raw.pools.len());
        for (index, raw) in raw.pools.into_iter().enumerate() {
            let at = |key: &str| layout.key_line(index, key);
            let name = raw.name.clone();
            let refuse_pool =
                |line: usize, what: String| refuse(line, format!("pool \"{name}\": {what}"));
            if !valid_pool_name(&name) {
                return Err(refuse(
                    at("name"),
                    format!("`{name}` is not a pool name: {POOL_NAME_RULE}"),
                ));
            }
            if !names.insert(name.clone()) {
                return Err(refuse_pool(
                    at("name"),
                    "a second pool of this name (pool names must be unique)".to_owned(),
                ));
            }
            if let Err(unknown) = podq_api::slice_type(&raw.accelerator) {
                return Err(refuse_pool(at("accelerator"), unknown.to_string()));
            }
            if raw.max_slices == 0 {
                return Err(refuse_pool(
                    at("max_slices"),
                    "max_slices must be at least 1".to_owned(),
                ));
            }
            let idle_after = parse_idle_after(&raw.idle_after)
                .map_err(|e| refuse_pool(at("idle_after"), format!("idle_after: {e}")))?;
            let gcloud = raw.driver == PoolDriver::Gcloud;
            if !gcloud {
                for (key, given) in [
                    ("api", raw.api.is_some()),
                    ("project", raw.project.is_some()),
                ] {
                    if given {
                        return Err(refuse_pool(
                            at(key),
                            format!(
                                "`{key}:` is for `driver: gcloud`; this pool's driver is local"
                            ),
                        ));
                    }
                }
            }
            if gcloud && raw.hosts.is_some() {
                return Err(refuse_pool(
                    at("hosts"),
                    "`hosts:` is for `driver: local`; a gcloud slice has the hosts its \
                     accelerator type gives"
                        .to_owned(),
                ));
            }
            if raw.hosts == Some(0) {
                return Err(refuse_pool(
                    at("hosts"),
                    "hosts must be at least 1".to_owned(),
                ));
            }
            if raw.max_creating == Some(0) {
                return Err(refuse_pool(
                    at("max_creating"),
                    "max_creating must be at least 1: a pool that may make nothing serves nothing"
                        .to_owned(),
                ));
            }
            if let podq_api::Spares::Count(n) = raw.spares {
                if n >= raw.max_slices {
                    return Err(refuse_pool(
                        at("spares"),
                        format!(
                            "spares: {n} leaves no slice to run on: keep at most max_slices - 1 \
                             ({}) ready, or `auto`",
                            raw.max_slices.saturating_sub(1)
                        ),
                    ));
                }
            }
            if raw.zones.is_empty() {
                return Err(refuse_pool(
                    at("zones"),
                    "the zone list is empty: name at least one zone to make slices in".to_owned(),
                ));
            }
            let zone_lines = layout.zone_lines(index, raw.zones.len());
            let mut seen = HashSet::new();
            let mut zones = Vec::with_capacity(raw.zones.len());
            for (z, entry) in raw.zones.into_iter().enumerate() {
                let line = zone_lines[z];
                if !valid_zone_name(&entry.zone) {
                    return Err(refuse_pool(
                        line,
                        format!(
                            "`{}` is not a zone name (lowercase letters, digits and `-`)",
                            entry.zone
                        ),
                    ));
                }
                if !seen.insert(entry.zone.clone()) {
                    return Err(refuse_pool(
                        line,
                        format!("zone `{}` is listed twice", entry.zone),
                    ));
                }
                let sim = match entry.sim {
                    None => None,
                    Some(_) if gcloud => {
                        return Err(refuse_pool(
                            line,
                            format!(
                                "zone `{}` has a `sim:` script, which only the local driver \
                                 plays; this pool's driver is gcloud",
                                entry.zone
                            ),
                        ));
                    }
                    Some(raw) => Some(raw.check().map_err(|e| {
                        refuse_pool(line, format!("zone `{}`: sim: {e}", entry.zone))
                    })?),
                };
                zones.push(ZoneEntry {
                    zone: entry.zone,
                    sim,
                });
            }
            pools.push(Pool {
                name: raw.name,
                accelerator: raw.accelerator,
                max_slices: raw.max_slices,
                max_creating: raw.max_creating.unwrap_or(raw.max_slices),
                idle_after,
                spares: raw.spares,
                zones,
                provisioning: raw.provisioning,
                driver: raw.driver,
                api: raw.api.unwrap_or_default(),
                project: raw.project,
                hosts: raw.hosts,
            });
        }
        Ok(PoolFile { pools })
    }
}

/// serde_yaml's message without its ` at line L column C` tail, which the error's own
/// `file:line:` prefix replaces.
fn serde_message(error: &serde_yaml::Error) -> (usize, String) {
    let text = error.to_string();
    match error.location() {
        Some(at) => {
            let tail = format!(" at line {} column {}", at.line(), at.column());
            let message = text.strip_suffix(&tail).unwrap_or(&text).to_owned();
            (at.line(), message)
        }
        None => (1, text),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    pools: Vec<RawPool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPool {
    name: String,
    accelerator: String,
    max_slices: u32,
    #[serde(default)]
    max_creating: Option<u32>,
    idle_after: String,
    #[serde(default)]
    spares: podq_api::Spares,
    zones: Vec<RawZone>,
    #[serde(default)]
    provisioning: Provisioning,
    #[serde(default)]
    driver: PoolDriver,
    #[serde(default)]
    api: Option<PoolApi>,
    #[serde(default)]
    project: Option<String>,
    #[serde(default)]
    hosts: Option<u32>,
}

/// A zone entry: a bare name, or `{zone: NAME, sim: SCRIPT}`.
struct RawZone {
    zone: String,
    sim: Option<RawSim>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawZoneTable {
    zone: String,
    #[serde(default)]
    sim: Option<RawSim>,
}

impl<'de> Deserialize<'de> for RawZone {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // By hand rather than `#[serde(untagged)]`, whose one error ("did not match any
        // variant") would hide which field was wrong and where.
        struct ZoneVisitor;

        impl<'de> Visitor<'de> for ZoneVisitor {
            type Value = RawZone;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a zone's name, or {zone: NAME, sim: SCRIPT}")
            }

            fn visit_str<E: de::Error>(self, zone: &str) -> Result<RawZone, E> {
                Ok(RawZone {
                    zone: zone.to_owned(),
                    sim: None,
                })
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawZone, A::Error> {
                let table = RawZoneTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(RawZone {
                    zone: table.zone,
                    sim: table.sim,
                })
            }
        }

        deserializer.deserialize_any(ZoneVisitor)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSim {
    #[serde(default)]
    capacity: Option<u32>,
    #[serde(default)]
    fault: Option<SimFault>,
    #[serde(default)]
    clears_after: Option<String>,
    #[serde(default)]
    preempt_young: Option<u32>,
}

impl RawSim {
    fn check(self) -> Result<SimScript, String> {
        if self.clears_after.is_some() && self.fault.is_none() {
            return Err("`clears_after` without a `fault` to clear".to_owned());
        }
        let clears_after = self
            .clears_after
            .as_deref()
            .map(parse_duration)
            .transpose()
            .map_err(|e| format!("clears_after: {e}"))?;
        Ok(SimScript {
            capacity: self.capacity,
            fault: self.fault,
            clears_after,
            preempt_young: self.preempt_young,
        })
    }
}

/// Where the pools and their keys sit in the text. Only block-style YAML is mapped in
/// detail; anything written in flow style on one line gets that line.
struct Layout<'a> {
    lines: Vec<&'a str>,
    /// 0-based line of `pools:`.
    pools_key: Option<usize>,
    /// 0-based first line of each pool entry, in order.
    starts: Vec<usize>,
    /// 0-based line after the last pool entry.
    end: usize,
}

impl<'a> Layout<'a> {
    fn of(text: &'a str) -> Layout<'a> {
        let lines: Vec<&str> = text.lines().collect();
        let pools_key = lines
            .iter()
            .position(|l| uncommented(l).trim_end().starts_with("pools:"));
        let mut starts = Vec::new();
        let mut end = lines.len();
        if let Some(key) = pools_key {
            let mut entry_indent = None;
            for (i, line) in lines.iter().enumerate().skip(key + 1) {
                let content = uncommented(line);
                if content.trim().is_empty() {
                    continue;
                }
                let indent = indent_of(content);
                let item = is_item(content);
                if indent == 0 && !item {
                    end = i;
                    break;
                }
                if item && *entry_indent.get_or_insert(indent) == indent {
                    starts.push(i);
                }
            }
        }
        Layout {
            lines,
            pools_key,
            starts,
            end,
        }
    }

    fn pools_line(&self) -> usize {
        self.pools_key.map_or(1, |i| i + 1)
    }

    fn pool_range(&self, pool: usize) -> Option<std::ops::Range<usize>> {
        let start = *self.starts.get(pool)?;
        let end = self.starts.get(pool + 1).copied().unwrap_or(self.end);
        Some(start..end)
    }

    /// The 0-based line of `key:` within the pool's entry.
    fn key_index(&self, pool: usize, key: &str) -> Option<usize> {
        self.pool_range(pool)?
            .find(|&i| has_key(uncommented(self.lines[i]), key))
    }

    /// The 1-based line of `key:` in the pool's entry, else of the entry, else of `pools:`.
    fn key_line(&self, pool: usize, key: &str) -> usize {
        self.key_index(pool, key)
            .or_else(|| self.starts.get(pool).copied())
            .map_or(self.pools_line(), |i| i + 1)
    }

    /// The 1-based line of each of the pool's `count` zone entries; the `zones:` line for
    /// all of them when they cannot be told apart (a flow list).
    fn zone_lines(&self, pool: usize, count: usize) -> Vec<usize> {
        let fallback = vec![self.key_line(pool, "zones"); count];
        let (Some(key), Some(range)) = (self.key_index(pool, "zones"), self.pool_range(pool))
        else {
            return fallback;
        };
        let key_content = uncommented(self.lines[key]);
        let after_key = key_content
            .split_once("zones:")
            .map_or("", |(_, rest)| rest.trim());
        if !after_key.is_empty() {
            return fallback;
        }
        // Block items may sit at the key's own column (`zones:` then `- a` below it).
        let key_column = key_content.find("zones:").unwrap_or(0);
        let mut item_indent = None;
        let mut found = Vec::new();
        for i in key + 1..range.end {
            let content = uncommented(self.lines[i]);
            if content.trim().is_empty() {
                continue;
            }
            let indent = indent_of(content);
            let item = is_item(content);
            if indent < key_column || (!item && indent == key_column) {
                break;
            }
            if item && *item_indent.get_or_insert(indent) == indent {
                found.push(i + 1);
            }
        }
        if found.len() == count {
            found
        } else {
            fallback
        }
    }
}

fn uncommented(line: &str) -> &str {
    if line.trim_start().starts_with('#') {
        return "";
    }
    line.find(" #").map_or(line, |at| &line[..at])
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn is_item(line: &str) -> bool {
    let trimmed = line.trim_start();
    trimmed == "-" || trimmed.starts_with("- ")
}

/// Whether `key:` appears as a key on the line, block style (`key: v`, `- key: v`) or flow
/// style (`{a: 1, key: v}`).
fn has_key(line: &str, key: &str) -> bool {
    let needle = format!("{key}:");
    line.match_indices(&needle).any(|(at, _)| {
        line[..at]
            .chars()
            .next_back()
            .is_none_or(|c| matches!(c, ' ' | '{' | ',' | '-'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An example pool file: one spot pool over two simulated zones.
    const EXAMPLE: &str = "\
pools:
  - name: v4-spot
    accelerator: v4-64
    max_slices: 2
    idle_after: 20s
    provisioning: spot
    driver: local
    zones:
      - {zone: zone-a, sim: {fault: stockout}}
      - {zone: zone-c, sim: {capacity: 1}}
";

    #[test]
    fn the_issue_example_loads() {
        let file = PoolFile::parse(EXAMPLE, "pools.yaml").unwrap();
        assert_eq!(
            file.pools,
            vec![Pool {
                name: "v4-spot".into(),
                accelerator: "v4-64".into(),
                max_slices: 2,
                max_creating: 2,
                idle_after: Some(Duration::from_secs(20)),
                spares: podq_api::Spares::Count(0),
                zones: vec![
                    ZoneEntry {
                        zone: "zone-a".into(),
                        sim: Some(SimScript {
                            fault: Some(SimFault::Stockout),
                            ..SimScript::default()
                        }),
                    },
                    ZoneEntry {
                        zone: "zone-c".into(),
                        sim: Some(SimScript {
                            capacity: Some(1),
                            ..SimScript::default()
                        }),
                    },
                ],
                provisioning: Provisioning::Spot,
                driver: PoolDriver::Local,
                api: PoolApi::Tpu,
                project: None,
                hosts: None,
            }]
        );
    }

    #[test]
    fn every_documented_example_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/pools");
        let mut apis = Vec::new();
        for name in ["local.yaml", "gcloud.yaml", "compute.yaml"] {
            let file = PoolFile::load(&dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            apis.extend(file.pools.iter().map(|p| (p.driver, p.api)));
        }
        assert!(
            apis.contains(&(PoolDriver::Gcloud, PoolApi::Compute)),
            "{apis:?}"
        );
        assert!(
            apis.contains(&(PoolDriver::Gcloud, PoolApi::Tpu)),
            "{apis:?}"
        );
    }

    #[test]
    fn a_gcloud_pool_and_every_sim_script_load() {
        let text = "\
pools:
  - name: v6e-spot
    accelerator: v6e-16
    max_slices: 3
    idle_after: never
    provisioning: flex_start
    driver: gcloud
    api: compute
    project: my-project
    zones:
      - us-east5-b   # first choice
      - europe-west4-a
  - name: sim
    accelerator: v5litepod-4
    max_slices: 1
    idle_after: 10m
    hosts: 2
    zones:
      - zone-a
      - zone: zone-b
        sim: {fault: quota, clears_after: 1h}
      - {zone: zone-c, sim: {capacity: 2, preempt_young: 3}}
      - {zone: zone-d, sim: {fault: denied}}
";
        let file = PoolFile::parse(text, "pools.yaml").unwrap();
        let gcloud = &file.pools[0];
        assert_eq!(gcloud.driver, PoolDriver::Gcloud);
        assert_eq!(gcloud.api, PoolApi::Compute);
        assert_eq!(gcloud.provisioning, Provisioning::FlexStart);
        assert_eq!(gcloud.idle_after, None);
        assert_eq!(gcloud.project.as_deref(), Some("my-project"));
        let zones: Vec<&str> = gcloud.zones.iter().map(|z| z.zone.as_str()).collect();
        assert_eq!(zones, ["us-east5-b", "europe-west4-a"]);
        let sim = &file.pools[1];
        assert_eq!(sim.hosts, Some(2));
        assert_eq!(sim.idle_after, Some(Duration::from_secs(600)));
        assert_eq!(sim.zones[0].sim, None);
        assert_eq!(
            sim.zones[1].sim,
            Some(SimScript {
                fault: Some(SimFault::Quota),
                clears_after: Some(Duration::from_secs(3600)),
                ..SimScript::default()
            })
        );
        assert_eq!(
            sim.zones[2].sim,
            Some(SimScript {
                capacity: Some(2),
                preempt_young: Some(3),
                ..SimScript::default()
            })
        );
        assert_eq!(
            sim.zones[3].sim.as_ref().unwrap().fault,
            Some(SimFault::Denied)
        );
    }

    #[test]
    fn spares_are_a_number_or_auto() {
        for (text, want) in [
            ("1", podq_api::Spares::Count(1)),
            ("auto", podq_api::Spares::Auto(podq_api::SparesAuto::Auto)),
        ] {
            let yaml = EXAMPLE.replace(
                "    driver: local\n",
                &format!("    driver: local\n    spares: {text}\n"),
            );
            let file = PoolFile::parse(&yaml, "pools.yaml").unwrap();
            assert_eq!(file.pools[0].spares, want, "{text}");
        }
    }

    /// Each refused file, the line its error must name, and words its message must hold.
    #[test]
    fn bad_files_are_refused_with_their_line() {
        let two_pools = |second: &str| {
            format!(
                "pools:\n  - name: a\n    accelerator: v4-8\n    max_slices: 1\n    \
                 idle_after: 1m\n    zones: [z-a]\n{second}"
            )
        };
        let cases: Vec<(&str, String, usize, &str)> = vec![
            (
                "unknown field",
                EXAMPLE.replace(
                    "    driver: local\n",
                    "    driver: local\n    colour: red\n",
                ),
                8,
                "unknown field `colour`",
            ),
            (
                "unknown field in a sim script",
                EXAMPLE.replace("{capacity: 1}", "{capacity: 1, speed: 2}"),
                10,
                "unknown field `speed`",
            ),
            (
                "spares that leave no slice to run on",
                EXAMPLE.replace("    driver: local\n", "    driver: local\n    spares: 2\n"),
                8,
                "spares: 2 leaves no slice to run on",
            ),
            (
                "spares neither a number nor auto",
                EXAMPLE.replace(
                    "    driver: local\n",
                    "    driver: local\n    spares: many\n",
                ),
                8,
                "spares",
            ),
            (
                "unknown top-level key",
                format!("{EXAMPLE}extra: 1\n"),
                11,
                "unknown field `extra`",
            ),
            (
                "empty zone list",
                "pools:\n  - name: p\n    accelerator: v4-8\n    max_slices: 1\n    \
                 idle_after: 1m\n    zones: []\n"
                    .to_owned(),
                6,
                "pool \"p\": the zone list is empty",
            ),
            (
                "max_slices 0",
                EXAMPLE.replace("max_slices: 2", "max_slices: 0"),
                4,
                "pool \"v4-spot\": max_slices must be at least 1",
            ),
            (
                "negative max_slices",
                EXAMPLE.replace("max_slices: 2", "max_slices: -1"),
                4,
                "max_slices",
            ),
            (
                "duplicate pool name",
                two_pools(
                    "  - name: a\n    accelerator: v4-8\n    max_slices: 1\n    \
                     idle_after: 1m\n    zones: [z-b]\n",
                ),
                7,
                "pool \"a\": a second pool of this name",
            ),
            (
                "duplicate zone",
                "pools:\n  - name: p\n    accelerator: v4-8\n    max_slices: 1\n    \
                 idle_after: 1m\n    zones:\n      - z-a\n      - z-b\n      - z-a\n"
                    .to_owned(),
                9,
                "zone `z-a` is listed twice",
            ),
            (
                "duplicate zone in the second pool",
                two_pools(
                    "  - name: b\n    accelerator: v4-8\n    max_slices: 1\n    \
                     idle_after: 1m\n    zones:\n      - {zone: z-a}\n      - zone: z-a\n",
                ),
                13,
                "pool \"b\": zone `z-a` is listed twice",
            ),
            (
                "sim on a gcloud pool",
                EXAMPLE.replace("driver: local", "driver: gcloud"),
                9,
                "only the local driver",
            ),
            (
                "bad idle_after",
                EXAMPLE.replace("idle_after: 20s", "idle_after: soon"),
                5,
                "idle_after: `soon` is not a duration",
            ),
            (
                "missing idle_after",
                EXAMPLE.replace("    idle_after: 20s\n", ""),
                2,
                "missing field `idle_after`",
            ),
            (
                "bad pool name",
                EXAMPLE.replace("name: v4-spot", "name: V4_spot"),
                2,
                "not a pool name",
            ),
            (
                "bad accelerator",
                EXAMPLE.replace("accelerator: v4-64", "accelerator: v4-63"),
                3,
                "did you mean `v4-64`?",
            ),
            (
                "unknown provisioning",
                EXAMPLE.replace("provisioning: spot", "provisioning: cheap"),
                6,
                "unknown variant `cheap`",
            ),
            (
                "unknown fault",
                EXAMPLE.replace("fault: stockout", "fault: fire"),
                9,
                "unknown variant `fire`",
            ),
            (
                "clears_after alone",
                EXAMPLE.replace("{capacity: 1}", "{capacity: 1, clears_after: 1m}"),
                10,
                "`clears_after` without a `fault`",
            ),
            (
                "api on a local pool",
                EXAMPLE.replace(
                    "    driver: local\n",
                    "    driver: local\n    api: compute\n",
                ),
                8,
                "`api:` is for `driver: gcloud`",
            ),
            ("no pools", "pools: []\n".to_owned(), 1, "lists no pool"),
        ];
        let mut wrong = Vec::new();
        for (what, text, line, words) in cases {
            match PoolFile::parse(&text, "pools.yaml") {
                Ok(_) => wrong.push(format!("{what}: accepted")),
                Err(error) => {
                    let shown = error.to_string();
                    if error.line != Some(line)
                        || !shown.starts_with(&format!("pools.yaml:{line}: "))
                        || !shown.contains(words)
                    {
                        wrong.push(format!(
                            "{what}: wanted line {line} and {words:?}, got {shown}"
                        ));
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn the_message_reads_as_the_issue_shows() {
        let text = "\
pools:
  - name: v4-spot
    accelerator: v4-64
    idle_after: 20s
    zones: [zone-a]
    provisioning: spot

    max_slices: 0
";
        assert_eq!(
            PoolFile::parse(text, "pools.yaml").unwrap_err().to_string(),
            "pools.yaml:8: pool \"v4-spot\": max_slices must be at least 1"
        );
    }

    #[test]
    fn durations_are_read() {
        let cases: [(&str, Result<Option<u64>, ()>); 9] = [
            ("20s", Ok(Some(20))),
            ("10m", Ok(Some(600))),
            ("1h", Ok(Some(3600))),
            ("2d", Ok(Some(172_800))),
            ("never", Ok(None)),
            ("20", Err(())),
            ("1h30m", Err(())),
            ("m", Err(())),
            ("-5s", Err(())),
        ];
        for (text, want) in cases {
            let got = parse_idle_after(text)
                .map(|d| d.map(|d| d.as_secs()))
                .map_err(|_| ());
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn an_unreadable_file_says_so() {
        let error = PoolFile::load(Path::new("/nonexistent/pools.yaml")).unwrap_err();
        assert_eq!(error.line, None);
        assert!(error
            .to_string()
            .starts_with("/nonexistent/pools.yaml: cannot read the pool file"));
    }
}
