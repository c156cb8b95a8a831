//! `podq results`: a group's or the suite's results table, as the server's CSV or as JSON
//! rows, for a notebook or a pipe (`podq results --group exp07-precision > exp07.csv`).

use std::process::ExitCode;

use clap::{Args, ValueEnum};
use podq_api::Results;
use reqwest::Method;

use super::{encode, Client, ServerAddress};

#[derive(Args)]
pub struct ResultsArgs {
    /// One group's rows (the study view's); default every group's.
    #[arg(long)]
    group: Option<String>,
    /// `csv`: the server's results.csv as it is; `json`: an array of one object per row,
    /// keyed by the CSV's columns.
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    format: Format,
    #[command(flatten)]
    address: ServerAddress,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Csv,
    Json,
}

pub async fn results(args: ResultsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    let path = match &args.group {
        Some(group) => format!("/groups/{}/results", encode(group)),
        None => "/results".to_owned(),
    };
    match args.format {
        Format::Csv => {
            let request = client
                .request(Method::GET, &format!("{path}.csv"))
                .header("accept", "text/csv");
            // One row per experiment: small enough to read whole.
            let csv = client.stream(request).await?.text().await?;
            super::emit(&csv)?;
        }
        Format::Json => {
            let results: Results = client.json(client.request(Method::GET, &path)).await?;
            emit_line!("{}", serde_json::to_string_pretty(&results.flat_rows())?);
        }
    }
    Ok(ExitCode::SUCCESS)
}
