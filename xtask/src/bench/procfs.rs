//! What `/proc` tells about a process: its resident memory (current, and the peak over a
//! measured stretch) and the CPU time it has used. Linux only; it knows nothing about what the
//! process is.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::Result;

/// How often [`PeakSampler`] reads the resident size.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);

/// The current resident set size of `pid`, in bytes.
pub fn rss(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("reading /proc/{pid}/status: {e}"))?;
    status_field(&status, "VmRSS").ok_or_else(|| format!("no VmRSS in /proc/{pid}/status").into())
}

/// CPU time (user and system, all threads) that `pid` has used so far.
pub fn cpu_time(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("reading /proc/{pid}/stat: {e}"))?;
    stat_cpu_ticks(&stat)
        .map(|ticks| Duration::from_millis(ticks * 1000 / CLOCK_TICKS_PER_SEC))
        .ok_or_else(|| format!("unexpected /proc/{pid}/stat: {stat}").into())
}

/// CPU time that the whole machine has spent busy (all processes, all cores) since boot.
pub fn machine_busy() -> Result<Duration> {
    let stat =
        std::fs::read_to_string("/proc/stat").map_err(|e| format!("reading /proc/stat: {e}"))?;
    busy_ticks(&stat)
        .map(|ticks| Duration::from_millis(ticks * 1000 / CLOCK_TICKS_PER_SEC))
        .ok_or_else(|| "unexpected /proc/stat".into())
}

/// user + nice + system + irq + softirq + steal from the `cpu` line of `/proc/stat`: all but
/// idle and iowait (guest time is already part of user).
fn busy_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let field = |i: usize| ticks.get(i).copied().unwrap_or(0);
    (ticks.len() >= 4).then(|| field(0) + field(1) + field(2) + field(5) + field(6) + field(7))
}

/// `USER_HZ`, the unit of the times in `/proc/<pid>/stat`: 100 on every Linux architecture in
/// use (`getconf CLK_TCK`); reading it properly needs `sysconf`, which is not worth `unsafe`.
const CLOCK_TICKS_PER_SEC: u64 = 100;

/// `utime + stime` from a `/proc/<pid>/stat` line, in clock ticks. The command name in
/// parentheses may contain spaces, so fields are counted from its closing parenthesis.
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// A `kB` field of `/proc/<pid>/status`, in bytes.
fn status_field(status: &str, name: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let value = line.strip_prefix(name)?.strip_prefix(':')?;
        let kb = value
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse::<u64>()
            .ok()?;
        Some(kb * 1024)
    })
}

/// Follows the resident size of a process from `start` to `finish`: a thread samples it every
/// [`SAMPLE_EVERY`], and the kernel's own high-water mark (`VmHWM`, reset at the start through
/// `/proc/<pid>/clear_refs`) catches peaks between samples where the kernel allows the reset.
pub struct PeakSampler {
    pid: u32,
    hwm_reset: bool,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<u64>,
}

impl PeakSampler {
    pub fn start(pid: u32) -> Result<PeakSampler> {
        // "5" resets the peak resident size to the current one (Linux 4.0 and later). Without
        // it, VmHWM would still hold the peak of earlier phases, so it is then left unused.
        let hwm_reset = std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok();
        let first = rss(pid)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut peak = first;
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(SAMPLE_EVERY);
                // The process may be exiting; the samples taken so far still stand.
                if let Ok(now) = rss(pid) {
                    peak = peak.max(now);
                }
            }
            peak
        });
        Ok(PeakSampler {
            pid,
            hwm_reset,
            stop,
            thread,
        })
    }

    /// The peak resident size, in bytes, since `start`.
    pub fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let sampled = self.thread.join().unwrap_or(0);
        let hwm = if self.hwm_reset {
            std::fs::read_to_string(format!("/proc/{}/status", self.pid))
                .ok()
                .and_then(|s| status_field(&s, "VmHWM"))
                .unwrap_or(0)
        } else {
            0
        };
        sampled.max(hwm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_read_in_bytes() {
        let status = "Name:\tstrata\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t9\n";
        assert_eq!(status_field(status, "VmRSS"), Some(100 * 1024 * 1024));
        assert_eq!(status_field(status, "VmHWM"), Some(200 * 1024 * 1024));
        assert_eq!(status_field(status, "VmSwap"), None);
        assert_eq!(status_field(status, "Threads"), None);
    }

    #[test]
    fn cpu_ticks_are_fields_14_and_15() {
        let stat = "3188 (a (b) c) R 3183 3183 28323 0 -1 4194304 98 0 0 0 7 5 0 0 20 0 1 0";
        assert_eq!(stat_cpu_ticks(stat), Some(12));
        assert_eq!(stat_cpu_ticks("3188 (cat) R 1 2"), None);
        assert!(cpu_time(std::process::id()).is_ok());
    }

    #[test]
    fn busy_ticks_leave_out_idle_and_iowait() {
        let stat = "cpu  100 2 30 5000 70 4 5 6 0 0\ncpu0 50 1 15 2500 35 2 2 3 0 0\n";
        assert_eq!(busy_ticks(stat), Some(100 + 2 + 30 + 4 + 5 + 6));
        assert_eq!(busy_ticks("cpu0 1 2 3 4\n"), None);
        assert!(machine_busy().is_ok());
    }

    #[test]
    fn own_resident_size_is_plausible() {
        let now = rss(std::process::id()).unwrap();
        assert!(now > 1024 * 1024, "{now}");
        let sampler = PeakSampler::start(std::process::id()).unwrap();
        assert!(sampler.finish() >= now / 2);
    }
}
