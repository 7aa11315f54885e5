//! The flash tier's `stats` lines: memcached extstore's names where they mean the same thing,
//! then tierkv's own `flash_*` figures, summed over the workers like every other figure; and
//! the flash settings `stats settings` shows.
//!
//! It must not touch the partition beyond `Engine::flash_report`.

use tierkv_engine::{AnyPartition as Partition, Engine};

/// What each worker sends for `stats` (summed over workers), in `NAMES` order.
pub(crate) const NAMES: [&str; FIGURES] = [
    // memcached extstore's names.
    "get_extstore",
    "get_aborted_extstore",
    "miss_from_extstore",
    "badcrc_from_extstore",
    "recache_from_extstore",
    "extstore_objects_written",
    "extstore_objects_read",
    "extstore_objects_used",
    "extstore_objects_evicted",
    "extstore_bytes_written",
    "extstore_bytes_read",
    "extstore_page_reclaims",
    "extstore_io_queue",
    // tierkv's own.
    "flash_hits",
    "flash_reads_in_flight",
    "flash_device_reads",
    "flash_admission_rejects",
    "flash_spill_clean",
    "flash_spill_dropped",
    "flash_invalidations",
    "flash_gc_rewrites",
    "flash_gc_drops",
    "flash_io_errors",
    "flash_index_bytes",
    // The index by tier (the full index is all tier 1): mappings, hits and the flash reads
    // they took, DRAM by structure, and the cascade index's own work.
    "flash_tier1_items",
    "flash_tier2_items",
    "flash_tier3_items",
    "flash_hits_tier1",
    "flash_reads_tier1",
    "flash_hits_tier2",
    "flash_reads_tier2",
    "flash_hits_tier3",
    "flash_reads_tier3",
    "flash_misses",
    "flash_reads_miss",
    "flash_tier1_bytes",
    "flash_demotion_bytes",
    "flash_tier2_filter_bytes",
    "flash_tier3_filter_bytes",
    "flash_merge_buffer_bytes",
    "flash_demotions",
    "flash_promotions",
    "flash_tombstones",
    "flash_merges",
    "flash_merge_errors",
    "flash_page_overflow_drops",
    "flash_stream_drops",
    // Keys counted once in curr_items though in both tiers; what else drops items, and what
    // keeping the never-stale promise across a crash costs (see the README's flash section).
    "flash_items_in_dram_too",
    "flash_index_evictions",
    "flash_spill_held",
    "flash_durable_waits",
    "flash_durable_failures",
    "flash_marks",
    "flash_commits",
    "flash_recovered_items",
    // Flash hits of plain gets answered from the read, not copied into DRAM (a first hit).
    "flash_hits_not_promoted",
    // The sets index (zeros with another index): hits in the log and in sets, the reads of
    // hits and misses, Bloom false positives; set writes and the items they carried, log items
    // read back for them, threshold drops and re-admissions, RRIP evictions, tombstones, voided
    // sets, damaged pages; DRAM of the per-set filters, per-set state and moves; set writes
    // made to apply tombstones before their ground was reclaimed (purges); after a crash, set
    // pages taken back and their items found killed by a newer record or mark.
    "flash_sets_log_hits",
    "flash_sets_set_hits",
    "flash_sets_reads_hit",
    "flash_sets_misses",
    "flash_sets_reads_miss",
    "flash_sets_false_positives",
    "flash_sets_writes",
    "flash_sets_items_moved",
    "flash_sets_move_reads",
    "flash_sets_threshold_drops",
    "flash_sets_readmitted",
    "flash_sets_rrip_evictions",
    "flash_sets_tombstones",
    "flash_sets_voided",
    "flash_sets_bad_pages",
    "flash_sets_filter_bytes",
    "flash_sets_state_bytes",
    "flash_sets_move_bytes",
    "flash_sets_purges",
    "flash_sets_recovered_sets",
    "flash_sets_recovered_killed",
    "flash_write_errors",
    "flash_segments_given_up",
    "flash_degraded_partitions",
    "flash_rejected_degraded",
    "flash_read_timeouts",
    // Clean starts whose index snapshot was damaged: the segments were recovered instead.
    "flash_snapshot_fallbacks",
    // Another key's item removed with a key's tag (a tag twin: lost), removals that could not
    // be checked, and the reads the checks took.
    "flash_tag_twin_drops",
    "flash_tag_twin_unchecked",
    "flash_tag_twin_reads",
];
pub(crate) const FIGURES: usize = 86;

