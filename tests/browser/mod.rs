//! A real headless Chromium driven over the Chrome DevTools Protocol (the `chromiumoxide`
//! crate), for tests and benches that look at the dashboard as a person does: load the page,
//! wait for what it shows, click, read the DOM, take screenshots.
//!
//! Needs Chromium at `/usr/bin/chromium` (Debian: `apt-get install -y chromium`; `scripts/test`
//! installs it), or another binary named by `PODQ_TEST_CHROMIUM`. Without it a test fails
//! with that advice: it never passes silently.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chromiumoxide::browser::{Browser as CdpBrowser, BrowserConfig};
use chromiumoxide::cdp::browser_protocol::page::CaptureScreenshotFormat;
use chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use chromiumoxide::handler::viewport::Viewport;
use chromiumoxide::page::ScreenshotParams;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use chromiumoxide::Page as CdpPage;

const CHROMIUM: &str = "/usr/bin/chromium";
pub const WIDTH: u32 = 1280;
pub const HEIGHT: u32 = 900;

/// Where screenshots go: `target/test-artifacts/dashboard/` (kept after the run).
pub fn artifacts_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts/dashboard");
    std::fs::create_dir_all(&dir).expect("create target/test-artifacts/dashboard");
    dir
}

pub fn chromium_path() -> PathBuf {
    let path = std::env::var_os("PODQ_TEST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(CHROMIUM));
    assert!(
        path.is_file(),
        "Chromium not found at {}. The dashboard tests drive a real headless browser: install \
         it with `apt-get install -y chromium` (Debian/Ubuntu; scripts/test does), or point \
         PODQ_TEST_CHROMIUM at a Chromium/Chrome binary.",
        path.display()
    );
    path
}

/// One headless Chromium with its own profile directory, closed (and waited for) on
/// [`Browser::close`], killed when dropped.
pub struct Browser {
    browser: CdpBrowser,
    handler: tokio::task::JoinHandle<()>,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn launch() -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let config = BrowserConfig::builder()
            .chrome_executable(chromium_path())
            // The CI container runs as root, where Chromium's sandbox cannot start.
            .no_sandbox()
            .user_data_dir(profile.path())
            .window_size(WIDTH, HEIGHT)
            .viewport(Viewport {
                width: WIDTH,
                height: HEIGHT,
                device_scale_factor: Some(1.0),
                emulating_mobile: false,
                is_landscape: true,
                has_touch: false,
            })
            .launch_timeout(Duration::from_secs(60))
            .request_timeout(Duration::from_secs(60))
            .args([
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                // Background tabs would have their timers throttled; every page here is
                // watched by a test.
                "--disable-background-timer-throttling",
                "--disable-renderer-backgrounding",
            ])
            .build()
            .expect("browser config");
        let (browser, mut handler) = CdpBrowser::launch(config)
            .await
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromium_path().display()));
        // The handler carries every CDP message; an event this version of the crate cannot
        // parse (Chromium is newer) is not a reason to stop reading.
        let handler = tokio::spawn(async move { while handler.next().await.is_some() {} });
        Browser {
            browser,
            handler,
            _profile: profile,
        }
    }

    /// A new tab on `url`, once its document has loaded.
    pub async fn open(&self, url: &str) -> Page {
        let page = self
            .browser
            .new_page(url)
            .await
            .unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
        Page { page }
    }

    /// A new blank tab (for a test that enables CDP domains before navigating).
    pub async fn blank(&self) -> Page {
        self.open("about:blank").await
    }

    pub async fn close(mut self) {
        let _ = self.browser.close().await;
        let _ = self.browser.wait().await;
        self.handler.abort();
    }
}

/// One tab.
pub struct Page {
    pub page: CdpPage,
}

