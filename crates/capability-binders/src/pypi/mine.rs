//! The candidates of a wheel: its console scripts and public top-level functions, found
//! without importing it.
//!
//! The reference runs Python's `ast` over the wheel on the host. Here the parsing itself runs
//! in the process sandbox: the embedded miner (`miner.py`) is a sandboxed module whose package
//! root holds only itself and the wheel (read-only), with no network and no grants. It opens
//! the wheel as a zip archive, reads `*.dist-info/entry_points.txt` (`[console_scripts]`) and
//! parses up to [`MAX_FILES`] `.py` files (skipping `.dist-info/` and `tests/` paths; parse
//! failures are skipped) and returns raw facts only: `{module, symbol, kind, lineno, path,
//! docstring}`. Nothing of the wheel is ever imported, and a wheel crafted to crash or hang
//! the parser crashes or hangs a sandbox, not the host.
//!
//! Rust does the rest ([`score_candidates`], testable without Python):
//!
//! * a console script scores 1.0; its evidence is the `entry_points.txt` path and the entry;
//! * a function scores (query tokens found in the lowercased `name docstring module`) / (query
//!   tokens), or 0.5 without query tokens, plus 0.2 when it has a docstring, rounded to 4
//!   places; its evidence is `path:lineno` and the first 240 characters of its docstring;
//! * all are sorted by (−score, module, symbol) and the first [`MAX_CANDIDATES`] kept.
//!
//! Query tokens are the runs of `[a-z0-9]` of the lowercased query longer than one character
//! (the reference's Python splits on non-word characters, which also keeps `_`; a run here
//! never contains `_`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::run::{ScratchRoot, read_with_sha256, sandbox_run, write_file};
use super::{Index, Inspection, PypiError, PypiErrorKind};

/// The most `.py` files the miner parses.
pub const MAX_FILES: usize = 120;
/// The most candidates a report keeps.
pub const MAX_CANDIDATES: usize = 100;
/// The wall clock (and CPU) limit of the miner.
pub const MINER_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest wheel the miner reads.
pub const MAX_MINED_WHEEL_BYTES: u64 = 256 << 20;
/// Characters of a docstring kept as evidence.
const DOC_EVIDENCE_CHARS: usize = 240;
const MINER_FILE: &str = "_capability_pypi_miner.py";
const MINER_SOURCE: &str = include_str!("miner.py");
const WHEEL_FILE: &str = "wheel.whl";

/// The report's fixed notes.
pub const NOTES: [&str; 4] = [
    "The wheel was read as a zip archive and its Python sources parsed with ast; no code of it was imported or run.",
    "Candidates are lexical evidence (names, docstrings, entry points), not proof of what a function does.",
    "Authority stays incomplete until the function has run in isolation and its effects were observed.",
    "The parser ran in the process sandbox: no network, no grants, the wheel read-only.",
];

/// What a candidate is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CandidateKind {
    /// A public top-level `def` or `async def`.
    Function,
    /// A `[console_scripts]` entry point.
    ConsoleScript,
}

impl CandidateKind {
    /// `function` or `console-script`.
    pub fn as_str(self) -> &'static str {
        match self {
            CandidateKind::Function => "function",
            CandidateKind::ConsoleScript => "console-script",
        }
    }

    /// The kind named `s`.
    pub fn parse(s: &str) -> Option<CandidateKind> {
        match s {
            "function" => Some(CandidateKind::Function),
            "console-script" => Some(CandidateKind::ConsoleScript),
            _ => None,
        }
    }
}

/// One candidate of a wheel.
#[derive(Clone, Debug, PartialEq)]
pub struct PythonCandidate {
    /// The importable module (`pkg.sub`).
    pub module: String,
    /// The function, the entry point's attribute (`main`, `Cli.run`), or `__main__` for an
    /// entry point naming a module only.
    pub symbol: String,
    pub kind: CandidateKind,
    pub score: f64,
    pub evidence: Vec<String>,
    /// The console script's name (console scripts only).
    pub script: Option<String>,
}

