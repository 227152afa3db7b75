//! `capability`: the same command as `cap`.

fn main() -> std::process::ExitCode {
    cap::main_entry()
}
