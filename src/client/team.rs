//! The team: `podq users` (admins), `podq whoami` and `podq audit`.

use std::io::Read;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use podq_api::{escape_controls, AddUserRequest, AuditPage, User, UserList, UserToken, WhoAmI};
use reqwest::Method;

use super::table::Table;
use super::{encode, Client, ServerAddress};

#[derive(Args)]
pub struct UsersArgs {
    #[command(subcommand)]
    command: UsersCommand,
}

#[derive(Subcommand)]
enum UsersCommand {
    /// Add a person; their token is printed once, alone on the last line.
    Add {
        #[command(flatten)]
        address: ServerAddress,
        /// 1 to 64 letters, digits, `.`, `_`, `-` or `@`.
        name: String,
        /// viewer (reads), submitter (submits and acts on their own jobs), admin
        /// (everything), or worker (the worker protocol).
        #[arg(long)]
        role: String,
        /// Only for a worker: the pods its token may lease for and report as (comma-separated).
        #[arg(long, value_delimiter = ',')]
        pods: Vec<String>,
    },
    /// People, their roles and whether they are disabled (never their tokens).
    List {
        #[command(flatten)]
        address: ServerAddress,
    },
    /// Disable a person: their token stops working at once.
    Disable {
        #[command(flatten)]
        address: ServerAddress,
        name: String,
    },
    /// Give a person a new token (printed once, alone on the last line); the old one stops
    /// working at once.
    Rotate {
        #[command(flatten)]
        address: ServerAddress,
        name: String,
    },
    /// Print the SHA-256 of a token read from stdin, for `--users FILE`.
    Hash,
}

pub async fn users(args: UsersArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        UsersCommand::Add {
            address,
            name,
            role,
            pods,
        } => {
            let client = Client::connect(&address).await;
            let body = AddUserRequest {
                name,
                role,
                pods: (!pods.is_empty()).then_some(pods),
            };
            let added: UserToken = client
                .json(client.request(Method::POST, "/users").json(&body))
                .await?;
            print_token(&added, "added")?;
        }
        UsersCommand::List { address } => {
            let client = Client::connect(&address).await;
            let list: UserList = client.json(client.request(Method::GET, "/users")).await?;
            print_users(&list)?;
        }
        UsersCommand::Disable { address, name } => {
            let client = Client::connect(&address).await;
            let path = format!("/users/{}/disable", encode(&name));
            let user: User = client.json(client.request(Method::POST, &path)).await?;
            emit_line!("{}: disabled; their token no longer works", user.name);
        }
        UsersCommand::Rotate { address, name } => {
            let client = Client::connect(&address).await;
            let path = format!("/users/{}/rotate", encode(&name));
            let rotated: UserToken = client.json(client.request(Method::POST, &path)).await?;
            print_token(&rotated, "has a new token; the old one no longer works")?;
        }
        UsersCommand::Hash => {
            let mut token = String::new();
            std::io::stdin().read_to_string(&mut token)?;
            let token = token.trim();
            anyhow::ensure!(!token.is_empty(), "give the token on stdin");
            emit_line!("{}", podq_server::team::tokens::hash(token));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The person, then their token alone on the last line, so a script can take `tail -1`.
fn print_token(added: &UserToken, what: &str) -> anyhow::Result<()> {
    let user = &added.user;
    let pods = user
        .pods
        .as_ref()
        .map(|p| format!(" for pods {}", p.join(", ")))
        .unwrap_or_default();
    emit_line!("{} ({}{pods}) {what}.", user.name, user.role);
    emit_line!("Their token is shown this once; podq keeps only its hash:");
    emit_line!("{}", added.token);
    Ok(())
}

fn print_users(list: &UserList) -> anyhow::Result<()> {
    let mut table = Table::new(&["NAME", "ROLE", "PODS", "CREATED", "BY", "DISABLED"]);
    for user in &list.users {
        table.row(vec![
            user.name.clone(),
            user.role.clone(),
            user.pods.as_ref().map_or("-".to_owned(), |p| p.join(",")),
            user.created_at.format("%Y-%m-%d %H:%M").to_string(),
            user.created_by.clone(),
            user.disabled_at
                .map_or("-".to_owned(), |t| t.format("%Y-%m-%d %H:%M").to_string()),
        ]);
    }
    if table.is_empty() {
        emit_line!("no people yet: `podq users add NAME --role admin` adds the first");
    } else {
        emit_text!("{}", table.render());
    }
    if list.from_file {
        emit_line!("(from --users FILE: change them there)");
    }
    Ok(())
}

#[derive(Args)]
pub struct WhoAmIArgs {
    #[command(flatten)]
    address: ServerAddress,
}

pub async fn whoami(args: WhoAmIArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    let me: WhoAmI = client.json(client.request(Method::GET, "/whoami")).await?;
    emit_line!("{} ({}): may {}", me.name, me.role, me.may.join(", "));
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct AuditArgs {
    #[command(flatten)]
    address: ServerAddress,
    /// Only changes made by this person (or worker:POD, schedule:ID, podq).
    #[arg(long)]
    person: Option<String>,
    /// Only changes to this job (an id, or an experiment name for its newest job).
    #[arg(long)]
    job: Option<String>,
    /// Only changes at or after this time (RFC 3339).
    #[arg(long)]
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// At most this many entries, newest first.
    #[arg(long, default_value_t = 50)]
    limit: i64,
    /// Print the JSON answer.
    #[arg(long)]
    json: bool,
}

pub async fn audit(args: AuditArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    let mut query = format!("/audit?limit={}", args.limit);
    let filters = [
        ("person", args.person),
        ("job", args.job),
        ("since", args.since.map(|t| t.to_rfc3339())),
    ];
    for (key, value) in filters {
        if let Some(value) = value {
            query.push_str(&format!("&{key}={}", encode(&value)));
        }
    }
    let page: AuditPage = client.json(client.request(Method::GET, &query)).await?;
    if args.json {
        emit_line!("{}", serde_json::to_string_pretty(&page)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = Table::new(&["AT", "BY", "ACTION", "JOB", "WHAT"]);
    for entry in &page.entries {
        // What the server stored is printed so that it can draw no row of its own: a
        // newline or an escape sequence in a message shows as `\n` or `\u{1b}`.
        let by = match &entry.token_holder {
            Some(holder) if entry.by.starts_with("worker:") && holder != "worker" => {
                format!("{} (token {holder})", entry.by)
            }
            _ => entry.by.clone(),
        };
        table.row(vec![
            entry.at.format("%Y-%m-%d %H:%M:%S").to_string(),
            escape_controls(&by),
            escape_controls(&entry.action),
            entry
                .job_id
                .map_or("-".to_owned(), |j| j.to_string()[..8].to_owned()),
            escape_controls(&entry.message),
        ]);
    }
    if table.is_empty() {
        emit_line!("no changes match");
    } else {
        emit_text!("{}", table.render());
    }
    Ok(ExitCode::SUCCESS)
}
