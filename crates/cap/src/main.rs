//! `cap`: governed capabilities for agents.

fn main() -> std::process::ExitCode {
    cap::main_entry()
}
