//! A set's 4 KiB page on flash: its items with their keys, a header naming the set and the
//! write's sequence number, and an xxh3 checksum over both, verified on every read. Eviction
//! inside a set is RRIP: each item carries its 3-bit re-reference prediction, new items enter
//! at 6 ("long"), items hit since the last write (DRAM hit bits) drop to 0, and room is made by
//! evicting an item at 7 after ageing everyone until one is.
//!
//! ```text
//!   0 magic u32 "TKVS" | 4 set u32 | 8 seq u64 (a record sequence number: the page holds
//!  the set's state as of it) | 16 count u16 | 18 used u16 (bytes of items) | 20 partition u32
//!  24 epoch u64 (of the run that wrote it) | 32 seed u64 (the region's checksum seed)
//!  40 header checksum u64 (xxh3 of bytes 0..40, unseeded: recovery tells a torn page of
//!  this region from another file's) | 48 checksum u64 (xxh3, seeded, over bytes 0..48 and
//!  the items)
//!  56 items, one after another:
//!     rrpv u8 | state u8 | key_len u8 | 0 u8 | value_len u32 | flags u32 | expiry u32
//!     | cas u64 | key | value
//! ```

use super::super::layout::{ItemMeta, PAGE};
use xxhash_rust::xxh3::Xxh3;

pub(crate) const SET_HEADER: usize = 56;
pub(crate) const SET_ITEM_HEADER: usize = 24;
const MAGIC: u32 = u32::from_le_bytes(*b"TKVS");
/// RRIP: new items' prediction, and the largest (evicted first).
pub(super) const RRPV_INSERT: u8 = 6;
const RRPV_MAX: u8 = 7;
/// Items whose position in a page has a DRAM hit bit.
pub(super) const HIT_BITS: usize = 24;

/// The bytes an item takes in a set.
pub(crate) fn set_item_bytes(key_len: usize, value_len: usize) -> usize {
    SET_ITEM_HEADER + key_len + value_len
}

/// An item on its way into a set, or read out of one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SetItem {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub meta: ItemMeta,
    pub rrpv: u8,
}

impl SetItem {
    pub(super) fn bytes(&self) -> usize {
        set_item_bytes(self.key.len(), self.value.len())
    }
}

/// One item of a page, borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ItemView<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub meta: ItemMeta,
    pub rrpv: u8,
}

impl ItemView<'_> {
    pub(super) fn owned(&self) -> SetItem {
        SetItem { key: self.key.to_vec(), value: self.value.to_vec(), meta: self.meta, rrpv: self.rrpv }
    }
}

/// Why a page is not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BadPage {
    /// Never written (all zeros) or not a set page.
    Magic,
    /// Another set's or partition's page.
    Place,
    /// Lengths that do not add up, or a checksum that does not match.
    Checksum,
}

/// What a page is, as crash recovery sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Probe {
    /// Blank, or not this region's (another file's, an older layout's, a segment's bytes).
    Foreign,
    /// This region's header: the write's sequence number and epoch, and whether its items
    /// check out (a write torn past the header does not).
    Ours { seq: u64, epoch: u64, items_ok: bool },
    /// A set page's magic whose header does not check out: a write torn inside the header, or
    /// damage. Its sequence number is unknown.
    Damaged,
}

/// A verified page.
#[derive(Clone, Copy, Debug)]
pub(super) struct Page<'a> {
    pub seq: u64,
    pub count: u16,
    items: &'a [u8],
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn checksum(header: &[u8], items: &[u8], seed: u64) -> u64 {
    let mut h = Xxh3::with_seed(seed);
    h.update(&header[..48]);
    h.update(items);
    h.digest()
}

/// Where a page is written: its set, partition, epoch and checksum seed.
#[derive(Clone, Copy, Debug)]
pub(super) struct PagePlace {
    pub set: u32,
    pub partition: u32,
    pub epoch: u64,
    pub seed: u64,
}

/// Writes `items` (they must fit: `fits`) as the page of `place` holding the set's state as of
/// record `seq`.
pub(super) fn encode_page(out: &mut [u8], place: PagePlace, seq: u64, items: &[SetItem]) {
    let PagePlace { set, partition, epoch, seed } = place;
    out[..PAGE].fill(0);
    let mut at = SET_HEADER;
    for item in items {
        let b = &mut out[at..at + item.bytes()];
        b[0] = item.rrpv.min(RRPV_MAX);
        b[1] = item.meta.state;
        b[2] = item.key.len() as u8;
        b[4..8].copy_from_slice(&(item.value.len() as u32).to_le_bytes());
        b[8..12].copy_from_slice(&item.meta.flags.to_le_bytes());
        b[12..16].copy_from_slice(&item.meta.expiry.to_le_bytes());
        b[16..24].copy_from_slice(&item.meta.cas.to_le_bytes());
        b[24..24 + item.key.len()].copy_from_slice(&item.key);
        b[24 + item.key.len()..].copy_from_slice(&item.value);
        at += item.bytes();
    }
    out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    out[4..8].copy_from_slice(&set.to_le_bytes());
    out[8..16].copy_from_slice(&seq.to_le_bytes());
    out[16..18].copy_from_slice(&(items.len() as u16).to_le_bytes());
    out[18..20].copy_from_slice(&((at - SET_HEADER) as u16).to_le_bytes());
    out[20..24].copy_from_slice(&partition.to_le_bytes());
    out[24..32].copy_from_slice(&epoch.to_le_bytes());
    out[32..40].copy_from_slice(&seed.to_le_bytes());
    let head = xxhash_rust::xxh3::xxh3_64(&out[..40]);
    out[40..48].copy_from_slice(&head.to_le_bytes());
    let sum = checksum(&out[..48], &out[SET_HEADER..at], seed);
    out[48..56].copy_from_slice(&sum.to_le_bytes());
}

