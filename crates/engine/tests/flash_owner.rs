//! One owner per flash file: a second opening of a file in use is refused and leaves it as it
//! was; a sparse file is given real blocks; a file deleted or replaced under its owner is
//! noticed.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use tierkv_engine::flash::{AdmissionPolicy, FlashIo, OpenError, TierFile, TierSettings};

const FILE_BYTES: u64 = 16 << 20;

fn settings() -> TierSettings {
    TierSettings {
        file_bytes: FILE_BYTES,
        segment_bytes: 256 << 10,
        admission: AdmissionPolicy::All,
        sync_commits: false,
        io: FlashIo::Threads,
        cascade_t1_bytes: None,
        sets: None,
        item_bytes: None,
        small_index: false,
        test_io: None,
    }
}

fn fresh(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("owner-{name}-{}.flash", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

#[test]
fn a_file_in_use_is_refused_and_left_as_it_was_until_its_owner_closes_it() {
    let path = fresh("in-use");
    let first = TierFile::open(&path, &settings(), 2, false).expect("the first opening");
    let before = std::fs::read(&path).unwrap();
    // A second server asking for a larger file must not grow, claim or truncate it either.
    let larger = TierSettings { file_bytes: 2 * FILE_BYTES, ..settings() };
    for asked in [settings(), larger] {
        match TierFile::open(&path, &asked, 2, true) {
            Err(OpenError::InUse) => {}
            other => panic!("a second opening of a file in use: {other:?}"),
        }
    }
    assert!(std::fs::read(&path).unwrap() == before, "the refused opening changed the file");
    assert!(first.path_check().is_none());
    drop(first);
    TierFile::open(&path, &settings(), 2, false).expect("free again once its owner closed it");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_sparse_file_of_the_right_length_gets_its_blocks() {
    let path = fresh("sparse");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(FILE_BYTES).unwrap();
    drop(file);
    let blocks = |path: &Path| std::fs::metadata(path).unwrap().blocks() * 512;
    if blocks(&path) >= FILE_BYTES {
        eprintln!("this file system does not make sparse files; nothing to check");
        return;
    }
    let tier = TierFile::open(&path, &settings(), 1, true).expect("opens");
    assert!(blocks(&path) >= FILE_BYTES, "{} of {FILE_BYTES} bytes allocated", blocks(&path));
    drop(tier);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_file_deleted_or_replaced_under_its_owner_is_noticed() {
    let path = fresh("moved");
    let tier = TierFile::open(&path, &settings(), 1, false).expect("opens");
    assert_eq!(tier.path_check(), None);
    let moved = path.with_extension("moved");
    std::fs::rename(&path, &moved).unwrap();
    assert_eq!(tier.path_check(), Some("moved to another name"));
    std::fs::write(&path, b"someone else's").unwrap();
    assert_eq!(tier.path_check(), Some("replaced by another file"));
    std::fs::remove_file(&moved).unwrap();
    assert_eq!(tier.path_check(), Some("deleted"));
    let _ = std::fs::remove_file(&path);
}
