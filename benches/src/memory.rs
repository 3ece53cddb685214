//! Resident memory of this process, from `/proc/self/status` (Linux): the memory bench reports
//! it as runs complete.
//!
//! **Invariant:** a figure is reported only as the kernel printed it (`VmRSS`, `VmHWM`, in KiB);
//! a missing file or line is `None`, never a guess.

/// The process's resident set now and at its peak, in KiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resident {
    /// `VmRSS`: resident now.
    pub rss_kib: u64,
    /// `VmHWM`: the peak resident set so far.
    pub hwm_kib: u64,
}

impl Resident {
    /// Reads `/proc/self/status`; `None` where there is no such file (not Linux).
    pub fn now() -> Option<Resident> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        Resident::parse(&status)
    }

    /// The two figures from the text of a `/proc/<pid>/status` file.
    pub fn parse(status: &str) -> Option<Resident> {
        let kib = |field: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(field))
                .and_then(|rest| rest.trim().strip_suffix("kB"))
                .and_then(|n| n.trim().parse::<u64>().ok())
        };
        Some(Resident {
            rss_kib: kib("VmRSS:")?,
            hwm_kib: kib("VmHWM:")?,
        })
    }
}

impl std::fmt::Display for Resident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VmRSS {:.1} MiB, VmHWM {:.1} MiB",
            self.rss_kib as f64 / 1024.0,
            self.hwm_kib as f64 / 1024.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernels_lines_and_refuses_a_partial_file() {
        let status = "Name:\tbench\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nThreads:\t4\n";
        assert_eq!(
            Resident::parse(status),
            Some(Resident {
                rss_kib: 10_240,
                hwm_kib: 20_480
            })
        );
        assert_eq!(Resident::parse("VmRSS:\t 1 kB\n"), None);
        let shown = Resident::parse(status).map(|r| r.to_string());
        assert_eq!(shown.as_deref(), Some("VmRSS 10.0 MiB, VmHWM 20.0 MiB"));
    }

    #[test]
    fn this_process_has_resident_memory() {
        if let Some(now) = Resident::now() {
            assert!(now.rss_kib > 0 && now.hwm_kib >= now.rss_kib);
        }
    }
}
