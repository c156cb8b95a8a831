//! A trainer's links (its W&B run, say), as the worker forwards them: kept per job and name,
//! the newest URL winning, across attempts; a new or changed URL goes on the job's timeline.

use futures::FutureExt;
use podq_api::LeaseId;
use podq_api::{LinksBatch, MAX_LINKS_PER_JOB};

use crate::scheduler::{Result, Scheduler, SchedulerError};
use crate::store::events::insert_event;
use crate::store::links;
use crate::team::Acting;

impl Scheduler {
    /// Records the links of the lease's attempt. A bad link, or a new name past
    /// `MAX_LINKS_PER_JOB`, refuses the whole batch and stores nothing of it.
    pub async fn record_links(
        &self,
        lease_id: LeaseId,
        batch: LinksBatch,
        acting: &Acting,
    ) -> Result<()> {
        let (live, worker) = self.held_lease(lease_id, acting)?;
        let pod = live.pod;
        if let Some(problem) = batch.links.iter().find_map(|l| l.problem()) {
            return Err(SchedulerError::invalid("invalid_link", problem));
        }
        self.write_fenced(lease_id, move |conn, fenced| {
            async move {
                let job = fenced.job_id;
                let mut known = links::of_job(conn, job).await?;
                for link in &batch.links {
                    let count = known.len();
                    match known.iter_mut().find(|k| k.name == link.name) {
                        Some(k) if k.url == link.url => continue,
                        Some(k) => k.url.clone_from(&link.url),
                        None if count >= MAX_LINKS_PER_JOB => {
                            return Err(SchedulerError::invalid(
                                "too_many_links",
                                format!(
                                    "the job has {MAX_LINKS_PER_JOB} links already; \
                                     link {} is not kept",
                                    link.name
                                ),
                            ));
                        }
                        None => known.push(link.clone()),
                    }
                    links::upsert(conn, job, fenced.attempt, link).await?;
                    let message = format!("{}: {}", link.name, link.url);
                    insert_event(conn, &worker, Some(job), Some(&pod), "link", &message).await?;
                }
                Ok(())
            }
            .boxed()
        })
        .await
    }
}
