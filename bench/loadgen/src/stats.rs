//! Latency summaries and process RSS sampling.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use serde::Serialize;

/// What one measured phase did.
#[derive(Debug, Serialize, Clone)]
pub struct Phase {
    pub phase: String,
    pub clients: usize,
    /// Requests answered with the expected status.
    pub ok: u64,
    /// Every other answer, by status ("io" for transport errors).
    pub unexpected: BTreeMap<String, u64>,
    pub elapsed_s: f64,
    /// `ok / elapsed_s`.
    pub rps: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    /// CPU time (user + system) the server process (`--pid`) used during the phase.
    pub server_cpu_ms: Option<f64>,
    /// The same per answered request, in microseconds.
    pub server_cpu_us_per_ok: Option<f64>,
    /// CPU time every program on the machine used during the phase, per answered request,
    /// in microseconds, by program name (`postgres`, `onejob`, `onejob-loadgen` (this load
    /// generator and the sink it serves), `onejob-fake`, everything else as `other`), and
    /// `all`: where the machine's cores went for each request.
    pub cpu_us_per_ok_by_program: BTreeMap<String, f64>,
    /// How busy the machine's cores were over the phase (/proc/stat: all but idle and
    /// iowait), in percent of all of them; and how much of their time went to iowait.
    pub machine_busy_pct: Option<f64>,
    pub machine_iowait_pct: Option<f64>,
}

/// Percentiles of microsecond samples (nearest rank), in milliseconds.
pub fn percentiles(samples: &mut [i64]) -> (f64, f64, f64, f64, f64) {
    if samples.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN, f64::NAN, f64::NAN);
    }
    samples.sort_unstable();
    let at = |q: f64| {
        let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
        samples[rank - 1] as f64 / 1000.0
    };
    let mean = samples.iter().map(|&s| s as f64).sum::<f64>() / samples.len() as f64 / 1000.0;
    (
        at(0.50),
        at(0.90),
        at(0.99),
        samples[samples.len() - 1] as f64 / 1000.0,
        mean,
    )
}

impl Phase {
    pub fn new(
        phase: &str,
        clients: usize,
        mut latencies_us: Vec<i64>,
        unexpected: BTreeMap<String, u64>,
        elapsed: Duration,
    ) -> Phase {
        let ok = latencies_us.len() as u64;
        let (p50, p90, p99, max, mean) = percentiles(&mut latencies_us);
        let elapsed_s = elapsed.as_secs_f64();
        Phase {
            phase: phase.into(),
            clients,
            ok,
            unexpected,
            elapsed_s,
            rps: ok as f64 / elapsed_s,
            p50_ms: p50,
            p90_ms: p90,
            p99_ms: p99,
            max_ms: max,
            mean_ms: mean,
            server_cpu_ms: None,
            server_cpu_us_per_ok: None,
            cpu_us_per_ok_by_program: BTreeMap::new(),
            machine_busy_pct: None,
            machine_iowait_pct: None,
        }
    }
}

/// The resident set size of a process in KiB (`VmRSS` in /proc/<pid>/status).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Samples a process's RSS every 50 ms in the background, keeping the peak.
pub struct RssSampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl RssSampler {
    pub fn start(pid: Option<u32>) -> RssSampler {
        let peak = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        if let Some(pid) = pid {
            let (peak, stop) = (peak.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(kib) = rss_kib(pid) {
                        peak.fetch_max(kib, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            });
        }
        RssSampler { peak, stop }
    }

    /// Stops sampling; the peak in KiB (None without a pid).
    pub fn finish(self) -> Option<u64> {
        self.stop.store(true, Ordering::Relaxed);
        match self.peak.load(Ordering::Relaxed) {
            0 => None,
            kib => Some(kib),
        }
    }
}

/// utime + stime of a process, in clock ticks (/proc/<pid>/stat fields 14 and 15).
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces: count fields after its closing paren.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Clock ticks to milliseconds (Linux's USER_HZ is 100 on every mainstream architecture).
pub fn ticks_to_ms(ticks: u64) -> f64 {
    ticks as f64 * 10.0
}

/// The programs `CpuByProgram` names; everything else is `other`.
const PROGRAMS: [&str; 4] = ["postgres", "onejob", "onejob-loadgen", "onejob-fake"];

/// CPU time (utime + stime, clock ticks) of every process on the machine, summed by program.
/// PostgreSQL's backends that exited are counted through the postmaster's reaped children's
/// time (cutime + cstime); no other program's children are, so nothing is counted twice.
#[derive(Debug, Clone, Default)]
pub struct CpuByProgram(BTreeMap<String, u64>, Vec<u64>);

impl CpuByProgram {
    /// Reads /proc now.
    pub fn now() -> CpuByProgram {
        let mut by = BTreeMap::new();
        // The machine's first line of /proc/stat: user, nice, system, idle, iowait, ...
        let machine = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|stat| stat.lines().next().map(str::to_owned))
            .map(|line| {
                line.split_whitespace()
                    .skip(1)
                    .map(|f| f.parse().unwrap_or(0))
                    .collect()
            })
            .unwrap_or_default();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return CpuByProgram(by, machine);
        };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                continue;
            };
            // "postgres: user db ..." titles keep their program name before the colon.
            let comm = stat[open + 1..close].split(':').next().unwrap_or_default();
            let fields: Vec<u64> = stat[close + 2..]
                .split_whitespace()
                .map(|f| f.parse().unwrap_or(0))
                .collect();
            if fields.len() < 15 {
                continue;
            }
            let mut ticks = fields[11] + fields[12];
            if comm == "postgres" {
                ticks += fields[13] + fields[14];
            }
            let program = PROGRAMS
                .iter()
                .find(|p| **p == comm)
                .copied()
                .unwrap_or("other");
            *by.entry(program.to_string()).or_default() += ticks;
        }
        CpuByProgram(by, machine)
    }

    /// The machine's busy and iowait shares since `before`, in percent of all its cores'
    /// time (None when /proc/stat could not be read).
    pub fn machine_since(&self, before: &CpuByProgram) -> Option<(f64, f64)> {
        if self.1.len() < 5 || before.1.len() < 5 {
            return None;
        }
        let d: Vec<u64> = self
            .1
            .iter()
            .zip(&before.1)
            .map(|(b, a)| b.saturating_sub(*a))
            .collect();
        let total: u64 = d.iter().sum();
        if total == 0 {
            return None;
        }
        let pct = |ticks: u64| 100.0 * ticks as f64 / total as f64;
        Some((pct(total - d[3] - d[4]), pct(d[4])))
    }

    /// Microseconds per request of each program since `before`, and `all`.
    pub fn per_request_since(&self, before: &CpuByProgram, requests: u64) -> BTreeMap<String, f64> {
        let per = |ticks: u64| ticks_to_ms(ticks) * 1000.0 / requests.max(1) as f64;
        let mut out = BTreeMap::new();
        let mut all = 0;
        for (program, ticks) in &self.0 {
            // A process that exited during the phase takes its ticks with it: never negative.
            let used = ticks.saturating_sub(before.0.get(program).copied().unwrap_or(0));
            all += used;
            out.insert(program.clone(), per(used));
        }
        out.insert("all".to_string(), per(all));
        out
    }
}
