//! `tierkv-bench compare --flash-dir`: the flash workload. tierkv runs with a flash file
//! (`O_DIRECT`), memcached with extstore on a file in the same directory, in a cgroup v1 memory
//! group whose limit counts its page cache (so neither is helped by the page cache), with
//! `ext_item_size` low enough that its items go to flash at all. After the workloads each server
//! reports what its flash tier holds and costs in DRAM; tierkv also gets a flash-hit GET run
//! (uniform, all GETs) whose mean depth of flash reads in flight is sampled, a `fio` 4 KiB random
//! read run on its file at that depth, and a warm restart (SIGTERM, start, share of items
//! served).

use crate::loadgen::{self, RunConfig};
use crate::workload::Distribution;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The flash settings of a comparison.
#[derive(Clone, Debug)]
pub struct FlashCompare {
    /// Where both servers' flash files go (the same file system).
    pub dir: PathBuf,
    /// The flash file's size for the servers that take one (MiB).
    pub size_mib: u64,
    /// memcached's `ext_item_size`: items larger than this go to extstore.
    pub ext_item_size: usize,
    /// The memory cgroup limit for memcached, beyond `-m` (MiB).
    pub cgroup_slack_mib: u64,
    /// tierkv's flash index (`--flash-index`), its tier-1 MiB, and its own file size if not
    /// `size_mib` (the full index at the DRAM the cascade index uses indexes a smaller file).
    pub index: String,
    /// The flash index's DRAM budget (MiB; None: what the index chosen needs).
    pub index_mib: Option<u64>,
    /// tierkv's flash file size when it differs from `size_mib` (MiB).
    pub tierkv_size_mib: Option<u64>,
    /// The workload's key + value bytes: tierkv's `--flash-item-bytes` (its flash DRAM is
    /// sized for the items it will hold, as `flash-bench` sizes it).
    pub item_bytes: usize,
}

const CGROUP: &str = "/sys/fs/cgroup/memory/tierkv-bench";

impl FlashCompare {
    /// The flash file tierkv is given.
    pub fn tierkv_file(&self) -> PathBuf {
        self.dir.join("tierkv.flash")
    }

    /// The size of tierkv's file, MiB.
    pub fn tierkv_mib(&self) -> u64 {
        self.tierkv_size_mib.unwrap_or(self.size_mib)
    }

    fn memcached_file(&self) -> PathBuf {
        self.dir.join("memcached.extstore")
    }

    /// The extra arguments of `server`.
    pub fn args(&self, server: &str) -> Vec<String> {
        match server {
            build if crate::ab::is_tierkv(build) => {
                let mut args = vec![
                    "--flash-path".into(),
                    self.tierkv_file().display().to_string(),
                    "--flash-size".into(),
                    format!("{}m", self.tierkv_mib()),
                    "--flash-index".into(),
                    self.index.clone(),
                    "--flash-item-bytes".into(),
                    self.item_bytes.to_string(),
                ];
                if let Some(mib) = self.index_mib {
                    args.extend(["--flash-index-mib".into(), mib.to_string()]);
                }
                args
            }
            "memcached" => vec![
                "-o".into(),
                format!(
                    "ext_path={}:{}m,ext_item_size={},ext_threads=4",
                    self.memcached_file().display(),
                    self.size_mib,
                    self.ext_item_size
                ),
            ],
            _ => Vec::new(),
        }
    }

    /// Starts from empty files (tierkv's warm restart is measured later, on purpose).
    pub fn reset(&self) {
        let _ = std::fs::create_dir_all(&self.dir);
        let _ = std::fs::remove_file(self.tierkv_file());
        let _ = std::fs::remove_file(self.memcached_file());
        // The last server's writes reach the device now, not while the next one is measured.
        // SAFETY: sync takes no arguments and only asks the kernel to write back dirty data.
        unsafe { libc::sync() };
    }

    /// Puts memcached (`pid`) in a memory cgroup of `-m` plus the slack, page cache included.
    pub fn confine(&self, server: &str, pid: u32, memory_mib: usize) -> Result<(), String> {
        if server != "memcached" {
            return Ok(());
        }
        let limit = (memory_mib as u64 + self.cgroup_slack_mib) << 20;
        let write = |name: &str, value: String| {
            std::fs::write(Path::new(CGROUP).join(name), value)
                .map_err(|e| format!("{CGROUP}/{name}: {e} (cgroup v1 memory, as root)"))
        };
        std::fs::create_dir_all(CGROUP).map_err(|e| format!("{CGROUP}: {e} (cgroup v1 memory, as root)"))?;
        write("memory.limit_in_bytes", limit.to_string())?;
        write("cgroup.procs", pid.to_string())
    }
}

