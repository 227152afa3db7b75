//! Printing: pretty JSON on stdout, one-line errors on stderr.

use std::io::Write;
use std::path::Path;

use serde_json::Value;

/// Prints `JSON.stringify(value, null, 2)` and a newline.
pub fn print_json(value: &Value) -> Result<(), String> {
    let mut text = capability_core::json::to_pretty_string(value);
    text.push('\n');
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| format!("stdout: {e}"))
}

/// Prints a one-line error on stderr.
pub fn error_line(message: &str) {
    let one_line = message.replace(['\n', '\r'], " ");
    let _ = writeln!(std::io::stderr().lock(), "cap: {one_line}");
}

/// Reads a file, with a one-line error naming it.
pub fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Reads and parses a JSON file (JavaScript semantics), with errors naming the file.
pub fn read_json(path: &Path) -> Result<Value, String> {
    let bytes = read_file(path)?;
    capability_core::json::parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses JSON given on the command line (a value nested past the limit is refused with
/// the message every surface gives).
pub fn parse_json_arg(text: &str, what: &str) -> Result<Value, String> {
    capability_core::json::parse_str(text).map_err(|e| {
        if e.is_too_deep() && what == "input" {
            capability_core::json::too_deep("Input")
        } else {
            format!("{what}: {e}")
        }
    })
}

/// Writes `JSON.stringify(value, null, 2)` and a newline to a file.
pub fn write_json(path: &Path, value: &Value) -> Result<(), String> {
    let mut text = capability_core::json::to_pretty_string(value);
    text.push('\n');
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The absolute form of a path (without resolving symlinks).
pub fn absolute(path: &Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}
