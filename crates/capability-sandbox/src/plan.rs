//! What one sandbox opens, as data.
//!
//! [`SandboxPlan::new`] decides, from the target, its contents, the grants and the limits,
//! everything a sandbox shows its guest — the new root ([`RootPlan`]: every tmpfs, bind,
//! overlay, device, symlink and mask, in order), the landlock rules, whether the guest gets
//! an empty network namespace, its environment — and what the report will say of them. It
//! reads the host (which system directories exist, where `/etc` entries point, which `/proc`
//! entries to cover, where a granted path really is) but creates nothing and spawns nothing,
//! so the plan is tested as data. [`LimitPlan::new`] does the same for the limits once the
//! run's cgroup is known. `ProcessSandbox::prepare` applies both: it makes the mount point
//! and the cgroup and turns the plans into the child's ([`RootPlan::mount_ops`]).
//!
//! The root, in order: a tmpfs at `/`; the system directories read-only (or their symlinks);
//! a minimal `/etc` (read-only, noexec entries and a synthetic `passwd`/`group`); `/dev` with
//! five character devices; the package at [`PACKAGE_MOUNT`] (a read-only overlay); a private
//! size-limited `/tmp`; a fresh `/proc` with kernel internals covered; interpreter prefixes;
//! a child's code and the granted paths, shallowest first (read grants read-only, write grants
//! writable, both noexec); and last, the masks over protected host paths inside any of them,
//! so that nothing mounted later uncovers one.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use capability_exec::{AppliedLimit, Grants, Limits, effects};

use crate::error::SandboxError;
use crate::linux::host::{self, CgroupMemory};
use crate::linux::landlock;
use crate::linux::spawn::MountOp;
use crate::linux::sys;
use crate::process::{Contents, PACKAGE_MOUNT, SANDBOX_UID, Target};
use crate::protect::{self, Protected};
use crate::types::{ModuleKind, ProcessLimits};

/// How a host tree is mounted inside: always `nosuid`; read-only unless `writable`, `noexec`
/// unless `exec`, `nodev` unless `devices`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MountFlags {
    pub writable: bool,
    pub exec: bool,
    pub devices: bool,
}

impl MountFlags {
    /// System directories, interpreter prefixes, the package, a child's code: read-only, and
    /// mappable as code.
    pub const CODE: MountFlags = MountFlags {
        writable: false,
        exec: true,
        devices: false,
    };
    /// Read grants, `/etc` entries, masks over files: read-only data.
    pub const READ_DATA: MountFlags = MountFlags {
        writable: false,
        exec: false,
        devices: false,
    };
    /// Write grants: writable data, never code.
    pub const WRITE_DATA: MountFlags = MountFlags {
        writable: true,
        exec: false,
        devices: false,
    };
    /// `/dev/null` and friends: device nodes read and written, never code.
    pub const DEVICE: MountFlags = MountFlags {
        writable: true,
        exec: false,
        devices: true,
    };

    /// The `MOUNT_ATTR_*` bits.
    pub fn attrs(self) -> u64 {
        let mut attrs = sys::MOUNT_ATTR_NOSUID;
        if !self.writable {
            attrs |= sys::MOUNT_ATTR_RDONLY;
        }
        if !self.exec {
            attrs |= sys::MOUNT_ATTR_NOEXEC;
        }
        if !self.devices {
            attrs |= sys::MOUNT_ATTR_NODEV;
        }
        attrs
    }
}

/// One step of building the new root. Paths are inside the sandbox (absolute); sources are
/// host paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RootEntry {
    /// An empty directory (a mount point, or the parent of one).
    Dir(PathBuf),
    /// An empty file to bind a file onto.
    File(PathBuf),
    Symlink {
        at: PathBuf,
        to: PathBuf,
    },
    /// A fresh tmpfs (`nosuid`, `nodev`, `noexec`) with these mount options.
    Tmpfs {
        at: PathBuf,
        options: String,
        read_only: bool,
    },
    /// A host file or directory at `at`.
    Bind {
        source: PathBuf,
        at: PathBuf,
        flags: MountFlags,
    },
    /// A host directory at `at` as a read-only overlay that hides its host path (see
    /// `MountOp::Overlay`).
    Overlay {
        source: PathBuf,
        at: PathBuf,
        flags: MountFlags,
    },
    /// A fresh procfs, with these entries (inside path, is_dir) covered.
    Proc {
        at: PathBuf,
        masks: Vec<(PathBuf, bool)>,
    },
    /// A small file written into the root before it is made read-only.
    WriteFile {
        at: PathBuf,
        data: Vec<u8>,
    },
    /// An empty read-only cover over a protected host path: a tmpfs for a directory,
    /// `/dev/null` for a file.
    Mask {
        at: PathBuf,
        is_dir: bool,
    },
}

/// The new root of one sandbox: every entry in the order it is built.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RootPlan {
    pub entries: Vec<RootEntry>,
    /// What was masked and why, for the report.
    pub mask_notes: Vec<String>,
}

impl RootPlan {
    /// The child's mount operations, with the root built on `root` (the host's empty mount
    /// point).
    pub fn mount_ops(&self, root: &Path) -> Result<Vec<MountOp>, SandboxError> {
        let host = |inside: &Path| -> Result<CString, SandboxError> {
            match inside.strip_prefix("/") {
                Ok(rest) if !rest.as_os_str().is_empty() => path_cstring(&root.join(rest)),
                _ => path_cstring(root),
            }
        };
        let tmpfs_flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        self.entries
            .iter()
            .map(|entry| {
                Ok(match entry {
                    RootEntry::Dir(at) => MountOp::Mkdir(host(at)?),
                    RootEntry::File(at) => MountOp::Touch(host(at)?),
                    RootEntry::Symlink { at, to } => MountOp::Symlink {
                        target: path_cstring(to)?,
                        link: host(at)?,
                    },
                    RootEntry::Tmpfs {
                        at,
                        options,
                        read_only,
                    } => MountOp::Tmpfs {
                        target: host(at)?,
                        flags: tmpfs_flags | if *read_only { libc::MS_RDONLY } else { 0 },
                        data: cstring(options.as_bytes().to_vec())?,
                    },
                    RootEntry::Bind { source, at, flags } => MountOp::Bind {
                        source: path_cstring(source)?,
                        target: host(at)?,
                        attrs: flags.attrs(),
                    },
                    RootEntry::Overlay { source, at, flags } => MountOp::Overlay {
                        source: path_cstring(source)?,
                        target: host(at)?,
                        attrs: flags.attrs(),
                    },
                    RootEntry::Proc { at, masks } => MountOp::Proc {
                        target: host(at)?,
                        masks: masks
                            .iter()
                            .map(|(m, is_dir)| Ok((host(m)?, *is_dir)))
                            .collect::<Result<_, SandboxError>>()?,
                    },
                    RootEntry::WriteFile { at, data } => MountOp::WriteFile {
                        path: host(at)?,
                        data: data.clone(),
                    },
                    RootEntry::Mask { at, is_dir: true } => MountOp::Tmpfs {
                        target: host(at)?,
                        flags: tmpfs_flags | libc::MS_RDONLY,
                        data: c"size=4k,nr_inodes=16,mode=0555".to_owned(),
                    },
                    RootEntry::Mask { at, is_dir: false } => MountOp::Bind {
                        source: c"/dev/null".to_owned(),
                        target: host(at)?,
                        attrs: MountFlags::READ_DATA.attrs(),
                    },
                })
            })
            .collect()
    }
}

