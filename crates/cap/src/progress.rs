//! The progress line of federation crawls and downloads (`cap install`, `cap exec` of an
//! indexed capability, `find`/`info --index`, `novelty`, `doctor`): drawn with `indicatif`
//! on **stderr**, only when stderr is a terminal, `TERM` is not `dumb` and `CAP_NO_PROGRESS`
//! is unset (or `0`). Stdout, the JSON output, never carries it. The line is cleared when
//! the command ends, whether it succeeded or failed.

use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use capability_host::acquire::progress::{Download, Event};
use capability_host::acquire::{Progress, Reporter};
use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The environment variable that turns progress off (`CAP_NO_PROGRESS=1`).
pub const NO_PROGRESS: &str = "CAP_NO_PROGRESS";

/// Whether progress is drawn: stderr is a terminal and `CAP_NO_PROGRESS` does not opt out.
fn wanted() -> bool {
    let opted_out = std::env::var_os(NO_PROGRESS).is_some_and(|v| !v.is_empty() && v != "0");
    !opted_out && std::io::stderr().is_terminal()
}

/// The reporter of one command and the guard that clears its line when dropped (at the end
/// of the command, on success, error or panic). Without a terminal the reporter reports to
/// nothing.
pub fn terminal() -> (Reporter, Shown) {
    if !wanted() {
        return (Reporter::default(), Shown(None));
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(style(SPINNER));
    let line = Line {
        bar: bar.clone(),
        crawl: Mutex::new(None),
        bytes_bar: AtomicBool::new(false),
    };
    (Reporter::new(Arc::new(line)), Shown(Some(bar)))
}

/// A crawl or a download of unknown size: the message alone.
const SPINNER: &str = "{spinner} {wide_msg}";
/// A tarball of known size: a bar of its bytes.
const BYTES: &str = "{spinner} downloading {bytes}/{total_bytes} [{bar:30}] {wide_msg}";

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .progress_chars("=> ")
}

/// Clears the progress line when dropped.
pub struct Shown(Option<ProgressBar>);

impl Drop for Shown {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

/// The progress line: the crawl's counts (kept while documents download), or a tarball's bar.
struct Line {
    bar: ProgressBar,
    /// The summary of the crawl going on (`indexes 2/3 loaded, level 1`).
    crawl: Mutex<Option<String>>,
    /// Whether the line shows a tarball's bar.
    bytes_bar: AtomicBool,
}

impl Line {
    fn set_bytes_bar(&self, on: bool) {
        if self.bytes_bar.swap(on, Ordering::Relaxed) != on {
            self.bar.set_style(style(if on { BYTES } else { SPINNER }));
        }
    }

    fn crawl(&self) -> Option<String> {
        self.crawl.lock().ok()?.clone()
    }

    fn set_crawl(&self, summary: Option<String>) {
        if let Ok(mut c) = self.crawl.lock() {
            *c = summary;
        }
    }
}

fn bytes(received: u64, total: Option<u64>) -> String {
    match total {
        Some(t) => format!("{}/{}", HumanBytes(received), HumanBytes(t)),
        None => HumanBytes(received).to_string(),
    }
}

impl Progress for Line {
    fn report(&self, event: &Event<'_>) {
        // Narrow terminals cut the line on the right: the counts and the bytes come before
        // the URL.
        match *event {
            Event::Level {
                depth,
                urls,
                loaded,
                known,
            } => {
                let summary = format!("indexes {loaded}/{known} loaded, level {depth}");
                self.set_bytes_bar(false);
                self.bar.set_message(format!("{summary}: fetching {urls}"));
                self.set_crawl(Some(summary));
            }
            Event::Index {
                url,
                depth,
                loaded,
                known,
            } => {
                let summary = format!("indexes {loaded}/{known} loaded, level {depth}");
                self.set_bytes_bar(false);
                self.bar.set_message(format!("{summary}: {url}"));
                // The crawl goes on while some known index is not loaded.
                self.set_crawl((loaded < known).then_some(summary));
            }
            Event::Bytes {
                url,
                what: Download::Tarball,
                received,
                total: Some(total),
            } => {
                // The URL and the size once, when the headers are in; then the bytes.
                if received == 0 {
                    self.bar.set_message(url.to_string());
                    self.bar.set_length(total);
                    self.set_bytes_bar(true);
                }
                self.bar.set_position(received);
            }
            Event::Bytes {
                url,
                what,
                received,
                total,
            } => {
                self.set_bytes_bar(false);
                let verb = match what {
                    Download::Tarball => "downloading",
                    Download::Document => "fetching",
                };
                let message = match self.crawl() {
                    Some(c) => format!("{c}: {verb} {} {url}", bytes(received, total)),
                    None => format!("{verb} {} {url}", bytes(received, total)),
                };
                self.bar.set_message(message);
            }
            _ => {}
        }
    }
}
