//! The flash file's identity (its first page, `layout::FileHeader`). Before any partition opens
//! its region, the file is claimed once: a blank file gets a header and a new identity; a file
//! laid out as now keeps its identity; a file laid out differently (threads, size, segment size,
//! index kind, format version) gets a new identity, so every region written under the old one
//! starts empty; anything that is not tierkv's is refused unless the operator forces it.
//!
//! It must not touch anything past the first page.

use super::io::{AlignedBuf, IoEngine, IoKind, IoOp};
use super::layout::{FileHeader, FirstPage, PAGE};
use super::FlashConfig;

/// What claiming the file found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Claim {
    /// The identity every region must carry to be used (`FlashConfig::identity`).
    pub identity: u64,
    /// Why a new identity was drawn for a file that held tierkv's data (None: the same layout
    /// as the last run, or a blank file).
    pub changed: Option<String>,
    /// The file's first page was blank.
    pub new_file: bool,
}

/// Why the file cannot be claimed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimError {
    /// Its first page is neither blank nor tierkv's.
    Foreign,
    /// Reading or writing the header failed.
    Io(String),
}

impl std::fmt::Display for ClaimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClaimError::Foreign => f.write_str(
                "holds something that is not tierkv's (its first page is neither blank nor a tierkv header); \
                 --flash-force takes it over",
            ),
            ClaimError::Io(why) => f.write_str(why),
        }
    }
}

fn one(io: &mut dyn IoEngine, kind: IoKind, buf: AlignedBuf, len: usize) -> (AlignedBuf, Result<usize, i32>) {
    const TOKEN: u64 = u64::MAX;
    io.submit(IoOp { kind, offset: 0, buf, len, at: 0, token: TOKEN });
    io.flush();
    loop {
        let mut done = Vec::new();
        io.wait(&mut done);
        if let Some(c) = done.into_iter().find(|c| c.token == TOKEN) {
            return (c.buf, c.result);
        }
    }
}

/// A new identity: never 0, never `old`.
fn draw_identity(old: u64, salt: u64) -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let mut bytes = Vec::with_capacity(40);
    for v in [nanos as u64, (nanos >> 64) as u64, u64::from(std::process::id()), old, salt] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    let mut identity = xxhash_rust::xxh3::xxh3_64(&bytes);
    while identity == 0 || identity == old {
        identity = identity.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    }
    identity
}

/// Reads the file's first page and settles its identity for the layout `cfg` describes (its
/// partition is ignored), writing (and syncing) a new header when the identity changes. With
/// `force` a foreign file is taken over.
pub(super) fn claim_file(io: &mut dyn IoEngine, cfg: &FlashConfig, force: bool) -> Result<Claim, ClaimError> {
    let (page, result) = one(io, IoKind::Read, AlignedBuf::new(PAGE), PAGE);
    result.map_err(|errno| ClaimError::Io(format!("cannot read its first page (errno {errno})")))?;
    let header = FileHeader {
        partitions: cfg.partitions,
        file_bytes: cfg.file_bytes,
        segment_bytes: cfg.segment_bytes,
        index: if cfg.sets.is_some() { 2 } else { u32::from(cfg.cascade.is_some()) },
        layout_key: cfg.layout_key(),
        identity: 0,
        item_bytes: cfg.expected_item_bytes,
        log_percent: cfg.sets.map_or(0, |s| s.log_percent),
    };
    let (old, changed, new_file) = match FileHeader::classify(&page[..PAGE]) {
        FirstPage::Ours(found) if found.layout_key == header.layout_key => {
            if (found.item_bytes, found.log_percent) != (header.item_bytes, header.log_percent) {
                // A file of an earlier run, whose header did not record these yet.
                write_header(io, FileHeader { identity: found.identity, ..header })?;
            }
            return Ok(Claim { identity: found.identity, changed: None, new_file: false });
        }
        FirstPage::Ours(found) => {
            let (was, now) = (describe(&found), describe(&header));
            let why = if was == now {
                format!("the layout changed ({now}; other settings of the index differ): every region starts empty")
            } else {
                format!("the layout changed (was {was}; now {now}): every region starts empty")
            };
            (found.identity, Some(why), false)
        }
        FirstPage::OursOther => (
            0,
            Some("written by another tierkv format, or its header is damaged: every region starts empty".into()),
            false,
        ),
        FirstPage::Foreign if !force => return Err(ClaimError::Foreign),
        FirstPage::Foreign => (0, Some("held something else; taken over (--flash-force)".into()), false),
        FirstPage::Blank => (0, None, true),
    };
    let identity = draw_identity(old, header.layout_key);
    write_header(io, FileHeader { identity, ..header })?;
    Ok(Claim { identity, changed, new_file })
}

/// Writes (and syncs) the file's header page.
fn write_header(io: &mut dyn IoEngine, header: FileHeader) -> Result<(), ClaimError> {
    let mut buf = AlignedBuf::new(PAGE);
    buf[..PAGE].fill(0);
    header.encode(&mut buf);
    let (_, result) = one(io, IoKind::Write, buf, PAGE);
    result.map_err(|errno| ClaimError::Io(format!("cannot write its header (errno {errno})")))?;
    let (_, result) = one(io, IoKind::Sync, AlignedBuf::new(0), 0);
    result.map_err(|errno| ClaimError::Io(format!("cannot sync its header (errno {errno})")))?;
    Ok(())
}

/// The layout a header records, as the start-up line names it.
fn describe(h: &FileHeader) -> String {
    let index = match h.index {
        1 => "cascade",
        2 => "sets",
        _ => "full",
    };
    let mut out = format!(
        "{} partitions, {} bytes, {}-byte segments, the {index} index",
        h.partitions, h.file_bytes, h.segment_bytes
    );
    if h.item_bytes != 0 {
        let key_value = h.item_bytes.saturating_sub(super::layout::ITEM_HEADER as u32);
        out += &format!(", sized for {}-byte items on flash (--flash-item-bytes up to {key_value})", h.item_bytes);
    }
    if h.log_percent != 0 {
        out += &format!(", its log {}% of each region", h.log_percent);
    }
    out
}