/// Builds a [`RootPlan`], checking every host tree against the protected paths.
struct RootBuilder {
    entries: Vec<RootEntry>,
    made: BTreeSet<PathBuf>,
    /// Host paths no mount may expose.
    protected: Vec<Protected>,
    /// Masks over protected paths (inside path, is_dir), laid after every bind.
    masks: Vec<(PathBuf, bool)>,
    mask_notes: Vec<String>,
}

impl RootBuilder {
    /// A root that is a small tmpfs.
    fn new(protected: Vec<Protected>) -> Self {
        RootBuilder {
            entries: vec![RootEntry::Tmpfs {
                at: PathBuf::from("/"),
                options: "size=4m,nr_inodes=4096,mode=0755".into(),
                read_only: false,
            }],
            made: BTreeSet::from([PathBuf::from("/")]),
            protected,
            masks: Vec::new(),
            mask_notes: Vec::new(),
        }
    }

    fn mkdir_p(&mut self, inside: &Path) {
        let mut cur = PathBuf::from("/");
        for c in inside.components().skip(1) {
            cur.push(c);
            if self.made.insert(cur.clone()) {
                self.entries.push(RootEntry::Dir(cur.clone()));
            }
        }
    }

    fn bind(
        &mut self,
        source: &Path,
        inside: &Path,
        flags: MountFlags,
        is_dir: bool,
    ) -> Result<(), SandboxError> {
        self.guard(source, inside, flags.writable)?;
        if is_dir {
            self.mkdir_p(inside);
        } else {
            if let Some(parent) = inside.parent() {
                self.mkdir_p(parent);
            }
            if self.made.insert(inside.to_path_buf()) {
                self.entries.push(RootEntry::File(inside.to_path_buf()));
            }
        }
        self.entries.push(RootEntry::Bind {
            source: source.to_path_buf(),
            at: inside.to_path_buf(),
            flags,
        });
        Ok(())
    }

    /// Checks a host tree about to be mounted at `inside` against the protected paths:
    /// refuses it, or records the masks to lay over protected paths inside it.
    fn guard(&mut self, source: &Path, inside: &Path, writable: bool) -> Result<(), SandboxError> {
        let real = protect::resolve(source);
        for (at, is_dir, host, why) in protect::masks_for(&real, inside, writable, &self.protected)?
        {
            if !self.masks.iter().any(|(m, _)| *m == at) {
                self.mask_notes.push(format!(
                    "masked {} ({why}) at {}: an empty read-only mount covers it",
                    host.display(),
                    at.display()
                ));
                self.masks.push((at, is_dir));
            }
        }
        Ok(())
    }

    fn symlink(&mut self, to: &Path, inside: &Path) {
        if let Some(parent) = inside.parent() {
            self.mkdir_p(parent);
        }
        if self.made.insert(inside.to_path_buf()) {
            self.entries.push(RootEntry::Symlink {
                at: inside.to_path_buf(),
                to: to.to_path_buf(),
            });
        }
    }

    fn tmpfs(&mut self, inside: &Path, options: String) {
        self.mkdir_p(inside);
        self.entries.push(RootEntry::Tmpfs {
            at: inside.to_path_buf(),
            options,
            read_only: false,
        });
    }

    /// A fresh procfs, with the kernel-internal entries of [`PROC_MASKS`] that exist here
    /// covered.
    fn proc(&mut self, inside: &Path) {
        self.mkdir_p(inside);
        let masks = PROC_MASKS
            .iter()
            .filter_map(|name| {
                let meta = std::fs::symlink_metadata(Path::new("/proc").join(name)).ok()?;
                Some((inside.join(name), meta.is_dir()))
            })
            .collect();
        self.entries.push(RootEntry::Proc {
            at: inside.to_path_buf(),
            masks,
        });
    }

    /// `source` read-only at `inside`, as an overlay.
    fn overlay(
        &mut self,
        source: &Path,
        inside: &Path,
        flags: MountFlags,
    ) -> Result<(), SandboxError> {
        self.guard(source, inside, false)?;
        self.mkdir_p(inside);
        self.entries.push(RootEntry::Overlay {
            source: source.to_path_buf(),
            at: inside.to_path_buf(),
            flags,
        });
        Ok(())
    }

    fn write_file(&mut self, inside: &Path, data: Vec<u8>) {
        if let Some(parent) = inside.parent() {
            self.mkdir_p(parent);
        }
        self.made.insert(inside.to_path_buf());
        self.entries.push(RootEntry::WriteFile {
            at: inside.to_path_buf(),
            data,
        });
    }

    /// The plan, the masks laid last so that nothing mounted later can uncover them.
    fn finish(mut self) -> RootPlan {
        for (at, is_dir) in std::mem::take(&mut self.masks) {
            self.entries.push(RootEntry::Mask { at, is_dir });
        }
        RootPlan {
            entries: self.entries,
            mask_notes: self.mask_notes,
        }
    }
}

/// A landlock rule: the rights granted beneath a path inside the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AccessRule {
    pub path: String,
    pub rights: u64,
    pub is_dir: bool,
}

/// Everything one sandbox opens, decided before anything is created (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct SandboxPlan {
    pub root: RootPlan,
    /// The landlock rules, in order (applied when the kernel has landlock).
    pub access: Vec<AccessRule>,
    /// `network.connect`: the host's network namespace, else an empty one of its own.
    pub network: bool,
    /// `process.spawn`: new processes and execs of the system's programs.
    pub spawn: bool,
    /// The guest's whole environment.
    pub env: Vec<(String, String)>,
    /// Granted host paths opened read-only, and read-write, as the report lists them.
    pub read_paths: Vec<String>,
    pub write_paths: Vec<String>,
    /// What was granted but not opened, for the report.
    pub notes: Vec<String>,
}

