//! What acquisition reports while it works: the federation crawl (each level, each index
//! loaded, how many are known) and the bytes of every download as they arrive (documents
//! such as indexes and packuments, and tarballs).
//!
//! The library only reports [`Event`]s to a [`Progress`] (`cap` draws them as a bar on a
//! terminal); the default [`Reporter`] reports to nothing. A [`Fetcher`](crate::Fetcher)
//! carries its reporter ([`Fetcher::with_progress`](crate::Fetcher::with_progress)), and
//! [`federate`](crate::federate) and [`install`](crate::install()) report through it
//! ([`InstallOptions::progress`](crate::InstallOptions::progress)).
//!
//! Events may come from several threads at once (a level of the crawl is fetched in
//! parallel, bytes arrive on the HTTP client's thread).

use std::sync::Arc;

/// What is downloaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Download {
    /// An index, discovery document, packument or key set.
    Document,
    /// A package tarball.
    Tarball,
}

/// One thing that happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A level of the federation crawl starts (`depth` 0: the roots): `urls` indexes of it
    /// are fetched now; `loaded` indexes were loaded before it, `known` URLs are known so
    /// far (this level's included).
    Level {
        depth: usize,
        urls: usize,
        loaded: usize,
        known: usize,
    },
    /// An index of the crawl was loaded (fetched, revalidated or read from the cache):
    /// `loaded` of the `known` URLs are now loaded.
    Index {
        url: &'a str,
        depth: usize,
        loaded: usize,
        known: usize,
    },
    /// Bytes of a download arrived: `received` so far (0 when the headers are in; a
    /// redirect or a retry starts again from 0) of `total`, the `Content-Length` when the
    /// server sent one.
    Bytes {
        url: &'a str,
        what: Download,
        received: u64,
        total: Option<u64>,
    },
}

/// Receives the events. It must return quickly (it is called on the fetching threads).
pub trait Progress: Send + Sync {
    fn report(&self, event: &Event<'_>);
}

/// A shared [`Progress`], or nothing (the default: events are dropped).
#[derive(Clone, Default)]
pub struct Reporter(Option<Arc<dyn Progress>>);

impl Reporter {
    /// Reports to `progress`.
    pub fn new(progress: Arc<dyn Progress>) -> Reporter {
        Reporter(Some(progress))
    }

    /// Reports `event` (nothing when there is no receiver).
    pub fn report(&self, event: &Event<'_>) {
        if let Some(p) = &self.0 {
            p.report(event);
        }
    }

    /// Whether events go anywhere.
    pub fn is_active(&self) -> bool {
        self.0.is_some()
    }

    /// The body callback of the HTTP client for a download of `url` (`None` when there is
    /// no receiver).
    pub(crate) fn body(
        &self,
        url: &str,
        what: Download,
    ) -> Option<capability_openapi::http::BodyProgress> {
        let progress = Arc::clone(self.0.as_ref()?);
        let url = url.to_string();
        Some(Arc::new(move |received, total| {
            progress.report(&Event::Bytes {
                url: &url,
                what,
                received,
                total,
            });
        }))
    }
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Reporter")
            .field(&if self.is_active() { "active" } else { "none" })
            .finish()
    }
}
