//! `podq pools`: each pool's slices and zones, and what the queue wants of it.

use std::process::ExitCode;

use clap::Args;
use podq_api::{escape_controls, PoolsPage};
use reqwest::Method;

use super::table::Table;
use super::{Client, ServerAddress};

#[derive(Args)]
pub struct PoolsArgs {
    #[command(flatten)]
    address: ServerAddress,
    /// Print the JSON answer.
    #[arg(long)]
    json: bool,
}

pub async fn pools(args: PoolsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    let page: PoolsPage = client.json(client.request(Method::GET, "/pools")).await?;
    if args.json {
        emit_line!("{}", serde_json::to_string_pretty(&page)?);
        return Ok(ExitCode::SUCCESS);
    }
    if page.pools.is_empty() {
        emit_line!("no pool has reported (podq pool --pools FILE, or podq up --pool FILE)");
        return Ok(ExitCode::SUCCESS);
    }
    for pool in &page.pools {
        emit_line!(
            "pool {} ({}): {} of {} slices, {} job(s) waiting for one, {:.1} slice-hours{}",
            escape_controls(&pool.name),
            escape_controls(&pool.accelerator),
            pool.slices.len(),
            pool.max_slices,
            pool.demand,
            pool.slice_hours,
            pool.paused
                .as_deref()
                .map(|why| format!("; PAUSED: {}", escape_controls(why)))
                .unwrap_or_default()
        );
        let mut slices = Table::new(&["SLICE", "ZONE", "STATE", "CREATED", "IDLE SINCE"]);
        for slice in &pool.slices {
            slices.row(vec![
                escape_controls(&slice.pod),
                escape_controls(&slice.zone),
                slice.state.as_str().to_owned(),
                slice.created_at.format("%H:%M:%S").to_string(),
                slice
                    .idle_since
                    .map_or("-".to_owned(), |t| t.format("%H:%M:%S").to_string()),
            ]);
        }
        if !slices.is_empty() {
            emit_text!("{}", slices.render());
        }
        let mut zones = Table::new(&["ZONE", "STATE", "NEXT TRY", "LAST ERROR"]);
        for zone in &pool.zones {
            zones.row(vec![
                escape_controls(&zone.zone),
                zone.state.as_str().to_owned(),
                zone.next_try_at
                    .map_or("-".to_owned(), |t| t.format("%H:%M:%S").to_string()),
                zone.last_error.as_deref().map_or("-".to_owned(), |e| {
                    escape_controls(e).chars().take(100).collect()
                }),
            ]);
        }
        emit_text!("{}", zones.render());
    }
    Ok(ExitCode::SUCCESS)
}
