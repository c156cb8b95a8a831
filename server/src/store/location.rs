//! Where the store lives, as given on the command line, and how it is shown: a URL's
//! password never reaches a log or an error.

use std::path::PathBuf;

use super::backend::postgres;
use super::{Backend, StoreError};

/// Where the store lives: a SQLite file, or a PostgreSQL database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Location {
    /// A `postgres://` or `postgresql://` URL, a `sqlite://PATH` URL, or a plain file path.
    pub fn parse(text: &str) -> Result<Location, StoreError> {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            postgres::check_url(text).map_err(|e| {
                StoreError::BadLocation(format!("`{}` is not a PostgreSQL URL: {e}", redact(text)))
            })?;
            return Ok(Location::Postgres(text.to_owned()));
        }
        if let Some(path) = text.strip_prefix("sqlite://") {
            let path = path.split('?').next().unwrap_or_default();
            if path.is_empty() {
                return Err(StoreError::BadLocation(format!(
                    "`{text}` names no file: write sqlite:///absolute/path.db or sqlite://relative.db"
                )));
            }
            return Ok(Location::Sqlite(PathBuf::from(path)));
        }
        if text.contains("://") {
            return Err(StoreError::BadLocation(format!(
                "`{}` is neither a postgres:// nor a sqlite:// URL",
                redact(text)
            )));
        }
        Ok(Location::Sqlite(PathBuf::from(text)))
    }

    pub fn backend(&self) -> Backend {
        match self {
            Location::Sqlite(_) => Backend::Sqlite,
            Location::Postgres(_) => Backend::Postgres,
        }
    }
}

/// What a location looks like in a log or an error: a URL's password is not shown.
pub fn redact(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => match rest[..at].split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***{}", &rest[at..]),
            None => text.to_owned(),
        },
        None => text.to_owned(),
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "{}", path.display()),
            Location::Postgres(url) => f.write_str(&redact(url)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{redact, Location};

    #[test]
    fn a_location_is_a_postgres_url_a_sqlite_url_or_a_path() {
        assert_eq!(
            Location::parse("postgres://u:secret@db:5432/podq").unwrap(),
            Location::Postgres("postgres://u:secret@db:5432/podq".into())
        );
        assert_eq!(
            Location::parse("sqlite:///var/lib/podq.db").unwrap(),
            Location::Sqlite("/var/lib/podq.db".into())
        );
        assert_eq!(
            Location::parse("./podq.db").unwrap(),
            Location::Sqlite("./podq.db".into())
        );
        let error = Location::parse("mysql://u:secret@db/podq")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("neither") && !error.contains("secret"),
            "{error}"
        );
        assert!(Location::parse("sqlite://").is_err());
        assert_eq!(
            redact("postgres://u:secret@db/podq"),
            "postgres://u:***@db/podq"
        );
    }
}
