//! Unpacking a tarball: entry paths are taken below the package's top directory (its own
//! entry is no file), `.` is dropped and `..` refused; a symlink may point anywhere inside
//! the package, checked lexically, never outside it or at an absolute path.

use capability_acquire::unpack::{Limits, unpack};
use capability_test_support::registry::{Extra, tarball};

/// Unpacks a tarball of the fixture with `extra` into a fresh directory: the directory, and
/// the refusal's message, if any.
fn unpacked(extra: Extra) -> (tempfile::TempDir, Result<(), String>) {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("pkg");
    let r = unpack(&tarball("t", "1.0.0", extra), &dest, Limits::default())
        .map(|_| ())
        .map_err(|e| e.to_string());
    (dir, r)
}

#[test]
fn links_are_checked_lexically() {
    for (at, to) in [
        ("package/lib/a.js", "b.js"),
        ("package/lib/a.js", "../index.js"),
    ] {
        let (dir, r) = unpacked(Extra::Symlink(at, to));
        assert_eq!(r, Ok(()), "{at} -> {to}");
        let link = dir.path().join("pkg").join(&at["package/".len()..]);
        assert_eq!(std::fs::read_link(&link).unwrap().to_str(), Some(to));
    }
    for (at, to) in [
        ("package/lib/a.js", "../../x"),
        ("package/a", "/etc/passwd"),
    ] {
        let (dir, r) = unpacked(Extra::Symlink(at, to));
        let e = r.unwrap_err();
        assert!(e.contains("outside the package"), "{at} -> {to}: {e}");
        assert!(
            !dir.path()
                .join("pkg")
                .join(&at["package/".len()..])
                .exists()
        );
    }
}

#[test]
fn entry_paths_are_taken_below_the_top_directory() {
    let (dir, r) = unpacked(Extra::RawPath("package/./lib/x.js"));
    assert_eq!(r, Ok(()));
    assert_eq!(
        std::fs::read(dir.path().join("pkg/lib/x.js")).unwrap(),
        b"x"
    );
    assert!(dir.path().join("pkg/package.json").is_file());
    assert!(!dir.path().join("pkg/package").exists());
    // The top directory's own entry.
    let (dir, r) = unpacked(Extra::Dir("package/"));
    assert_eq!(r, Ok(()));
    assert!(dir.path().join("pkg/add.mjs").is_file());
    let (_dir, r) = unpacked(Extra::RawPath("package/../x"));
    assert!(r.unwrap_err().contains("contains `..`"));
}

/// One entry of a tarball built in memory (under `package/`).
#[derive(Clone, Copy)]
pub enum Entry<'a> {
    File(&'a str, &'a [u8]),
    Link(&'a str, &'a str),
}

/// An npm-style tarball of the fixture package renamed `name@1.0.0` with these entries
/// after its own, in this order.
pub fn tarball_with(name: &str, entries: &[Entry<'_>]) -> Vec<u8> {
    use std::io::Write as _;
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    let file = |b: &mut tar::Builder<_>, path: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_path(path).unwrap();
        h.set_cksum();
        b.append(&h, data).unwrap();
    };
    let pj = capability_test_support::registry::package_json(name, "1.0.0");
    file(
        &mut b,
        "package/package.json",
        &serde_json::to_vec_pretty(&pj).unwrap(),
    );
    file(
        &mut b,
        "package/add.mjs",
        &std::fs::read(capability_test_support::registry::fixture_dir().join("add.mjs")).unwrap(),
    );
    for entry in entries {
        match *entry {
            Entry::File(path, data) => file(&mut b, &format!("package/{path}"), data),
            Entry::Link(at, to) => {
                // GNU long-name entries carry targets past 100 bytes.
                let mut h = tar::Header::new_gnu();
                h.set_size(0);
                h.set_entry_type(tar::EntryType::Symlink);
                b.append_link(&mut h, format!("package/{at}"), to).unwrap();
            }
        }
    }
    let mut gz = b.into_inner().unwrap();
    gz.flush().unwrap();
    gz.finish().unwrap()
}

/// Chains of links that each pass the lexical check but, resolved through one another as
/// the kernel resolves them, leave the package.
pub fn escaping_chains() -> Vec<(&'static str, Vec<Entry<'static>>)> {
    use Entry::Link;
    vec![
        (
            // `y` is the package root, so `x` is its parent's parent.
            "y then x",
            vec![Link("a/b/y", "../.."), Link("a/b/x", "y/../..")],
        ),
        (
            // The link that makes `x` escape comes after it.
            "x then y",
            vec![Link("a/b/x", "y/../.."), Link("a/b/y", "../..")],
        ),
        (
            // Three links: l1 -> p/l2/.. ; p/l2 -> q/r/l3 ; p/q/r/l3 -> ../../.. (the root).
            "three links",
            vec![
                Link("p/q/r/l3", "../../.."),
                Link("p/l2", "q/r/l3"),
                Link("l1", "p/l2/.."),
            ],
        ),
        (
            // Through a link to the root and on to a file beside the package.
            "up and over",
            vec![Link("d/up", ".."), Link("d/x", "up/../etc/passwd")],
        ),
        (
            // A link to the root's parent reached through a link to a link.
            "link to link",
            vec![
                Link("m/root", ".."),
                Link("m/alias", "root"),
                Link("m/out", "alias/.."),
            ],
        ),
    ]
}

