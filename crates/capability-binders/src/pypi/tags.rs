//! Wheel filenames and the tags the sandbox's interpreter accepts.
//!
//! **Filenames** ([`WheelName`]): `{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl`,
//! each tag part possibly a compressed set (`py2.py3-none-any` is two tags), per the binary
//! distribution format.
//!
//! **The accepted tags** ([`Interpreter::supported_tags`]) are computed, never guessed from the
//! host running the binder: [`Interpreter::probe`] runs the python3 the process sandbox runs
//! guests with (`python3` on `PATH`, as `capability-sandbox`'s default) once, isolated
//! (`python3 -I -S -c <script>`: no site, no user environment), and reads the facts it
//! prints as JSON: `sys.version_info`, `sys.implementation.name`, `sys.abiflags`,
//! `sysconfig`'s `SOABI`, `platform.machine()`, `platform.system()`, `sys.platform`,
//! `os.name`, the platform's release and version, and the C library
//! (`os.confstr("CS_GNU_LIBC_VERSION")`, e.g. `glibc 2.36`). The answer is cached for the
//! process. From those facts, for CPython 3.X on Linux with glibc 2.G on `<arch>`, the
//! platforms are `manylinux_2_Y_<arch>` for Y from G down to 5 (17 on architectures that
//! manylinux2014 introduced), each legacy alias next to its equivalent (`manylinux2014` =
//! 2.17, `manylinux2010` = 2.12, `manylinux1` = 2.5), then `linux_<arch>`; and the tags, most
//! specific first (a platform wheel is preferred to a universal one, as installers do):
//!
//! 1. `cp3X-cp3X<abiflags>-<platform>` for each platform;
//! 2. `cp3X-abi3-<platform>` and `cp3X-none-<platform>`, then `cp3Y-abi3-<platform>` for Y
//!    from X−1 down to 2 (the stable ABI of older releases);
//! 3. `py3X-none-<platform>`, `py3-none-<platform>`, `py3Y-none-<platform>` (Y < X);
//! 4. the universal tags: `cp3X-none-any`, `py3X-none-any`, `py3-none-any`, `py3Y-none-any`.
//!
//! A wheel is compatible when one of its tags is in the list; the best wheel of a release is
//! the one whose best tag comes first. Another implementation (PyPy) gets only the `py`
//! tags; a non-glibc Linux (musl) gets no `manylinux` platform.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::pep::{MarkerEnv, Version, normalize_name};
use super::{PypiError, PypiErrorKind};

/// One `python-abi-platform` tag.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag {
    pub python: String,
    pub abi: String,
    pub platform: String,
}

impl Tag {
    /// A tag from its three parts.
    pub fn new(python: &str, abi: &str, platform: &str) -> Tag {
        Tag {
            python: python.to_string(),
            abi: abi.to_string(),
            platform: platform.to_string(),
        }
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.python, self.abi, self.platform)
    }
}

/// The parts of a wheel's filename.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WheelName {
    /// As written in the filename (`my_pkg`).
    pub name: String,
    /// As written in the filename.
    pub version: String,
    pub build: Option<String>,
    /// Compressed tag sets, split (`py2.py3` → `["py2", "py3"]`).
    pub python: Vec<String>,
    pub abi: Vec<String>,
    pub platform: Vec<String>,
}

