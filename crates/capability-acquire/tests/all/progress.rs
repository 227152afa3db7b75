//! Progress: a crawl reports each level and each index loaded, a download its bytes.

use std::sync::{Arc, Mutex};

use capability_acquire::federation::{Bounds, federate};
use capability_acquire::fetch::{FetchConfig, Fetcher};
use capability_acquire::progress::*;
use capability_test_support::http::Server;
use capability_test_support::registry;

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

/// An index of no package, federating `federates`.
fn index(federates: &[String]) -> Vec<u8> {
    serde_json::to_vec(&registry::index(Vec::new(), federates)).unwrap()
}

#[test]
fn a_crawl_reports_each_level_and_each_index_loaded() {
    // root -> a, b; a -> c, b (b is known already); c -> root (seen).
    let server = Server::start();
    let base = server.base.clone();
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
        server.put(&format!("/{p}.json"), 200, body);
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
    let server = Server::start();
    let base = server.base.clone();
    server.put("/pkg.tgz", 200, body.clone());
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
