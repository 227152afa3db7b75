//! What the guest may not learn or touch on the host: the package's host path (not in any
//! mount table), kernel-internal `/proc` files (addresses, slabs, timers, keys), and, when the
//! host runs as root, anything host permissions keep from an unprivileged user (the guest runs
//! as `nobody`: `--allow-read /etc` does not read `/etc/shadow`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use crate::common::{ALL, Package, chmod, guest_error, limits, ok_output};
use capability_sandbox::{Grants, ModuleSpec, SandboxError};
use serde_json::json;

fn host_is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The content of `path` as the guest reads it, or the guest's error code.
fn read(pkg: &Package, path: &str, grants: &Grants) -> Result<String, String> {
    let out = pkg.run(json!({"action": "read", "path": path}), grants, &limits());
    match &out.result {
        Ok(v) => Ok(v["content"].as_str().unwrap_or_default().to_string()),
        Err(SandboxError::Guest(g)) => Err(g.code.clone().unwrap_or_default()),
        Err(e) => panic!("{path}: {e}\nstderr: {}", out.stderr),
    }
}

#[test]
fn the_package_host_path_is_in_no_mount_table() {
    for lang in ALL {
        // Plain package, and a package inside an install root (as npm installs lay out).
        let plain = Package::new(lang);
        let outer = tempfile::tempdir().unwrap();
        let inner = outer.path().join("node_modules").join("hostile-pkg");
        std::fs::create_dir_all(&inner).unwrap();
        let module = plain.spec.module.trim_start_matches("./").to_string();
        std::fs::copy(plain.dir.path().join(&module), inner.join(&module)).unwrap();
        let installed = Package {
            spec: ModuleSpec {
                package_root: inner.clone(),
                install_root: Some(outer.path().to_path_buf()),
                ..plain.spec.clone()
            },
            dir: outer,
        };
        for (pkg, host) in [
            (&plain, plain.dir.path()),
            (&installed, installed.dir.path()),
        ] {
            let host = host.canonicalize().unwrap();
            let name = host.file_name().unwrap().to_string_lossy().to_string();
            for table in [
                "/proc/self/mountinfo",
                "/proc/self/mounts",
                "/proc/self/mountstats",
                "/proc/self/maps",
            ] {
                let content = read(pkg, table, &Grants::none())
                    .unwrap_or_else(|e| panic!("{lang:?} {table}: {e}"));
                if table != "/proc/self/maps" {
                    assert!(content.contains("/package"), "{lang:?} {table}: {content}");
                }
                assert!(
                    !content.contains(&host.display().to_string()) && !content.contains(&name),
                    "{lang:?} {table} shows the package's host path {}:\n{content}",
                    host.display()
                );
            }
        }
        // The package itself is there and readable.
        let content = read(
            &installed,
            &format!("/package/node_modules/hostile-pkg/{module}"),
            &Grants::none(),
        );
        assert!(content.is_ok(), "{lang:?}: {content:?}");
    }
}

#[test]
fn kernel_internals_in_proc_are_hidden() {
    let files = [
        "/proc/slabinfo",
        "/proc/vmallocinfo",
        "/proc/kallsyms",
        "/proc/timer_list",
        "/proc/pagetypeinfo",
        "/proc/zoneinfo",
        "/proc/iomem",
        "/proc/ioports",
        "/proc/modules",
        "/proc/keys",
        "/proc/key-users",
        "/proc/buddyinfo",
        "/proc/sched_debug",
        "/proc/kcore",
    ];
    for lang in ALL {
        let pkg = Package::new(lang);
        for file in files {
            if !Path::new(file).exists() {
                continue;
            }
            match read(&pkg, file, &Grants::none()) {
                Err(code) => assert!(
                    matches!(code.as_str(), "EACCES" | "EPERM" | "ENOENT"),
                    "{lang:?} {file}: {code}"
                ),
                Ok(content) => {
                    assert!(content.is_empty(), "{lang:?} reads {file}:\n{content:.400}")
                }
            }
        }
        // What runtimes do need is still there.
        for file in [
            "/proc/self/status",
            "/proc/meminfo",
            "/proc/cpuinfo",
            "/proc/self/stat",
        ] {
            let content = read(&pkg, file, &Grants::none());
            assert!(
                content.as_ref().is_ok_and(|c| !c.is_empty()),
                "{lang:?} {file}: {content:?}"
            );
        }
    }
}

#[test]
fn a_root_host_runs_the_guest_as_nobody() {
    if !host_is_root() {
        eprintln!("the host is not root: the guest is the host user, nothing to check");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o755);
    let private = dir.path().join("private.txt");
    std::fs::write(&private, "root only").unwrap();
    chmod(&private, 0o600);
    let public = dir.path().join("public.txt");
    std::fs::write(&public, "for everyone").unwrap();
    chmod(&public, 0o644);
    let out_dir = tempfile::tempdir().unwrap();
    chmod(out_dir.path(), 0o777);
    for lang in ALL {
        let pkg = Package::new(lang);
        // A read grant on /etc does not read the shadow file.
        let etc = Grants::none().read("/etc");
        let out = pkg.run(
            json!({"action": "read", "path": "/etc/shadow"}),
            &etc,
            &limits(),
        );
        let (code, message) = guest_error(&out);
        assert_eq!(code, "EACCES", "{lang:?}: {message}");
        assert!(
            out.boundary.notes.iter().any(|n| n.contains("nobody")),
            "{:?}",
            out.boundary.notes
        );
        // ... while what others may read is readable.
        assert!(read(&pkg, "/etc/hostname", &etc).is_ok() || !Path::new("/etc/hostname").exists());
        // Host permissions decide inside a granted directory.
        let grants = Grants::none().read(dir.path());
        assert_eq!(
            read(&pkg, &private.display().to_string(), &grants),
            Err("EACCES".to_string()),
            "{lang:?}"
        );
        assert_eq!(
            read(&pkg, &public.display().to_string(), &grants),
            Ok("for everyone".to_string()),
            "{lang:?}"
        );
        // No supplementary group of the host's root survives.
        let status = read(&pkg, "/proc/self/status", &Grants::none()).unwrap();
        let groups = status.lines().find(|l| l.starts_with("Groups:")).unwrap();
        assert_eq!(groups.trim(), "Groups:", "{lang:?}: {groups}");
        // Files the guest creates belong to nobody on the host.
        let made = out_dir.path().join(format!("made-by-{lang:?}"));
        let out = pkg.run(
            json!({"action": "write", "path": made, "data": "x"}),
            &Grants::none().write(out_dir.path()),
            &limits(),
        );
        assert_eq!(ok_output(&out)["written"], true, "{lang:?}");
        let meta = std::fs::metadata(&made).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (65534, 65534), "{lang:?}");
    }
}