/// What `b` is as set `set`'s page of `partition` under `seed` (crash recovery).
pub(super) fn probe_page(b: &[u8], set: u32, partition: u32, seed: u64) -> Probe {
    if b.len() < PAGE || u32_at(b, 0) != MAGIC {
        return Probe::Foreign;
    }
    if u64_at(b, 40) != xxhash_rust::xxh3::xxh3_64(&b[..40]) {
        return Probe::Damaged;
    }
    if u64_at(b, 32) != seed || u32_at(b, 4) != set || u32_at(b, 20) != partition {
        return Probe::Foreign;
    }
    let items_ok = decode_page(b, set, partition, seed).is_ok();
    Probe::Ours { seq: u64_at(b, 8), epoch: u64_at(b, 24), items_ok }
}

/// Whether items of these sizes fit one page.
pub(super) fn fits(bytes: usize) -> bool {
    bytes <= PAGE - SET_HEADER
}

/// Verifies `b` as set `set`'s page of `partition` (written under `seed`).
pub(super) fn decode_page(b: &[u8], set: u32, partition: u32, seed: u64) -> Result<Page<'_>, BadPage> {
    if b.len() < PAGE || u32_at(b, 0) != MAGIC {
        return Err(BadPage::Magic);
    }
    if u32_at(b, 4) != set || u32_at(b, 20) != partition {
        return Err(BadPage::Place);
    }
    let used = usize::from(u16::from_le_bytes([b[18], b[19]]));
    if !fits(used) || checksum(&b[..48], &b[SET_HEADER..SET_HEADER + used], seed) != u64_at(b, 48) {
        return Err(BadPage::Checksum);
    }
    let page =
        Page { seq: u64_at(b, 8), count: u16::from_le_bytes([b[16], b[17]]), items: &b[SET_HEADER..SET_HEADER + used] };
    // Lengths must add up to exactly `used` with `count` items.
    let walked: usize = page.iter().map(|(_, v)| set_item_bytes(v.key.len(), v.value.len())).sum();
    if walked != used || page.iter().count() != usize::from(page.count) {
        return Err(BadPage::Checksum);
    }
    Ok(page)
}

