//! `POST /api/v1/schedules`: submissions repeated on a cron.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::SubmitRequest;

/// `POST /api/v1/schedules`: submit `submit` whenever `cron` fires.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ScheduleRequest {
    /// Standard 5-field cron (`min hour day month weekday`, UTC), or 6/7 fields with seconds,
    /// or a shorthand (`@daily`). A field out of range is 422 `invalid_cron`.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = r"^\s*(@[A-Za-z]+|\S+(\s+\S+){4,6})\s*$", max_length = 200)
    )]
    pub cron: String,
    pub submit: SubmitRequest,
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
}

fn enabled_by_default() -> bool {
    true
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Schedule {
    pub id: Uuid,
    pub cron: String,
    pub submit: SubmitRequest,
    pub enabled: bool,
    pub next_run_at: Option<DateTime<Utc>>,
    pub last_run_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}
