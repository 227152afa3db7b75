//! Files: reads outside the grant, writes outside the private tmp, symlinks out of the package,
//! filling the tmp. Each attempt fails with the kernel's refusal, the host file is unchanged,
//! and the matching grant makes the same capability succeed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{ALL, Lang, Package, assert_host_alive, chmod, guest_error, limits, ok_output};
use capability_sandbox::{Grants, Limits};
use serde_json::json;

const SECRET: &str = "TOP-SECRET-host-file-7f3a9c";

fn secret_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret.txt");
    std::fs::write(&path, SECRET).unwrap();
    (dir, path)
}

#[test]
fn reading_outside_the_grant_fails_and_the_grant_opens_it() {
    let (_dir, path) = secret_file();
    for lang in ALL {
        let pkg = Package::new(lang);
        let input = json!({"action": "read", "path": path});
        let out = pkg.run(input.clone(), &Grants::none(), &limits());
        let (code, message) = guest_error(&out);
        assert!(
            code == "ENOENT" || code == "EACCES",
            "{lang:?}: {code} {message}"
        );
        assert!(!format!("{:?}", out.result).contains(SECRET));
        // Paths the host never exposes are not there either.
        for hidden in ["/etc/shadow", "/root/.bashrc", "/home"] {
            let out = pkg.run(
                json!({"action": "read", "path": hidden}),
                &Grants::none(),
                &limits(),
            );
            let (code, _) = guest_error(&out);
            assert!(
                matches!(code.as_str(), "ENOENT" | "EACCES" | "EISDIR"),
                "{lang:?} {hidden}: {code}"
            );
        }
        // Granted: the same capability reads it.
        let out = pkg.run(input, &Grants::none().read(&path), &limits());
        assert_eq!(ok_output(&out)["content"], SECRET, "{lang:?}");
        assert_eq!(
            out.boundary.read_paths,
            vec![path.canonicalize().unwrap().display().to_string()]
        );
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), SECRET);
}

#[test]
fn granting_a_directory_does_not_open_its_siblings() {
    let (dir, path) = secret_file();
    let granted = dir.path().join("granted");
    std::fs::create_dir(&granted).unwrap();
    std::fs::write(granted.join("ok.txt"), "fine").unwrap();
    for lang in ALL {
        let pkg = Package::new(lang);
        let grants = Grants::none().read(&granted);
        let out = pkg.run(
            json!({"action": "read", "path": granted.join("ok.txt")}),
            &grants,
            &limits(),
        );
        assert_eq!(ok_output(&out)["content"], "fine");
        let out = pkg.run(json!({"action": "read", "path": path}), &grants, &limits());
        let (code, _) = guest_error(&out);
        assert!(code == "ENOENT" || code == "EACCES", "{lang:?}: {code}");
    }
}

#[test]
fn writing_outside_the_private_tmp_fails_and_the_grant_opens_it() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "original").unwrap();
    // Host permissions apply to the guest (as nobody when the host is root): the granted
    // directory and file must be writable by others for the grant to be usable.
    chmod(dir.path(), 0o777);
    chmod(&victim, 0o666);
    for lang in ALL {
        let pkg = Package::new(lang);
        let targets = [
            victim.clone(),
            dir.path().join("new-file.txt"),
            pkg.dir.path().join("planted.txt"),
            "/package/planted.txt".into(),
            "/usr/planted.txt".into(),
            "/etc/planted.txt".into(),
            "/planted.txt".into(),
        ];
        for target in &targets {
            let out = pkg.run(
                json!({"action": "write", "path": target, "data": "pwned"}),
                &Grants::none(),
                &limits(),
            );
            let (code, message) = guest_error(&out);
            assert!(
                matches!(code.as_str(), "ENOENT" | "EACCES" | "EROFS" | "EPERM"),
                "{lang:?} {}: {code} {message}",
                target.display()
            );
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original");
        assert!(!dir.path().join("new-file.txt").exists());
        assert!(!pkg.dir.path().join("planted.txt").exists());
        // The private tmp is writable (and private).
        let out = pkg.run(
            json!({"action": "write", "path": "/tmp/scratch.txt", "data": "mine"}),
            &Grants::none(),
            &limits(),
        );
        assert_eq!(ok_output(&out)["written"], true);
        // A read grant does not allow writing.
        let out = pkg.run(
            json!({"action": "write", "path": victim, "data": "pwned"}),
            &Grants::none().read(dir.path()),
            &limits(),
        );
        let (code, _) = guest_error(&out);
        assert!(
            matches!(code.as_str(), "EACCES" | "EROFS"),
            "{lang:?}: {code}"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original");
    }
    // Granted filesystem.write on the directory: the same capability writes.
    for lang in ALL {
        let pkg = Package::new(lang);
        let out = pkg.run(
            json!({"action": "write", "path": victim, "data": format!("written by {lang:?}")}),
            &Grants::none().write(dir.path()),
            &limits(),
        );
        assert_eq!(ok_output(&out)["written"], true);
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            format!("written by {lang:?}")
        );
    }
}

#[test]
fn a_symlink_in_the_package_does_not_reach_the_host() {
    let (_dir, path) = secret_file();
    for lang in ALL {
        let pkg = Package::new(lang);
        std::os::unix::fs::symlink(&path, pkg.dir.path().join("leak")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", pkg.dir.path().join("passwd")).unwrap();
        let out = pkg.run(
            json!({"action": "read", "path": "/package/leak"}),
            &Grants::none(),
            &limits(),
        );
        let (code, _) = guest_error(&out);
        assert!(code == "ENOENT" || code == "EACCES", "{lang:?}: {code}");
        // /etc/passwd inside is the sandbox's own, not the host's.
        let out = pkg.run(
            json!({"action": "read", "path": "/package/passwd"}),
            &Grants::none(),
            &limits(),
        );
        let content = ok_output(&out)["content"].as_str().unwrap().to_string();
        assert!(content.starts_with("sandbox:x:"), "{content}");
        assert!(!content.contains("root:"), "{content}");
    }
}

#[test]
fn filling_the_tmp_stops_at_its_size() {
    let limits = Limits {
        tmp_bytes: 8 << 20,
        ..limits()
    };
    for lang in ALL {
        let pkg = Package::new(lang);
        let out = pkg.run(json!({"action": "filltmp"}), &Grants::none(), &limits);
        let (code, message) = guest_error(&out);
        assert_eq!(code, "ENOSPC", "{lang:?}: {message}");
        assert_eq!(out.boundary.limit("tmpSize").unwrap().value, 8 << 20);
    }
    assert_host_alive(Lang::Native);
}
