//! The compact shapes metric points and log lines are stored in (migration 0012).
//!
//! A worker reports a batch every few seconds: ten steps of a dozen metrics, a few lines of
//! each host's output. Stored a row per value and a row per line, with their indexes, each
//! batch cost a hundred B-tree inserts and most of the store's growth. Stored as it arrives,
//! a batch is one row per series (in its job's `metric_tail`, folded into `metric_chunks`
//! every 16th report, `metrics.rs`) and one per host (`log_chunks`), and every read decodes
//! what it needs.
//!
//! The encoding is postcard's (serde, varints): steps and offsets as deltas from the previous
//! one, so a chunk of ten steps costs a few bytes of steps. A chunk's values are stored as
//! `f32` when every one of them is exactly an `f32` (what a JAX trainer reports), else as
//! `f64`; either way a value reads back bit-exact, NaN and infinities included. A log chunk
//! is then compressed with LZ4 (lz4_flex, pure Rust): a trainer's lines repeat themselves
//! ("step N: loss … lr …"), and the text is most of what a log chunk holds.

use serde::{Deserialize, Serialize};

use super::StoreError;

#[derive(Serialize, Deserialize)]
enum Values {
    Single(Vec<f32>),
    Double(Vec<f64>),
}

#[derive(Serialize, Deserialize)]
struct PointsChunk {
    /// The first step, then each step's distance from the one before.
    steps: Vec<i64>,
    values: Values,
}

/// `points` in step order, each step once.
pub fn encode_points(points: &[(i64, f64)]) -> Vec<u8> {
    let mut previous = 0_i64;
    let steps = points
        .iter()
        .map(|&(step, _)| {
            let delta = step.wrapping_sub(previous);
            previous = step;
            delta
        })
        .collect();
    let single = points
        .iter()
        .all(|&(_, v)| v.is_nan() || f64::from(v as f32).to_bits() == v.to_bits());
    let values = if single {
        Values::Single(points.iter().map(|&(_, v)| v as f32).collect())
    } else {
        Values::Double(points.iter().map(|&(_, v)| v).collect())
    };
    postcard::to_allocvec(&PointsChunk { steps, values }).expect("a Vec always takes the bytes")
}

/// A chunk's points, in step order.
pub fn decode_points(data: &[u8]) -> Result<Vec<(i64, f64)>, StoreError> {
    let chunk: PointsChunk = postcard::from_bytes(data).map_err(corrupt("metric chunk"))?;
    let mut step = 0_i64;
    let steps = chunk.steps.into_iter().map(|delta| {
        step = step.wrapping_add(delta);
        step
    });
    let points = match chunk.values {
        Values::Single(values) => steps.zip(values.into_iter().map(f64::from)).collect(),
        Values::Double(values) => steps.zip(values).collect(),
    };
    Ok(points)
}

/// One stored line of a host's output.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredLine {
    /// Its place in the batch it arrived in, across hosts: with the batch's number, the
    /// line's id (`logs.rs`).
    pub position: i64,
    /// The line's byte offset in the host's output for the attempt.
    pub offset: i64,
    /// When the worker received it, ms since the epoch.
    pub at: i64,
    pub text: String,
}

#[derive(Serialize, Deserialize)]
struct LinesChunk {
    /// Per line: position, offset and time as distances from the line before, and the text.
    lines: Vec<(i64, i64, i64, String)>,
}

/// `lines` in the order they arrived.
pub fn encode_lines<'a>(lines: impl IntoIterator<Item = &'a StoredLine>) -> Vec<u8> {
    let (mut position, mut offset, mut at) = (0_i64, 0_i64, 0_i64);
    let lines = lines
        .into_iter()
        .map(|line| {
            let encoded = (
                line.position.wrapping_sub(position),
                line.offset.wrapping_sub(offset),
                line.at.wrapping_sub(at),
                line.text.clone(),
            );
            (position, offset, at) = (line.position, line.offset, line.at);
            encoded
        })
        .collect();
    let encoded = postcard::to_allocvec(&LinesChunk { lines }).expect("a Vec takes the bytes");
    lz4_flex::compress_prepend_size(&encoded)
}

pub fn decode_lines(data: &[u8]) -> Result<Vec<StoredLine>, StoreError> {
    let encoded = lz4_flex::decompress_size_prepended(data)
        .map_err(|e| StoreError::Corrupt(format!("a log chunk does not decompress: {e}")))?;
    let chunk: LinesChunk = postcard::from_bytes(&encoded).map_err(corrupt("log chunk"))?;
    let (mut position, mut offset, mut at) = (0_i64, 0_i64, 0_i64);
    Ok(chunk
        .lines
        .into_iter()
        .map(|(d_position, d_offset, d_at, text)| {
            position = position.wrapping_add(d_position);
            offset = offset.wrapping_add(d_offset);
            at = at.wrapping_add(d_at);
            StoredLine {
                position,
                offset,
                at,
                text,
            }
        })
        .collect())
}

fn corrupt(what: &'static str) -> impl Fn(postcard::Error) -> StoreError {
    move |e| StoreError::Corrupt(format!("a {what} does not decode: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_read_back_bit_exact_in_either_width() {
        let single = vec![(0, 1.5), (10, f64::NAN), (20, f64::INFINITY), (35, -0.25)];
        let double = vec![(-5, 0.1), (7, f64::NEG_INFINITY), (1 << 40, 1e300)];
        for points in [single, double] {
            let back = decode_points(&encode_points(&points)).unwrap();
            assert_eq!(back.len(), points.len());
            for ((s, v), (bs, bv)) in points.iter().zip(&back) {
                assert_eq!(s, bs);
                assert!(v.to_bits() == bv.to_bits() || (v.is_nan() && bv.is_nan()));
            }
        }
        // Ten steps of one f32 metric: a few bytes a point, not a row's dozens.
        let ten: Vec<(i64, f64)> = (0..10)
            .map(|i| (1000 + i * 10, f64::from(0.5_f32)))
            .collect();
        assert!(
            encode_points(&ten).len() <= 64,
            "{}",
            encode_points(&ten).len()
        );
    }

    #[test]
    fn lines_read_back_in_their_order() {
        let lines = vec![
            StoredLine {
                position: 0,
                offset: 0,
                at: 1_700_000_000_000,
                text: "step 1".into(),
            },
            StoredLine {
                position: 2,
                offset: 7,
                at: 1_700_000_000_500,
                text: "étape ✓".into(),
            },
            StoredLine {
                position: 5,
                offset: 19,
                at: 1_700_000_000_400,
                text: String::new(),
            },
        ];
        assert_eq!(decode_lines(&encode_lines(&lines)).unwrap(), lines);
        assert!(decode_lines(b"\xff\xff\xff").is_err());
        // Lines alike, as a trainer prints them, take less room than their text.
        let alike: Vec<StoredLine> = (0..4)
            .map(|i| StoredLine {
                position: i,
                offset: i * 80,
                at: 1_700_000_000_000 + i * 500,
                text: format!("[host 3] step 12{i}: loss 0.42{i} lm_loss 0.39{i} lr 1.0e-4"),
            })
            .collect();
        let text: usize = alike.iter().map(|l| l.text.len()).sum();
        let stored = encode_lines(&alike).len();
        assert!(stored < text * 3 / 4, "{stored} bytes for {text} of text");
    }
}
