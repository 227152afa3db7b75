//! A deliberately hostile capability-wasm guest. The envelope's input is
//! `{"attack": NAME, "arg": STRING}`; each attack tries to cross the boundary and reports what
//! it saw as `{"output": {...}}`, or `{"error": {...}}` when the attempt failed inside the guest.

use std::hint::black_box;
use std::io::{Read, Write};

fn main() {
    let mut text = String::new();
    if std::io::stdin().read_to_string(&mut text).is_err() {
        reply(&error("cannot read stdin"));
        return;
    }
    let attack = field(&text, "attack").unwrap_or_default();
    let arg = field(&text, "arg").unwrap_or_default();
    let result = run(&attack, &arg);
    reply(&match result {
        Ok(output) => format!("{{\"output\":{output}}}"),
        Err(message) => error(&format!("{attack} failed: {message}")),
    });
}

fn run(attack: &str, arg: &str) -> Result<String, String> {
    match attack {
        "read" => {
            let content = std::fs::read_to_string(arg).map_err(|e| e.to_string())?;
            Ok(format!("{{\"content\":{}}}", quote(&content)))
        }
        "write" => {
            std::fs::write(arg, b"pwned by guest-hostile").map_err(|e| e.to_string())?;
            Ok(format!("{{\"written\":{}}}", quote(arg)))
        }
        "connect" => {
            let stream = std::net::TcpStream::connect(arg).map_err(|e| e.to_string())?;
            Ok(format!(
                "{{\"connected\":{}}}",
                quote(&format!("{stream:?}"))
            ))
        }
        "resolve" => {
            use std::net::ToSocketAddrs;
            let addrs: Vec<String> = (arg, 80)
                .to_socket_addrs()
                .map_err(|e| e.to_string())?
                .map(|a| a.to_string())
                .collect();
            Ok(format!("{{\"addresses\":{}}}", quote(&addrs.join(","))))
        }
        "spawn" => {
            let child = std::process::Command::new(arg)
                .spawn()
                .map_err(|e| e.to_string())?;
            Ok(format!("{{\"pid\":{}}}", child.id()))
        }
        "env" => {
            let all: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
            let value = std::env::var(arg).map_err(|e| e.to_string())?;
            Ok(format!(
                "{{\"value\":{},\"all\":{}}}",
                quote(&value),
                quote(&all.join("\n"))
            ))
        }
        "alloc" => {
            // Try to hold 8 GiB in 64 MiB chunks.
            let mut held: Vec<Vec<u8>> = Vec::new();
            for _ in 0..128 {
                held.push(black_box(vec![1u8; 64 << 20]));
            }
            Ok(format!("{{\"chunks\":{}}}", held.len()))
        }
        "spin" => {
            let mut x: u64 = 0;
            loop {
                x = black_box(x.wrapping_add(1));
            }
        }
        "sleep" => {
            std::thread::sleep(std::time::Duration::from_secs(3600));
            Ok("{\"slept\":true}".into())
        }
        "tmp" => {
            std::fs::write("/tmp/note.txt", arg).map_err(|e| e.to_string())?;
            let back = std::fs::read_to_string("/tmp/note.txt").map_err(|e| e.to_string())?;
            Ok(format!("{{\"roundTrip\":{}}}", quote(&back)))
        }
        "fill" => {
            // Write 1 MiB chunks into /tmp until something stops us.
            let chunk = vec![7u8; 1 << 20];
            let mut file = std::fs::File::create("/tmp/fill.bin").map_err(|e| e.to_string())?;
            let mut total: u64 = 0;
            loop {
                file.write_all(&chunk)
                    .map_err(|e| format!("{e} after {total} bytes"))?;
                total += chunk.len() as u64;
            }
        }
        "recurse" => Ok(format!("{{\"depth\":{}}}", recurse(black_box(0)))),
        "flood" => {
            let line = [b'x'; 4096];
            let mut out = std::io::stdout().lock();
            loop {
                out.write_all(&line).map_err(|e| e.to_string())?;
            }
        }
        other => Err(format!("unknown attack {other:?}")),
    }
}

#[inline(never)]
#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    let frame = black_box([depth; 64]);
    black_box(recurse(black_box(frame[3] + 1))) + frame[7]
}

fn reply(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn error(message: &str) -> String {
    format!(
        "{{\"error\":{{\"message\":{},\"code\":\"EXECUTION_FAILED\"}}}}",
        quote(message)
    )
}

/// The string value of `"name": "..."` in the envelope's input (no escapes needed by tests).
fn field(text: &str, name: &str) -> Option<String> {
    let input = &text[text.find("\"input\"")?..];
    let key = format!("\"{name}\"");
    let rest = &input[input.find(&key)? + key.len()..];
    let rest = &rest[rest.find('"')? + 1..];
    Some(rest[..rest.find('"')?].to_string())
}

fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
