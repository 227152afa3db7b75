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
