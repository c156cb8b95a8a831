//! One query interface over both stores.
//!
//! podq's SQL is written once, in the dialect both SQLite and PostgreSQL accept, with SQLite's
//! `?` / `?N` placeholders. A query carries its arguments as plain values ([`Arg`]) and is
//! bound natively when it meets a connection: on SQLite as written, on PostgreSQL after its
//! placeholders are renumbered to `$N`. Both sides use sqlx's own drivers, so each keeps its
//! types, its statement cache and its `EXPLAIN`. The connection ([`Conn`]) and the read pool
//! ([`Pool`]) dispatch to either driver; the few statements that differ live in `backend/`,
//! chosen by [`Conn::backend`].
//!
//! This was chosen over sqlx's `Any` driver (placeholders are passed through unchanged, so
//! `QueryBuilder<Any>` writes `?` that PostgreSQL rejects; rows are copied into its own value
//! type; SQLite's integer booleans would not decode) and over making every store function
//! generic over `sqlx::Database` (the bounds spread into the scheduler and every handler's
//! state, and the whole server would compile twice).

use std::borrow::Cow;
use std::marker::PhantomData;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgConnection, PgPool, PgRow};
use sqlx::sqlite::{SqliteArguments, SqliteConnection, SqlitePool, SqliteRow};
use sqlx::{Arguments, AssertSqlSafe, Connection, FromRow, Postgres, Sqlite};

/// Which database a store keeps its state in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// A connection to either store: the writer's own, or one borrowed from the read pool.
pub enum Conn {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
    SqlitePooled(PoolConnection<Sqlite>),
    PostgresPooled(PoolConnection<Postgres>),
}

enum Native<'c> {
    Sqlite(&'c mut SqliteConnection),
    Postgres(&'c mut PgConnection),
}

impl Conn {
    pub fn backend(&self) -> Backend {
        match self {
            Conn::Sqlite(_) | Conn::SqlitePooled(_) => Backend::Sqlite,
            Conn::Postgres(_) | Conn::PostgresPooled(_) => Backend::Postgres,
        }
    }

    fn native(&mut self) -> Native<'_> {
        match self {
            Conn::Sqlite(c) => Native::Sqlite(c),
            Conn::SqlitePooled(c) => Native::Sqlite(c),
            Conn::Postgres(c) => Native::Postgres(c),
            Conn::PostgresPooled(c) => Native::Postgres(c),
        }
    }

    /// Runs statements that take no arguments (several may be joined with `;`).
    pub async fn batch(&mut self, sql: &'static str) -> Result<(), sqlx::Error> {
        match self.native() {
            Native::Sqlite(c) => sqlx::raw_sql(sql).execute(c).await.map(drop),
            Native::Postgres(c) => sqlx::raw_sql(sql).execute(c).await.map(drop),
        }
    }

    /// A pooled connection that must not be reused (say, a transaction could not be ended)
    /// is closed instead of going back to the pool.
    pub fn close_on_drop(&mut self) {
        match self {
            Conn::SqlitePooled(c) => c.close_on_drop(),
            Conn::PostgresPooled(c) => c.close_on_drop(),
            Conn::Sqlite(_) | Conn::Postgres(_) => {}
        }
    }

    /// Ends the writer's own connection cleanly; a pooled one just goes back to its pool.
    pub async fn close(self) -> Result<(), sqlx::Error> {
        match self {
            Conn::Sqlite(c) => c.close().await,
            Conn::Postgres(c) => c.close().await,
            Conn::SqlitePooled(_) | Conn::PostgresPooled(_) => Ok(()),
        }
    }
}

/// The read pool of either store.
#[derive(Clone)]
pub enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Pool {
    pub fn backend(&self) -> Backend {
        match self {
            Pool::Sqlite(_) => Backend::Sqlite,
            Pool::Postgres(_) => Backend::Postgres,
        }
    }

    pub async fn acquire(&self) -> Result<Conn, sqlx::Error> {
        Ok(match self {
            Pool::Sqlite(pool) => Conn::SqlitePooled(pool.acquire().await?),
            Pool::Postgres(pool) => Conn::PostgresPooled(pool.acquire().await?),
        })
    }
}

