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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::collections::HashMap;
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;
    use crate::federation::{Bounds, federate};
    use crate::fetch::{FetchConfig, Fetcher};

    /// `(url, what, received, total)` of a [`Event::Bytes`].
    type Bytes = (String, Download, u64, Option<u64>);

    /// Every event, owned: the crawl's (debug-printed) and the downloads'.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>, Mutex<Vec<Bytes>>);

    impl Progress for Recorder {
        fn report(&self, event: &Event<'_>) {
            match *event {
                Event::Bytes {
                    url,
                    what,
                    received,
                    total,
                } => self
                    .1
                    .lock()
                    .unwrap()
                    .push((url.to_string(), what, received, total)),
                other => self.0.lock().unwrap().push(format!("{other:?}")),
            }
        }
    }

    type Routes = Arc<Mutex<HashMap<String, Vec<u8>>>>;

    /// A loopback server answering from its routes (path to body), 404 elsewhere.
    fn serve() -> (String, Routes) {
        let routes: Routes = Arc::default();
        let shared = Arc::clone(&routes);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
                    let found = shared.lock().unwrap().get(uri.path()).cloned();
                    async move {
                        match found {
                            Some(body) => (axum::http::StatusCode::OK, body),
                            None => (axum::http::StatusCode::NOT_FOUND, b"{}".to_vec()),
                        }
                    }
                });
                axum::serve(listener, app).await.unwrap();
            });
        });
        (format!("http://{}", rx.recv().unwrap()), routes)
    }

    fn index(federates: &[String]) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "indexVersion": "0.1",
            "generatedAt": "2026-01-01T00:00:00.000Z",
            "packages": [],
            "federates": federates,
        }))
        .unwrap()
    }

    #[test]
    fn a_crawl_reports_each_level_and_each_index_loaded() {
        // root -> a, b; a -> c, b (b is known already); c -> root (seen).
        let (base, routes) = serve();
        let at = |p: &str| format!("{base}/{p}.json");
        let sizes: Vec<(String, u64)> = [
            ("root", index(&[at("a"), at("b")])),
            ("a", index(&[at("c"), at("b")])),
            ("b", index(&[])),
            ("c", index(&[at("root")])),
        ]
        .into_iter()
        .map(|(p, body)| {
            let size = body.len() as u64;
            routes.lock().unwrap().insert(format!("/{p}.json"), body);
            (at(p), size)
        })
        .collect();
        let recorder = Arc::new(Recorder::default());
        let fetcher = Fetcher::new(FetchConfig::default())
            .unwrap()
            .with_progress(Reporter::new(recorder.clone()));
        let root = format!("{base}/root.json");
        let network = federate(
            &fetcher,
            std::slice::from_ref(&root),
            &[],
            Bounds::default(),
            None,
        )
        .unwrap();
        assert_eq!(network.documents.len(), 4);

        let events = recorder.0.lock().unwrap().clone();
        let levels: Vec<&String> = events.iter().filter(|e| e.starts_with("Level")).collect();
        assert_eq!(
            levels,
            [
                "Level { depth: 0, urls: 1, loaded: 0, known: 1 }",
                "Level { depth: 1, urls: 2, loaded: 1, known: 3 }",
                "Level { depth: 2, urls: 1, loaded: 3, known: 4 }",
            ],
            "{events:?}"
        );
        let indexes: Vec<&String> = events.iter().filter(|e| e.starts_with("Index")).collect();
        assert_eq!(indexes.len(), 4, "{events:?}");
        assert_eq!(
            indexes[0],
            &format!("Index {{ url: {root:?}, depth: 0, loaded: 1, known: 1 }}")
        );
        // Level 1 is fetched in parallel: its two indexes are counted 2 and 3, in either order.
        let mut counted: Vec<String> = indexes[1..3]
            .iter()
            .map(|e| e.split("loaded: ").nth(1).unwrap().to_string())
            .collect();
        counted.sort();
        assert_eq!(counted, ["2, known: 3 }", "3, known: 3 }"]);
        assert!(
            indexes[3].ends_with("depth: 2, loaded: 4, known: 4 }"),
            "{}",
            indexes[3]
        );

        // Every index document's bytes were reported, ending at its size.
        let bytes = recorder.1.lock().unwrap().clone();
        for (url, size) in sizes {
            let last = bytes.iter().rev().find(|(u, ..)| *u == url).unwrap();
            assert_eq!(
                (last.1, last.2, last.3),
                (Download::Document, size, Some(size))
            );
        }
    }

    #[test]
    fn a_tarball_download_reports_its_bytes_up_to_its_size() {
        // Bytes that do not compress and take many chunks.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let body: Vec<u8> = (0..300_001)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let (base, routes) = serve();
        routes
            .lock()
            .unwrap()
            .insert("/pkg.tgz".into(), body.clone());
        let recorder = Arc::new(Recorder::default());
        let fetcher = Fetcher::new(FetchConfig::default())
            .unwrap()
            .with_progress(Reporter::new(recorder.clone()));
        let url = format!("{base}/pkg.tgz");
        let fetched = fetcher.tarball(&url).unwrap();
        assert_eq!(fetched.body, body);

        let bytes = recorder.1.lock().unwrap().clone();
        assert!(
            bytes.len() > 2,
            "the body arrives in chunks: {}",
            bytes.len()
        );
        assert!(bytes.iter().all(|(u, what, _, total)| *u == url
            && *what == Download::Tarball
            && *total == Some(body.len() as u64)));
        assert_eq!(bytes[0].2, 0, "reported when the headers are in");
        assert_eq!(bytes.last().unwrap().2, body.len() as u64);
        // Each report counts up: the increments sum to the tarball's size.
        let steps: u64 = bytes.windows(2).map(|w| w[1].2 - w[0].2).sum();
        assert_eq!(steps, body.len() as u64);

        // No reporter: nothing is reported, the same bytes arrive.
        let silent = Fetcher::new(FetchConfig::default()).unwrap();
        assert!(!silent.progress().is_active());
        assert_eq!(silent.tarball(&url).unwrap().body, body);
        assert_eq!(recorder.1.lock().unwrap().len(), bytes.len());
    }
}