impl WheelName {
    /// Parses `{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl`.
    pub fn parse(filename: &str) -> Result<WheelName, PypiError> {
        let bad = |why: &str| {
            PypiError::new(
                PypiErrorKind::Invalid,
                format!("`{filename}` is not a valid wheel filename: {why}"),
            )
        };
        let stem = filename
            .strip_suffix(".whl")
            .ok_or_else(|| bad("it does not end in .whl"))?;
        let parts: Vec<&str> = stem.split('-').collect();
        let (name, version, build, tags) = match parts.as_slice() {
            [n, v, py, abi, plat] => (*n, *v, None, [*py, *abi, *plat]),
            [n, v, b, py, abi, plat] => (*n, *v, Some(*b), [*py, *abi, *plat]),
            _ => return Err(bad("it needs 5 or 6 dash-separated parts")),
        };
        if !super::pep::is_valid_name(name) {
            return Err(bad("its name is not a valid project name"));
        }
        Version::parse(version).map_err(|_| bad("its version is not PEP 440"))?;
        if let Some(b) = build
            && !b.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(bad("its build tag does not start with a digit"));
        }
        let split = |part: &str| -> Result<Vec<String>, PypiError> {
            let v: Vec<String> = part.split('.').map(str::to_string).collect();
            if v.iter()
                .any(|t| t.is_empty() || !t.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_'))
            {
                return Err(bad("a tag is empty or has unexpected characters"));
            }
            Ok(v)
        };
        Ok(WheelName {
            name: name.to_string(),
            version: version.to_string(),
            build: build.map(str::to_string),
            python: split(tags[0])?,
            abi: split(tags[1])?,
            platform: split(tags[2])?,
        })
    }

    /// The PEP 503 name.
    pub fn normalized_name(&self) -> String {
        normalize_name(&self.name)
    }

    /// The parsed version (the filename was checked to have a valid one).
    pub fn parsed_version(&self) -> Result<Version, PypiError> {
        Version::parse(&self.version)
    }

    /// Every tag of the compressed sets.
    pub fn tags(&self) -> Vec<Tag> {
        let mut out = Vec::new();
        for p in &self.python {
            for a in &self.abi {
                for pl in &self.platform {
                    out.push(Tag::new(p, a, pl));
                }
            }
        }
        out
    }

    /// The tag triple as written (`py2.py3-none-any`).
    pub fn tag_string(&self) -> String {
        format!(
            "{}-{}-{}",
            self.python.join("."),
            self.abi.join("."),
            self.platform.join(".")
        )
    }
}

/// The facts of the sandbox's python3 that decide which wheels it can import, and the
/// environment its markers are evaluated in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interpreter {
    /// `(major, minor, micro)`.
    pub version: (u32, u32, u32),
    /// `platform.python_version()` (`3.11.7`, `3.13.0rc1`).
    pub full_version: String,
    /// `sys.implementation.name` (`cpython`, `pypy`).
    pub implementation_name: String,
    /// `platform.python_implementation()` (`CPython`).
    pub python_implementation: String,
    /// `sys.implementation.version` as a version string.
    pub implementation_version: String,
    /// `sys.abiflags` (`""`, `"t"` for free-threaded builds, `"d"` for debug builds).
    pub abiflags: String,
    /// `sysconfig.get_config_var("SOABI")` (`cpython-311-x86_64-linux-gnu`).
    pub soabi: Option<String>,
    /// `platform.machine()` (`x86_64`, `aarch64`).
    pub machine: String,
    /// `platform.system()` (`Linux`).
    pub system: String,
    /// `sys.platform` (`linux`).
    pub sys_platform: String,
    /// `os.name` (`posix`).
    pub os_name: String,
    /// `platform.release()`.
    pub platform_release: String,
    /// `platform.version()`.
    pub platform_version: String,
    /// glibc `(major, minor)`; `None` on another C library.
    pub glibc: Option<(u32, u32)>,
}

/// What the interpreter prints: one JSON object.
const PROBE_SCRIPT: &str = r#"
import json, os, platform, sys, sysconfig
try:
    libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
except (ValueError, OSError, AttributeError):
    libc = ""
iv = sys.implementation.version
ivs = "%d.%d.%d" % (iv.major, iv.minor, iv.micro)
if iv.releaselevel != "final":
    ivs += iv.releaselevel[0] + str(iv.serial)
