//! The Cloud TPU slice types podq knows: how many chips, hosts and JAX devices a slice has,
//! its memory and its speed. The catalog validates a job's `accelerators:` against it, the
//! lease tells a worker its slice's shape from it, and the plan takes its prior speed of a
//! run on a generation from the peak FLOPs here.
//!
//! Sources (each generation's "TPU versions" page, read 2026-12-05; see
//! `docs/architecture.md`, "Generations"):
//! - cloud.google.com/tpu/docs/v4: 2 TensorCores a chip (megacore: one JAX device), 4 chips
//!   a host, 32 GiB HBM, 275 bf16 TFLOPs a chip; the name counts TensorCores.
//! - cloud.google.com/tpu/docs/v5p: as v4 in layout, 95 GiB HBM, 459 TFLOPs.
//! - cloud.google.com/tpu/docs/v5e: one TensorCore a chip, 16 GB, 197 TFLOPs; the name counts
//!   chips; multi-host slices have 4 chips a host, and up to 8 chips fit one host.
//! - cloud.google.com/tpu/docs/v6e: as v5e in layout, 32 GB, 918 TFLOPs.
//! - cloud.google.com/tpu/docs/v2, /v3 (system-architecture-tpu-vm): 2 TensorCores a chip,
//!   each its own JAX device, 4 chips a host; 16 and 32 GiB, 45 and 123 TFLOPs.

use serde::{Deserialize, Serialize};

/// One TPU generation's facts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Generation {
    /// The name's prefix: `v4` in `v4-64`.
    pub prefix: &'static str,
    /// Whether the count after the dash is TensorCores (2 a chip) rather than chips.
    pub counts_cores: bool,
    /// JAX devices a chip shows: 2 where each TensorCore is a device (v2, v3).
    pub devices_per_chip: u32,
    /// Chips one host VM holds in a multi-host slice.
    pub chips_per_host: u32,
    /// The most chips a single-host slice holds.
    pub single_host_chips: u32,
    pub hbm_gib_per_chip: f64,
    pub peak_bf16_tflops_per_chip: f64,
    /// The slice sizes Google sells, as the count after the dash.
    pub sizes: &'static [u32],
}

/// Every generation podq knows, oldest first.
pub const GENERATIONS: [Generation; 6] = [
    Generation {
        prefix: "v2",
        counts_cores: true,
        devices_per_chip: 2,
        chips_per_host: 4,
        single_host_chips: 4,
        hbm_gib_per_chip: 16.0,
        peak_bf16_tflops_per_chip: 45.0,
        sizes: &[8, 32, 128, 256, 512],
    },
    Generation {
        prefix: "v3",
        counts_cores: true,
        devices_per_chip: 2,
        chips_per_host: 4,
        single_host_chips: 4,
        hbm_gib_per_chip: 32.0,
        peak_bf16_tflops_per_chip: 123.0,
        sizes: &[8, 32, 64, 128, 256, 512, 1024, 2048],
    },
    Generation {
        prefix: "v4",
        counts_cores: true,
        devices_per_chip: 1,
        chips_per_host: 4,
        single_host_chips: 4,
        hbm_gib_per_chip: 32.0,
        peak_bf16_tflops_per_chip: 275.0,
        sizes: &[8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096],
    },
    Generation {
        prefix: "v5p",
        counts_cores: true,
        devices_per_chip: 1,
        chips_per_host: 4,
        single_host_chips: 4,
        hbm_gib_per_chip: 95.0,
        peak_bf16_tflops_per_chip: 459.0,
        sizes: &[8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288],
    },
    Generation {
        prefix: "v5litepod",
        counts_cores: false,
        devices_per_chip: 1,
        chips_per_host: 4,
        single_host_chips: 8,
        hbm_gib_per_chip: 16.0,
        peak_bf16_tflops_per_chip: 197.0,
        sizes: &[1, 4, 8, 16, 32, 64, 128, 256],
    },
    Generation {
        prefix: "v6e",
        counts_cores: false,
        devices_per_chip: 1,
        chips_per_host: 4,
        single_host_chips: 8,
        hbm_gib_per_chip: 32.0,
        peak_bf16_tflops_per_chip: 918.0,
        sizes: &[1, 4, 8, 16, 32, 64, 128, 256],
    },
];

