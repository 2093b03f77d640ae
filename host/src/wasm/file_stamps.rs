//! What the compiled cache remembers about the files it has checked, so a cached load does
//! not read them again: a driver file's sha256, and that the cache entry compiled from it
//! passed its checksum in this boot.
//!
//! Owns: [`FileStamp`] (a file's identity as the kernel reports it: device, inode, size,
//! modification and status-change times), and the record files `<dev>-<ino>.id` beside the
//! cache entries, one per driver file, each holding that file's stamp and sha256 and,
//! optionally, the boot and stamp of the cache entry verified for it.
//! Must not: decide anything on a record whose stamp differs from the file's in any field,
//! nor record a file whose times are not [settled](FileStamp::settled).
//!
//! Why a stamp names the content: writing a file sets its status-change time (`ctime`) to
//! the current time, and no system call sets `ctime` to a chosen value (only a change of the
//! system clock, which needs privilege, does). A record is made only for a file whose `ctime`
//! and `mtime` are at least [`SETTLE`] old when it is hashed, and only when the file's stamp
//! is the same after the hash as before it; so any later write gives the file a later `ctime`
//! than the recorded one, whatever the timestamp granularity of its filesystem (Git's
//! "racily clean" problem: a change within the same clock tick as the record). An inode
//! number reused by a new file comes with that file's new `ctime` too.
//!
//! Trust: the records sit in the cache directory (0700), beside the native code of the
//! entries; whatever can write one can write an entry, so a record adds no way in. A record
//! that cannot be read, parsed or written only costs the hash it would have saved; write
//! failures are logged at debug level.
//!
//! The entry part: entries are synced before they are renamed into place and never modified
//! in place, so an entry whose stamp is unchanged since its checksum passed holds the bytes
//! that passed. The checksum guards against damage on disk, which a reboot may reveal (a
//! page cache dropped, a device that lost a write), so a verification counts only in the
//! boot it was made in (`/proc/sys/kernel/random/boot_id`; without it, entries are verified
//! on every load). Marking an entry used (at most daily) changes its stamp, so each entry is
//! also verified again at least once a day.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How old a file's times must be before its stamp may stand for its content.
pub(crate) const SETTLE: Duration = Duration::from_secs(2);

/// The first word of a record file (its layout).
const RECORD_MAGIC: &str = "adaptor-file-stamps-1";

/// A file's identity: any write to it changes `ctime` (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    /// Seconds and nanoseconds since the epoch.
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    /// The stamp of the file `meta` describes (`None` off Unix, where there is no `ctime`).
    pub(crate) fn of(meta: &std::fs::Metadata) -> Option<FileStamp> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            Some(FileStamp {
                dev: meta.dev(),
                ino: meta.ino(),
                size: meta.size(),
                mtime: (meta.mtime(), meta.mtime_nsec()),
                ctime: (meta.ctime(), meta.ctime_nsec()),
            })
        }
        #[cfg(not(unix))]
        {
            let _ = meta;
            None
        }
    }

    /// Whether both times are at least [`SETTLE`] before `now`, so that a later write gives
    /// the file a different stamp.
    pub(crate) fn settled(&self, now: SystemTime) -> bool {
        let Ok(since_epoch) = now.duration_since(SystemTime::UNIX_EPOCH) else {
            return false;
        };
        let Some(limit) = since_epoch.checked_sub(SETTLE) else {
            return false;
        };
        let before_limit = |(secs, nanos): (i64, i64)| {
            let limit = (limit.as_secs() as i64, i64::from(limit.subsec_nanos()));
            (secs, nanos) < limit
        };
        before_limit(self.mtime) && before_limit(self.ctime)
    }

    fn encode(&self) -> String {
        format!(
            "{} {} {} {}.{:09} {}.{:09}",
            self.dev, self.ino, self.size, self.mtime.0, self.mtime.1, self.ctime.0, self.ctime.1
        )
    }

    fn parse<'a>(words: &mut impl Iterator<Item = &'a str>) -> Option<FileStamp> {
        let mut number = || words.next()?.parse::<u64>().ok();
        let (dev, ino, size) = (number()?, number()?, number()?);
        let mut time = || {
            let (secs, nanos) = words.next()?.split_once('.')?;
            Some((secs.parse().ok()?, nanos.parse().ok()?))
        };
        Some(FileStamp {
            dev,
            ino,
            size,
            mtime: time()?,
            ctime: time()?,
        })
    }
}

/// What is known about one driver file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// The driver file's stamp when it was hashed.
    pub wasm: FileStamp,
    /// The sha256 (hex) of its bytes.
    pub sha256: String,
    /// The cache entry compiled from those bytes, as it was when its checksum passed: the
    /// boot id then and the entry's stamp.
    pub entry: Option<(String, FileStamp)>,
}

impl Record {
    fn encode(&self) -> String {
        let entry = match &self.entry {
            Some((boot, stamp)) => format!("{boot} {}", stamp.encode()),
            None => "-".to_owned(),
        };
        format!(
            "{RECORD_MAGIC} {} {} {entry}\n",
            self.wasm.encode(),
            self.sha256
        )
    }

    fn parse(text: &str) -> Option<Record> {
        let mut words = text.split_ascii_whitespace();
        if words.next()? != RECORD_MAGIC {
            return None;
        }
        let wasm = FileStamp::parse(&mut words)?;
        let sha256 = words.next()?;
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let entry = match words.next()? {
            "-" => None,
            boot => Some((boot.to_owned(), FileStamp::parse(&mut words)?)),
        };
        words.next().is_none().then(|| Record {
            wasm,
            sha256: sha256.to_owned(),
            entry,
        })
    }

