//! Headless Chromium for the HTML reports' tests: render a file, read its DOM back, and check
//! from Chromium's network log that the page fetched nothing but itself.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Chromium from the Debian package (`make test` installs it: hack/install-chromium.sh).
pub fn chromium() -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "chromium is not installed: the report tests render the HTML reports in headless \
             Chromium; `make test` installs Debian's package (hack/install-chromium.sh, \
             apt-get as root)"
        )
    })
}

/// Runs headless Chromium on `page` with `mode` (`--dump-dom`, `--screenshot=…`), logging
/// every network request to `net_log`; returns its standard output.
pub fn headless(page: &Path, mode: &str, net_log: &Path) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1100,1500",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--log-net-log={}", net_log.display()))
        .arg(mode)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("running chromium");
    assert!(
        out.status.success(),
        "chromium {mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of attribute `name` in the start tag `tag`.
pub fn attr<'t>(tag: &'t str, name: &str) -> Option<&'t str> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    Some(&tag[start..start + tag[start..].find('"')?])
}

/// Text as `--dump-dom` serializes it, read back: the entities it writes in text and
/// attribute values.
pub fn unescape(serialized: &str) -> String {
    serialized
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// Asserts that Chromium's network log `net_log` shows no request made for the page `page`
/// (a file name) but the file itself: no request whose network isolation key is the page's
/// (file://) went to anything but a file. Chromium's own background requests (its updater,
/// accounts) carry other keys and are not the page's doing.
pub fn assert_fetched_nothing(net_log: &Path, page: &str) {
    let text = std::fs::read_to_string(net_log).expect("net log");
    let net: serde_json::Value = serde_json::from_str(&text).expect("net log JSON");
    let mut fetched = BTreeSet::new();
    for event in net["events"].as_array().expect("events") {
        let params = &event["params"];
        let (Some(url), Some(key)) = (
            params["url"].as_str(),
            params["network_isolation_key"].as_str(),
        ) else {
            continue;
        };
        if key.starts_with("file://") && !url.starts_with("file://") {
            fetched.insert(url.to_owned());
        }
    }
    let log = net_log.display();
    assert!(fetched.is_empty(), "{log}: the page fetched {fetched:?}");
    // The log is not empty of the page: the check above can see its requests.
    assert!(text.contains(page), "{log} logged nothing of {page}");
}
