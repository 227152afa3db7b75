//! Processes on this machine: which are alive (a sandboxed child or an upstream must not
//! outlive what started it), and a child that does not outlive its test ([`Running`]).

/// The pids of the processes (other than this one) whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .collect()
}

/// A child process (a server), killed and reaped when dropped.
#[derive(Debug)]
pub struct Running(pub std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