    /// The entry's stamp if its checksum passed in this boot.
    pub(crate) fn entry_verified_this_boot(&self) -> Option<FileStamp> {
        let (boot, stamp) = self.entry.as_ref()?;
        (Some(boot.as_str()) == boot_id()).then_some(*stamp)
    }
}

/// A record's text parsed (for the engine's tests).
#[cfg(test)]
pub(crate) fn tests_parse(text: &str) -> Option<Record> {
    Record::parse(text)
}

/// The record file for the file stamped `stamp`, in the cache directory `dir`.
fn record_path(dir: &Path, stamp: &FileStamp) -> PathBuf {
    dir.join(format!("{}-{}.id", stamp.dev, stamp.ino))
}

/// The record of the file stamped `stamp`, if there is one with exactly that stamp.
pub(crate) fn read(dir: &Path, stamp: &FileStamp) -> Option<Record> {
    let text = std::fs::read_to_string(record_path(dir, stamp)).ok()?;
    Record::parse(&text).filter(|r| r.wasm == *stamp)
}

/// Write `record` (replacing the file's earlier one); a failure is logged at debug level and
/// costs only the next load's hash.
pub(crate) fn write(dir: &Path, record: &Record) {
    let path = record_path(dir, &record.wasm);
    let tmp = super::engine::temporary_beside(&path);
    let written = std::fs::write(&tmp, record.encode()).and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        // A temporary file left behind is deleted with the cache's other leftovers (`prune`).
        tracing::debug!(path = %path.display(), error = %e, "could not record a driver file's stamp");
    }
}

/// This boot's id (read once), if the kernel offers one.
pub(crate) fn boot_id() -> Option<&'static str> {
    static BOOT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let id = id.trim();
        (!id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'))
            .then(|| id.to_owned())
    })
    .as_deref()
}

/// Write `bytes` over the file at `path` and put its modification time back (for tests: a
/// write that only `ctime` tells).
#[cfg(test)]
pub(crate) fn rewrite_keeping_mtime(path: &Path, bytes: &[u8]) {
    let mtime = std::fs::metadata(path).unwrap().modified().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(path, bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn sample_stamp() -> FileStamp {
        FileStamp {
            dev: 1,
            ino: 2,
            size: 3,
            mtime: (4, 5),
            ctime: (6, 7),
        }
    }

    fn stamp_of(path: &Path) -> FileStamp {
        FileStamp::of(&std::fs::metadata(path).unwrap()).unwrap()
    }

    #[test]
    fn a_record_round_trips_and_is_found_only_for_the_same_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("driver.wasm");
        std::fs::write(&file, b"one").unwrap();
        let stamp = stamp_of(&file);
        let record = Record {
            wasm: stamp,
            sha256: "ab".repeat(32),
            entry: Some(("0a1b-2c".to_owned(), stamp)),
        };
        assert_eq!(Record::parse(&record.encode()), Some(record.clone()));
        let plain = Record {
            entry: None,
            ..record.clone()
        };
        assert_eq!(Record::parse(&plain.encode()), Some(plain));
        write(dir.path(), &record);
        assert_eq!(read(dir.path(), &stamp), Some(record));
        // A write of the same length at the same modification time still changes `ctime`.
        rewrite_keeping_mtime(&file, b"two");
        let rewritten = stamp_of(&file);
        assert_ne!(rewritten, stamp);
        assert_eq!(read(dir.path(), &rewritten), None);
    }

    #[test]
    fn damaged_records_are_not_read() {
        let stamp = sample_stamp();
        let good = Record {
            wasm: stamp,
            sha256: "0".repeat(64),
            entry: None,
        }
        .encode();
        assert!(Record::parse(&good).is_some());
        for bad in [
            good.replace(RECORD_MAGIC, "adaptor-file-stamps-0"),
            good.replace(&"0".repeat(64), &"0".repeat(63)),
            good.replace(&"0".repeat(64), &"g".repeat(64)),
            good.replace(" -", ""),
            good.replace(" -", " - extra"),
            good.replace("4.000000005", "4"),
            String::new(),
        ] {
            assert_eq!(Record::parse(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_times_older_than_the_settle_window_are_settled() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let stamp = stamp_of(&file);
        let now = SystemTime::now();
        assert!(!stamp.settled(now), "a file written just now");
        assert!(!stamp.settled(now + SETTLE - Duration::from_millis(100)));
        assert!(stamp.settled(now + SETTLE + Duration::from_millis(100)));
        assert!(!stamp.settled(SystemTime::UNIX_EPOCH));
    }

    #[test]
    fn an_entry_verification_counts_only_in_its_boot() {
        let stamp = sample_stamp();
        let boot = boot_id().expect("Linux has a boot id");
        let this_boot = Record {
            wasm: stamp,
            sha256: "0".repeat(64),
            entry: Some((boot.to_owned(), stamp)),
        };
        assert_eq!(this_boot.entry_verified_this_boot(), Some(stamp));
        let other_boot = Record {
            entry: Some(("00000000-0000-0000-0000-000000000000".to_owned(), stamp)),
            ..this_boot
        };
        assert_eq!(other_boot.entry_verified_this_boot(), None);
    }
}