/// A slice type (`v6e-32`) read against [`GENERATIONS`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SliceType {
    pub generation: &'static Generation,
    /// The count after the dash.
    pub size: u32,
}

impl SliceType {
    pub fn chips(&self) -> u32 {
        if self.generation.counts_cores {
            self.size / 2
        } else {
            self.size
        }
    }

    /// JAX devices over the whole slice, what a global batch is divided among.
    pub fn devices(&self) -> u32 {
        self.chips() * self.generation.devices_per_chip
    }

    /// Host VMs in the slice, each running one trainer process.
    pub fn hosts(&self) -> u32 {
        let chips = self.chips();
        if chips <= self.generation.single_host_chips {
            1
        } else {
            chips.div_ceil(self.generation.chips_per_host)
        }
    }

    /// Peak bf16 TFLOPs of the whole slice: the plan's prior for how fast a run goes on it.
    pub fn peak_bf16_tflops(&self) -> f64 {
        f64::from(self.chips()) * self.generation.peak_bf16_tflops_per_chip
    }

    pub fn hbm_gib(&self) -> f64 {
        f64::from(self.chips()) * self.generation.hbm_gib_per_chip
    }

    /// What a lease tells a worker of the slice it runs on.
    pub fn shape(&self, name: &str) -> SliceShape {
        SliceShape {
            accelerator: name.to_owned(),
            hosts: self.hosts(),
            devices: self.devices(),
        }
    }
}

/// The slice an attempt runs on, as its lease says: the trainer restores onto a mesh of
/// this many devices (`PODQ_ACCELERATOR`, `PODQ_SLICE_HOSTS`, `PODQ_SLICE_DEVICES`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SliceShape {
    pub accelerator: String,
    pub hosts: u32,
    pub devices: u32,
}

/// Why a name is no slice type podq knows.
#[derive(Debug, Clone, PartialEq)]
pub struct UnknownSliceType {
    pub name: String,
    /// The nearest known name, when one is a typo away.
    pub did_you_mean: Option<String>,
    pub why: String,
}

