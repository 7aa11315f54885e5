//! The request types every protocol decodes into, so the server handles each command once.

use crate::meta::MetaFlags;

/// A key as it arrived: raw bytes, or base64 text (meta `b` flag) that `decode_into` turns into
/// the key's bytes without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key<'a> {
    /// The bytes on the wire.
    pub raw: &'a [u8],
    /// Whether `raw` is base64.
    pub base64: bool,
}

impl<'a> Key<'a> {
    /// A plain key.
    pub fn plain(raw: &'a [u8]) -> Key<'a> {
        Key { raw, base64: false }
    }

    /// The key's bytes: `raw` itself, or `raw` base64-decoded into `buffer`. None if the base64
    /// is invalid or decodes to more than `buffer` holds.
    pub fn decode_into<'b>(&self, buffer: &'b mut [u8]) -> Option<&'b [u8]>
    where
        'a: 'b,
    {
        if !self.base64 {
            return Some(self.raw);
        }
        let len = crate::base64::decode(self.raw, buffer)?;
        Some(&buffer[..len])
    }
}

/// Space-separated keys of a text retrieval command, validated by the decoder (count and
/// lengths), iterated without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys<'a> {
    raw: &'a [u8],
    count: usize,
    /// Whether `raw` is a space-separated list (text) rather than one key of any bytes.
    list: bool,
}

impl<'a> Keys<'a> {
    pub(crate) fn new(raw: &'a [u8], count: usize) -> Keys<'a> {
        Keys { raw, count, list: true }
    }

    /// Keys separated by single spaces, as a text retrieval line carries them.
    pub fn from_line(raw: &'a [u8]) -> Keys<'a> {
        let count = raw.split(|&b| b == b' ').filter(|token| !token.is_empty()).count();
        Keys { raw, count, list: true }
    }

    /// One key of any bytes (binary and meta requests).
    pub fn one(key: &'a [u8]) -> Keys<'a> {
        Keys { raw: key, count: 1, list: false }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are no keys (never true for a decoded request).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The keys in request order.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let (list, single) = if self.list { (self.raw, None) } else { (&self.raw[..0], Some(self.raw)) };
        single.into_iter().chain(list.split(|&b| b == b' ').filter(|token| !token.is_empty()))
    }
}

/// memcached's storage modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// `set`: store whatever is there.
    Set,
    /// `add`: store if absent.
    Add,
    /// `replace`: store if present.
    Replace,
    /// `append`: add bytes after the value.
    Append,
    /// `prepend`: add bytes before the value.
    Prepend,
    /// Store only if the CAS matches (text `cas`, meta `ms` with `C` in set/replace mode).
    Cas,
}

/// What a request asks for, whatever protocol carried it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// get, gets, gat, gats, mg, binary GET* / GAT*.
    Get {
        /// The keys.
        keys: Keys<'a>,
        /// gets/gats: include the CAS in the reply.
        return_cas: bool,
        /// gat/gats/binary GAT/meta `T`: the new exptime.
        touch: Option<i64>,
        /// Meta `b`: keys are base64 (only for mg, which has one key).
        base64: bool,
    },
    /// set, add, replace, append, prepend, cas, ms, binary SET/ADD/REPLACE/APPEND/PREPEND.
    Store {
        /// How it stores.
        mode: StoreMode,
        /// The key.
        key: Key<'a>,
        /// Client flags.
        flags: u32,
        /// Expiry (memcached's relative seconds or Unix time).
        exptime: i64,
        /// The value.
        value: &'a [u8],
        /// The CAS it must match (0: any).
        cas: u64,
    },
    /// delete, md, binary DELETE.
    Delete {
        /// The key.
        key: Key<'a>,
        /// The CAS it must match (0: any).
        cas: u64,
    },
    /// incr, decr, ma, binary INCREMENT/DECREMENT.
    Arith {
        /// The key.
        key: Key<'a>,
        /// How much to add or take away.
        delta: u64,
        /// Take away (decr).
        decrement: bool,
        /// The counter to create if missing (meta and binary).
        initial: Option<ArithInitial>,
        /// The CAS it must match (0: any).
        cas: u64,
    },
    /// tierkv's atomics (docs/protocol-extensions.md): text `atomic`, meta `ma` with an
    /// extended mode, binary ATOMIC/ATOMICQ. Operands are 64-bit patterns, read as i64 when
    /// `signed`.
    Atomic {
        /// The key.
        key: Key<'a>,
        /// The operation.
        code: AtomicCode,
        /// The counter is signed.
        signed: bool,
        /// The operand.
        operand: u64,
        /// `cas`: the new value (`operand` is the expected one).
        operand2: u64,
    },
    /// tierkv's vector commands (docs/protocol-extensions.md): `vnew`, `vupd`, `vget`, `vlen`.
    Vector {
        /// The key.
        key: Key<'a>,
        /// The call.
        call: VectorCall<'a>,
        /// `vnew`: the item's flags and exptime (0 and 0 from the text line).
        flags: u32,
        /// The expiry of a vector it creates.
        exptime: i64,
    },
    /// touch, binary TOUCH.
    Touch {
        /// The key.
        key: Key<'a>,
        /// The new expiry.
        exptime: i64,
    },
    /// flush_all [delay], binary FLUSH.
    FlushAll {
        /// Seconds until the flush (0: now).
        delay: i64,
    },
    /// stats [group ...]: the raw arguments (empty for plain `stats`).
    Stats {
        /// What follows `stats`.
        args: &'a [u8],
    },
    /// `version`.
    Version,
    /// `verbosity`.
    Verbosity {
        /// The level.
        level: u32,
    },
    /// `quit`.
    Quit,
    /// mn, binary NOOP.
    Noop,
    /// me <key>.
    MetaDebug {
        /// The key.
        key: Key<'a>,
    },
    /// memcached's administrative commands (`shutdown`, `slabs`, `cache_memlimit`,
    /// `lru_crawler`, `lru`, `watch`): the whole line, for the server to interpret.
    Admin {
        /// The whole line.
        line: &'a [u8],
    },
    /// Binary SASL opcodes (a server without authentication answers them as memcached does).
    Sasl {
        /// The SASL opcode.
        opcode: u8,
        /// The mechanism.
        key: &'a [u8],
        /// The mechanism's data.
        value: &'a [u8],
    },
}

/// A vector's element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorElem {
    /// Signed 64-bit integers.
    I64,
    /// Unsigned 64-bit integers.
    U64,
    /// 64-bit floats.
    F64,
    /// 32-bit floats.
    F32,
}

