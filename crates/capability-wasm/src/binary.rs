//! Just enough of the WebAssembly binary format to tell modules from components and to read
//! custom sections, without another parser dependency.

use crate::error::{WasmError, WasmErrorKind};

/// The custom section a module may embed its manifest in (UTF-8 JSON).
pub const MANIFEST_SECTION: &str = "capability-manifest";

const MAGIC: &[u8; 4] = b"\0asm";

/// What a binary is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinaryKind {
    Module,
    Component,
}

pub(crate) fn kind(bytes: &[u8]) -> Result<BinaryKind, WasmError> {
    let invalid = || WasmError::new(WasmErrorKind::InvalidModule, "not a WebAssembly binary");
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return Err(invalid());
    }
    match (
        bytes[4..6] == [1, 0],
        bytes[6..8] == [0, 0],
        bytes[6..8] == [1, 0],
    ) {
        (true, true, _) => Ok(BinaryKind::Module),
        (_, _, true) => Ok(BinaryKind::Component),
        _ => Err(invalid()),
    }
}

fn leb_u32(bytes: &[u8], pos: &mut usize) -> Option<u32> {
    let mut result: u32 = 0;
    for shift in (0..35).step_by(7) {
        let byte = *bytes.get(*pos)?;
        *pos += 1;
        result |= u32::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            return Some(result);
        }
    }
    None
}

/// The payloads of every custom section named `name`, in order.
pub(crate) fn custom_sections<'a>(bytes: &'a [u8], name: &str) -> Result<Vec<&'a [u8]>, WasmError> {
    let malformed = || WasmError::new(WasmErrorKind::InvalidModule, "malformed section header");
    let mut out = Vec::new();
    let mut pos = 8;
    while pos < bytes.len() {
        let id = bytes[pos];
        pos += 1;
        let size = leb_u32(bytes, &mut pos).ok_or_else(malformed)? as usize;
        let end = pos
            .checked_add(size)
            .filter(|&e| e <= bytes.len())
            .ok_or_else(malformed)?;
        if id == 0 {
            let mut p = pos;
            let len = leb_u32(bytes, &mut p).ok_or_else(malformed)? as usize;
            let name_end = p
                .checked_add(len)
                .filter(|&e| e <= end)
                .ok_or_else(malformed)?;
            if &bytes[p..name_end] == name.as_bytes() {
                out.push(&bytes[name_end..end]);
            }
        }
        pos = end;
    }
    Ok(out)
}
