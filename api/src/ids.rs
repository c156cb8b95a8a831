//! A job's id and a lease's id: both uuids, never interchangeable.
//!
//! On the wire and in either store each is the uuid's hyphenated lowercase text
//! (`0191e4f2-…`). Inside, the type says which it is, so a lease id cannot be passed where a
//! job id is expected, and a string that is not a uuid never gets past the door where it
//! was read (a path, a row).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A type kept in either store as its text (`FromStr` reads it back), so that rows and
/// `query_scalar` decode it directly; a text that does not parse is an error of the row.
#[cfg(feature = "sqlx")]
macro_rules! text_column {
    ($name:ty) => {
        impl<DB: sqlx::Database> sqlx::Type<DB> for $name
        where
            str: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <str as sqlx::Type<DB>>::type_info()
            }
            fn compatible(ty: &DB::TypeInfo) -> bool {
                <str as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $name
        where
            &'r str: sqlx::Decode<'r, DB>,
        {
            fn decode(value: DB::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <&'r str as sqlx::Decode<'r, DB>>::decode(value)?;
                Ok(text.parse::<$name>()?)
            }
        }
    };
}
#[cfg(not(feature = "sqlx"))]
macro_rules! text_column {
    ($name:ty) => {};
}
pub(crate) use text_column;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[cfg_attr(feature = "openapi", schema(value_type = String, format = Uuid))]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// A new random (v4) id.
            pub fn new_random() -> $name {
                $name(Uuid::new_v4())
            }

            pub fn as_uuid(self) -> Uuid {
                self.0
            }
        }

        impl From<Uuid> for $name {
            fn from(id: Uuid) -> Self {
                $name(id)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(text)
                    .map($name)
                    .map_err(|_| format!("`{text}` is not a {} (a uuid)", $what))
            }
        }

        text_column!($name);
    };
}

uuid_id!(
    /// A job: one submission of one experiment, across all its attempts.
    JobId,
    "job id"
);

uuid_id!(
    /// A lease: one attempt of a job on one pod, and the token of the worker holding it.
    LeaseId,
    "lease id"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json_are_the_uuid_s() {
        let uuid = Uuid::new_v4();
        let id = JobId::from(uuid);
        assert_eq!(id.to_string(), uuid.to_string());
        assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{uuid}\""));
        assert_eq!(
            serde_json::from_str::<JobId>(&format!("\"{uuid}\"")).unwrap(),
            id
        );
        assert_eq!(uuid.to_string().parse::<JobId>().unwrap(), id);
    }

    #[test]
    fn not_a_uuid_is_refused_with_what_was_expected() {
        let err = "bert-small".parse::<LeaseId>().unwrap_err();
        assert_eq!(err, "`bert-small` is not a lease id (a uuid)");
        assert!(serde_json::from_str::<JobId>("\"bert-small\"").is_err());
    }
}
