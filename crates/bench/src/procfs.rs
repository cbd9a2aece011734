//! Memory and CPU of the operator process, from `/proc/<pid>`.

use anyhow::{Context as _, bail};
use std::path::PathBuf;

#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Resident set size now (`VmRSS`), KiB.
    pub rss_kib: u64,
    /// Peak resident set size (`VmHWM`) since start or since the last [`reset_peak`], KiB.
    pub peak_rss_kib: u64,
    /// User + system CPU time, in clock ticks.
    pub cpu_ticks: u64,
}

impl Sample {
    pub fn read(pid: u32) -> anyhow::Result<Self> {
        let status_path = proc_file(pid, "status");
        let status = std::fs::read_to_string(&status_path)
            .with_context(|| format!("reading {}", status_path.display()))?;
        let kib = |field: &str| -> anyhow::Result<u64> {
            let line = status
                .lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .with_context(|| format!("{field} missing in {}", status_path.display()))?;
            line.trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .with_context(|| format!("{field} in {}: {line:?}", status_path.display()))
        };
        Ok(Self {
            rss_kib: kib("VmRSS")?,
            peak_rss_kib: kib("VmHWM")?,
            cpu_ticks: cpu_ticks_of_pid(pid)?,
        })
    }
}

/// CPU time of `pids` together (the control plane's processes), in clock ticks.
pub fn cpu_ticks_of(pids: &[u32]) -> anyhow::Result<u64> {
    pids.iter()
        .try_fold(0, |sum, pid| Ok(sum + cpu_ticks_of_pid(*pid)?))
}

/// Those of `pids` whose command (`/proc/<pid>/comm`) is one of `commands`.
pub fn named(pids: &[u32], commands: &[&str]) -> anyhow::Result<Vec<u32>> {
    let mut found = Vec::new();
    for pid in pids {
        let path = proc_file(*pid, "comm");
        let comm = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        if commands.contains(&comm.trim()) {
            found.push(*pid);
        }
    }
    if found.len() != commands.len() {
        bail!(
            "found {} of the processes {commands:?} among {pids:?}",
            found.len()
        );
    }
    Ok(found)
}

/// CPU time of process `pid`, in clock ticks.
fn cpu_ticks_of_pid(pid: u32) -> anyhow::Result<u64> {
    let path = proc_file(pid, "stat");
    let stat =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    cpu_ticks(&stat).with_context(|| format!("parsing {}", path.display()))
}

/// utime + stime (fields 14 and 15 of `/proc/<pid>/stat`; the command name, field 2, may
/// contain spaces and parentheses, so fields are counted from its closing parenthesis).
fn cpu_ticks(stat: &str) -> anyhow::Result<u64> {
    let (_, after_comm) = stat
        .rsplit_once(')')
        .context("no ')' after the command name")?;
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // fields[0] is field 3 (state), so field n is fields[n - 3].
    let field = |n: usize| -> anyhow::Result<u64> {
        let value = fields.get(n - 3).with_context(|| format!("no field {n}"))?;
        value
            .parse()
            .with_context(|| format!("field {n} is {value:?}"))
    };
    Ok(field(14)? + field(15)?)
}

/// Resets the process's peak RSS (`VmHWM`) to its current RSS, so that the next [`Sample`]
/// shows the peak of a single scenario (`/proc/<pid>/clear_refs`, Linux >= 4.0).
pub fn reset_peak(pid: u32) -> anyhow::Result<()> {
    let path = proc_file(pid, "clear_refs");
    std::fs::write(&path, "5").with_context(|| format!("writing 5 to {}", path.display()))
}

pub fn ticks_to_secs(ticks: u64) -> f64 {
    let per_second = rustix::param::clock_ticks_per_second();
    ticks as f64 / per_second.max(1) as f64
}

fn proc_file(pid: u32, name: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{name}"))
}

/// Fails unless `/proc` describes our own process (the numbers would be meaningless).
pub fn check_available() -> anyhow::Result<()> {
    let pid = std::process::id();
    match Sample::read(pid) {
        Ok(s) if s.rss_kib > 0 => Ok(()),
        Ok(_) => bail!("/proc/{pid}/status reports no resident memory"),
        Err(e) => Err(e.context("process figures need Linux /proc")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_survive_odd_command_names() -> anyhow::Result<()> {
        let stat = "42 (a) b) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 4 0 1 2 3";
        assert_eq!(cpu_ticks(stat)?, 12);
        Ok(())
    }

    #[test]
    fn reads_this_process() -> anyhow::Result<()> {
        let s = Sample::read(std::process::id())?;
        assert!(s.rss_kib > 0 && s.peak_rss_kib >= s.rss_kib);
        Ok(())
    }
}