impl PythonCandidate {
    /// `{module, symbol, kind, score, evidence, script?}`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "module": self.module,
            "symbol": self.symbol,
            "kind": self.kind.as_str(),
            "score": self.score,
            "evidence": self.evidence,
        });
        if let Some(script) = &self.script {
            v["script"] = json!(script);
        }
        v
    }

    /// The candidate `to_json` wrote.
    pub fn from_json(v: &Value) -> Option<PythonCandidate> {
        Some(PythonCandidate {
            module: v.get("module")?.as_str()?.to_string(),
            symbol: v.get("symbol")?.as_str()?.to_string(),
            kind: CandidateKind::parse(v.get("kind")?.as_str()?)?,
            score: v.get("score").and_then(Value::as_f64).unwrap_or(0.0),
            evidence: v
                .get("evidence")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|e| e.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            script: v.get("script").and_then(Value::as_str).map(str::to_string),
        })
    }
}

/// A fact the miner reported (before scoring).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MinedFact {
    pub kind: CandidateKind,
    pub module: String,
    pub symbol: String,
    /// The file inside the wheel (`pkg/mod.py`, `x.dist-info/entry_points.txt`).
    pub path: String,
    /// Functions only.
    pub lineno: Option<u64>,
    /// Functions only; empty when there is none.
    pub docstring: String,
    /// Console scripts only: the script name.
    pub script: Option<String>,
    /// Console scripts only: `name = module:attr`.
    pub entry: Option<String>,
}

/// The reference's `PythonMiningReport`, plus the sandbox report of the miner's run.
#[derive(Clone, Debug, PartialEq)]
pub struct MiningReport {
    pub artifact: Inspection,
    pub query: Option<String>,
    pub candidates: Vec<PythonCandidate>,
    pub files_analyzed: u64,
    /// `.py` files the parser could not parse (`path: ErrorType`), and unreadable entry points.
    pub parse_failures: Vec<String>,
    /// The miner's `SandboxReport` as JSON.
    pub sandbox: Value,
}

impl MiningReport {
    /// `{artifact, query?, candidates, filesAnalyzed, notes, parseFailures, sandbox}`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "artifact": self.artifact.to_json(),
            "candidates": self.candidates.iter().map(PythonCandidate::to_json).collect::<Vec<_>>(),
            "filesAnalyzed": self.files_analyzed,
            "notes": NOTES,
            "parseFailures": self.parse_failures,
            "sandbox": self.sandbox,
        });
        if let Some(q) = &self.query {
            v["query"] = json!(q);
        }
        v
    }
}

/// Inspects `name` (`version`, or the latest) on the index, downloads its wheel into the
/// index's cache (sha256-checked) and mines it.
pub fn mine(
    index: &Index,
    name: &str,
    version: Option<&str>,
    query: Option<&str>,
) -> Result<MiningReport, PypiError> {
    let inspection = index.inspect(name, version)?;
    let wheel = fetch(index, &inspection)?;
    mine_wheel(&wheel, &inspection, query)
}

/// The verified wheel of `inspection`, downloaded into the index's cache if needed.
pub(crate) fn fetch(index: &Index, inspection: &Inspection) -> Result<PathBuf, PypiError> {
    index.fetch_wheel(&inspection.wheel, &index.config().cache_dir)
}

/// Mines a local wheel: its bytes must have the sha256 `inspection` names.
pub fn mine_wheel(
    wheel: &Path,
    inspection: &Inspection,
    query: Option<&str>,
) -> Result<MiningReport, PypiError> {
    let bytes = read_wheel(wheel, inspection, MAX_MINED_WHEEL_BYTES)?;
    mine_bytes(&bytes, inspection, query)
}

/// A local wheel's bytes (at most `max`), once they have the sha256 `inspection` names.
pub(crate) fn read_wheel(
    wheel: &Path,
    inspection: &Inspection,
    max: u64,
) -> Result<Vec<u8>, PypiError> {
    let expected = &inspection.wheel.sha256;
    read_with_sha256(wheel, max, expected, |actual| {
        format!(
            "{} has sha256 {actual}, but {} {} names sha256 {expected}",
            wheel.display(),
            inspection.name,
            inspection.version,
        )
    })
}

