//! OCI on loopback: Debian's `docker-registry` (the CNCF distribution registry) on a free
//! port ([`DockerRegistry`]), podman when it runs here ([`podman`]), and a `FROM scratch`
//! image of a small static guest pushed to a registry ([`push_guest`]).
//!
//! The guest prints `marker=<marker> uid=<uid>` and its arguments; `sleep` sleeps two
//! minutes, `fail` exits 3 after a line on stderr.
//!
//! Without `docker-registry` on PATH [`DockerRegistry::start`] says so and returns `None`
//! (the test passes) unless `CAPABILITY_TEST_REQUIRE_REGISTRY=1`; without a podman that
//! runs, [`podman`] does the same unless `CAPABILITY_TEST_REQUIRE_OCI=1`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::http::free_port;
use crate::process::Running;

/// Set (by CI) where docker-registry is installed.
pub const REQUIRE_REGISTRY_ENV: &str = "CAPABILITY_TEST_REQUIRE_REGISTRY";
/// Set (by CI) where podman must run.
pub const REQUIRE_OCI_ENV: &str = "CAPABILITY_TEST_REQUIRE_OCI";

/// `docker-registry serve` on a free loopback port, its storage in a temporary directory;
/// killed when dropped.
pub struct DockerRegistry {
    _process: Running,
    _dir: tempfile::TempDir,
    /// `127.0.0.1:<port>`.
    pub addr: String,
}

impl DockerRegistry {
    /// Starts the registry and waits until `GET /v2/` answers 200.
    pub fn start() -> Option<DockerRegistry> {
        let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join("docker-registry"))
            .find(|p| p.is_file());
        let Some(program) = found else {
            assert!(
                std::env::var_os(REQUIRE_REGISTRY_ENV).is_none(),
                "{REQUIRE_REGISTRY_ENV} is set but docker-registry is not on PATH"
            );
            eprintln!(
                "skipping: docker-registry is not installed (apt-get install docker-registry)"
            );
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let config = dir.path().join("registry.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{ level: error, accesslog: {{ disabled: true }} }}\nstorage: {{ filesystem: {{ rootdirectory: {} }}, delete: {{ enabled: true }} }}\nhttp: {{ addr: \"{addr}\" }}\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new(program)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let registry = DockerRegistry {
            _process: Running(child),
            _dir: dir,
            addr,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if std::net::TcpStream::connect(&registry.addr).is_ok() {
                let (status, _, _) = crate::http::http(&registry.addr, "GET", "/v2/", &[], "");
                if status == 200 {
                    return Some(registry);
                }
            }
            assert!(Instant::now() < deadline, "docker-registry did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// podman's path when `podman info` succeeds here; else `None` after saying why (a
/// failure under `CAPABILITY_TEST_REQUIRE_OCI`).
pub fn podman() -> Option<PathBuf> {
    let answered = Command::new("podman")
        .args(["info", "--format", "{{.Host.OCIRuntime.Name}}"])
        .stdin(Stdio::null())
        .output();
    match answered {
        Ok(out) if out.status.success() => Some(PathBuf::from("podman")),
        other => {
            let why = match other {
                Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_string(),
                Err(e) => e.to_string(),
            };
            assert!(
                std::env::var_os(REQUIRE_OCI_ENV).is_none(),
                "{REQUIRE_OCI_ENV} is set but podman cannot run: {why}"
            );
            eprintln!("skipping: podman cannot run here: {why}");
            None
        }
    }
}

const GUEST: &str = r#"
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "sleep") == 0) { sleep(120); return 0; }
    if (argc > 1 && strcmp(argv[1], "fail") == 0) { fprintf(stderr, "failing on purpose\n"); return 3; }
    FILE *m = fopen("/marker", "r");
    char marker[64] = {0};
    if (m) { fgets(marker, sizeof marker, m); fclose(m); }
    printf("marker=%s uid=%d\n", marker, (int)getuid());
    for (int i = 1; i < argc; i++) printf("arg[%d]=%s\n", i, argv[i]);
    return 0;
}
"#;

/// The static guest, compiled once.
pub fn guest() -> &'static [u8] {
    static GUEST_BIN: OnceLock<Vec<u8>> = OnceLock::new();
    GUEST_BIN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("guest.c"), GUEST).unwrap();
        let out = Command::new("gcc")
            .args(["-static", "-O1", "-o"])
            .arg(dir.path().join("guest"))
            .arg(dir.path().join("guest.c"))
            .output()
            .unwrap_or_else(|e| panic!("gcc is required for the OCI tests: {e}"));
        assert!(
            out.status.success(),
            "gcc -static failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read(dir.path().join("guest")).unwrap()
    })
}

/// Runs `cmd`, asserting it succeeds; its trimmed stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Builds a `FROM scratch` image of the guest with `marker`, pushes it to `<registry>/<repo>:
/// <tag>` and returns the digest podman reports for the push (`--digestfile`).
pub fn push_guest(
    engine: &std::path::Path,
    registry: &str,
    repo: &str,
    tag: &str,
    marker: &str,
) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("guest"), guest()).unwrap();
    std::fs::write(dir.path().join("marker"), marker).unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(dir.path().join("guest"), mode).unwrap();
        std::fs::set_permissions(
            dir.path().join("marker"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
    }
    std::fs::write(
        dir.path().join("Containerfile"),
        "FROM scratch\nCOPY guest /guest\nCOPY marker /marker\nENTRYPOINT [\"/guest\"]\n",
    )
    .unwrap();
    let local = format!("localhost/capability-binders-test/{repo}:{marker}");
    run_ok(
        Command::new(engine)
            .args(["build", "-q", "--timestamp", "0", "-t", &local])
            .arg(dir.path()),
    );
    let digestfile = dir.path().join("digest");
    run_ok(
        Command::new(engine)
            .args(["push", "-q", "--tls-verify=false", "--digestfile"])
            .arg(&digestfile)
            .arg(&local)
            .arg(format!("docker://{registry}/{repo}:{tag}")),
    );
    std::fs::read_to_string(&digestfile)
        .unwrap()
        .trim()
        .to_string()
}