/// One bound value. Integers and flags are 64-bit on both stores (PostgreSQL's columns are
/// `BIGINT`, flags 0 or 1 as in SQLite), so a value binds the same way everywhere.
#[derive(Clone, Debug)]
pub enum Arg {
    Int(Option<i64>),
    Real(Option<f64>),
    Text(Option<String>),
    /// Encoded chunks of metric points and log lines (`store/chunks.rs`).
    Blob(Option<Vec<u8>>),
}

pub trait IntoArg {
    fn into_arg(self) -> Arg;
    /// The typed NULL of this kind of value (PostgreSQL wants to know what a NULL is).
    fn null() -> Arg
    where
        Self: Sized;
}

impl IntoArg for Arg {
    fn into_arg(self) -> Arg {
        self
    }
    fn null() -> Arg {
        Arg::Text(None)
    }
}

macro_rules! int_arg {
    ($($t:ty),*) => {$(
        impl IntoArg for $t {
            fn into_arg(self) -> Arg {
                Arg::Int(Some(i64::from(self)))
            }
            fn null() -> Arg {
                Arg::Int(None)
            }
        }
    )*};
}
int_arg!(i64, i32, u32, u16, u8, bool);

impl IntoArg for f64 {
    fn into_arg(self) -> Arg {
        Arg::Real(Some(self))
    }
    fn null() -> Arg {
        Arg::Real(None)
    }
}

impl IntoArg for &str {
    fn into_arg(self) -> Arg {
        Arg::Text(Some(self.to_owned()))
    }
    fn null() -> Arg {
        Arg::Text(None)
    }
}

impl IntoArg for String {
    fn into_arg(self) -> Arg {
        Arg::Text(Some(self))
    }
    fn null() -> Arg {
        Arg::Text(None)
    }
}

impl IntoArg for &Option<String> {
    fn into_arg(self) -> Arg {
        Arg::Text(self.clone())
    }
    fn null() -> Arg {
        Arg::Text(None)
    }
}

impl IntoArg for &String {
    fn into_arg(self) -> Arg {
        Arg::Text(Some(self.clone()))
    }
    fn null() -> Arg {
        Arg::Text(None)
    }
}

/// Ids are kept as their uuid's text in both stores.
macro_rules! id_arg {
    ($($t:ty),*) => {$(
        impl IntoArg for $t {
            fn into_arg(self) -> Arg {
                Arg::Text(Some(self.to_string()))
            }
            fn null() -> Arg {
                Arg::Text(None)
            }
        }
    )*};
}
id_arg!(podq_api::JobId, podq_api::LeaseId);

impl IntoArg for Vec<u8> {
    fn into_arg(self) -> Arg {
        Arg::Blob(Some(self))
    }
    fn null() -> Arg {
        Arg::Blob(None)
    }
}

impl<T: IntoArg> IntoArg for Option<T> {
    fn into_arg(self) -> Arg {
        match self {
            Some(value) => value.into_arg(),
            None => T::null(),
        }
    }
    fn null() -> Arg {
        T::null()
    }
}

/// SQL text: a literal, or one built at run time (wrapped in `AssertSqlSafe` by its author,
/// who vouches that no input was pasted into it).
pub struct Sql(Cow<'static, str>);

impl From<&'static str> for Sql {
    fn from(sql: &'static str) -> Self {
        Sql(Cow::Borrowed(sql))
    }
}

impl From<AssertSqlSafe<String>> for Sql {
    fn from(sql: AssertSqlSafe<String>) -> Self {
        Sql(Cow::Owned(sql.0))
    }
}

impl Sql {
    fn for_sqlite(self) -> sqlx::SqlStr {
        use sqlx::SqlSafeStr;
        match self.0 {
            Cow::Borrowed(sql) => sql.into_sql_str(),
            Cow::Owned(sql) => AssertSqlSafe(sql).into_sql_str(),
        }
    }

    fn for_postgres(self) -> sqlx::SqlStr {
        use sqlx::SqlSafeStr;
        AssertSqlSafe(numbered_placeholders(&self.0)).into_sql_str()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Rewrites SQLite's `?N` and `?` placeholders as PostgreSQL's `$N`, leaving string
/// literals, quoted names and comments alone. A bare `?` numbers as SQLite numbers it: one
/// more than the largest number so far (<https://sqlite.org/lang_expr.html#varparam>).
pub fn numbered_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut largest = 0_usize;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                for inner in chars.by_ref() {
                    out.push(inner);
                    if inner == c {
                        break;
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                for inner in chars.by_ref() {
                    out.push(inner);
                    if inner == '\n' {
                        break;
                    }
                }
            }
            '?' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                let number = if digits.is_empty() {
                    largest + 1
                } else {
                    digits.parse().unwrap_or(0)
                };
                largest = largest.max(number);
                out.push('$');
                out.push_str(&number.to_string());
            }
            _ => out.push(c),
        }
    }
    out
}

