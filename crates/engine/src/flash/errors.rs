//! The flash store's errors, typed: why a region cannot be opened or closed (`StoreError`), and
//! why its snapshot or segments cannot be used (`RecoveryError`: the region then starts empty and
//! the report says why). Their `Display` is what the server logs.
//!
//! It must not decide anything: callers choose what an error leads to.

use super::config::LayoutError;

/// A device operation the store needed that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceError {
    /// What the store was doing.
    pub what: &'static str,
    /// The operating system's error number.
    pub errno: i32,
}

impl std::fmt::Display for DeviceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed (errno {})", self.what, self.errno)
    }
}

/// Why a store could not be opened or closed cleanly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// The region cannot be laid out as configured.
    Layout(LayoutError),
    /// The device failed an operation that could not be skipped.
    Device(DeviceError),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Layout(error) => f.write_str(&error.0),
            StoreError::Device(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for StoreError {}

/// Why what a region holds is not used (it starts empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecoveryError {
    /// The snapshot's first page is not a valid header.
    SnapshotHeader,
    /// The snapshot was written for another partition or geometry.
    SnapshotLayout,
    /// The snapshot's size is not the one the superblock names.
    SnapshotSize,
    /// Reading the snapshot failed.
    SnapshotRead {
        /// The operating system's error number.
        errno: i32,
    },
    /// The snapshot fails its checksum.
    SnapshotChecksum,
    /// The ring the snapshot describes has gaps or overlaps.
    SnapshotRing,
    /// The snapshot's index names places outside the ring.
    SnapshotPlaces,
    /// The cascade index's section of the snapshot is damaged or of another layout.
    CascadeSnapshot,
    /// The sets index's section of the snapshot does not check out.
    SetsSnapshot,
    /// A segment read back damaged after a crash, so nothing is adopted.
    SegmentDamaged {
        /// Its slot in the ring.
        slot: u32,
    },
    /// Set pages could not be read after a crash, so nothing is adopted.
    SetsUnreadable {
        /// The first set of the read that kept failing.
        set: u32,
    },
}

impl std::fmt::Display for RecoveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecoveryError::SnapshotHeader => f.write_str("the index snapshot's header is damaged"),
            RecoveryError::SnapshotLayout => f.write_str("the index snapshot does not match the layout"),
            RecoveryError::SnapshotSize => f.write_str("the index snapshot's size does not match"),
            RecoveryError::SnapshotRead { errno } => write!(f, "reading the index snapshot failed (errno {errno})"),
            RecoveryError::SnapshotChecksum => f.write_str("the index snapshot fails its checksum"),
            RecoveryError::SnapshotRing => f.write_str("the index snapshot's ring is inconsistent"),
            RecoveryError::SnapshotPlaces => f.write_str("the index snapshot names places outside the ring"),
            RecoveryError::CascadeSnapshot => f.write_str("the cascade index snapshot is damaged or of another layout"),
            RecoveryError::SetsSnapshot => f.write_str("the sets index snapshot is damaged or of another layout"),
            RecoveryError::SegmentDamaged { slot } => {
                write!(f, "segment {slot} reads back damaged; nothing is adopted")
            }
            RecoveryError::SetsUnreadable { set } => {
                write!(f, "the set pages from set {set} on cannot be read; nothing is adopted")
            }
        }
    }
}

impl std::error::Error for RecoveryError {}