#[test]
fn link_chains_are_resolved_through_the_package_and_escapes_keep_nothing() {
    for (case, entries) in escaping_chains() {
        for pre_existing in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let dest = dir.path().join("pkg");
            if pre_existing {
                std::fs::create_dir(&dest).unwrap();
            }
            let r = unpack(&tarball_with("t", &entries), &dest, Limits::default());
            let e = r.map(|_| ()).unwrap_err().to_string();
            assert!(e.contains("outside the package"), "{case}: {e}");
            if pre_existing {
                let left: Vec<_> = std::fs::read_dir(&dest).unwrap().flatten().collect();
                assert!(left.is_empty(), "{case}: {left:?}");
            } else {
                assert!(!dest.exists(), "{case}: the refused package was kept");
            }
        }
    }
}

#[test]
fn link_loops_and_overlong_chains_are_refused_and_a_chain_inside_is_kept() {
    use Entry::Link;
    let names: Vec<String> = (0..=41).map(|i| format!("l{i}")).collect();
    let chain = |n: usize| -> Vec<Entry<'_>> {
        (0..n)
            .map(|i| match i + 1 < n {
                true => Link(&names[i], &names[i + 1]),
                false => Link(&names[i], "add.mjs"),
            })
            .collect()
    };
    let refused: Vec<(&str, Vec<Entry<'_>>)> = vec![
        ("two-link loop", vec![Link("a", "b"), Link("b", "a")]),
        ("self loop", vec![Link("s", "s")]),
        (
            "loop through a directory",
            vec![Link("d/x", "../d/y"), Link("d/y", "x")],
        ),
        ("41 links", chain(41)),
    ];
    for (case, entries) in refused {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("pkg");
        let e = unpack(&tarball_with("t", &entries), &dest, Limits::default())
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("does not resolve within 40 links"),
            "{case}: {e}"
        );
        assert!(!dest.exists(), "{case}: the refused package was kept");
    }
    // Controls: 40 links, and links that go through each other but stay inside.
    let inside: Vec<(&str, Vec<Entry<'_>>)> = vec![
        ("40 links", chain(40)),
        (
            "through each other",
            vec![
                Link("lib/cur", "../lib2"),
                Link("lib2/z", "../add.mjs"),
                Link("x", "lib/cur/z"),
                Link("lib/self", "../lib/./cur/../cur"),
            ],
        ),
    ];
    for (case, entries) in inside {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("pkg");
        let r = unpack(&tarball_with("t", &entries), &dest, Limits::default());
        assert!(r.is_ok(), "{case}: {:?}", r.err());
        let last = match entries.last().unwrap() {
            Link(at, _) => dest.join(at),
            Entry::File(at, _) => dest.join(at),
        };
        assert!(std::fs::symlink_metadata(&last).is_ok(), "{case}");
    }
    // The kept chain reads as the module it names.
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("pkg");
    unpack(&tarball_with("t", &chain(40)), &dest, Limits::default()).unwrap();
    assert_eq!(
        std::fs::read(dest.join("l0")).unwrap(),
        std::fs::read(dest.join("add.mjs")).unwrap()
    );
}

#[test]
fn links_that_take_too_long_to_resolve_are_refused() {
    // 300 links, each through 1000 steps (`d/..` 500 times): more than the archive's budget.
    let target = format!("{}add.mjs", "d/../".repeat(500));
    let names: Vec<String> = (0..300).map(|i| format!("l{i}")).collect();
    let mut entries = vec![Entry::File("d/f", b"f")];
    entries.extend(names.iter().map(|n| Entry::Link(n, &target)));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("pkg");
    let started = std::time::Instant::now();
    let e = unpack(&tarball_with("t", &entries), &dest, Limits::default())
        .map(|_| ())
        .unwrap_err()
        .to_string();
    eprintln!(
        "refusing 300 links of 1000 steps took {:?}",
        started.elapsed()
    );
    assert!(e.contains("its links take more than 262144 steps"), "{e}");
    assert!(!dest.exists());
    // The same links, fewer of them, resolve inside the package and are kept.
    let dest = dir.path().join("few");
    unpack(&tarball_with("t", &entries[..50]), &dest, Limits::default()).unwrap();
    assert_eq!(
        std::fs::read(dest.join("l0")).unwrap(),
        std::fs::read(dest.join("add.mjs")).unwrap()
    );
}