/// The state of [`SandboxPlan::new`] between its stages.
struct Planner {
    root: RootBuilder,
    access: Vec<AccessRule>,
    /// `FS_EXECUTE` on code trees when `process.spawn` is granted.
    exec_right: u64,
}

impl Planner {
    fn allow(&mut self, path: &str, rights: u64, is_dir: bool) {
        self.access.push(AccessRule {
            path: path.to_string(),
            rights,
            is_dir,
        });
    }

    /// `/`, and the system directories read-only (their symlinks recreated).
    fn system_dirs(&mut self) -> Result<(), SandboxError> {
        self.allow("/", sys::FS_READ_DIR, true);
        for dir in host::SYSTEM_DIRS {
            let p = Path::new(dir);
            match std::fs::symlink_metadata(p) {
                Ok(m) if m.file_type().is_symlink() => {
                    if let Ok(t) = std::fs::read_link(p) {
                        self.root.symlink(&t, p);
                    }
                }
                Ok(m) if m.is_dir() => self.root.bind(p, p, MountFlags::CODE, true)?,
                _ => continue,
            }
            self.allow(dir, landlock::READ | self.exec_right, true);
        }
        Ok(())
    }

    /// A minimal `/etc`: what dynamic linking, name resolution and TLS need, and a synthetic
    /// `passwd` and `group` naming the guest.
    fn etc(&mut self) -> Result<(), SandboxError> {
        self.root.mkdir_p(Path::new("/etc"));
        for entry in host::ETC_ENTRIES {
            let p = Path::new("/etc").join(entry);
            let Ok(real) = p.canonicalize() else { continue };
            let Ok(meta) = std::fs::metadata(&real) else {
                continue;
            };
            self.root
                .bind(&real, &p, MountFlags::READ_DATA, meta.is_dir())?;
        }
        self.root.write_file(
            Path::new("/etc/passwd"),
            format!("sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:/tmp:/nonexistent\n")
                .into_bytes(),
        );
        self.root.write_file(
            Path::new("/etc/group"),
            format!("sandbox:x:{SANDBOX_UID}:\n").into_bytes(),
        );
        self.allow("/etc", landlock::READ, true);
        Ok(())
    }

    /// `/dev` with the harmless character devices and the standard stream links.
    fn devices(&mut self) -> Result<(), SandboxError> {
        self.root.mkdir_p(Path::new("/dev"));
        for dev in ["null", "zero", "full", "random", "urandom"] {
            let p = Path::new("/dev").join(dev);
            if p.exists() {
                self.root.bind(&p, &p, MountFlags::DEVICE, false)?;
                self.allow(
                    &p.to_string_lossy(),
                    sys::FS_READ_FILE | sys::FS_WRITE_FILE | sys::FS_IOCTL_DEV,
                    false,
                );
            }
        }
        for (link, to) in [
            ("/dev/fd", "/proc/self/fd"),
            ("/dev/stdin", "/proc/self/fd/0"),
            ("/dev/stdout", "/proc/self/fd/1"),
            ("/dev/stderr", "/proc/self/fd/2"),
        ] {
            self.root.symlink(Path::new(to), Path::new(link));
        }
        self.allow("/dev", sys::FS_READ_DIR, true);
        Ok(())
    }

    /// The package, read-only at [`PACKAGE_MOUNT`], through an overlay that hides its host
    /// path.
    fn package(&mut self, mount_root: &Path) -> Result<(), SandboxError> {
        self.root
            .overlay(mount_root, Path::new(PACKAGE_MOUNT), MountFlags::CODE)?;
        self.allow(PACKAGE_MOUNT, landlock::READ, true);
        Ok(())
    }

    /// The private, size-limited `/tmp`.
    fn private_tmp(&mut self, tmp_bytes: u64) {
        let inodes = (tmp_bytes / 4096).clamp(1024, 1 << 20);
        self.root.tmpfs(
            Path::new("/tmp"),
            format!("size={tmp_bytes},nr_inodes={inodes},mode=1777"),
        );
        self.allow("/tmp", landlock::WRITE, true);
    }

    /// A fresh procfs of the new pid namespace.
    fn procfs(&mut self) {
        self.root.proc(Path::new("/proc"));
        self.allow("/proc", landlock::READ, true);
    }

    /// Interpreter prefixes outside the system directories, read-only at their host path.
    fn interpreter_roots(&mut self, roots: &[PathBuf]) -> Result<(), SandboxError> {
        for extra in roots {
            self.root.bind(extra, extra, MountFlags::CODE, true)?;
            self.allow(
                &extra.to_string_lossy(),
                landlock::READ | self.exec_right,
                true,
            );
        }
        Ok(())
    }

    /// The executables the guest itself must be able to `execve`, and their ELF interpreters.
    fn executables(&mut self, target: &Target, contents: Contents<'_>) {
        let mut exec_files = target.exec_files.clone();
        for f in &target.exec_files {
            let host_path = match contents {
                Contents::Package(module) if f.starts_with(PACKAGE_MOUNT) => {
                    module.host_path.clone()
                }
                _ => f.clone(),
            };
            if let Some(interp) = host::elf_interpreter(&host_path) {
                exec_files.push(interp);
            }
        }
        for f in &exec_files {
            self.allow(
                &f.to_string_lossy(),
                sys::FS_EXECUTE | sys::FS_READ_FILE,
                false,
            );
        }
    }

    /// A child's code (read-only, mappable as code) and the granted paths (data: noexec),
    /// shallowest first; the read and write paths as the report lists them.
    fn granted_paths(
        &mut self,
        grants: &Grants,
        contents: Contents<'_>,
        extra_roots: &[PathBuf],
    ) -> Result<(Vec<String>, Vec<String>), SandboxError> {
        let mut grant_list: Vec<(PathBuf, bool)> = Vec::new();
        if grants.has(effects::FILESYSTEM_READ) {
            for p in &grants.read_paths {
                grant_list.push((check_grant_path(p)?, false));
            }
        }
        if grants.has(effects::FILESYSTEM_WRITE) {
            for p in &grants.write_paths {
                grant_list.push((check_grant_path(p)?, true));
            }
        }
        let code: Vec<PathBuf> = match contents {
            Contents::Package(_) => Vec::new(),
            Contents::Code { roots, .. } => code_roots(roots, extra_roots)?,
        };
        let mut mounts: Vec<(PathBuf, Option<bool>)> =
            code.into_iter().map(|p| (p, None)).collect();
        mounts.extend(grant_list.into_iter().map(|(p, w)| (p, Some(w))));
        mounts.sort_by_key(|(p, _)| p.components().count());
        let (mut read_paths, mut write_paths) = (Vec::new(), Vec::new());
        for (p, grant) in mounts {
            let is_dir = p.is_dir();
            let Some(write) = grant else {
                self.root.bind(&p, &p, MountFlags::CODE, is_dir)?;
                self.allow(
                    &p.to_string_lossy(),
                    landlock::READ | self.exec_right,
                    is_dir,
                );
                continue;
            };
            // Granted paths hold data, not code: noexec, so that neither execve nor an
            // executable mapping (the dynamic loader, dlopen) can use a file from them. A read
            // grant the system directories already show is not mounted again.
            if write {
                self.root.bind(&p, &p, MountFlags::WRITE_DATA, is_dir)?;
                self.allow(&p.to_string_lossy(), landlock::WRITE_GRANT, is_dir);
                write_paths.push(p.display().to_string());
            } else {
                if !host::under_system_dirs(&p) {
                    self.root.bind(&p, &p, MountFlags::READ_DATA, is_dir)?;
                }
                self.allow(&p.to_string_lossy(), landlock::READ, is_dir);
                read_paths.push(p.display().to_string());
            }
        }
        Ok((read_paths, write_paths))
    }
}