/// What a vector update does to each element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorOpCode {
    /// Adds to each element.
    Add,
    /// Keeps the smaller of each pair.
    Min,
    /// Keeps the larger of each pair.
    Max,
    /// Overwrites the elements.
    Set,
}

/// One vector command (see `Command::Vector`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorCall<'a> {
    /// A vector of `len` zeroes.
    New {
        /// The element type.
        elem: VectorElem,
        /// Elements.
        len: u32,
    },
    /// `data` (little-endian elements) applied from element `offset`.
    Update {
        /// What it does.
        op: VectorOpCode,
        /// The data's element type.
        elem: VectorElem,
        /// The first element.
        offset: u32,
        /// The operands.
        data: &'a [u8],
    },
    /// Elements `offset..offset + count`, as bytes.
    Get {
        /// The first element.
        offset: u32,
        /// Elements to read.
        count: u32,
    },
    /// The type and length.
    Len,
}

/// Which atomic operation (see `Command::Atomic`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicCode {
    /// Add.
    Add,
    /// Compare and swap.
    Cas,
    /// Keep the smaller.
    Min,
    /// Keep the larger.
    Max,
    /// Bitwise and.
    And,
    /// Bitwise or.
    Or,
    /// Bitwise exclusive or.
    Xor,
}

/// The value and exptime an incr/decr creates on a miss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArithInitial {
    /// The value a missing counter starts at.
    pub value: u64,
    /// Its expiry.
    pub exptime: i64,
}

/// How the reply must be shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyStyle<'a> {
    /// Classic text protocol; `noreply` suppresses the reply.
    Text {
        /// No reply is wanted.
        noreply: bool,
    },
    /// Meta protocol with its flags (returned in request order).
    Meta(MetaFlags<'a>),
    /// Binary protocol.
    Binary(BinaryRequestInfo),
}

/// What a binary reply echoes from its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinaryRequestInfo {
    /// The request's opcode.
    pub opcode: u8,
    /// The client's tag, echoed.
    pub opaque: u32,
    /// Quiet variant: success replies (and, for gets, misses) are suppressed.
    pub quiet: bool,
    /// GETK/GETKQ/GATK/GATKQ: the key goes back in the reply.
    pub return_key: bool,
}

impl<'a> Command<'a> {
    /// The one key the command names (a get of exactly one key, or any single-key command),
    /// as the client sent it (base64 still encoded).
    pub fn key(&self) -> Option<Key<'a>> {
        match *self {
            Command::Get { keys, base64, .. } if keys.len() == 1 => Some(Key { raw: keys.iter().next()?, base64 }),
            Command::Store { key, .. }
            | Command::Delete { key, .. }
            | Command::Arith { key, .. }
            | Command::Atomic { key, .. }
            | Command::Vector { key, .. }
            | Command::Touch { key, .. }
            | Command::MetaDebug { key } => Some(key),
            _ => None,
        }
    }
}

/// One decoded request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// What it asks.
    pub command: Command<'a>,
    /// How the reply is shaped.
    pub style: ReplyStyle<'a>,
}

/// What a request needs of its key's current item before it may run, wherever that item is
/// (a flash tier keeps some items off the partition's DRAM: a request that needs them waits
/// for their read, and one that writes waits for the flash copy's invalidation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// It must see the key's item (everything keyed but a plain text or binary set, which
    /// replaces the item whatever it was).
    pub item: bool,
    /// It may change the key (every keyed command but plain reads).
    pub write: bool,
    /// It only reads the item's value and metadata (a text or binary get without touch): a
    /// copy of the item read from flash answers it as well as the item itself would.
    pub copy: bool,
}

impl Request<'_> {
    /// What this request needs of its key's item (`Needs`); nothing for keyless commands.
    pub fn needs(&self) -> Needs {
        let (item, write) = match self.command {
            // Plain sets replace the item whatever it was; meta sets are given it too (their
            // flags may depend on it).
            Command::Store { mode: StoreMode::Set, cas: 0, .. } => (matches!(self.style, ReplyStyle::Meta(_)), true),
            Command::Get { touch, .. } => (true, touch.is_some()),
            Command::Store { .. }
            | Command::Delete { .. }
            | Command::Arith { .. }
            | Command::Atomic { .. }
            | Command::Vector { .. }
            | Command::Touch { .. } => (true, true),
            Command::MetaDebug { .. } => (true, false),
            _ => (false, false),
        };
        let copy =
            matches!(self.command, Command::Get { touch: None, .. }) && !matches!(self.style, ReplyStyle::Meta(_));
        Needs { item, write, copy }
    }
}