fn sqlite_arguments(args: Vec<Arg>) -> Result<SqliteArguments, sqlx::Error> {
    let mut out = SqliteArguments::default();
    for arg in args {
        match arg {
            Arg::Int(v) => out.add(v),
            Arg::Real(v) => out.add(v),
            Arg::Text(v) => out.add(v),
            Arg::Blob(v) => out.add(v),
        }
        .map_err(sqlx::Error::Encode)?;
    }
    Ok(out)
}

fn postgres_arguments(args: Vec<Arg>) -> Result<PgArguments, sqlx::Error> {
    let mut out = PgArguments::default();
    for arg in args {
        match arg {
            Arg::Int(v) => out.add(v),
            Arg::Real(v) => out.add(v),
            Arg::Text(v) => out.add(v),
            Arg::Blob(v) => out.add(v),
        }
        .map_err(sqlx::Error::Encode)?;
    }
    Ok(out)
}

/// A row type both drivers can decode.
pub trait Decodable:
    for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{
}
impl<T> Decodable for T where
    T: for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{
}

/// A statement and its arguments, not yet run.
pub struct Query {
    sql: Sql,
    args: Vec<Arg>,
}

pub fn query(sql: impl Into<Sql>) -> Query {
    Query {
        sql: sql.into(),
        args: Vec::new(),
    }
}

pub fn query_as<T: Decodable>(sql: impl Into<Sql>) -> QueryAs<T> {
    QueryAs {
        query: query(sql),
        row: PhantomData,
    }
}

pub fn query_scalar<T>(sql: impl Into<Sql>) -> QueryScalar<T>
where
    (T,): Decodable,
{
    QueryScalar {
        inner: query_as(sql),
    }
}

impl Query {
    pub fn bind(mut self, value: impl IntoArg) -> Self {
        self.args.push(value.into_arg());
        self
    }

    /// Runs the statement and says how many rows it changed.
    pub async fn execute(self, conn: &mut Conn) -> Result<u64, sqlx::Error> {
        Ok(match conn.native() {
            Native::Sqlite(c) => {
                sqlx::query_with(self.sql.for_sqlite(), sqlite_arguments(self.args)?)
                    .execute(c)
                    .await?
                    .rows_affected()
            }
            Native::Postgres(c) => {
                sqlx::query_with(self.sql.for_postgres(), postgres_arguments(self.args)?)
                    .execute(c)
                    .await?
                    .rows_affected()
            }
        })
    }
}

/// Runs `query` as rows on whichever driver `conn` is: the same call, compiled per driver.
macro_rules! on_native {
    ($conn:expr, $query:expr, $fetch:ident) => {{
        let Query { sql, args } = $query;
        match $conn.native() {
            Native::Sqlite(c) => {
                sqlx::query_as_with(sql.for_sqlite(), sqlite_arguments(args)?)
                    .$fetch(c)
                    .await
            }
            Native::Postgres(c) => {
                sqlx::query_as_with(sql.for_postgres(), postgres_arguments(args)?)
                    .$fetch(c)
                    .await
            }
        }
    }};
}

pub struct QueryAs<T> {
    query: Query,
    row: PhantomData<fn() -> T>,
}

impl<T: Decodable> QueryAs<T> {
    pub fn bind(mut self, value: impl IntoArg) -> Self {
        self.query = self.query.bind(value);
        self
    }

    pub async fn fetch_all(self, conn: &mut Conn) -> Result<Vec<T>, sqlx::Error> {
        on_native!(conn, self.query, fetch_all)
    }

    pub async fn fetch_optional(self, conn: &mut Conn) -> Result<Option<T>, sqlx::Error> {
        on_native!(conn, self.query, fetch_optional)
    }

    pub async fn fetch_one(self, conn: &mut Conn) -> Result<T, sqlx::Error> {
        self.fetch_optional(conn)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }
}

pub struct QueryScalar<T> {
    inner: QueryAs<(T,)>,
}