print(json.dumps({
    "version": list(sys.version_info[:3]),
    "full_version": platform.python_version(),
    "implementation_name": sys.implementation.name,
    "python_implementation": platform.python_implementation(),
    "implementation_version": ivs,
    "abiflags": getattr(sys, "abiflags", ""),
    "soabi": sysconfig.get_config_var("SOABI"),
    "machine": platform.machine(),
    "system": platform.system(),
    "sys_platform": sys.platform,
    "os_name": os.name,
    "platform_release": platform.release(),
    "platform_version": platform.version(),
    "libc": libc,
}))
"#;

static PROBED: OnceLock<Result<Interpreter, PypiError>> = OnceLock::new();

impl Interpreter {
    /// The facts of `python3` on `PATH` (the process sandbox's default interpreter), probed
    /// once per process.
    pub fn probe() -> Result<Interpreter, PypiError> {
        PROBED
            .get_or_init(|| Interpreter::probe_python(Path::new("python3")))
            .clone()
    }

    /// The facts of the interpreter at `python` (not cached): it runs
    /// `python -I -S -c <script>` once, with a 20 s deadline.
    pub fn probe_python(python: &Path) -> Result<Interpreter, PypiError> {
        let fail = |why: String| {
            PypiError::new(
                PypiErrorKind::Sandbox,
                format!("cannot read the wheel tags of {}: {why}", python.display()),
            )
        };
        let mut child = Command::new(python)
            .args(["-I", "-S", "-c", PROBE_SCRIPT])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| fail(format!("it cannot be started ({e})")))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(fail("it did not answer within 20 s".into()));
                }
                Err(e) => return Err(fail(format!("waiting for it failed ({e})"))),
            }
        }
        let out = child
            .wait_with_output()
            .map_err(|e| fail(format!("its output cannot be read ({e})")))?;
        if !out.status.success() {
            return Err(fail(format!(
                "it exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let facts: Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| fail(format!("its answer is not JSON ({e})")))?;
        Interpreter::from_facts(&facts).map_err(|e| fail(e.message))
    }

    /// The interpreter described by the probe's JSON (`version` `[3, 11, 7]`,
    /// `implementation_name`, `abiflags`, `machine`, `sys_platform`, `libc` `"glibc 2.36"`,
    /// ...; missing strings read as empty).
    pub fn from_facts(facts: &Value) -> Result<Interpreter, PypiError> {
        let s = |k: &str| {
            facts
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let version = facts
            .get("version")
            .and_then(Value::as_array)
            .and_then(|v| {
                let n = |i: usize| {
                    v.get(i)
                        .and_then(Value::as_u64)
                        .and_then(|x| u32::try_from(x).ok())
                };
                Some((n(0)?, n(1)?, n(2)?))
            })
            .ok_or_else(|| {
                PypiError::new(PypiErrorKind::Invalid, "the probe did not report `version`")
            })?;
        let glibc = s("libc").strip_prefix("glibc ").and_then(|v| {
            let mut it = v.trim().split('.');
            let major = it.next()?.parse().ok()?;
            let minor = it.next().unwrap_or("0").parse().ok()?;
            Some((major, minor))
        });
        let full_version = match s("full_version") {
            v if v.is_empty() => format!("{}.{}.{}", version.0, version.1, version.2),
            v => v,
        };
        Ok(Interpreter {
            version,
            full_version,
            implementation_name: s("implementation_name"),
            python_implementation: s("python_implementation"),
            implementation_version: s("implementation_version"),
            abiflags: s("abiflags"),
            soabi: facts
                .get("soabi")
                .and_then(Value::as_str)
                .map(str::to_string),
            machine: s("machine"),
            system: s("system"),
            sys_platform: s("sys_platform"),
            os_name: s("os_name"),
            platform_release: s("platform_release"),
            platform_version: s("platform_version"),
            glibc,
        })
    }

    /// The marker environment of this interpreter (`extra` empty).
    pub fn marker_env(&self) -> MarkerEnv {
        let mut env = MarkerEnv::new();
        env.set(
            "python_version",
            format!("{}.{}", self.version.0, self.version.1),
        );
        env.set("python_full_version", self.full_version.clone());
        env.set("os_name", self.os_name.clone());
        env.set("sys_platform", self.sys_platform.clone());
        env.set("platform_release", self.platform_release.clone());
        env.set("platform_system", self.system.clone());
        env.set("platform_version", self.platform_version.clone());
        env.set("platform_machine", self.machine.clone());
        env.set(
            "platform_python_implementation",
            self.python_implementation.clone(),
        );
        env.set("implementation_name", self.implementation_name.clone());
        env.set(
            "implementation_version",
            self.implementation_version.clone(),
        );
        env.set("extra", "");
        env
    }

    /// `cpython 3.11.7 on linux x86_64, glibc 2.36`: for messages.
    pub fn describe(&self) -> String {
        let libc = match self.glibc {
            Some((a, b)) => format!("glibc {a}.{b}"),
            None => "no glibc".to_string(),
        };
        format!(
            "{} {} on {} {}, {libc}",
            self.implementation_name, self.full_version, self.sys_platform, self.machine
        )
    }

    /// The machine as platform tags spell it.
    fn arch(&self) -> String {
        let m = self.machine.to_ascii_lowercase();
        match m.as_str() {
            "amd64" => "x86_64".to_string(),
            "arm64" => "aarch64".to_string(),
            "i386" | "i586" => "i686".to_string(),
            _ => m.replace(['-', '.', ' '], "_"),
        }
    }

    /// The binary platforms, most specific first (`any` is not among them).
    pub fn platforms(&self) -> Vec<String> {
        if self.sys_platform != "linux" {
            return Vec::new();
        }
        let arch = self.arch();
        let mut out = Vec::new();
        if let Some((2, minor)) = self.glibc {
            let oldest = if matches!(arch.as_str(), "x86_64" | "i686") {
                5
            } else {
                17
            };
            let mut y = minor;
            while y >= oldest {
                out.push(format!("manylinux_2_{y}_{arch}"));
                match y {
                    17 if matches!(
                        arch.as_str(),
                        "x86_64" | "i686" | "aarch64" | "armv7l" | "ppc64" | "ppc64le" | "s390x"
                    ) =>
                    {
                        out.push(format!("manylinux2014_{arch}"));
                    }
                    12 => out.push(format!("manylinux2010_{arch}")),
                    5 => out.push(format!("manylinux1_{arch}")),
                    _ => {}
                }
                if y == 0 {
                    break;
                }
                y -= 1;
            }
        }
        out.push(format!("linux_{arch}"));
        out
    }

    /// Every tag this interpreter accepts, most preferred first (see the module doc).
    pub fn supported_tags(&self) -> Vec<Tag> {
        let (major, minor, _) = self.version;
        let platforms = self.platforms();
        let mut tags = Vec::new();
        if major == 3 && self.implementation_name == "cpython" {
            let cp = format!("cp3{minor}");
            let own_abi = format!("{cp}{}", self.abiflags);
            for p in &platforms {
                tags.push(Tag::new(&cp, &own_abi, p));
            }
            // The stable ABI is not available to free-threaded builds.
            let abi3 = !self.abiflags.contains('t');
            for p in &platforms {
                if abi3 {
                    tags.push(Tag::new(&cp, "abi3", p));
                }
                tags.push(Tag::new(&cp, "none", p));
            }
            if abi3 {
                for y in (2..minor).rev() {
                    for p in &platforms {
                        tags.push(Tag::new(&format!("cp3{y}"), "abi3", p));
                    }
                }
            }
        }
        let mut pys = vec![format!("py{major}{minor}"), format!("py{major}")];
        pys.extend((0..minor).rev().map(|y| format!("py{major}{y}")));
        for p in &platforms {
            for py in &pys {
                tags.push(Tag::new(py, "none", p));
            }
        }
        if self.implementation_name == "cpython" {
            tags.push(Tag::new(&format!("cp{major}{minor}"), "none", "any"));
        }
        for py in &pys {
            tags.push(Tag::new(py, "none", "any"));
        }
        tags
    }

    /// The ranks of [`Interpreter::supported_tags`] (0 is the most preferred).
    pub fn tag_ranks(&self) -> TagRanks {
        TagRanks {
            ranks: self
                .supported_tags()
                .into_iter()
                .enumerate()
                .map(|(i, t)| (t, i))
                .collect(),
        }
    }
}

/// The accepted tags by preference, for choosing among a release's wheels.
#[derive(Clone, Debug)]
pub struct TagRanks {
    ranks: HashMap<Tag, usize>,
}

impl TagRanks {
    /// The rank of the wheel's best tag and that tag, or `None` when no tag is accepted.
    pub fn best(&self, wheel: &WheelName) -> Option<(usize, Tag)> {
        wheel
            .tags()
            .into_iter()
            .filter_map(|t| self.ranks.get(&t).map(|r| (*r, t)))
            .min_by_key(|(r, _)| *r)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cpython311() -> Interpreter {
        Interpreter::from_facts(&json!({
            "version": [3, 11, 7], "full_version": "3.11.7", "implementation_name": "cpython",
            "python_implementation": "CPython", "implementation_version": "3.11.7",
            "abiflags": "", "soabi": "cpython-311-x86_64-linux-gnu", "machine": "x86_64",
            "system": "Linux", "sys_platform": "linux", "os_name": "posix",
            "libc": "glibc 2.36"
        }))
        .unwrap()
    }

    #[test]
    fn wheel_names_parse() {
        let w = WheelName::parse("My_Pkg-1.0.post1-py2.py3-none-any.whl").unwrap();
        assert_eq!(w.name, "My_Pkg");
        assert_eq!(w.normalized_name(), "my-pkg");
        assert_eq!(w.version, "1.0.post1");
        assert_eq!(w.build, None);
        assert_eq!(
            w.tags(),
            vec![
                Tag::new("py2", "none", "any"),
                Tag::new("py3", "none", "any")
            ]
        );
        assert_eq!(w.tag_string(), "py2.py3-none-any");
        let w = WheelName::parse(
            "numpy-1.26.4-1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        )
        .unwrap();
        assert_eq!(w.build.as_deref(), Some("1"));
        assert_eq!(w.tags().len(), 2);
        for bad in [
            "pkg-1.0.tar.gz",
            "pkg-1.0-py3-none.whl",
            "pkg-x.y-py3-none-any.whl",
            "pkg-1.0-b1-py3-none-any.whl",
            "pkg-1.0-py3--any.whl",
            "-1.0-py3-none-any.whl",
            "a-b-1.0-py3-none-any-x-y.whl",
        ] {
            let e = WheelName::parse(bad).unwrap_err();
            assert_eq!(e.kind, PypiErrorKind::Invalid, "{bad}");
        }
    }

    #[test]
    fn cpython_tags_are_ordered() {
        let tags: Vec<String> = cpython311()
            .supported_tags()
            .iter()
            .map(ToString::to_string)
            .collect();
        let pos = |t: &str| {
            tags.iter()
                .position(|x| x == t)
                .unwrap_or_else(|| panic!("{t} missing"))
        };
        assert_eq!(tags[0], "cp311-cp311-manylinux_2_36_x86_64");
        assert!(pos("cp311-cp311-manylinux_2_17_x86_64") < pos("cp311-cp311-manylinux2014_x86_64"));
        assert!(pos("cp311-cp311-manylinux2014_x86_64") < pos("cp311-cp311-manylinux_2_16_x86_64"));
        assert!(pos("cp311-cp311-manylinux1_x86_64") < pos("cp311-cp311-linux_x86_64"));
        assert!(pos("cp311-cp311-linux_x86_64") < pos("cp311-abi3-manylinux_2_36_x86_64"));
        assert!(pos("cp311-abi3-linux_x86_64") < pos("cp310-abi3-manylinux_2_17_x86_64"));
        assert!(pos("cp32-abi3-linux_x86_64") < pos("py311-none-manylinux_2_36_x86_64"));
        assert!(pos("py3-none-linux_x86_64") < pos("py311-none-any"));
        assert!(pos("cp311-none-any") < pos("py311-none-any"));
        assert!(pos("py311-none-any") < pos("py3-none-any"));
        assert!(pos("py3-none-any") < pos("py30-none-any"));
        for absent in [
            "cp311-cp311-manylinux_2_37_x86_64",
            "cp311-cp311-win_amd64",
            "cp312-cp312-manylinux_2_17_x86_64",
            "cp311-abi3-manylinux_2_4_x86_64",
            "cp31-abi3-linux_x86_64",
            "py2-none-any",
        ] {
            assert!(!tags.iter().any(|t| t == absent), "{absent}");
        }
    }

    #[test]
    fn wheels_rank_by_their_best_tag() {
        let ranks = cpython311().tag_ranks();
        let best = |f: &str| {
            ranks
                .best(&WheelName::parse(f).unwrap())
                .map(|(_, t)| t.to_string())
        };
        assert_eq!(
            best("a-1-py2.py3-none-any.whl").as_deref(),
            Some("py3-none-any")
        );
        assert_eq!(
            best("a-1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl").as_deref(),
            Some("cp311-cp311-manylinux_2_17_x86_64")
        );
        assert_eq!(
            best("a-1-cp39-abi3-manylinux_2_28_x86_64.whl").as_deref(),
            Some("cp39-abi3-manylinux_2_28_x86_64")
        );
        assert_eq!(best("a-1-cp311-cp311-win_amd64.whl"), None);
        assert_eq!(best("a-1-cp311-cp311-manylinux_2_17_aarch64.whl"), None);
        assert_eq!(best("a-1-py2-none-any.whl"), None);
        let platform = ranks.best(&WheelName::parse("a-1-cp311-cp311-linux_x86_64.whl").unwrap());
        let universal = ranks.best(&WheelName::parse("a-1-py3-none-any.whl").unwrap());
        assert!(platform.unwrap().0 < universal.unwrap().0);
    }

    #[test]
    fn other_platforms() {
        let mut musl = cpython311();
        musl.glibc = None;
        assert_eq!(musl.platforms(), vec!["linux_x86_64"]);
        let mut arm = cpython311();
        arm.machine = "aarch64".into();
        let p = arm.platforms();
        assert_eq!(p.last().map(String::as_str), Some("linux_aarch64"));
        assert!(p.contains(&"manylinux2014_aarch64".to_string()));
        assert!(!p.iter().any(|x| x.starts_with("manylinux_2_16")));
        let mut pypy = cpython311();
        pypy.implementation_name = "pypy".into();
        assert!(
            pypy.supported_tags()
                .iter()
                .all(|t| t.python.starts_with("py"))
        );
        let mut ft = cpython311();
        ft.abiflags = "t".into();
        let tags = ft.supported_tags();
        assert_eq!(tags[0].to_string(), "cp311-cp311t-manylinux_2_36_x86_64");
        assert!(!tags.iter().any(|t| t.abi == "abi3"));
    }

    #[test]
    fn marker_env_of_the_interpreter() {
        let env = cpython311().marker_env();
        assert_eq!(env.get("python_version"), "3.11");
        assert_eq!(env.get("python_full_version"), "3.11.7");
        assert_eq!(env.get("platform_machine"), "x86_64");
        assert_eq!(env.get("extra"), "");
        assert!(cpython311().describe().contains("glibc 2.36"));
    }

    #[test]
    fn the_local_interpreter_probes() {
        // Only when a python3 is on PATH (the sandbox needs one anyway).
        match Interpreter::probe() {
            Ok(i) => {
                assert_eq!(i.version.0, 3);
                assert!(!i.supported_tags().is_empty());
                assert_eq!(Interpreter::probe().unwrap(), i);
            }
            Err(e) => assert_eq!(e.kind, PypiErrorKind::Sandbox),
        }
    }
}
