//! The exact dependency closure of a wheel, from the index the wheel came from.
//!
//! [`resolve`] reads the root wheel's `Requires-Dist`, keeps the requirements whose markers
//! hold in the sandbox interpreter's environment ([`Interpreter::marker_env`], no extra; a
//! dependency asked for with extras also brings the requirements of those extras), and
//! satisfies them breadth-first, greedily and without backtracking: for each project, the
//! highest release that satisfies **every** constraint collected so far, that is not a
//! pre-release (unless a constraint names one), not yanked, and has a wheel with a sha256 and a
//! tag the interpreter accepts. Its wheel is downloaded and verified into the cache
//! (`<cache>/<sha256>/<filename>`), its own requirements are queued, and so on, up to
//! [`MAX_PACKAGES`] packages and [`MAX_DEPTH`] levels.
//!
//! It refuses, with kind [`PypiErrorKind::Dependency`] and a message naming the requirement
//! and who required it: a project missing from the index, a requirement no release satisfies,
//! a release with no usable wheel (an sdist-only dependency is never built), a direct URL
//! requirement, and a conflict (a later requirement that excludes the release already
//! chosen, naming both requirers). Nothing else runs: no sdist is downloaded, no build script
//! runs, pip is never invoked.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use super::index::{Index, read_metadata};
use super::pep::{Requirement, SpecifierSet, Version, normalize_name};
use super::tags::Interpreter;
use super::{Inspection, PypiError, PypiErrorKind};

/// The most packages a closure may have (the root excluded).
pub const MAX_PACKAGES: usize = 200;
/// The deepest chain of requirements.
pub const MAX_DEPTH: usize = 50;

/// One dependency of the closure.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub inspection: Inspection,
    /// The verified wheel in the cache.
    pub path: PathBuf,
    /// `<name> <version>` of the package whose requirement chose it.
    pub required_by: String,
}

fn dependency(message: impl Into<String>) -> PypiError {
    PypiError::new(PypiErrorKind::Dependency, message)
}

/// A constraint on a project and where it came from.
#[derive(Clone, Debug)]
struct Constraint {
    requirement: String,
    specifiers: SpecifierSet,
    required_by: String,
}

/// A project already chosen.
#[derive(Clone, Debug)]
struct Chosen {
    version: Version,
    label: String,
    required_by: String,
    /// Its `Requires-Dist` (none for the root, which is handled first).
    requires_dist: Vec<String>,
    extras: BTreeSet<String>,
    depth: usize,
}

/// The dependency closure of `root` (whose wheel is `root_wheel`), from `index`, with every
/// wheel verified in `cache_dir`; in the order chosen, the root excluded.
pub fn resolve(
    index: &Index,
    root: &Inspection,
    root_wheel: &Path,
    cache_dir: &Path,
) -> Result<Vec<Resolved>, PypiError> {
    let interpreter = index.interpreter()?;
    resolve_for(index, &interpreter, root, root_wheel, cache_dir)
}

struct Resolver<'a> {
    index: &'a Index,
    env: super::pep::MarkerEnv,
    cache_dir: &'a Path,
    chosen: BTreeMap<String, Chosen>,
    constraints: BTreeMap<String, Vec<Constraint>>,
    queue: VecDeque<(Requirement, String, usize)>,
    out: Vec<Resolved>,
}

fn resolve_for(
    index: &Index,
    interpreter: &Interpreter,
    root: &Inspection,
    root_wheel: &Path,
    cache_dir: &Path,
) -> Result<Vec<Resolved>, PypiError> {
    let meta = read_metadata(root_wheel)?;
    let root_label = format!("{} {}", root.name, root.version);
    let root_version = Version::parse(&root.version)?;
    let mut r = Resolver {
        index,
        env: interpreter.marker_env(),
        cache_dir,
        chosen: BTreeMap::new(),
        constraints: BTreeMap::new(),
        queue: VecDeque::new(),
        out: Vec::new(),
    };
    r.chosen.insert(
        normalize_name(&root.name),
        Chosen {
            version: root_version,
            label: root_label.clone(),
            required_by: String::new(),
            requires_dist: Vec::new(),
            extras: BTreeSet::new(),
            depth: 0,
        },
    );
    r.enqueue(&meta.requires_dist, &BTreeSet::new(), &root_label, 1, true)?;
    while let Some((req, by, depth)) = r.queue.pop_front() {
        r.satisfy(req, by, depth)?;
    }
    Ok(r.out)
}

