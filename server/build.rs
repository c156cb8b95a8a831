// `sqlx::migrate!` embeds the migration files it finds when it runs; a file added to the
// directory must make it run again (sqlx's documented build script).
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