impl<T> QueryScalar<T>
where
    (T,): Decodable,
{
    pub fn bind(mut self, value: impl IntoArg) -> Self {
        self.inner = self.inner.bind(value);
        self
    }

    pub async fn fetch_all(self, conn: &mut Conn) -> Result<Vec<T>, sqlx::Error> {
        Ok(self
            .inner
            .fetch_all(conn)
            .await?
            .into_iter()
            .map(|(v,)| v)
            .collect())
    }

    pub async fn fetch_optional(self, conn: &mut Conn) -> Result<Option<T>, sqlx::Error> {
        Ok(self.inner.fetch_optional(conn).await?.map(|(v,)| v))
    }

    pub async fn fetch_one(self, conn: &mut Conn) -> Result<T, sqlx::Error> {
        Ok(self.inner.fetch_one(conn).await?.0)
    }
}

/// Builds a statement whose shape depends on its input (optional filters), numbering its
/// placeholders as it goes: the run-time counterpart of `sqlx::QueryBuilder` for both stores.
pub struct Builder {
    sql: String,
    args: Vec<Arg>,
}

impl Builder {
    pub fn new(start: impl Into<String>) -> Self {
        Builder {
            sql: start.into(),
            args: Vec::new(),
        }
    }

    /// Appends SQL text written by podq, never input.
    pub fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    /// A bare `?`, numbered by both stores as the next one (`numbered_placeholders`). Not
    /// `?N`: SQLite keeps numbered placeholders in a list that sqlx's bind scans once per
    /// parameter (`sqlite3_bind_parameter_name`), so a statement of N of them costs N²; on a
    /// 500-value metrics batch that was the server's top cost (benches/fleet.rs).
    pub fn push_bind(&mut self, value: impl IntoArg) -> &mut Self {
        self.args.push(value.into_arg());
        self.sql.push('?');
        self
    }

    /// `VALUES (…), (…)`: one parenthesised row per item, its values bound by `each`.
    pub fn push_values<I, F>(&mut self, rows: I, mut each: F) -> &mut Self
    where
        I: IntoIterator,
        F: FnMut(Separated<'_>, I::Item),
    {
        self.sql.push_str("VALUES ");
        for (index, row) in rows.into_iter().enumerate() {
            if index > 0 {
                self.sql.push_str(", ");
            }
            self.sql.push('(');
            each(
                Separated {
                    builder: self,
                    first: true,
                },
                row,
            );
            self.sql.push(')');
        }
        self
    }

    /// `(?, ?, …)`: one bound value per item, for `IN`.
    pub fn push_list<I>(&mut self, items: I) -> &mut Self
    where
        I: IntoIterator,
        I::Item: IntoArg,
    {
        self.sql.push('(');
        for (index, item) in items.into_iter().enumerate() {
            if index > 0 {
                self.sql.push_str(", ");
            }
            self.push_bind(item);
        }
        self.sql.push(')');
        self
    }

    pub fn sql(&self) -> &str {
        &self.sql
    }

    pub fn build(self) -> Query {
        Query {
            sql: Sql(Cow::Owned(self.sql)),
            args: self.args,
        }
    }

    pub fn build_query_as<T: Decodable>(self) -> QueryAs<T> {
        QueryAs {
            query: self.build(),
            row: PhantomData,
        }
    }

    pub fn build_query_scalar<T>(self) -> QueryScalar<T>
    where
        (T,): Decodable,
    {
        QueryScalar {
            inner: self.build_query_as(),
        }
    }
}

/// The values of one row of [`Builder::push_values`], separated by commas.
pub struct Separated<'b> {
    builder: &'b mut Builder,
    first: bool,
}

impl Separated<'_> {
    pub fn push_bind(&mut self, value: impl IntoArg) -> &mut Self {
        if !self.first {
            self.builder.sql.push_str(", ");
        }
        self.first = false;
        self.builder.push_bind(value);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::numbered_placeholders;

    #[test]
    fn placeholders_are_numbered_outside_literals_and_comments() {
        assert_eq!(
            numbered_placeholders("SELECT ?, ?3, '?', \"a?\" -- ?\n, ? FROM t WHERE x = ?1"),
            "SELECT $1, $3, '?', \"a?\" -- ?\n, $4 FROM t WHERE x = $1"
        );
    }
}
