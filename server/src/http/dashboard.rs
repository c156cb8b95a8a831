//! The dashboard: static files from `web/`, embedded at build time so the binary works
//! offline and alone.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use rust_embed::RustEmbed;

use crate::AppState;

#[derive(RustEmbed)]
#[folder = "../web/"]
struct Assets;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { asset("index.html") }))
        .route(
            "/web/{*path}",
            get(|Path(path): Path<String>| async move { asset(&path) }),
        )
}

/// The dashboard's policy: its own scripts, styles and API only, and no page of another
/// site may frame it (its buttons cancel and requeue jobs: a framing page could trick a
/// click). Styles set through the CSSOM (`el.style`) need no `'unsafe-inline'`.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn asset(path: &str) -> Response {
    match Assets::get(path) {
        Some(file) => {
            let mime = mime_guess::from_path(path).first_or_octet_stream();
            (
                [
                    (header::CONTENT_TYPE, mime.as_ref().to_owned()),
                    (
                        header::CONTENT_SECURITY_POLICY,
                        CONTENT_SECURITY_POLICY.to_owned(),
                    ),
                    (header::X_FRAME_OPTIONS, "DENY".to_owned()),
                    (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
                ],
                file.data.into_owned(),
            )
                .into_response()
        }
        None => (StatusCode::NOT_FOUND, "not found\n").into_response(),
    }
}
