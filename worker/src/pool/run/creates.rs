//! A pool's creates: the zone the next one goes to, each started on a task of its own, and
//! their answers taken in at a later tick, so no tick waits on the cloud.

use super::*;

impl PoolRun {
    /// The zone the next create goes to: the first ready one, below `max_creating` creates
    /// in flight there, away from a zone a slice was just quarantined in when another will do.
    pub(super) fn zone_for_create(&mut self, now: DateTime<Utc>) -> Option<String> {
        let mut in_flight: BTreeMap<&str, u32> = BTreeMap::new();
        for held in self.held.values().filter(|h| h.life.phase.in_flight()) {
            *in_flight.entry(held.life.zone.as_str()).or_default() += 1;
        }
        let room = |zone: &str| in_flight.get(zone).copied().unwrap_or(0) < self.pool.max_creating;
        let avoid = self.avoid.clone();
        let chosen = avoid
            .as_deref()
            .and_then(|avoid| self.book.choose_where(now, |z| z != avoid && room(z)))
            .or_else(|| self.book.choose_where(now, room))
            .map(str::to_owned);
        if chosen.is_some() {
            self.avoid = None;
        }
        chosen
    }

    /// Asks for one slice in `zone`: written to the journal first, held as being made, and
    /// created on a task of its own whose answer a later tick collects.
    pub(super) async fn start_create(
        &mut self,
        zone: String,
        demand: u32,
        now: DateTime<Utc>,
    ) -> anyhow::Result<()> {
        let name = self.journal.ask(&self.pool.name, &zone, now)?;
        let spec = SliceSpec {
            name: name.clone(),
            zone: zone.clone(),
            pool: self.pool.name.clone(),
            owner: self.journal.owner().to_owned(),
            accelerator: self.pool.accelerator.clone(),
        };
        let held = Held::unheld(&zone, now);
        self.learn(&name, held, Fact::CreateAsked, Words::None, now)
            .await?;
        tracing::info!(pool = %self.pool.name, slice = %name, %zone, demand, "creating a slice");
        let spec_name = name.clone();
        let cloud = Arc::clone(&self.cloud);
        let task = self.creates.spawn(async move {
            let result = cloud.create(&spec).await;
            CreateAnswer {
                name,
                zone,
                demand,
                result,
            }
        });
        self.create_tasks.insert(task.id(), spec_name);
        Ok(())
    }

    /// Takes in the answers of the creates and deletes that finished since the last tick.
    pub(super) async fn collect_answers(&mut self, now: DateTime<Utc>) -> anyhow::Result<()> {
        while let Some(done) = self.deletes.try_join_next() {
            if let Ok(name) = done {
                self.deleting.remove(&name);
            }
        }
        // A delete task that panicked or was aborted names nothing: forget what is not in
        // flight any more.
        if self.deletes.is_empty() {
            self.deleting.clear();
        }
        while let Some(done) = self.creates.try_join_next_with_id() {
            let answer = match done {
                Ok((id, answer)) => {
                    self.create_tasks.remove(&id);
                    answer
                }
                Err(e) => {
                    // No answer: the listing decides what became of the slice, as after a
                    // restart (held if the cloud lists it, gone if it does not).
                    tracing::error!(pool = %self.pool.name, error = %e, "a create's task ended without an answer");
                    if let Some(name) = self.create_tasks.remove(&e.id()) {
                        if let Some(held) = self.held.remove(&name) {
                            self.learn(&name, held, Fact::CreateLost, Words::None, now)
                                .await?;
                        }
                    }
                    continue;
                }
            };
            self.take_create_answer(answer, now).await?;
        }
        Ok(())
    }

    pub(super) async fn take_create_answer(
        &mut self,
        answer: CreateAnswer,
        now: DateTime<Utc>,
    ) -> anyhow::Result<()> {
        let CreateAnswer {
            name,
            zone,
            demand,
            result,
        } = answer;
        // A slice no longer held is answered as one just asked for.
        let held = match self.held.remove(&name) {
            Some(held) => held,
            None => {
                let mut held = Held::unheld(&zone, now);
                held.life = held.life.advance(Fact::CreateAsked, At::now()).0;
                held
            }
        };
        match &result {
            Ok(()) => {
                self.learn(&name, held, Fact::CreateOk, Words::Created(demand), now)
                    .await
            }
            Err(error) => {
                let fact = Fact::CreateRefused(Refusal::of(error.kind));
                self.learn(&name, held, fact, Words::Refused(error), now)
                    .await
            }
        }
    }
}
