//! How many CPUs the server may really use, for the default `-t`: the CPUs of its affinity mask,
//! capped by the CPU quota of its cgroup (a container's `--cpus`, systemd's `CPUQuota=`), at
//! every level from its own group up to the root, rounded up. A worker per CPU the quota does
//! not give would only wait for its turn while holding requests.
//!
//! It must not fail: a file it cannot read or parse means no quota there.

use std::path::{Path, PathBuf};

/// Where cgroup v2's unified hierarchy and cgroup v1's cpu controller are mounted, in order.
const UNIFIED_ROOTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];
const CPU_V1_ROOTS: [&str; 3] = ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpuacct,cpu"];

/// CPUs this process may run on (its affinity mask), at most its cgroup's quota; at least 1.
pub(crate) fn usable_cpus() -> usize {
    let allowed = crate::sys::allowed_cpus().len().max(1);
    let membership = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let read = |path: &Path| std::fs::read_to_string(path).ok();
    quota_cpus(&membership, &read).map_or(allowed, |quota| quota.min(allowed))
}

/// The smallest CPU quota (in whole CPUs, rounded up, at least 1) over the groups named in
/// `membership` (the text of /proc/self/cgroup) and their ancestors, reading files with `read`.
pub(crate) fn quota_cpus(membership: &str, read: &dyn Fn(&Path) -> Option<String>) -> Option<usize> {
    let mut smallest: Option<usize> = None;
    let mut take = |cpus: Option<usize>| {
        if let Some(cpus) = cpus {
            smallest = Some(smallest.map_or(cpus, |seen| seen.min(cpus)));
        }
    };
    for line in membership.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(group)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        if controllers.is_empty() {
            for root in UNIFIED_ROOTS {
                for dir in ancestors(root, group) {
                    take(read(&dir.join("cpu.max")).and_then(|text| parse_cpu_max(&text)));
                }
            }
        } else if controllers.split(',').any(|controller| controller == "cpu") {
            for root in CPU_V1_ROOTS {
                for dir in ancestors(root, group) {
                    let quota = read(&dir.join("cpu.cfs_quota_us"));
                    let period = read(&dir.join("cpu.cfs_period_us"));
                    take(quota.zip(period).and_then(|(quota, period)| parse_v1(&quota, &period)));
                }
            }
        }
    }
    smallest
}

/// `group`'s directory under `root` and every directory above it up to `root`.
fn ancestors(root: &str, group: &str) -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from(root)];
    let mut dir = PathBuf::from(root);
    for part in group.split('/').filter(|part| !part.is_empty() && *part != "..") {
        dir.push(part);
        dirs.push(dir.clone());
    }
    dirs
}

/// cgroup v2's `cpu.max` ("QUOTA PERIOD", or "max PERIOD" for none) as whole CPUs, rounded up.
pub(crate) fn parse_cpu_max(text: &str) -> Option<usize> {
    let mut fields = text.split_whitespace();
    let quota: u64 = fields.next()?.parse().ok()?;
    let period: u64 = fields.next().map_or(Some(100_000), |field| field.parse().ok())?;
    whole_cpus(quota, period)
}

/// cgroup v1's `cpu.cfs_quota_us` (-1 for none) and `cpu.cfs_period_us`, as whole CPUs.
pub(crate) fn parse_v1(quota: &str, period: &str) -> Option<usize> {
    let quota: i64 = quota.trim().parse().ok()?;
    let period: u64 = period.trim().parse().ok()?;
    whole_cpus(u64::try_from(quota).ok()?, period)
}

fn whole_cpus(quota: u64, period: u64) -> Option<usize> {
    if quota == 0 || period == 0 {
        return None;
    }
    Some(quota.div_ceil(period).max(1) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn quotas_round_up_to_whole_cpus_and_none_means_none() {
        assert_eq!(parse_cpu_max("150000 100000\n"), Some(2));
        assert_eq!(parse_cpu_max("100000 100000"), Some(1));
        assert_eq!(parse_cpu_max("20000 100000"), Some(1));
        assert_eq!(parse_cpu_max("max 100000"), None);
        assert_eq!(parse_cpu_max(""), None);
        assert_eq!(parse_v1("-1\n", "100000\n"), None);
        assert_eq!(parse_v1("250000\n", "100000\n"), Some(3));
        assert_eq!(parse_v1("garbage", "100000"), None);
    }

    fn files(pairs: &[(&str, &str)]) -> HashMap<PathBuf, String> {
        pairs.iter().map(|(path, text)| (PathBuf::from(path), text.to_string())).collect()
    }

    #[test]
    fn the_smallest_quota_on_the_way_to_the_root_wins() {
        let v2 = files(&[
            ("/sys/fs/cgroup/cpu.max", "max 100000"),
            ("/sys/fs/cgroup/system.slice/cpu.max", "300000 100000"),
            ("/sys/fs/cgroup/system.slice/tierkv.service/cpu.max", "max 100000"),
        ]);
        let read = |path: &Path| v2.get(path).cloned();
        assert_eq!(quota_cpus("0::/system.slice/tierkv.service\n", &read), Some(3));
        let v1 = files(&[
            ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1"),
            ("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000"),
            ("/sys/fs/cgroup/cpu/box/cpu.cfs_quota_us", "100000"),
            ("/sys/fs/cgroup/cpu/box/cpu.cfs_period_us", "100000"),
        ]);
        let read = |path: &Path| v1.get(path).cloned();
        assert_eq!(quota_cpus("5:memory:/x\n1:cpu,cpuacct:/box\n0::/\n", &read), Some(1));
        assert_eq!(quota_cpus("1:cpu:/\n0::/\n", &read), None, "no quota at the root");
        assert_eq!(quota_cpus("not a cgroup file", &read), None);
    }

    #[test]
    fn this_process_may_use_at_least_one_cpu_and_no_more_than_it_may_run_on() {
        let usable = usable_cpus();
        assert!(usable >= 1);
        assert!(usable <= crate::sys::allowed_cpus().len().max(1));
    }
}