impl<'a> Page<'a> {
    /// The items with their positions (a walk that stops at the first length that does not fit).
    pub(super) fn iter(&self) -> impl Iterator<Item = (usize, ItemView<'a>)> + 'a {
        let items = self.items;
        let mut at = 0;
        (0..).map_while(move |pos| {
            let b = items.get(at..at + SET_ITEM_HEADER)?;
            let key_len = usize::from(b[2]);
            let value_len = u32_at(b, 4) as usize;
            let end = at.checked_add(SET_ITEM_HEADER + key_len)?.checked_add(value_len)?;
            let body = items.get(at + SET_ITEM_HEADER..end)?;
            let meta = ItemMeta { flags: u32_at(b, 8), expiry: u32_at(b, 12), cas: u64_at(b, 16), state: b[1] };
            let view = ItemView { key: &body[..key_len], value: &body[key_len..], meta, rrpv: b[0] };
            at = end;
            Some((pos, view))
        })
    }

    /// The item with `key`, and its position.
    pub(super) fn find(&self, key: &[u8]) -> Option<(usize, ItemView<'a>)> {
        self.iter().find(|(_, v)| v.key == key)
    }
}

/// RRIP inside one set: the page's `old` items (those hit since the last write, per `hits`,
/// predicted near again) and the `incoming` ones (which replace old copies of their keys)
/// ordered and trimmed to one page. Returns the items to write and how many were evicted.
pub(super) fn merge(old: Vec<SetItem>, hits: u32, incoming: Vec<SetItem>) -> (Vec<SetItem>, u32) {
    let mut items: Vec<SetItem> = old
        .into_iter()
        .enumerate()
        .filter(|(_, o)| !incoming.iter().any(|n| n.key == o.key))
        .map(|(pos, mut o)| {
            if pos < HIT_BITS && hits & (1 << pos) != 0 {
                o.rrpv = 0;
            }
            o
        })
        .collect();
    items.extend(incoming);
    let mut evicted = 0;
    while !fits(items.iter().map(SetItem::bytes).sum()) {
        let most = items.iter().map(|i| i.rrpv).max().unwrap_or(RRPV_MAX);
        if most < RRPV_MAX {
            for i in &mut items {
                i.rrpv += RRPV_MAX - most;
            }
        }
        // The first at the largest prediction: old items before new ones at equal predictions.
        let victim = items.iter().position(|i| i.rrpv >= RRPV_MAX).expect("an item at the largest prediction");
        items.remove(victim);
        evicted += 1;
    }
    (items, evicted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(key: &str, len: usize, rrpv: u8) -> SetItem {
        SetItem {
            key: key.into(),
            value: vec![key.as_bytes()[0]; len],
            meta: ItemMeta { flags: 7, expiry: 9, cas: 11, state: 1 },
            rrpv,
        }
    }

    #[test]
    fn a_page_round_trips_and_every_damage_is_refused() {
        let items = vec![item("a", 100, 6), item("bb", 0, 0), item("ccc", 500, 3)];
        let mut page = vec![0u8; PAGE];
        let place = PagePlace { set: 42, partition: 3, epoch: 5, seed: 77 };
        encode_page(&mut page, place, 9, &items);
        let p = decode_page(&page, 42, 3, 77).unwrap();
        assert_eq!((p.seq, p.count), (9, 3));
        let back: Vec<SetItem> = p.iter().map(|(_, v)| v.owned()).collect();
        assert_eq!(back, items);
        assert_eq!(p.find(b"ccc").map(|(pos, v)| (pos, v.value.len())), Some((2, 500)));
        assert!(p.find(b"zz").is_none());
        assert_eq!(decode_page(&page, 41, 3, 77).unwrap_err(), BadPage::Place);
        assert_eq!(decode_page(&page, 42, 2, 77).unwrap_err(), BadPage::Place);
        assert_eq!(decode_page(&page, 42, 3, 78).unwrap_err(), BadPage::Checksum, "another file's seed");
        assert_eq!(decode_page(&vec![0u8; PAGE], 42, 3, 77).unwrap_err(), BadPage::Magic);
        // Every bit of the header and items flipped in turn: never accepted.
        let used = SET_HEADER + items.iter().map(SetItem::bytes).sum::<usize>();
        for bit in 0..used * 8 {
            let mut bad = page.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_page(&bad, 42, 3, 77).is_err(), "bit {bit}");
        }
        // A torn write: the second half of the page from an older write.
        let mut older = vec![0u8; PAGE];
        encode_page(&mut older, place, 8, &[item("ccc", 400, 6), item("d", 300, 6), item("e", 1000, 6)]);
        let mut torn = page.clone();
        torn[300..].copy_from_slice(&older[300..]);
        assert!(decode_page(&torn, 42, 3, 77).is_err());
        // Recovery's view: the new header with older items, an older header, a header torn
        // part-way, another seed's page, a blank page.
        assert_eq!(probe_page(&page, 42, 3, 77), Probe::Ours { seq: 9, epoch: 5, items_ok: true });
        assert_eq!(probe_page(&torn, 42, 3, 77), Probe::Ours { seq: 9, epoch: 5, items_ok: false });
        let mut torn_late = older.clone();
        torn_late[..SET_HEADER].copy_from_slice(&older[..SET_HEADER]);
        torn_late[SET_HEADER..200].copy_from_slice(&page[SET_HEADER..200]);
        assert_eq!(probe_page(&torn_late, 42, 3, 77), Probe::Ours { seq: 8, epoch: 5, items_ok: false });
        let mut torn_head = older.clone();
        torn_head[..20].copy_from_slice(&page[..20]);
        assert_eq!(probe_page(&torn_head, 42, 3, 77), Probe::Damaged);
        assert_eq!(probe_page(&page, 42, 3, 78), Probe::Foreign, "another file's seed");
        assert_eq!(probe_page(&vec![0u8; PAGE], 42, 3, 77), Probe::Foreign);
    }

    #[test]
    fn rrip_keeps_hit_items_and_evicts_the_distant_ones_first() {
        // Four old items of 1000 bytes fill most of the page; two were hit.
        let old: Vec<SetItem> = ["a", "b", "c", "d"].iter().map(|k| item(k, 1000 - SET_ITEM_HEADER - 1, 6)).collect();
        let incoming = vec![item("e", 1000 - SET_ITEM_HEADER - 1, RRPV_INSERT)];
        let (kept, evicted) = merge(old, 0b0101, incoming);
        assert_eq!(evicted, 1);
        let keys: Vec<&[u8]> = kept.iter().map(|i| &i.key[..]).collect();
        assert_eq!(keys, vec![&b"a"[..], b"c", b"d", b"e"], "b: the first not hit at the largest prediction");
        assert_eq!(kept[0].rrpv, 1, "hit items were predicted near (0), then aged once");
        // An incoming copy of a key replaces the old one, whatever its prediction.
        let (kept, evicted) = merge(vec![item("a", 10, 0), item("b", 10, 7)], 0, vec![item("a", 20, 6)]);
        assert_eq!(evicted, 0);
        assert_eq!(
            kept.iter().map(|i| (i.key.clone(), i.value.len())).collect::<Vec<_>>(),
            vec![(b"b".to_vec(), 10), (b"a".to_vec(), 20)]
        );
    }
}