/// The guest's environment: a child's is its configuration, chosen by the host; a module's
/// is empty unless `environment.read` is granted. The names are checked.
fn environment(
    contents: Contents<'_>,
    grants: &Grants,
) -> Result<Vec<(String, String)>, SandboxError> {
    let env: Vec<(String, String)> = match contents {
        Contents::Code { env, .. } => env.to_vec(),
        Contents::Package(_) if grants.has(effects::ENVIRONMENT_READ) => grants
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        Contents::Package(_) => Vec::new(),
    };
    if let Some((k, _)) = env.iter().find(|(k, _)| k.is_empty() || k.contains('=')) {
        return Err(SandboxError::Invalid {
            detail: format!("invalid environment variable name {k:?}"),
        });
    }
    Ok(env)
}

impl SandboxPlan {
    /// What a sandbox for `target` holding `contents` opens with these grants and limits;
    /// every mount is checked against `protected`.
    pub fn new(
        target: &Target,
        contents: Contents<'_>,
        grants: &Grants,
        limits: &Limits<ProcessLimits>,
        protected: Vec<Protected>,
    ) -> Result<SandboxPlan, SandboxError> {
        let mut plan = Planner {
            root: RootBuilder::new(protected),
            access: Vec::new(),
            exec_right: if grants.spawn() { sys::FS_EXECUTE } else { 0 },
        };
        plan.system_dirs()?;
        plan.etc()?;
        plan.devices()?;
        if let Contents::Package(module) = contents {
            plan.package(&module.mount_root)?;
        }
        plan.private_tmp(limits.tmp_bytes);
        plan.procfs();
        plan.interpreter_roots(&target.extra_roots)?;
        plan.executables(target, contents);
        let (read_paths, write_paths) =
            plan.granted_paths(grants, contents, &target.extra_roots)?;
        let mut notes = Vec::new();
        if !grants.has(effects::FILESYSTEM_READ) && !grants.read_paths.is_empty() {
            notes.push("read paths ignored: filesystem.read is not granted".into());
        }
        if !grants.has(effects::FILESYSTEM_WRITE) && !grants.write_paths.is_empty() {
            notes.push("write paths ignored: filesystem.write is not granted".into());
        }
        if !grants.has(effects::ENVIRONMENT_READ) && !grants.env.is_empty() {
            notes.push("environment ignored: environment.read is not granted".into());
        }
        let env = environment(contents, grants)?;
        Ok(SandboxPlan {
            root: plan.root.finish(),
            access: plan.access,
            network: grants.network(),
            spawn: grants.spawn(),
            env,
            read_paths,
            write_paths,
            notes,
        })
    }

    /// The namespaces the guest lives in, and their `clone` flags: always user, mount, pid,
    /// ipc, uts and cgroup; an empty network namespace unless `network.connect` is granted.
    pub fn namespaces(&self) -> (Vec<&'static str>, u64) {
        let mut names = vec!["user", "mount", "pid", "ipc", "uts", "cgroup"];
        let mut flags = sys::CLONE_NEWUSER
            | sys::CLONE_NEWNS
            | sys::CLONE_NEWPID
            | sys::CLONE_NEWIPC
            | sys::CLONE_NEWUTS
            | sys::CLONE_NEWCGROUP;
        if !self.network {
            flags |= sys::CLONE_NEWNET;
            names.push("net");
        }
        (names, flags)
    }
}

/// The run's cgroup, as far as the limits are concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CgroupFacts {
    /// 1 or 2.
    pub version: u8,
    /// A pids controller counts the sandbox's processes.
    pub pids: bool,
    pub memory: CgroupMemory,
}

/// The resource limits of one sandbox, once its cgroup is known: the rlimits its guest gets
/// and every limit as the report states it.
#[derive(Clone, Debug)]
pub(crate) struct LimitPlan {
    /// `(resource, soft, hard)`.
    pub rlimits: Vec<(libc::c_int, u64, u64)>,
    pub applied: Vec<AppliedLimit>,
    /// The process count the init polls for, when nothing else holds `maxPids`.
    pub pids_watchdog: Option<u32>,
    /// The report's `cgroup`.
    pub cgroup_label: String,
    /// A memory cgroup counts the whole sandbox.
    pub memory_cgroup: bool,
}

