//! The compute grant: set through the API and stored, or the server's `--deadline` as a
//! start-up default.

use chrono::{DateTime, Utc};
use futures::FutureExt;
use podq_api::{Grant, GrantRequest};

use crate::scheduler::{Result, Scheduler, SchedulerError};
use crate::store::events::{insert_event, Actor};
use crate::store::grant::{self, GrantRow};
use crate::store::{ms_to_datetime, pods};

impl Scheduler {
    /// The grant in force: the stored one, else `--deadline` (starting when the server did).
    pub async fn grant(&self) -> Result<Option<Grant>> {
        if let Some(row) = grant::get(&mut self.store.read().await?).await? {
            return Ok(Some(Grant {
                start: ms_to_datetime(row.start_ms),
                end: ms_to_datetime(row.end_ms),
                pod_hours: row.pod_hours,
                source: "api".into(),
            }));
        }
        Ok(self.config.deadline.map(|end| Grant {
            start: self.started_at,
            end,
            pod_hours: Default::default(),
            source: "flag".into(),
        }))
    }

    /// Stores the grant after checking it: it ends in the future and after it starts, and
    /// every budget names an accelerator podq knows and is not negative.
    pub async fn set_grant(&self, by: &Actor, req: GrantRequest) -> Result<Grant> {
        let now = Utc::now();
        let start = req.start.unwrap_or(now);
        check_deadline(req.end, now)?;
        if req.end <= start {
            return Err(SchedulerError::unprocessable(
                "invalid_grant",
                format!("the grant ends ({}) before it starts ({start})", req.end),
            ));
        }
        let known = self.known_accelerators().await?;
        for (accelerator, hours) in &req.pod_hours {
            if !known.contains(accelerator) {
                return Err(SchedulerError::unprocessable(
                    "unknown_accelerator",
                    format!("no pod or job uses the accelerator `{accelerator}`"),
                )
                .with_details(serde_json::json!({ "accelerators": known })));
            }
            if !hours.is_finite() || *hours < 0.0 {
                return Err(SchedulerError::invalid(
                    "invalid_grant",
                    format!("the pod-hour budget of {accelerator} must be 0 or more, got {hours}"),
                ));
            }
        }
        let row = GrantRow {
            start_ms: start.timestamp_millis(),
            end_ms: req.end.timestamp_millis(),
            pod_hours: req.pod_hours,
        };
        let pod_hours = row.pod_hours.clone();
        let message = format!(
            "set the grant: {start} to {}, pod-hours {}",
            req.end,
            serde_json::to_string(&pod_hours).unwrap_or_default()
        );
        let by = by.clone();
        self.store
            .write(move |conn| {
                async move {
                    grant::put(conn, &row).await?;
                    insert_event(conn, &by, None, None, "grant", &message).await
                }
                .boxed()
            })
            .await?;
        Ok(Grant {
            start: ms_to_datetime(start.timestamp_millis()),
            end: ms_to_datetime(req.end.timestamp_millis()),
            pod_hours,
            source: "api".into(),
        })
    }

    /// Every pod's accelerator and every experiment's.
    async fn known_accelerators(&self) -> Result<Vec<String>> {
        let mut known: Vec<String> = pods::list(&mut self.store.read().await?)
            .await?
            .into_iter()
            .map(|p| p.accelerator)
            .collect();
        known.extend(
            self.catalog
                .experiments
                .iter()
                .map(|e| e.accelerator.clone()),
        );
        known.push(self.config.catalog.accelerator.clone());
        known.sort();
        known.dedup();
        Ok(known)
    }
}

/// A deadline the plan can measure against: one that has not passed.
pub fn check_deadline(deadline: DateTime<Utc>, now: DateTime<Utc>) -> Result<()> {
    if deadline <= now {
        return Err(SchedulerError::unprocessable(
            "deadline_passed",
            format!("the deadline {deadline} has already passed (it is {now} now)"),
        ));
    }
    Ok(())
}
