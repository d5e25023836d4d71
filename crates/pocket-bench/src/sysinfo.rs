//! Facts about the machine and the build: CPU model, GPUs and driver, commit, date, peak RSS.

use std::process::Command;

use serde::{Deserialize, Serialize};

/// One GPU as nvidia-smi reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    /// Product name.
    pub name: String,
    /// Driver version.
    pub driver: String,
    /// Total memory in MiB.
    pub memory_mib: Option<u64>,
}

/// The hardware a run happened on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hardware {
    /// CPU model name (`/proc/cpuinfo`).
    pub cpu: String,
    /// Logical CPUs available to the process.
    pub cpus: usize,
    /// Total host memory in bytes (`/proc/meminfo`).
    pub memory_bytes: Option<u64>,
    /// GPUs (empty when nvidia-smi is absent).
    pub gpus: Vec<Gpu>,
}

/// Collects [`Hardware`] now.
pub fn hardware() -> Hardware {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let memory_bytes = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    });
    Hardware {
        cpu,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_bytes,
        gpus: gpus(),
    }
}

/// GPUs from `nvidia-smi`, empty when it is missing or fails.
pub fn gpus() -> Vec<Gpu> {
    let out = Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,driver_version,memory.total",
            "--format=csv,noheader,nounits",
        ])
        .output();
    let Ok(out) = out else { return Vec::new() };
    if !out.status.success() {
        return Vec::new();
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            (f.len() >= 2).then(|| Gpu {
                name: f[0].to_string(),
                driver: f[1].to_string(),
                memory_mib: f.get(2).and_then(|m| m.parse().ok()),
            })
        })
        .collect()
}

/// The commit this binary was built from (`$POCKET_COMMIT` overrides; `-dirty` when the tree
/// had changes at build time).
pub fn commit() -> String {
    std::env::var("POCKET_COMMIT")
        .ok()
        .or_else(|| option_env!("POCKET_BUILD_COMMIT").map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// Peak resident set size of this process in bytes (`VmHWM`), if the kernel reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // civil-from-days (Howard Hinnant)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts() {
        let d = utc_now();
        assert_eq!(d.len(), 20, "{d}");
        assert!(d.starts_with("20"));
        assert!(peak_rss_bytes().unwrap_or(1) > 0);
        assert!(!hardware().cpu.is_empty());
    }
}