/// One server's flash figures.
#[derive(Clone, Debug, Default)]
pub struct FlashRow {
    /// The server measured.
    pub server: String,
    /// Which round (0-based) of `--repeat`.
    pub round: usize,
    /// Items written.
    pub items: u64,
    /// Items the server reports on flash.
    pub on_flash: u64,
    /// DRAM bytes per flash-resident item, and how they were worked out.
    pub dram_per_flash_item: f64,
    /// How the figures were derived (which counters, which files).
    pub derivation: String,
    /// tierkv only: flash-hit GETs/s, the mean reads in flight, and fio's IOPS at that depth.
    pub flash_gets_per_sec: f64,
    /// Mean device queue depth during the read phase.
    pub mean_depth: f64,
    /// fio's 4 KiB random-read IOPS on the same file at the same depth.
    pub fio_iops: f64,
    /// tierkv only: the clean stop, the start until every partition is restored, and the share
    /// of a uniform sample of keys that hit before and after.
    pub stop_ms: f64,
    /// Milliseconds from start until the server served again after a restart.
    pub start_ms: f64,
    /// Hits per second before the restart.
    pub hits_before: f64,
    /// Hits per second after the restart.
    pub hits_after: f64,
}

/// `stats` (or `stats <group>`) as name/value pairs.
pub fn stats(port: u16, group: &str) -> Result<Vec<(String, String)>, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    let request = if group.is_empty() { "stats\r\n".to_string() } else { format!("stats {group}\r\n") };
    stream.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 65536];
    while !reply.ends_with(b"END\r\n") {
        let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("stats: connection closed".into());
        }
        reply.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix("STAT ")?.splitn(2, ' ');
            Some((words.next()?.to_string(), words.next()?.to_string()))
        })
        .collect())
}

fn stat(stats: &[(String, String)], name: &str) -> u64 {
    stats.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.parse().ok()).unwrap_or(0)
}

/// The sets index's figures: DRAM by part, reads per hit and per miss, set writes.
fn sets_derivation(general: &[(String, String)], heap: u64, on_flash: f64) -> String {
    let get = |name: &str| stat(general, name);
    let per = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    let hits = get("flash_sets_set_hits") + get("flash_sets_log_hits");
    format!(
        "flash_index_bytes {heap} (every heap byte of the flash tier: log index {}, set filters {}, set state {}, moves {}) / {on_flash} items; hits: log {}, sets {}, {:.3} reads per hit; {} misses at {:.3} reads ({} Bloom false positives); {} set writes carrying {:.2} items each, {} threshold drops, {} readmitted, {} RRIP evictions",
        get("flash_tier1_bytes"),
        get("flash_sets_filter_bytes"),
        get("flash_sets_state_bytes"),
        get("flash_sets_move_bytes"),
        get("flash_sets_log_hits"),
        get("flash_sets_set_hits"),
        per(get("flash_sets_reads_hit"), hits),
        get("flash_sets_misses"),
        per(get("flash_sets_reads_miss"), get("flash_sets_misses")),
        get("flash_sets_false_positives"),
        get("flash_sets_writes"),
        per(get("flash_sets_items_moved"), get("flash_sets_writes")),
        get("flash_sets_threshold_drops"),
        get("flash_sets_readmitted"),
        get("flash_sets_rrip_evictions"),
    )
}

