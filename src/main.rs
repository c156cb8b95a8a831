mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use podq_server::catalog::CatalogOptions;

#[derive(Parser)]
#[command(name = "podq", version, about = "Schedules ML experiments onto whole TPU pod slices")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load an experiment catalog and report what is wrong with it.
    Validate {
        #[arg(long, env = "PODQ_EXPERIMENTS", default_value = "./experiments")]
        experiments: PathBuf,
        #[arg(long, env = "PODQ_BUCKET", default_value = "gs://sculptor-tpu-experiments")]
        bucket: String,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Validate {
            experiments,
            bucket,
            json,
        } => {
            let options = CatalogOptions {
                bucket,
                ..CatalogOptions::default()
            };
            if validate::run(&experiments, &options, json) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