impl Page {
    /// Evaluates a JavaScript expression (a promise is awaited) and returns its JSON value.
    pub async fn eval<T: DeserializeOwned>(&self, js: &str) -> T {
        let value = self
            .try_eval(js)
            .await
            .unwrap_or_else(|e| panic!("evaluating `{js}`: {e}"));
        serde_json::from_value(value.clone())
            .unwrap_or_else(|e| panic!("`{js}` returned {value}, not the expected type: {e}"))
    }

    /// As [`Page::eval`], with the error (a JavaScript exception, or a page between two
    /// documents) returned rather than raised.
    pub async fn try_eval(&self, js: &str) -> Result<Value, String> {
        let params = EvaluateParams::builder()
            .expression(js)
            .await_promise(true)
            .return_by_value(true)
            .build()
            .map_err(|e| e.to_string())?;
        let result = self
            .page
            .evaluate_expression(params)
            .await
            .map_err(|e| e.to_string())?;
        Ok(result.into_value().unwrap_or(Value::Null))
    }

    /// Polls `js` until it returns something other than `null`, `undefined` or `false`, and
    /// returns that; panics with `what` (and what the page showed) after `timeout`.
    pub async fn wait_for<T: DeserializeOwned>(
        &self,
        timeout: Duration,
        what: &str,
        js: &str,
    ) -> T {
        let deadline = Instant::now() + timeout;
        let mut last_error = None;
        loop {
            match self.try_eval(&format!("(async () => ({js}))()")).await {
                Ok(value) if !(value.is_null() || value == Value::Bool(false)) => {
                    return serde_json::from_value(value.clone()).unwrap_or_else(|e| {
                        panic!("waiting for {what}: `{js}` returned {value}: {e}")
                    });
                }
                Ok(_) => {}
                // Between two documents (a reload, a navigation) there is no context to
                // evaluate in for a moment.
                Err(e) => last_error = Some(e),
            }
            if Instant::now() >= deadline {
                let shown = self
                    .try_eval("document.body ? document.body.innerText.slice(0, 3000) : ''")
                    .await
                    .unwrap_or_default();
                let _ = self.screenshot("timeout").await;
                panic!(
                    "timed out after {timeout:?} waiting for {what} (`{js}`; last error: \
                     {last_error:?}). The page showed:\n{shown}"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Clicks the element `selector` matches (scrolled into view, a real mouse event). An
    /// element the page re-rendered meanwhile is looked up again, within a deadline.
    pub async fn click(&self, selector: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let attempt = async {
                let element = self.page.find_element(selector).await?;
                element.scroll_into_view().await?;
                element.click().await?;
                Ok::<(), chromiumoxide::error::CdpError>(())
            };
            match attempt.await {
                Ok(()) => return,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("clicking `{selector}`: {e}"),
            }
        }
    }

    /// Sets a form control's value as a user would, firing `input` and `change`.
    pub async fn set_value(&self, selector: &str, value: &str) {
        let js = format!(
            "(() => {{ const e = document.querySelector({sel}); if (!e) return false; \
             e.value = {val}; e.dispatchEvent(new Event('input', {{bubbles: true}})); \
             e.dispatchEvent(new Event('change', {{bubbles: true}})); return true; }})()",
            sel = serde_json::to_string(selector).unwrap(),
            val = serde_json::to_string(value).unwrap()
        );
        assert!(
            self.eval::<bool>(&js).await,
            "no element matches `{selector}`"
        );
    }

    pub async fn url(&self) -> String {
        self.eval("location.href").await
    }

    pub async fn goto(&self, url: &str) {
        self.page
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("cannot navigate to {url}: {e}"));
    }

    pub async fn reload(&self) {
        self.page.reload().await.expect("reload");
    }

    /// A PNG of the viewport, saved as `<artifacts>/<name>.png`; returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self
            .page
            .screenshot(
                ScreenshotParams::builder()
                    .format(CaptureScreenshotFormat::Png)
                    .build(),
            )
            .await
            .unwrap_or_else(|e| panic!("screenshot {name}: {e}"));
        let path = artifacts_dir().join(format!("{name}.png"));
        std::fs::write(&path, &png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }
}