/// What a server's flash tier holds and costs in DRAM.
pub fn dram_figures(server: &str, port: u16, row: &mut FlashRow, key_bytes: usize) -> Result<(), String> {
    let general = stats(port, "")?;
    row.items = stat(&general, "curr_items");
    row.on_flash = stat(&general, "extstore_objects_used");
    let on_flash = row.on_flash.max(1) as f64;
    if crate::ab::is_tierkv(server) {
        let heap = stat(&general, "flash_index_bytes");
        row.dram_per_flash_item = heap as f64 / on_flash;
        let per = |reads: &str, n: &str| stat(&general, reads) as f64 / stat(&general, n).max(1) as f64;
        let bytes =
            ["flash_tier1_bytes", "flash_demotion_bytes", "flash_tier2_filter_bytes", "flash_tier3_filter_bytes"]
                .map(|name| format!("{name} {}", stat(&general, name)))
                .join(", ");
        row.derivation = format!(
            "flash_index_bytes {heap} (every heap byte of the flash tier: {bytes}) / {on_flash} items; mappings tier 1 {}, tier 2 {}, tier 3 {}; flash reads per GET: tier-1 hit {:.3} ({} hits), tier-2 hit {:.3} ({}), tier-3 hit {:.3} ({}), miss {:.3} ({} lookups that found nothing)",
            stat(&general, "flash_tier1_items"),
            stat(&general, "flash_tier2_items"),
            stat(&general, "flash_tier3_items"),
            per("flash_reads_tier1", "flash_hits_tier1"),
            stat(&general, "flash_hits_tier1"),
            per("flash_reads_tier2", "flash_hits_tier2"),
            stat(&general, "flash_hits_tier2"),
            per("flash_reads_tier3", "flash_hits_tier3"),
            stat(&general, "flash_hits_tier3"),
            per("flash_reads_miss", "flash_misses"),
            stat(&general, "flash_misses"),
        );
        let set_hits = stat(&general, "flash_sets_set_hits") + stat(&general, "flash_sets_log_hits");
        if set_hits + stat(&general, "flash_sets_misses") > 0 {
            row.derivation = sets_derivation(&general, heap, on_flash);
        }
        return Ok(());
    }
    // memcached keeps an item header per extstore object: the 48-byte item, the CAS, the key
    // and its 12-byte location, in a slab class of its own size. Every class whose chunks are
    // too small for a whole item of this workload holds only such headers.
    let whole_item = 48 + 8 + key_bytes + 1 + 2 + 100;
    let slabs = stats(port, "slabs")?;
    let mut header_bytes = 0u64;
    let mut classes = Vec::new();
    for (name, value) in &slabs {
        let Some((class, "chunk_size")) = name.split_once(':') else { continue };
        let chunk: u64 = value.parse().unwrap_or(0);
        if chunk as usize >= whole_item {
            continue;
        }
        let used = stat(&slabs, &format!("{class}:used_chunks"));
        header_bytes += used * chunk;
        classes.push(format!("class {class}: {used} x {chunk} B"));
    }
    row.dram_per_flash_item = header_bytes as f64 / on_flash;
    row.derivation = format!(
        "item headers in slab classes below a whole item's {whole_item} B ({}) = {header_bytes} B / extstore_objects_used {on_flash}",
        classes.join(", ")
    );
    Ok(())
}

/// A uniform GET-only run: flash-hit GETs per second and the mean flash reads in flight
/// (sampled from `stats` every 50 ms).
pub fn flash_gets(base: &RunConfig, port: u16, pid: u32, row: &mut FlashRow) -> Result<(), String> {
    let run = RunConfig {
        get_ratio: 1.0,
        dist: Distribution::Uniform,
        pipeline: 32,
        connections: 8,
        preload: false,
        seed: 1003,
        ..base.clone()
    };
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = std::sync::Arc::clone(&done);
        std::thread::spawn(move || {
            // (when, flash reads started so far, reads in flight)
            let mut samples: Vec<(Instant, u64, u64)> = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(s) = stats(port, "") {
                    samples.push((Instant::now(), stat(&s, "get_extstore"), stat(&s, "flash_reads_in_flight")));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            samples
        })
    };
    let measured = loadgen::measure(&run, Some(pid));
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let samples = sampler.join().map_err(|_| "the sampler panicked")?;
    let measured = measured?;
    // The steady part: samples with reads in flight, less the first and last tenth.
    let busy: Vec<_> = samples.iter().filter(|s| s.2 > 0).collect();
    let cut = busy.len() / 10;
    let steady = &busy[cut..busy.len() - cut];
    let (Some(first), Some(last)) = (steady.first(), steady.last()) else {
        return Err("no flash reads were in flight during the GET run".into());
    };
    let seconds = last.0.duration_since(first.0).as_secs_f64().max(1e-3);
    row.flash_gets_per_sec = (last.1 - first.1) as f64 / seconds;
    row.mean_depth = steady.iter().map(|s| s.2).sum::<u64>() as f64 / steady.len() as f64;
    eprintln!(
        "flash-hit GETs: {:.0}/s at a mean depth of {:.1} ({} samples over {seconds:.1} s); {}",
        row.flash_gets_per_sec,
        row.mean_depth,
        steady.len(),
        measured.summary()
    );
    Ok(())
}