impl LimitPlan {
    /// The limits of a sandbox for a `kind` runner whose guest runs as host uid `guest_uid`.
    /// `long_lived` (a child program rather than one hook run) has no CPU limit and none of
    /// the run-only limits (wall clock, output, module size).
    pub fn new(
        limits: &Limits<ProcessLimits>,
        cgroup: Option<CgroupFacts>,
        kind: ModuleKind,
        spawn: bool,
        guest_uid: u32,
        long_lived: bool,
    ) -> LimitPlan {
        let p = &limits.boundary;
        let cpu_secs = p.cpu_time.as_secs_f64().ceil().max(1.0) as u64;
        let mut rlimits: Vec<(libc::c_int, u64, u64)> = vec![
            (
                libc::RLIMIT_DATA as libc::c_int,
                limits.memory_bytes,
                limits.memory_bytes,
            ),
            (
                libc::RLIMIT_NOFILE as libc::c_int,
                p.max_open_files,
                p.max_open_files,
            ),
            (
                libc::RLIMIT_FSIZE as libc::c_int,
                p.max_file_size,
                p.max_file_size,
            ),
            (libc::RLIMIT_CORE as libc::c_int, 0, 0),
            (libc::RLIMIT_MSGQUEUE as libc::c_int, 0, 0),
        ];
        if !long_lived {
            rlimits.push((libc::RLIMIT_CPU as libc::c_int, cpu_secs, cpu_secs + 1));
        }
        let cg_memory = cgroup.map_or(CgroupMemory::None, |c| c.memory);
        let memory_cgroup = cg_memory != CgroupMemory::None;
        let pids_cgroup = cgroup.is_some_and(|c| c.pids);
        let cgroup_label = match cgroup {
            Some(cg) if cg.version == 2 => "v2",
            Some(_) => match (pids_cgroup, memory_cgroup) {
                (true, true) => "v1-pids+memory",
                (true, false) => "v1-pids",
                _ => "v1-memory",
            },
            None => "unavailable",
        }
        .to_string();
        // RLIMIT_NPROC counts every process of the guest's host uid, and a root host runs all
        // its guests as nobody: with a pids cgroup (which counts exactly this sandbox) it is
        // only a backstop, well above the limit, so that concurrent sandboxes do not share it.
        let nproc = if pids_cgroup {
            (p.max_pids as u64).saturating_mul(4).max(256)
        } else {
            p.max_pids as u64
        };
        rlimits.push((libc::RLIMIT_NPROC as libc::c_int, nproc, nproc));
        let memory = memory_policy(cg_memory, kind, spawn, limits);
        if let Some(r#as) = memory.rlimit_as {
            rlimits.push((libc::RLIMIT_AS as libc::c_int, r#as, r#as));
        }
        // uid 0 is exempt from RLIMIT_NPROC: without a cgroup, a watchdog counts processes.
        let pids_watchdog = (spawn && !pids_cgroup && guest_uid == 0).then_some(p.max_pids);
        let mut applied = if long_lived {
            Vec::new()
        } else {
            vec![
                AppliedLimit::new("wallTimeoutMs", limits.timeout.as_millis() as u64, "timer"),
                AppliedLimit::new("cpuTimeMs", cpu_secs * 1000, "rlimit"),
            ]
        };
        applied.push(memory.applied);
        applied.push(match (cgroup, guest_uid, spawn) {
            (Some(cg), _, _) if pids_cgroup => AppliedLimit::new(
                "maxPids",
                p.max_pids as u64,
                if cg.version == 2 { "rlimit+cgroup" } else { "rlimit+cgroup-v1" },
            ),
            (_, 0, true) => {
                let mut l = AppliedLimit::new("maxPids", p.max_pids as u64, "watchdog");
                l.note = Some("best effort: uid 0 is exempt from RLIMIT_NPROC and no cgroup is available; processes are counted in /proc every 1 ms and the sandbox is killed past the limit, but a fast fork bomb can briefly exceed it".into());
                l
            }
            (_, 0, false) => {
                let mut l = AppliedLimit::new("maxPids", 1, "seccomp");
                l.note = Some("process creation is refused (process.spawn not granted); threads are not counted because uid 0 is exempt from RLIMIT_NPROC".into());
                l
            }
            (_, _, _) => AppliedLimit::new("maxPids", p.max_pids as u64, "rlimit"),
        });
        applied.push(AppliedLimit::new(
            "maxOpenFiles",
            p.max_open_files,
            "rlimit",
        ));
        applied.push(AppliedLimit::new("maxFileSize", p.max_file_size, "rlimit"));
        applied.push(AppliedLimit::new("tmpSize", limits.tmp_bytes, "tmpfs"));
        if !long_lived {
            applied.push(AppliedLimit::new(
                "maxOutputBytes",
                limits.output_bytes,
                "host",
            ));
            applied.push(AppliedLimit::new(
                "maxModuleBytes",
                p.max_module_bytes,
                "host",
            ));
        }
        LimitPlan {
            rlimits,
            applied,
            pids_watchdog,
            cgroup_label,
            memory_cgroup,
        }
    }
}

/// Address space reserved by node beyond what it uses (V8 cages and code range, malloc arenas
/// of its threads): node does not start under an RLIMIT_AS much below ~0.8 GiB.
const NODE_AS_HEADROOM: u64 = 1 << 30;

/// How a run's memory is limited.
struct MemoryPolicy {
    rlimit_as: Option<u64>,
    applied: AppliedLimit,
}

/// Memory: the run's cgroup when it has a memory controller (it counts every page of the
/// sandbox: private, shared, SysV, memfd, tmpfs, kernel), else RLIMIT_AS, which counts every
/// mapping of a process, shared ones included, while SysV shared memory, message queues and
/// memfds are refused (they hold memory without a mapping). RLIMIT_DATA is set in every case
/// so that plain allocations fail cleanly with ENOMEM before anything is killed.
fn memory_policy(
    cg: CgroupMemory,
    kind: ModuleKind,
    spawn: bool,
    limits: &Limits<ProcessLimits>,
) -> MemoryPolicy {
    let m = limits.memory_bytes;
    let (mechanism, rlimit_as, enforced, note): (&str, Option<u64>, bool, String) = match cg {
        CgroupMemory::V2 => (
            "cgroup-v2-memory.max+rlimit-data",
            None,
            true,
            "memory.max (and memory.swap.max 0) counts every page of the sandbox: private, \
             shared, SysV, memfd, /tmp and kernel memory"
                .into(),
        ),
        CgroupMemory::V1 { memsw } => (
            "cgroup-v1-memory+rlimit-data",
            None,
            true,
            if memsw {
                "memory.limit_in_bytes and memory.memsw.limit_in_bytes count every page of the \
                 sandbox: private, shared, SysV, memfd, /tmp and kernel memory, swap included"
                    .into()
            } else {
                "memory.limit_in_bytes counts every page of the sandbox: private, shared, SysV, \
                 memfd, /tmp and kernel memory; swap is not accounted on this host"
                    .into()
            },
        ),
        CgroupMemory::None if kind == ModuleKind::Node => (
            "rlimit-as+rlimit-data",
            Some(m.saturating_add(NODE_AS_HEADROOM)),
            false,
            format!(
                "no memory cgroup: node needs about 0.8 GiB of address space to start, so \
                 RLIMIT_AS is the limit plus {} MiB; private memory is held to the limit by \
                 RLIMIT_DATA and the V8 heap flag, but native code could map more shared memory",
                NODE_AS_HEADROOM >> 20
            ),
        ),
        CgroupMemory::None if spawn => (
            "rlimit-as+rlimit-data",
            Some(m),
            false,
            "no memory cgroup: RLIMIT_AS holds each process (shared mappings included) to the \
             limit, but with process.spawn the sandbox as a whole can use the limit once per \
             process"
                .into(),
        ),
        CgroupMemory::None => (
            "rlimit-as+rlimit-data",
            Some(m),
            true,
            "no memory cgroup: RLIMIT_AS counts every mapping of the (only) guest process, shared \
             ones included; memfd_create and SysV shmget/msgget/semget are refused; /tmp is \
             limited separately by tmpSize"
                .into(),
        ),
    };
    let mut applied = AppliedLimit::new("memoryBytes", m, mechanism);
    applied.enforced = enforced;
    applied.note = Some(note);
    MemoryPolicy { rlimit_as, applied }
}

/// A granted path must exist, be absolute, and not collide with the sandbox's own mounts.
fn check_grant_path(p: &Path) -> Result<PathBuf, SandboxError> {
    if !p.is_absolute() {
        return Err(SandboxError::Invalid {
            detail: format!("granted path {} must be absolute", p.display()),
        });
    }
    let real = p.canonicalize().map_err(|e| SandboxError::Invalid {
        detail: format!("granted path {} cannot be opened: {e}", p.display()),
    })?;
    for reserved in ["/proc", "/dev", PACKAGE_MOUNT, "/sys"] {
        if real.starts_with(reserved) {
            return Err(SandboxError::Invalid {
                detail: format!(
                    "granted path {} lies under the reserved {reserved}",
                    real.display()
                ),
            });
        }
    }
    if real == Path::new("/tmp") {
        return Err(SandboxError::Invalid {
            detail: format!("refusing to grant {} as a whole", real.display()),
        });
    }
    protect::refuse_whole_home(&real, "the granted path")?;
    Ok(real)
}

/// A child's code roots, canonical, without those the system directories or the
/// interpreter's prefix already show, nor those inside another root.
fn code_roots(roots: &[PathBuf], extra: &[PathBuf]) -> Result<Vec<PathBuf>, SandboxError> {
    let mut out: Vec<PathBuf> = Vec::new();
    for r in roots {
        let real = r.canonicalize().map_err(|e| SandboxError::Invalid {
            detail: format!("code path {} cannot be opened: {e}", r.display()),
        })?;
        // The sandbox's own /etc, /dev, /proc and /tmp stay its own.
        let reserved = ["/proc", "/dev", "/sys", "/etc", PACKAGE_MOUNT]
            .into_iter()
            .find(|r| real.starts_with(r))
            .or((real == Path::new("/tmp")).then_some("/tmp"));
        if let Some(reserved) = reserved {
            return Err(SandboxError::Invalid {
                detail: format!(
                    "code path {} lies under the reserved {reserved}",
                    real.display()
                ),
            });
        }
        protect::refuse_whole_home(&real, "the code path")?;
        if !host::under_system_dirs(&real) && !extra.iter().any(|e| real.starts_with(e)) {
            out.push(real);
        }
    }
    out.sort_by_key(|p| p.components().count());
    let mut kept: Vec<PathBuf> = Vec::new();
    for p in out {
        if !kept.iter().any(|k| p.starts_with(k)) {
            kept.push(p);
        }
    }
    Ok(kept)
}

pub(crate) fn cstring(bytes: Vec<u8>) -> Result<CString, SandboxError> {
    CString::new(bytes).map_err(|_| SandboxError::Invalid {
        detail: "a path or argument contains a NUL byte".into(),
    })
}

pub(crate) fn path_cstring(p: &Path) -> Result<CString, SandboxError> {
    cstring(p.as_os_str().as_bytes().to_vec())
}

/// `/proc` entries covered in every sandbox: kernel addresses, memory layout, kernel logs,
/// keys, timers, hardware and driver state. None of them is needed by a runner; several are
/// readable only by root (and a root host's guest used to act as root on them).
const PROC_MASKS: &[&str] = &[
    "kallsyms",
    "kcore",
    "kmsg",
    "slabinfo",
    "vmallocinfo",
    "pagetypeinfo",
    "zoneinfo",
    "buddyinfo",
    "iomem",
    "ioports",
    "modules",
    "timer_list",
    "timer_stats",
    "sched_debug",
    "latency_stats",
    "lock_stat",
    "keys",
    "key-users",
    "kpagecount",
    "kpageflags",
    "kpagecgroup",
    "sysrq-trigger",
    "config.gz",
    "bootconfig",
    "mtrr",
    "dma",
    "acpi",
    "asound",
    "scsi",
    "bus",
    "irq",
    "driver",
    "dynamic_debug",
    "fs",
    "sysvipc",
    "tty",
];

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::package::ResolvedModule;
    use std::time::Duration;

    /// A package directory and a native module in it, as `resolve_module` would give them.
    struct Fixture {
        dir: tempfile::TempDir,
        module: ResolvedModule,
        target: Target,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let pkg = dir.path().join("pkg");
        std::fs::create_dir(&pkg).unwrap();
        std::fs::write(pkg.join("tool"), b"\x7fELF").unwrap();
        let pkg = pkg.canonicalize().unwrap();
        let module = ResolvedModule {
            host_path: pkg.join("tool"),
            mount_root: pkg,
            relative: PathBuf::from("tool"),
            sha256: "00".repeat(32),
            head: Vec::new(),
            executable: true,
        };
        let target = Target {
            kind: ModuleKind::Native,
            program_label: "native ./tool".into(),
            reported_runtime: None,
            argv: vec![b"/package/tool".to_vec()],
            extra_roots: Vec::new(),
            exec_files: vec![PathBuf::from("/package/tool")],
        };
        Fixture {
            dir,
            module,
            target,
        }
    }

    /// A directory in the fixture (canonical: plans name real paths).
    fn dir(f: &Fixture, name: &str) -> PathBuf {
        let p = f.dir.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        p.canonicalize().unwrap()
    }

    fn plan_with(f: &Fixture, grants: &Grants, protected: &[PathBuf]) -> SandboxPlan {
        try_plan(f, grants, protected).unwrap()
    }

    fn try_plan(
        f: &Fixture,
        grants: &Grants,
        protected: &[PathBuf],
    ) -> Result<SandboxPlan, SandboxError> {
        SandboxPlan::new(
            &f.target,
            Contents::Package(&f.module),
            grants,
            &Limits::default(),
            protect::protected_paths(protected),
        )
    }

    /// The binds of a plan: (source, inside, flags).
    fn binds(plan: &SandboxPlan) -> Vec<(&Path, &Path, MountFlags)> {
        plan.root
            .entries
            .iter()
            .filter_map(|e| match e {
                RootEntry::Bind { source, at, flags } => {
                    Some((source.as_path(), at.as_path(), *flags))
                }
                _ => None,
            })
            .collect()
    }

    fn rule<'a>(plan: &'a SandboxPlan, path: &Path) -> Option<&'a AccessRule> {
        let path = path.to_string_lossy();
        plan.access.iter().find(|r| r.path == path)
    }

    #[test]
    fn a_plan_without_grants_shows_the_system_the_package_and_a_private_tmp_only() {
        let f = fixture();
        let plan = plan_with(&f, &Grants::none(), &[]);
        let entries = &plan.root.entries;
        assert_eq!(
            entries.first(),
            Some(&RootEntry::Tmpfs {
                at: "/".into(),
                options: "size=4m,nr_inodes=4096,mode=0755".into(),
                read_only: false
            })
        );
        assert!(entries.contains(&RootEntry::Overlay {
            source: f.module.mount_root.clone(),
            at: PACKAGE_MOUNT.into(),
            flags: MountFlags::CODE,
        }));
        let limits = Limits::<ProcessLimits>::default();
        assert!(entries.contains(&RootEntry::Tmpfs {
            at: "/tmp".into(),
            options: format!("size={},nr_inodes=16384,mode=1777", limits.tmp_bytes),
            read_only: false,
        }));
        assert!(
            entries
                .iter()
                .any(|e| matches!(e, RootEntry::Proc { at, .. } if at == Path::new("/proc")))
        );
        // Nothing of the host is writable but the device nodes; nothing is code but the
        // system, the interpreter and the package.
        for (source, at, flags) in binds(&plan) {
            assert!(
                !flags.writable || flags == MountFlags::DEVICE,
                "{source:?} at {at:?}"
            );
            assert!(
                source.starts_with("/usr")
                    || source.starts_with("/lib")
                    || source.starts_with("/bin")
                    || source.starts_with("/sbin")
                    || source.starts_with("/etc")
                    || source.starts_with("/dev")
                    || !flags.exec,
                "{source:?} at {at:?} is mounted as code"
            );
        }
        assert!(plan.read_paths.is_empty() && plan.write_paths.is_empty());
        assert!(plan.env.is_empty() && plan.notes.is_empty());
        assert!(!plan.spawn);
        // Only the package and the runner's own files are executable.
        let exec: Vec<&str> = plan
            .access
            .iter()
            .filter(|r| r.rights & sys::FS_EXECUTE != 0)
            .map(|r| r.path.as_str())
            .collect();
        assert_eq!(exec, ["/package/tool"]);
    }

    #[test]
    fn no_home_is_ever_mounted() {
        let f = fixture();
        let data = dir(&f, "data");
        let grants = Grants::none().read(&data).write(dir(&f, "out"));
        let plan = plan_with(&f, &grants, &[]);
        let mut homes = vec![protect::resolve(&protect::default_capability_home())];
        homes.extend(std::env::var_os("HOME").map(PathBuf::from));
        homes.push(PathBuf::from("/root"));
        for entry in &plan.root.entries {
            let source = match entry {
                RootEntry::Bind { source, .. } | RootEntry::Overlay { source, .. } => source,
                _ => continue,
            };
            for home in &homes {
                assert!(!home.starts_with(source), "{source:?} would show {home:?}");
            }
        }
        // Granting a home as a whole is refused, not planned.
        for home in ["/root", "/home", "/"] {
            let e = try_plan(&f, &Grants::none().read(home), &[]).unwrap_err();
            assert!(matches!(e, SandboxError::Invalid { .. }), "{home}: {e}");
        }
    }

    #[test]
    fn read_grants_are_read_only_data_and_write_grants_writable_data() {
        let f = fixture();
        let (data, out) = (dir(&f, "data"), dir(&f, "out"));
        let plan = plan_with(&f, &Grants::none().read(&data).write(&out), &[]);
        let binds = binds(&plan);
        assert!(binds.contains(&(data.as_path(), data.as_path(), MountFlags::READ_DATA)));
        assert!(binds.contains(&(out.as_path(), out.as_path(), MountFlags::WRITE_DATA)));
        assert_eq!(
            MountFlags::READ_DATA.attrs() & sys::MOUNT_ATTR_RDONLY,
            sys::MOUNT_ATTR_RDONLY
        );
        assert_eq!(MountFlags::WRITE_DATA.attrs() & sys::MOUNT_ATTR_RDONLY, 0);
        assert_ne!(MountFlags::WRITE_DATA.attrs() & sys::MOUNT_ATTR_NOEXEC, 0);
        assert_eq!(rule(&plan, &data).unwrap().rights, landlock::READ);
        // A writable grant never lets the guest make a socket file the host could reach.
        let write = rule(&plan, &out).unwrap().rights;
        assert_eq!(write, landlock::WRITE_GRANT);
        assert_eq!(write & sys::FS_MAKE_SOCK, 0);
        assert_eq!(plan.read_paths, [data.display().to_string()]);
        assert_eq!(plan.write_paths, [out.display().to_string()]);
        // Granted paths come after the sandbox's own mounts, shallowest first.
        let at = |p: &Path| {
            plan.root
                .entries
                .iter()
                .position(|e| matches!(e, RootEntry::Bind { at, .. } if at == p))
                .unwrap()
        };
        let proc = plan
            .root
            .entries
            .iter()
            .position(|e| matches!(e, RootEntry::Proc { .. }))
            .unwrap();
        assert!(proc < at(&data) && proc < at(&out));
    }

    #[test]
    fn host_resources_without_their_effect_stay_closed() {
        let f = fixture();
        let data = dir(&f, "data");
        let mut grants = Grants::none();
        grants.read_paths.push(data.clone());
        grants.write_paths.push(dir(&f, "out"));
        grants.env.insert("LANG".into(), "C".into());
        let plan = plan_with(&f, &grants, &[]);
        assert!(
            binds(&plan)
                .iter()
                .all(|(source, _, _)| !source.starts_with(f.dir.path()))
        );
        assert!(plan.env.is_empty());
        assert_eq!(
            plan.notes,
            [
                "read paths ignored: filesystem.read is not granted",
                "write paths ignored: filesystem.write is not granted",
                "environment ignored: environment.read is not granted",
            ]
        );
        let granted = plan_with(&f, &Grants::none().env_var("LANG", "C"), &[]);
        assert_eq!(granted.env, [("LANG".to_string(), "C".to_string())]);
    }

    #[test]
    fn the_network_namespace_is_the_guests_own_unless_network_connect_is_granted() {
        let f = fixture();
        let closed = plan_with(&f, &Grants::none(), &[]);
        let (names, flags) = closed.namespaces();
        assert_eq!(
            names,
            ["user", "mount", "pid", "ipc", "uts", "cgroup", "net"]
        );
        assert_ne!(flags & sys::CLONE_NEWNET, 0);
        let open = plan_with(&f, &Grants::none().effect(effects::NETWORK_CONNECT), &[]);
        let (names, flags) = open.namespaces();
        assert!(!names.contains(&"net"));
        assert_eq!(flags & sys::CLONE_NEWNET, 0);
        assert_ne!(flags & sys::CLONE_NEWUSER, 0);
        assert!(open.network);
    }

    #[test]
    fn protected_paths_inside_a_read_grant_are_masked_last_and_a_write_grant_over_one_is_refused() {
        let f = fixture();
        let data = dir(&f, "data");
        let key = data.join("key");
        std::fs::write(&key, b"secret").unwrap();
        let plan = plan_with(&f, &Grants::none().read(&data), std::slice::from_ref(&key));
        assert_eq!(
            plan.root.entries.last(),
            Some(&RootEntry::Mask {
                at: key.clone(),
                is_dir: false
            })
        );
        assert_eq!(plan.root.mask_notes.len(), 1);
        assert!(plan.root.mask_notes[0].starts_with(&format!("masked {}", key.display())));
        let e = try_plan(&f, &Grants::none().write(&data), std::slice::from_ref(&key)).unwrap_err();
        assert!(
            matches!(&e, SandboxError::Invalid { detail } if detail.contains(&key.display().to_string())),
            "{e}"
        );
    }

    #[test]
    fn reserved_and_relative_paths_are_never_granted() {
        let f = fixture();
        for path in ["relative", "/tmp", "/proc/self", "/dev/shm", "/sys"] {
            let e = try_plan(&f, &Grants::none().read(path), &[]).unwrap_err();
            assert!(matches!(e, SandboxError::Invalid { .. }), "{path}: {e}");
        }
    }

    #[test]
    fn mount_ops_build_the_plan_under_the_mount_point() {
        let f = fixture();
        let data = dir(&f, "data");
        let plan = plan_with(&f, &Grants::none().read(&data), &[]);
        let root = Path::new("/run/sandbox-root");
        let ops = plan.root.mount_ops(root).unwrap();
        assert_eq!(ops.len(), plan.root.entries.len());
        let Some(MountOp::Tmpfs { target, .. }) = ops.first() else {
            panic!("the root is a tmpfs first")
        };
        assert_eq!(target.as_bytes(), root.as_os_str().as_bytes());
        let inside = root.join(data.strip_prefix("/").unwrap());
        assert!(ops.iter().any(|op| matches!(
            op,
            MountOp::Bind { source, target, attrs }
                if source.as_bytes() == data.as_os_str().as_bytes()
                    && target.as_bytes() == inside.as_os_str().as_bytes()
                    && *attrs == MountFlags::READ_DATA.attrs()
        )));
    }

    fn limits() -> Limits<ProcessLimits> {
        Limits {
            timeout: Duration::from_secs(5),
            memory_bytes: 256 << 20,
            ..Limits::default()
        }
    }

    #[test]
    fn the_pid_limit_is_held_by_the_cgroup_else_the_rlimit_else_the_watchdog() {
        let v2 = Some(CgroupFacts {
            version: 2,
            pids: true,
            memory: CgroupMemory::V2,
        });
        let l = limits();
        let nproc = |p: &LimitPlan| {
            p.rlimits
                .iter()
                .find(|r| r.0 == libc::RLIMIT_NPROC as libc::c_int)
                .map(|r| r.1)
        };
        let with_cgroup = LimitPlan::new(&l, v2, ModuleKind::Python, true, 0, false);
        assert_eq!(with_cgroup.cgroup_label, "v2");
        assert!(with_cgroup.memory_cgroup && with_cgroup.pids_watchdog.is_none());
        let pids = with_cgroup
            .applied
            .iter()
            .find(|a| a.name == "maxPids")
            .unwrap();
        assert_eq!(pids.mechanism, "rlimit+cgroup");
        assert_eq!(nproc(&with_cgroup), Some(256), "a backstop, not the limit");

        let unprivileged = LimitPlan::new(&l, None, ModuleKind::Python, true, 1000, false);
        assert_eq!(unprivileged.cgroup_label, "unavailable");
        assert_eq!(nproc(&unprivileged), Some(64));
        assert!(unprivileged.pids_watchdog.is_none());

        let root = LimitPlan::new(&l, None, ModuleKind::Python, true, 0, false);
        assert_eq!(root.pids_watchdog, Some(64));
        let pids = root.applied.iter().find(|a| a.name == "maxPids").unwrap();
        assert_eq!(pids.mechanism, "watchdog");
    }

    #[test]
    fn memory_without_a_cgroup_is_held_by_rlimits_and_says_how_far() {
        let l = limits();
        let address_space = |p: &LimitPlan| {
            p.rlimits
                .iter()
                .find(|r| r.0 == libc::RLIMIT_AS as libc::c_int)
                .map(|r| r.1)
        };
        let python = LimitPlan::new(&l, None, ModuleKind::Python, false, 1000, false);
        let memory = python
            .applied
            .iter()
            .find(|a| a.name == "memoryBytes")
            .unwrap();
        assert!(memory.enforced);
        assert_eq!(address_space(&python), Some(256 << 20));
        let node = LimitPlan::new(&l, None, ModuleKind::Node, false, 1000, false);
        let memory = node
            .applied
            .iter()
            .find(|a| a.name == "memoryBytes")
            .unwrap();
        assert!(!memory.enforced, "node maps more than it uses");
        assert_eq!(address_space(&node), Some((256 << 20) + NODE_AS_HEADROOM));
        let spawning = LimitPlan::new(&l, None, ModuleKind::Native, true, 1000, false);
        assert!(
            !spawning
                .applied
                .iter()
                .find(|a| a.name == "memoryBytes")
                .unwrap()
                .enforced
        );
    }

    #[test]
    fn a_long_lived_child_has_no_cpu_or_run_only_limits() {
        let l = limits();
        let run = LimitPlan::new(&l, None, ModuleKind::Native, false, 1000, false);
        let child = LimitPlan::new(&l, None, ModuleKind::Native, false, 1000, true);
        let names = |p: &LimitPlan| p.applied.iter().map(|a| a.name).collect::<Vec<_>>();
        assert_eq!(
            names(&run),
            [
                "wallTimeoutMs",
                "cpuTimeMs",
                "memoryBytes",
                "maxPids",
                "maxOpenFiles",
                "maxFileSize",
                "tmpSize",
                "maxOutputBytes",
                "maxModuleBytes"
            ]
        );
        assert_eq!(
            names(&child),
            [
                "memoryBytes",
                "maxPids",
                "maxOpenFiles",
                "maxFileSize",
                "tmpSize"
            ]
        );
        let cpu = |p: &LimitPlan| {
            p.rlimits
                .iter()
                .any(|r| r.0 == libc::RLIMIT_CPU as libc::c_int)
        };
        assert!(cpu(&run) && !cpu(&child));
    }
}