impl std::fmt::Display for UnknownSliceType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` {}", self.name, self.why)?;
        if let Some(near) = &self.did_you_mean {
            write!(f, "; did you mean `{near}`?")?;
        }
        Ok(())
    }
}

/// The longest slice type's name, in bytes (`v5litepod-256`): a longer name is no slice type
/// nor a typo of one, and is refused before any near miss is looked for.
pub fn longest_slice_type() -> usize {
    GENERATIONS
        .iter()
        .flat_map(|g| {
            g.sizes
                .iter()
                .map(|size| g.prefix.len() + 1 + digits(*size))
        })
        .max()
        .unwrap_or(0)
}

fn digits(n: u32) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// `name` as a slice type, or why not with the nearest known name. Only the canonical
/// spelling parses: `v4-64`, never `v4-064` nor `v4-+64`, so one slice type has one name
/// (the waiters, the demand and the grant are kept by name).
pub fn slice_type(name: &str) -> Result<SliceType, UnknownSliceType> {
    let longest = longest_slice_type();
    if name.len() > longest {
        // Refused at the cost of reading its length: no edit distance against a megabyte,
        // and the answer quotes only its start.
        return Err(UnknownSliceType {
            name: quoted_start(name),
            did_you_mean: None,
            why: format!(
                "is no slice type: {} bytes, and no slice type is longer than {longest}",
                name.len()
            ),
        });
    }
    let unknown = |why: String| UnknownSliceType {
        name: name.to_owned(),
        did_you_mean: nearest(name),
        why,
    };
    let Some((prefix, size)) = name.rsplit_once('-') else {
        return Err(unknown(
            "is no slice type: a generation, a dash and a size, such as `v4-64` or `v6e-32`".into(),
        ));
    };
    let Some(generation) = GENERATIONS.iter().find(|g| g.prefix == prefix) else {
        let known: Vec<&str> = GENERATIONS.iter().map(|g| g.prefix).collect();
        return Err(unknown(format!(
            "names no TPU generation podq knows ({})",
            known.join(", ")
        )));
    };
    let canonical = size.bytes().all(|b| b.is_ascii_digit()) && !size.starts_with('0');
    match size.parse::<u32>() {
        Ok(size) if canonical && generation.sizes.contains(&size) => {
            Ok(SliceType { generation, size })
        }
        _ => Err(unknown(format!(
            "is no {} slice: its sizes are {}",
            generation.prefix,
            generation
                .sizes
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The first 32 characters of a name too long to quote whole, and `…`.
fn quoted_start(name: &str) -> String {
    let start: String = name.chars().take(32).collect();
    format!("{start}…")
}

/// The known slice name fewest edits from `name` (a transposition is one), when at most two.
/// `name` is at most [`longest_slice_type`] bytes long: the work is bounded.
fn nearest(name: &str) -> Option<String> {
    GENERATIONS
        .iter()
        .flat_map(|g| {
            g.sizes
                .iter()
                .map(move |size| format!("{}-{size}", g.prefix))
        })
        .map(|known| (strsim::osa_distance(name, &known), known))
        .filter(|(distance, _)| *distance <= 2)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, known)| known)
}

/// JAX devices of a slice type, 0 for a name podq does not know.
pub fn devices_of(name: &str) -> u32 {
    slice_type(name).map_or(0, |t| t.devices())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_study_slices_are_thirty_two_chips_of_each_generation() {
        for (name, hosts, devices, tflops) in [
            ("v4-64", 8, 32, 275.0 * 32.0),
            ("v5p-64", 8, 32, 459.0 * 32.0),
            ("v5litepod-32", 8, 32, 197.0 * 32.0),
            ("v6e-32", 8, 32, 918.0 * 32.0),
        ] {
            let t = slice_type(name).unwrap();
            assert_eq!(t.chips(), 32, "{name}");
            assert_eq!((t.hosts(), t.devices()), (hosts, devices), "{name}");
            assert_eq!(t.peak_bf16_tflops(), tflops, "{name}");
        }
        assert_eq!(
            slice_type("v3-8").unwrap().devices(),
            8,
            "v3 cores are devices"
        );
        assert_eq!(
            slice_type("v6e-8").unwrap().hosts(),
            1,
            "8 chips fit one host"
        );
        assert_eq!(slice_type("v4-8").unwrap().hosts(), 1);
    }

    #[test]
    fn a_near_miss_names_the_type_it_missed() {
        let e = slice_type("v6e-23").unwrap_err();
        assert_eq!(e.did_you_mean.as_deref(), Some("v6e-32"), "{e}");
        assert!(e.to_string().contains("v6e-23"), "{e}");
        let e = slice_type("v4-63").unwrap_err();
        assert_eq!(e.did_you_mean.as_deref(), Some("v4-64"), "{e}");
        let e = slice_type("v7-64").unwrap_err();
        assert!(e.why.contains("generation"), "{e}");
        assert_eq!(slice_type("big pod").unwrap_err().did_you_mean, None);
        assert_eq!(devices_of("v5litepod-4096"), 0);
    }

    #[test]
    fn only_the_canonical_spelling_parses() {
        assert_eq!(slice_type("v4-64").unwrap().size, 64);
        assert_eq!(slice_type("v5litepod-256").unwrap().size, 256);
        for name in [
            "v4-064",
            "v4-+64",
            "v4-0064",
            "v4- 64",
            "v4-64 ",
            "v4--64",
            "v4-",
            "v4-0",
            "-64",
            "V4-64",
            "v4-６４",
        ] {
            let e = slice_type(name).unwrap_err();
            assert_eq!(e.name, name, "{e}");
        }
        // A near miss of the canonical name is still named.
        assert_eq!(
            slice_type("v4-064").unwrap_err().did_you_mean.as_deref(),
            Some("v4-64")
        );
    }

    #[test]
    fn a_name_longer_than_any_type_is_refused_without_a_search() {
        assert_eq!(longest_slice_type(), "v5litepod-256".len());
        let huge = "x".repeat(3 << 20);
        let started = std::time::Instant::now();
        let e = slice_type(&huge).unwrap_err();
        assert!(
            started.elapsed() < std::time::Duration::from_millis(100),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(e.did_you_mean, None);
        assert!(e.to_string().len() < 200, "the answer quotes it whole");
        let e = slice_type(&format!("v4-64{}", "4".repeat(20))).unwrap_err();
        assert!(e.why.contains("no slice type is longer"), "{e}");
    }
}