/// fio's 4 KiB random-read IOPS on the first `bytes` of `file` (the part the store has
/// written: unwritten extents of a preallocated file read as zeros without touching the
/// device) at `depth` (O_DIRECT, io_uring), 10 s. `--readonly`: fio must never lay out (write)
/// the file under a running server; a `bytes` beyond the file is an error, not a new file.
pub fn fio_iops(file: &Path, bytes: u64, depth: f64) -> Result<f64, String> {
    let depth = depth.round().max(1.0) as u64;
    let size = (bytes & !((1 << 20) - 1)).max(1 << 20);
    let output = Command::new("fio")
        .args(["--name=randread", "--readonly", "--rw=randread", "--bs=4k", "--direct=1", "--ioengine=io_uring"])
        .arg(format!("--iodepth={depth}"))
        .arg(format!("--size={size}"))
        .arg(format!("--filename={}", file.display()))
        .args(["--runtime=10", "--time_based", "--output-format=terse", "--terse-version=3"])
        .output()
        .map_err(|e| format!("fio: {e} (apt-get install fio)"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    // Terse v3: field 8 (1-based) is the read IOPS.
    text.lines()
        .find_map(|line| line.split(';').nth(7).and_then(|v| v.parse::<f64>().ok()))
        .ok_or_else(|| format!("fio printed no IOPS: {text}{}", String::from_utf8_lossy(&output.stderr)))
}

/// Stops `child` with SIGTERM and waits; the time it took.
pub fn stop(child: &mut Child) -> f64 {
    let started = Instant::now();
    // SAFETY: kill only sends a signal to the child we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    started.elapsed().as_secs_f64() * 1e3
}

/// The Markdown table of the flash rows.
pub fn table(rows: &[FlashRow]) -> String {
    let mut out = String::from(
        "| server | curr_items | on flash | DRAM B per flash item | flash-hit GETs/s | mean depth | fio IOPS at depth | ratio | stop ms | start ms | hits before | hits after |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        let ratio = if r.fio_iops > 0.0 { format!("{:.2}", r.flash_gets_per_sec / r.fio_iops) } else { "n/a".into() };
        // Only tierkv is restarted (memcached's extstore does not survive one).
        let restart = if r.stop_ms > 0.0 {
            format!("{:.0} | {:.0} | {:.4} | {:.4}", r.stop_ms, r.start_ms, r.hits_before, r.hits_after)
        } else {
            format!("n/a | n/a | {:.4} | n/a", r.hits_before)
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} | {:.0} | {:.1} | {:.0} | {ratio} | {restart} |",
            r.server, r.items, r.on_flash, r.dram_per_flash_item, r.flash_gets_per_sec, r.mean_depth, r.fio_iops,
        );
    }
    out.push('\n');
    for r in rows {
        let _ = writeln!(out, "- {}: {}", r.server, r.derivation);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_restarted_server_has_restart_figures() {
        let restarted = FlashRow {
            server: "tierkv".into(),
            stop_ms: 1393.0,
            start_ms: 217.0,
            hits_before: 0.1565,
            hits_after: 0.1423,
            ..Default::default()
        };
        let not = FlashRow { server: "memcached".into(), hits_before: 0.0562, ..Default::default() };
        let text = table(&[restarted, not]);
        assert!(text.contains("| 1393 | 217 | 0.1565 | 0.1423 |"), "{text}");
        assert!(text.contains("| n/a | n/a | 0.0562 | n/a |"), "{text}");
    }

    #[test]
    fn fio_reads_only_tierkv_s_own_file_size() {
        let flash = FlashCompare {
            dir: "/tmp".into(),
            size_mib: 10600,
            ext_item_size: 64,
            cgroup_slack_mib: 128,
            index: "full".into(),
            index_mib: None,
            tierkv_size_mib: Some(1200),
            item_bytes: 116,
        };
        assert_eq!(flash.tierkv_mib(), 1200);
        assert!(flash.args("tierkv").contains(&"1200m".to_string()));
        assert!(flash.args("tierkv").windows(2).any(|w| w[0] == "--flash-item-bytes" && w[1] == "116"));
        let same = FlashCompare { tierkv_size_mib: None, ..flash };
        assert_eq!(same.tierkv_mib(), 10600);
    }
}
