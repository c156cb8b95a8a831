//! Fault injection (`PODQ_SIM_FAULT`), so every failure mode the worker must handle on a real
//! pod can be produced on demand.
//!
//! Syntax: a comma-separated list of `crash`, `crash-at-step=N`, `no-progress`,
//! `hang-at-step=N`, `slow-start=SECS`, `diverge-at-step=N`, `plateau-at-step=N`, each
//! optionally suffixed `@<host index>` to apply to that process only.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Exit 1 right after start-up.
    Crash,
    /// Exit 1 when reaching step N, before reporting it.
    CrashAtStep(u64),
    /// Report the start step once, then stay alive without advancing.
    NoProgress,
    /// Stop advancing when reaching step N, before reporting it, and stay alive.
    HangAtStep(u64),
    /// Sleep before the first step, like a long XLA compilation.
    SlowStart(Duration),
    /// From step N on, the training loss is NaN and `train/diverged` is 1 (TRM's own flag),
    /// and training goes on, as a diverged run does.
    DivergeAtStep(u64),
    /// From step N on, every metric keeps its value at N: a run that stopped learning.
    PlateauAtStep(u64),
}

/// The faults that apply to this process.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Faults(Vec<Fault>);

impl Faults {
    pub fn parse(spec: &str, process_index: usize) -> Result<Self, String> {
        let mut faults = Vec::new();
        for item in spec
            .split([',', ';'])
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let (fault, target) = match item.rsplit_once('@') {
                Some((fault, host)) => {
                    let host: usize = host
                        .trim()
                        .parse()
                        .map_err(|_| format!("fault '{item}': '@{host}' is not a host index"))?;
                    (fault.trim(), Some(host))
                }
                None => (item, None),
            };
            let fault = parse_one(fault).map_err(|e| format!("fault '{item}': {e}"))?;
            if target.is_none_or(|host| host == process_index) {
                faults.push(fault);
            }
        }
        Ok(Self(faults))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn crash_on_start(&self) -> bool {
        self.0.contains(&Fault::Crash)
    }

    pub fn no_progress(&self) -> bool {
        self.0.contains(&Fault::NoProgress)
    }

    pub fn slow_start(&self) -> Option<Duration> {
        self.0.iter().find_map(|f| match f {
            Fault::SlowStart(d) => Some(*d),
            _ => None,
        })
    }

    pub fn crash_at(&self, step: u64) -> bool {
        self.0.contains(&Fault::CrashAtStep(step))
    }

    pub fn hang_at(&self, step: u64) -> bool {
        self.0.contains(&Fault::HangAtStep(step))
    }

    pub fn diverged_at(&self, step: u64) -> bool {
        self.0
            .iter()
            .any(|f| matches!(f, Fault::DivergeAtStep(n) if step >= *n))
    }

    /// The step whose metrics a plateaued run keeps reporting at `step`.
    pub fn plateaued(&self, step: u64) -> u64 {
        self.0
            .iter()
            .find_map(|f| match f {
                Fault::PlateauAtStep(n) => Some(step.min(*n)),
                _ => None,
            })
            .unwrap_or(step)
    }

    pub fn describe(&self) -> String {
        format!("{:?}", self.0)
    }
}

fn parse_one(text: &str) -> Result<Fault, String> {
    let (name, value) = match text.split_once('=') {
        Some((name, value)) => (name.trim(), Some(value.trim())),
        None => (text, None),
    };
    let step = || -> Result<u64, String> {
        value
            .ok_or("needs =STEP")?
            .parse()
            .map_err(|_| "STEP must be a non-negative integer".to_string())
    };
    match (name, value) {
        ("crash", None) => Ok(Fault::Crash),
        ("no-progress", None) => Ok(Fault::NoProgress),
        ("crash-at-step", _) => step().map(Fault::CrashAtStep),
        ("hang-at-step", _) => step().map(Fault::HangAtStep),
        ("diverge-at-step", _) => step().map(Fault::DivergeAtStep),
        ("plateau-at-step", _) => step().map(Fault::PlateauAtStep),
        ("slow-start", Some(secs)) => secs
            .parse::<f64>()
            .ok()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .map(Fault::SlowStart)
            .ok_or_else(|| "SECS must be a non-negative number".to_string()),
        _ => Err(
            "unknown fault; expected crash, crash-at-step=N, no-progress, \
                  hang-at-step=N, slow-start=SECS, diverge-at-step=N or plateau-at-step=N"
                .to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_faults_apply_to_every_host() {
        for host in 0..3 {
            let faults = Faults::parse("crash-at-step=120", host).unwrap();
            assert!(faults.crash_at(120));
            assert!(!faults.crash_at(110));
        }
    }

    #[test]
    fn targeted_faults_apply_to_one_host() {
        let spec = "hang-at-step=50@1, slow-start=2.5";
        let host0 = Faults::parse(spec, 0).unwrap();
        assert!(!host0.hang_at(50));
        assert_eq!(host0.slow_start(), Some(Duration::from_millis(2500)));
        let host1 = Faults::parse(spec, 1).unwrap();
        assert!(host1.hang_at(50));
    }

    #[test]
    fn every_documented_fault_parses() {
        let faults = Faults::parse("crash;no-progress", 0).unwrap();
        assert!(faults.crash_on_start() && faults.no_progress());
        let faults = Faults::parse("diverge-at-step=60, plateau-at-step=200", 0).unwrap();
        assert!(!faults.diverged_at(59) && faults.diverged_at(60) && faults.diverged_at(300));
        assert_eq!((faults.plateaued(100), faults.plateaued(900)), (100, 200));
        assert!(Faults::parse("", 0).unwrap().is_empty());
    }

    #[test]
    fn malformed_faults_are_rejected() {
        for bad in [
            "explode",
            "crash-at-step",
            "crash-at-step=x",
            "slow-start=-1",
            "crash@x",
            "crash=3",
        ] {
            assert!(Faults::parse(bad, 0).is_err(), "{bad}");
        }
    }
}