/// Mines a wheel's bytes, already checked against `inspection`'s sha256.
pub(crate) fn mine_bytes(
    bytes: &[u8],
    inspection: &Inspection,
    query: Option<&str>,
) -> Result<MiningReport, PypiError> {
    let root = ScratchRoot::new("mine")?;
    write_file(&root.package.join(WHEEL_FILE), bytes)?;
    write_file(&root.package.join(MINER_FILE), MINER_SOURCE.as_bytes())?;
    root.seal()?;
    let manifest = json!({
        "specVersion": "0.1",
        "id": "capability/pypi-miner",
        "version": "1.0.0",
        "name": "PyPI wheel miner",
        "description": "Lists the console scripts and public functions of a wheel without importing it.",
        "effects": [],
    });
    let input = json!({"wheel": WHEEL_FILE, "maxFiles": MAX_FILES});
    let ran = sandbox_run(&root.package, MINER_FILE, manifest, input, MINER_TIMEOUT)?;
    drop(root);
    let answer = ran.result.map_err(|e| {
        let stderr = ran.stderr.trim();
        PypiError::new(
            PypiErrorKind::Sandbox,
            if stderr.is_empty() {
                format!("the sandboxed miner failed: {e}")
            } else {
                format!("the sandboxed miner failed: {e}\n{stderr}")
            },
        )
    })?;
    let (facts, files_analyzed, parse_failures) = parse_miner_answer(&answer)?;
    Ok(MiningReport {
        artifact: inspection.clone(),
        query: query.map(str::to_string),
        candidates: score_candidates(&facts, query.unwrap_or("")),
        files_analyzed,
        parse_failures,
        sandbox: ran.sandbox,
    })
}

/// The facts of the miner's answer `{consoleScripts, functions, filesAnalyzed,
/// parseFailures}`.
pub fn parse_miner_answer(answer: &Value) -> Result<(Vec<MinedFact>, u64, Vec<String>), PypiError> {
    let bad = |what: &str| {
        PypiError::new(
            PypiErrorKind::Sandbox,
            format!("the sandboxed miner answered without {what}"),
        )
    };
    let str_of = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let mut facts = Vec::new();
    for s in answer
        .get("consoleScripts")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("consoleScripts"))?
    {
        let (Some(module), Some(symbol), Some(path)) =
            (str_of(s, "module"), str_of(s, "symbol"), str_of(s, "path"))
        else {
            return Err(bad("a complete console script"));
        };
        facts.push(MinedFact {
            kind: CandidateKind::ConsoleScript,
            module,
            symbol,
            path,
            lineno: None,
            docstring: String::new(),
            script: str_of(s, "script"),
            entry: str_of(s, "entry"),
        });
    }
    for f in answer
        .get("functions")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("functions"))?
    {
        let (Some(module), Some(symbol), Some(path)) =
            (str_of(f, "module"), str_of(f, "symbol"), str_of(f, "path"))
        else {
            return Err(bad("a complete function"));
        };
        facts.push(MinedFact {
            kind: CandidateKind::Function,
            module,
            symbol,
            path,
            lineno: f.get("lineno").and_then(Value::as_u64),
            docstring: str_of(f, "docstring").unwrap_or_default(),
            script: None,
            entry: None,
        });
    }
    let files = answer
        .get("filesAnalyzed")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad("filesAnalyzed"))?;
    let failures = answer
        .get("parseFailures")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|e| e.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Ok((facts, files, failures))
}

/// The query's tokens: lowercase `[a-z0-9]+` runs longer than one character.
pub fn query_tokens(query: &str) -> Vec<String> {
    query
        .to_lowercase()
        .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
        .filter(|t| t.len() > 1)
        .map(str::to_string)
        .collect()
}