/// This worker's figures (zeros without a flash tier).
pub(crate) fn figures(partition: &Partition) -> [u64; FIGURES] {
    let Some(r) = partition.flash_ref().and_then(|tier| tier.flash_report()) else { return [0; FIGURES] };
    let (s, t, m) = (&r.store, &r.tier, &r.memory);
    let x = r.sets.unwrap_or_default();
    let c = r.cascade.unwrap_or_else(|| full_index_tiers(s));
    [
        t.reads_started,
        s.miss_superseded,
        s.miss_tag + s.miss_expired,
        s.miss_corrupt,
        t.promoted,
        s.inserts + s.gc_rewrites,
        s.hits_flash + s.hits_buffer,
        s.items,
        s.dropped_items,
        s.write_bytes,
        s.read_bytes,
        s.reclaims,
        s.in_flight,
        t.promoted + t.copies_served,
        s.in_flight,
        s.reads,
        t.spill_rejected,
        t.spill_clean,
        t.spill_dropped,
        t.invalidations,
        s.gc_rewrites,
        s.dropped_items + s.pressure_drops,
        s.miss_io_error + s.write_errors + s.gc_read_errors,
        m.total(),
        r.tiers.t1,
        r.tiers.t2,
        r.tiers.t3,
        c.hits_t1,
        c.reads_t1,
        c.hits_t2,
        c.reads_t2,
        c.hits_t3,
        c.reads_t3,
        c.misses,
        c.reads_miss,
        m.index,
        m.demotion,
        m.t2_filters,
        m.t3_filters,
        m.merge_buffers,
        c.demotions,
        c.promotions,
        c.tombstones,
        c.reorgs,
        c.reorg_errors,
        c.t3_overflow_drops,
        c.stream_drops,
        t.in_both,
        s.index_evictions,
        t.spill_held,
        t.durable_waits,
        t.durable_failures,
        s.marks,
        s.commits,
        s.recovered_items,
        t.copies_served,
        x.hits_log,
        x.hits_set,
        x.reads_hit,
        x.misses,
        x.reads_miss,
        x.false_positives,
        x.set_writes,
        x.items_moved,
        x.move_reads,
        x.threshold_drops,
        x.readmitted,
        x.rrip_evictions,
        x.tombstones,
        x.voided,
        x.bad_pages,
        m.set_filters,
        m.set_state,
        m.set_moves,
        x.purges,
        x.recovered_sets,
        x.recovered_killed,
        s.write_errors,
        s.segments_given_up,
        s.degraded,
        s.rejected_degraded,
        s.read_timeouts,
        s.snapshot_fallbacks,
        s.twin_drops,
        s.twin_unchecked,
        s.twin_reads,
    ]
}

/// The full index's figures by tier: it answers every hit from tier 1, with one read each
/// (none from a buffer).
fn full_index_tiers(s: &tierkv_engine::flash::FlashStats) -> tierkv_engine::flash::CascadeStats {
    tierkv_engine::flash::CascadeStats {
        hits_t1: s.hits_flash + s.hits_buffer,
        reads_t1: s.hits_flash,
        misses: s.miss_index + s.miss_tag + s.miss_expired + s.miss_corrupt + s.miss_superseded,
        reads_miss: s.reads.saturating_sub(s.hits_flash),
        ..Default::default()
    }
}

