//! A job's metric series: single values and `GET /api/v1/jobs/{id}/metrics`.

use serde::{Deserialize, Serialize};

use crate::ids::JobId;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MetricValue {
    pub step: i64,
    /// A non-finite value is the string `"NaN"`, `"Infinity"` or `"-Infinity"`: where a run
    /// diverged, the curve says so.
    #[serde(with = "crate::nonfinite")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::nonfinite::MetricNumberSchema))]
    pub value: f64,
}

/// `GET /api/v1/jobs/{id}/metrics`: downsampled series.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MetricSeries {
    pub name: String,
    /// Points stored for the series when it came back whole; null when it was sampled.
    pub total_points: Option<i64>,
    pub points: Vec<MetricValue>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobMetrics {
    pub job_id: JobId,
    pub series: Vec<MetricSeries>,
}