/// Rounds to 4 decimal places.
fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// Scores, sorts (−score, module, symbol) and truncates the facts (see the module docs).
pub fn score_candidates(facts: &[MinedFact], query: &str) -> Vec<PythonCandidate> {
    let tokens = query_tokens(query);
    let mut out: Vec<PythonCandidate> = facts
        .iter()
        .map(|f| match f.kind {
            CandidateKind::ConsoleScript => PythonCandidate {
                module: f.module.clone(),
                symbol: f.symbol.clone(),
                kind: f.kind,
                score: 1.0,
                evidence: std::iter::once(f.path.clone())
                    .chain(f.entry.clone().map(|e| format!("console_scripts: {e}")))
                    .collect(),
                script: f.script.clone(),
            },
            CandidateKind::Function => {
                let haystack = format!("{} {} {}", f.symbol, f.docstring, f.module).to_lowercase();
                let lexical = if tokens.is_empty() {
                    0.5
                } else {
                    let hits = tokens
                        .iter()
                        .filter(|t| haystack.contains(t.as_str()))
                        .count();
                    hits as f64 / tokens.len() as f64
                };
                let doc_bonus = if f.docstring.is_empty() { 0.0 } else { 0.2 };
                let mut evidence = vec![match f.lineno {
                    Some(line) => format!("{}:{line}", f.path),
                    None => f.path.clone(),
                }];
                if !f.docstring.is_empty() {
                    evidence.push(f.docstring.chars().take(DOC_EVIDENCE_CHARS).collect());
                }
                PythonCandidate {
                    module: f.module.clone(),
                    symbol: f.symbol.clone(),
                    kind: f.kind,
                    score: round4(lexical + doc_bonus),
                    evidence,
                    script: None,
                }
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.module.cmp(&b.module))
            .then_with(|| a.symbol.cmp(&b.symbol))
    });
    out.truncate(MAX_CANDIDATES);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(module: &str, symbol: &str, doc: &str) -> MinedFact {
        MinedFact {
            kind: CandidateKind::Function,
            module: module.into(),
            symbol: symbol.into(),
            path: format!("{}.py", module.replace('.', "/")),
            lineno: Some(3),
            docstring: doc.into(),
            script: None,
            entry: None,
        }
    }

    #[test]
    fn tokens_are_lowercase_alphanumeric_runs_longer_than_one() {
        assert_eq!(
            query_tokens("Add two-Numbers, a B 42x!"),
            vec!["add", "two", "numbers", "42x"]
        );
        assert!(query_tokens("a b c").is_empty());
    }

    #[test]
    fn scores_follow_the_reference_formula() {
        let facts = vec![
            function("calc", "add", "Add two numbers."),
            function("calc", "sub", ""),
            function("calc.extra", "mul", "Multiply."),
        ];
        let c = score_candidates(&facts, "add numbers");
        assert_eq!(c[0].symbol, "add");
        assert_eq!(c[0].score, 1.2);
        assert_eq!(c[0].evidence, vec!["calc.py:3", "Add two numbers."]);
        assert_eq!(c[1].symbol, "mul");
        assert_eq!(c[1].score, 0.2);
        assert_eq!(c[2].symbol, "sub");
        assert_eq!(c[2].score, 0.0);
        let none = score_candidates(&facts, "");
        assert_eq!(none[0].score, 0.7);
        assert_eq!(
            (none[0].module.as_str(), none[0].symbol.as_str()),
            ("calc", "add")
        );
        assert_eq!(none[2].score, 0.5);
        let third = score_candidates(&facts, "add zzz qqq");
        assert_eq!(third[0].score, 0.5333);
    }

    #[test]
    fn long_lists_are_cut() {
        let facts: Vec<_> = (0..150)
            .map(|i| function("m", &format!("f{i:03}"), ""))
            .collect();
        let c = score_candidates(&facts, "");
        assert_eq!(c.len(), MAX_CANDIDATES);
        assert_eq!(c[0].symbol, "f000");
    }
}