/// Items on flash and not in DRAM too (for `curr_items`, which counts each key once).
pub(crate) fn items(figures: &[u64; FIGURES]) -> u64 {
    figures[7].saturating_sub(figures[47])
}

/// The general `stats` lines of the flash tier, with reads per hit worked out.
pub(crate) fn report(figures: &[u64; FIGURES], size: u64, put: &mut dyn FnMut(&str, &dyn std::fmt::Display)) {
    put("extstore_limit_maxbytes", &size);
    for (name, value) in NAMES.iter().zip(figures) {
        put(name, value);
    }
    let (reads, hits) = (figures[15], figures[13]);
    let per_hit = if hits == 0 { 0.0 } else { reads as f64 / hits as f64 };
    put("flash_reads_per_hit", &format!("{per_hit:.3}"));
    let figure = |name: &str| NAMES.iter().position(|n| *n == name).map_or(0, |at| figures[at]);
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let set_hits = figure("flash_sets_log_hits") + figure("flash_sets_set_hits");
    put("flash_sets_reads_per_hit", &format!("{:.3}", ratio(figure("flash_sets_reads_hit"), set_hits)));
    put(
        "flash_sets_reads_per_miss",
        &format!("{:.3}", ratio(figure("flash_sets_reads_miss"), figure("flash_sets_misses"))),
    );
    put(
        "flash_sets_items_per_write",
        &format!("{:.2}", ratio(figure("flash_sets_items_moved"), figure("flash_sets_writes"))),
    );
    // The rest of memcached's extstore keys: its compaction is tierkv's segment GC; its pages,
    // OOM gets and byte accounting have no counterpart and stay at memcached's idle value.
    put("get_oom_extstore", &0);
    put("extstore_compact_lost", &figure("flash_gc_drops"));
    put("extstore_compact_rescues", &figure("flash_gc_rewrites"));
    for name in [
        "extstore_compact_skipped",
        "extstore_page_allocs",
        "extstore_page_evictions",
        "extstore_pages_free",
        "extstore_pages_used",
        "extstore_bytes_evicted",
        "extstore_bytes_used",
        "extstore_bytes_fragmented",
    ] {
        put(name, &0);
    }
}

/// The flash lines of `stats settings`.
pub(crate) fn settings(
    flash: Option<&crate::config::FlashSettings>,
    put: &mut dyn FnMut(&str, &dyn std::fmt::Display),
) {
    // Without a flash tier, nothing: the lines stay memcached's.
    let Some(flash) = flash else { return };
    put("flash_path", &flash.path.display());
    put("flash_size", &flash.size);
    put(
        "flash_io",
        &match flash.io {
            tierkv_engine::flash::FlashIo::Uring => "uring",
            tierkv_engine::flash::FlashIo::Threads => "threads",
        },
    );
    put(
        "flash_admission",
        &match flash.admission {
            tierkv_engine::flash::AdmissionPolicy::All => "all".to_string(),
            tierkv_engine::flash::AdmissionPolicy::Probability(p) => format!("p:{p}"),
            tierkv_engine::flash::AdmissionPolicy::RateMbps(r) => format!("mbps:{r}"),
        },
    );
    put("flash_segment_size", &flash.segment_bytes);
    let index = match (flash.sets, flash.cascade_t1_bytes.is_some()) {
        (true, _) => "sets",
        (false, true) => "cascade",
        (false, false) => "full",
    };
    put("flash_index", &index);
    put("flash_index_mib", &(flash.cascade_t1_bytes.unwrap_or(0) >> 20));
    if flash.sets {
        put("flash_sets_log_percent", &flash.sets_log_percent);
    }
    put("flash_item_bytes", &flash.item_bytes);
    put("flash_sync", &if flash.sync { "yes" } else { "no" });
    put("flash_poll_us", &flash.poll.as_micros());
    put("flash_memory_mib", &flash.memory_bytes.div_ceil(1 << 20));
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_figure_has_one_name() {
        let mut names = super::NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), super::FIGURES);
    }
}