impl Resolver<'_> {
    /// Queues the requirements of a package that apply with no extra (when `base`) or with
    /// one of `extras`.
    fn enqueue(
        &mut self,
        requires_dist: &[String],
        extras: &BTreeSet<String>,
        by: &str,
        depth: usize,
        base: bool,
    ) -> Result<(), PypiError> {
        for line in requires_dist {
            let req = Requirement::parse(line).map_err(|e| {
                dependency(format!("{by} has an invalid requirement: {}", e.message))
            })?;
            let applies = (base && req.applies(&self.env.with_extra("")))
                || extras.iter().any(|x| {
                    req.marker.is_some()
                        && req.applies(&self.env.with_extra(x))
                        && !req.applies(&self.env.with_extra(""))
                });
            if applies {
                self.queue.push_back((req, by.to_string(), depth));
            }
        }
        Ok(())
    }

    fn satisfy(&mut self, req: Requirement, by: String, depth: usize) -> Result<(), PypiError> {
        let name = req.normalized_name();
        if depth > MAX_DEPTH {
            return Err(dependency(format!(
                "the dependency chain is deeper than {MAX_DEPTH} at `{req}` (required by {by})"
            )));
        }
        if req.url.is_some() {
            return Err(dependency(format!(
                "`{req}` (required by {by}) is a direct URL requirement: only releases of the index are bound"
            )));
        }
        let constraint = Constraint {
            requirement: req.to_string(),
            specifiers: req.specifiers.clone(),
            required_by: by.clone(),
        };
        self.constraints
            .entry(name.clone())
            .or_default()
            .push(constraint);
        if let Some(chosen) = self.chosen.get(&name).cloned() {
            if !req
                .specifiers
                .contains_with(&chosen.version, chosen.version.is_prerelease())
            {
                let first = if chosen.required_by.is_empty() {
                    "it is the package being bound".to_string()
                } else {
                    format!("required by {}", chosen.required_by)
                };
                return Err(dependency(format!(
                    "conflict: {by} requires `{req}`, but {} was already chosen ({first})",
                    chosen.label
                )));
            }
            let new: BTreeSet<String> = req
                .extras
                .iter()
                .filter(|x| !chosen.extras.contains(*x))
                .cloned()
                .collect();
            if !new.is_empty() {
                if let Some(c) = self.chosen.get_mut(&name) {
                    c.extras.extend(new.iter().cloned());
                }
                self.enqueue(
                    &chosen.requires_dist,
                    &new,
                    &chosen.label,
                    chosen.depth + 1,
                    false,
                )?;
            }
            return Ok(());
        }
        if self.out.len() >= MAX_PACKAGES {
            return Err(dependency(format!(
                "the closure has more than {MAX_PACKAGES} packages (at `{req}`, required by {by})"
            )));
        }
        let all: Vec<Constraint> = self.constraints.get(&name).cloned().unwrap_or_default();
        let project = match self.index.project_files(&req.name) {
            Ok(p) => p,
            Err(e) if e.kind == PypiErrorKind::NotFound => {
                return Err(dependency(format!(
                    "`{req}` (required by {by}) cannot be bound: {} is not on the index {}",
                    req.name,
                    self.index.index_url()
                )));
            }
            Err(e) => return Err(e),
        };
        let releases = project.releases();
        let mut refusal: Option<PypiError> = None;
        let mut matching = 0usize;
        let mut picked: Option<Inspection> = None;
        for (version, _) in &releases {
            if !all.iter().all(|c| c.specifiers.contains(version)) {
                continue;
            }
            matching += 1;
            match self.index.inspection_from_files(&project, version) {
                Ok(i) => {
                    picked = Some(i);
                    break;
                }
                Err(e) if matches!(e.kind, PypiErrorKind::NoWheel | PypiErrorKind::Yanked) => {
                    refusal.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        let Some(inspection) = picked else {
            let constraints: Vec<String> = all
                .iter()
                .map(|c| format!("`{}` (required by {})", c.requirement, c.required_by))
                .collect();
            return Err(dependency(match (matching, refusal) {
                (0, _) => {
                    let known: Vec<String> = releases
                        .iter()
                        .take(10)
                        .map(|(v, _)| v.to_string())
                        .collect();
                    format!(
                        "no release of {} satisfies {} (releases on the index: {})",
                        req.name,
                        constraints.join(" and "),
                        if known.is_empty() {
                            "none".into()
                        } else {
                            known.join(", ")
                        }
                    )
                }
                (_, Some(e)) => {
                    format!("`{req}` (required by {by}) cannot be bound: {}", e.message)
                }
                (_, None) => format!("`{req}` (required by {by}) cannot be bound"),
            }));
        };
        let path = self
            .index
            .fetch_wheel(&inspection.wheel, self.cache_dir)
            .map_err(|e| PypiError::new(e.kind, format!("{} (required by {by})", e.message)))?;
        let meta = read_metadata(&path)?;
        if normalize_name(&meta.name) != name {
            return Err(dependency(format!(
                "{} (required by {by}) is a wheel of `{}`, not of `{}`",
                inspection.wheel.filename, meta.name, req.name
            )));
        }
        let version = Version::parse(&inspection.version)?;
        let label = format!("{} {}", inspection.name, inspection.version);
        self.chosen.insert(
            name,
            Chosen {
                version,
                label: label.clone(),
                required_by: by.clone(),
                requires_dist: meta.requires_dist.clone(),
                extras: req.extras.iter().cloned().collect(),
                depth,
            },
        );
        let extras: BTreeSet<String> = req.extras.iter().cloned().collect();
        self.enqueue(&meta.requires_dist, &extras, &label, depth + 1, true)?;
        self.out.push(Resolved {
            inspection,
            path,
            required_by: by,
        });
        Ok(())
    }
}
