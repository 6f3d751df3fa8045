//! `strata snapshot save FILE` and `strata snapshot restore FILE`: every key of a store, read at
//! one revision, in a file; and that file written into an empty store of either engine, so a
//! single-node (RocksDB) installation can move onto etcd, or back.
//!
//! # The file format (version 1)
//!
//! All integers are big-endian.
//!
//! | part    | bytes                                                                 |
//! |---------|-----------------------------------------------------------------------|
//! | header  | the magic `STRATA-SNAPSHOT\0` (16 bytes), `u32` format version (1), `u64` the source revision the keys were read at |
//! | records | per key, in key order: `0x01`, `u32` key length, the key (UTF-8), `u32` value length, the value bytes |
//! | trailer | `0x00`, `u64` the number of records, the SHA-256 (32 bytes) of every byte before it |
//!
//! Nothing may follow the trailer. Values are the store's bytes, unchanged: the objects with
//! their uid, creationTimestamp, managedFields, finalizers and labels, and the cluster's secrets
//! under `/strata/` (the ServiceAccount token signing key, the continue-token key, the CA and
//! the admin token), so tokens issued before still verify after a restore. Stored objects carry
//! no resourceVersion (the registry stamps the revision it reads them at), so a restored object
//! has the target's revision as its resourceVersion.
//!
//! # Save
//!
//! The keys are read with paged range reads, every page at the revision of the first one, so the
//! file is one consistent state even while a server writes. From etcd that is plain reads; from
//! a RocksDB data directory the store is opened read-only, which works whether or not a server
//! holds it (its acknowledged writes up to that moment are included). The file is written beside
//! its destination and renamed into place when complete.
//!
//! # Restore
//!
//! The whole file is verified first (magic, version, every record, count and checksum); a bad
//! file changes nothing. The target must hold no key at all: a store a server has already started
//! on holds its bootstrap namespaces, and is refused. Every key is then created with
//! create-if-absent, so a concurrent writer cannot be overwritten. A failure part-way leaves the
//! keys written so far; empty the target and restore again. Finally the target's history is
//! compacted to its current revision (as `etcdutl snapshot restore --mark-compacted` does): a
//! client that still holds a resourceVersion from the source and watches or lists from it gets
//! 410 Gone and lists again, instead of the restore's writes replayed as events.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use strata_store::{RangeRequest, Revision, Store, StoreError};

use crate::config::{Backend, Config};

/// The first bytes of every snapshot file.
pub const MAGIC: &[u8; 16] = b"STRATA-SNAPSHOT\0";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
const RECORD: u8 = 0x01;
const END: u8 = 0x00;
/// Keys read per range request while saving.
const PAGE: usize = 500;
/// Creates in flight while restoring.
const IN_FLIGHT: usize = 32;
/// Attempts at a save whose revision etcd compacted before the last page was read.
const SAVE_ATTEMPTS: usize = 3;

/// What a snapshot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The source revision the keys were read at.
    pub revision: Revision,
    /// How many keys.
    pub keys: u64,
}

/// `strata snapshot save FILE` (or `restore FILE` when `restore`) on the store `config`
/// describes (its storage settings; the `strata` binary parses the flags). Prints what was done
/// and returns the exit code: 0, or 1 for a failure.
pub async fn run(restore: bool, file: &Path, config: &Config) -> i32 {
    let result = if restore {
        restore_command(config, file).await.map(|s| {
            format!(
                "restored {} keys (saved at revision {}) from {}",
                s.keys,
                s.revision,
                file.display()
            )
        })
    } else {
        save_command(config, file).await.map(|s| {
            format!(
                "saved {} keys at revision {} to {}",
                s.keys,
                s.revision,
                file.display()
            )
        })
    };
    match result {
        Ok(line) => {
            println!("strata: {line}");
            0
        }
        Err(e) => {
            eprintln!("strata: {e}");
            1
        }
    }
}

async fn save_command(config: &Config, file: &Path) -> Result<Summary, String> {
    let store: Arc<dyn Store> = match config.backend {
        Backend::RocksDb => {
            let dir = config.data_dir.join("store");
            let opened = tokio::task::spawn_blocking(move || {
                strata_store_rocksdb::RocksStore::open_read_only(&dir)
            })
            .await
            .map_err(|e| e.to_string())?;
            Arc::new(opened.map_err(|e| {
                format!(
                    "cannot read the store in {}: {e}",
                    config.data_dir.display()
                )
            })?)
        }
        Backend::Etcd => crate::open_store(config).await?,
        Backend::Memory => return Err("a memory store has nothing to save".into()),
    };
    save(store.as_ref(), file).await
}

async fn restore_command(config: &Config, file: &Path) -> Result<Summary, String> {
    // Verified before the target is opened: a bad file touches nothing.
    let summary = verify(file)?;
    let store = match config.backend {
        Backend::RocksDb | Backend::Etcd => crate::open_store(config).await?,
        Backend::Memory => return Err("a memory store would be lost at exit".into()),
    };
    let restored = restore(store, file).await?;
    debug_assert_eq!(restored, summary);
    Ok(restored)
}

/// Saves every key of `store` at one revision to `file`.
pub async fn save(store: &dyn Store, file: &Path) -> Result<Summary, String> {
    let partial = partial_path(file);
    let mut attempt = 0;
    let summary = loop {
        attempt += 1;
        let out = File::create(&partial).map_err(|e| io_error(&partial, e))?;
        let writer = Writer::new(BufWriter::new(out));
        match write_all_keys(store, writer, &partial).await {
            Ok(summary) => break summary,
            Err(Failure::Store(StoreError::Compacted { .. })) if attempt < SAVE_ATTEMPTS => {
                tracing::info!("the snapshot's revision was compacted while saving; again");
            }
            Err(e) => {
                let _ = std::fs::remove_file(&partial);
                return Err(e.to_string());
            }
        }
    };
    std::fs::rename(&partial, file).map_err(|e| io_error(file, e))?;
    Ok(summary)
}

/// Why a save failed.
enum Failure {
    Store(StoreError),
    Other(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Store(e) => write!(f, "reading the store: {e}"),
            Failure::Other(e) => f.write_str(e),
        }
    }
}

async fn write_all_keys(
    store: &dyn Store,
    mut writer: Writer<BufWriter<File>>,
    path: &Path,
) -> Result<Summary, Failure> {
    let io = |e: std::io::Error| Failure::Other(io_error(path, e));
    // Every key Strata writes starts with `/` (`/registry/…`, `/strata/…`).
    let mut request = RangeRequest {
        prefix: "/".into(),
        start: String::new(),
        limit: PAGE,
        revision: None,
        // Every page is read anyway: counting the keys after each one would make the save
        // quadratic in the store's size.
        skip_remaining: true,
    };
    let mut keys = 0u64;
    let mut header_written = false;
    loop {
        let page = store.range(request.clone()).await.map_err(Failure::Store)?;
        if !header_written {
            writer.header(page.revision).map_err(io)?;
            header_written = true;
            request.revision = Some(page.revision);
        }
        for kv in &page.kvs {
            writer.record(&kv.key, &kv.value).map_err(io)?;
            keys += 1;
        }
        // Every engine fills a page unless the range ends first.
        match page.kvs.last() {
            Some(last) if page.kvs.len() == PAGE => request.start = format!("{}\0", last.key),
            _ => break,
        }
    }
    let revision = request.revision.unwrap_or_default();
    let file = writer.finish(keys).map_err(io)?;
    file.into_inner()
        .map_err(|e| io(e.into_error()))?
        .sync_all()
        .map_err(io)?;
    Ok(Summary { revision, keys })
}

/// Checks `file` from end to end without writing anything.
pub fn verify(file: &Path) -> Result<Summary, String> {
    let mut reader = Reader::open(file)?;
    while reader.next_record()?.is_some() {}
    reader.summary()
}

/// Writes every key of `file` into `store`, which must be empty.
pub async fn restore(store: Arc<dyn Store>, file: &Path) -> Result<Summary, String> {
    let summary = verify(file)?;
    let existing = store
        .range(RangeRequest {
            prefix: "/".into(),
            limit: 1,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("reading the target store: {e}"))?;
    // An engine may hide its own bookkeeping keys from a page yet count them as remaining;
    // either way, something is there.
    if !existing.kvs.is_empty() || existing.remaining > 0 {
        let held = match existing.kvs.first() {
            Some(kv) => format!("it holds {:?} and {} more keys", kv.key, existing.remaining),
            None => format!("it holds {} keys", existing.remaining),
        };
        return Err(format!(
            "the target store is not empty ({held}): restore writes only into an empty store"
        ));
    }
    let mut reader = Reader::open(file)?;
    let mut tasks = tokio::task::JoinSet::new();
    let outcome = |joined: Result<Result<(), String>, tokio::task::JoinError>| {
        joined.map_err(|e| format!("a restore task failed: {e}"))?
    };
    while let Some((key, value)) = reader.next_record()? {
        if tasks.len() >= IN_FLIGHT {
            if let Some(joined) = tasks.join_next().await {
                outcome(joined)?;
            }
        }
        let store = store.clone();
        tasks.spawn(async move {
            store
                .create(&key, value)
                .await
                .map(|_| ())
                .map_err(|e| match e {
                    StoreError::Exists(_) => {
                        format!("{key:?} appeared in the target while restoring")
                    }
                    e => format!("writing {key:?}: {e}"),
                })
        });
    }
    while let Some(joined) = tasks.join_next().await {
        outcome(joined)?;
    }
    // The second pass read the file again: make sure it is still the one verified.
    let again = reader.summary()?;
    if again != summary {
        return Err(format!("{} changed while it was restored", file.display()));
    }
    // The restore's own history is no one's: compacted away, a resourceVersion a client kept
    // from the source is 410 Gone (list again) rather than a read of unrelated revisions.
    let top = store
        .consistent_revision()
        .await
        .map_err(|e| format!("reading the target's revision: {e}"))?;
    store
        .compact(top)
        .await
        .map_err(|e| format!("compacting the restore's history: {e}"))?;
    Ok(summary)
}

fn partial_path(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    file.with_file_name(name)
}

fn io_error(path: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", path.display())
}

/// Writes the format, hashing as it goes.
struct Writer<W: Write> {
    out: W,
    hash: Sha256,
}

impl<W: Write> Writer<W> {
    fn new(out: W) -> Self {
        Writer {
            out,
            hash: Sha256::new(),
        }
    }

    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.hash.update(bytes);
        self.out.write_all(bytes)
    }

    fn header(&mut self, revision: Revision) -> std::io::Result<()> {
        self.put(MAGIC)?;
        self.put(&FORMAT_VERSION.to_be_bytes())?;
        self.put(&revision.to_be_bytes())
    }

    fn record(&mut self, key: &str, value: &[u8]) -> std::io::Result<()> {
        let len = |n: usize| {
            u32::try_from(n).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{key:?} is larger than a snapshot record can hold"),
                )
            })
        };
        self.put(&[RECORD])?;
        self.put(&len(key.len())?.to_be_bytes())?;
        self.put(key.as_bytes())?;
        self.put(&len(value.len())?.to_be_bytes())?;
        self.put(value)
    }

    /// Writes the trailer; returns the output.
    fn finish(mut self, count: u64) -> std::io::Result<W> {
        self.put(&[END])?;
        self.put(&count.to_be_bytes())?;
        let digest = self.hash.finalize();
        self.out.write_all(&digest)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Reads the format, hashing as it goes; every failure names the file and what is wrong.
struct Reader {
    path: PathBuf,
    input: BufReader<File>,
    hash: Sha256,
    revision: Revision,
    records: u64,
    /// The trailer's count, once read.
    trailer: Option<u64>,
}

impl Reader {
    fn open(path: &Path) -> Result<Reader, String> {
        let file = File::open(path).map_err(|e| io_error(path, e))?;
        let mut reader = Reader {
            path: path.to_path_buf(),
            input: BufReader::new(file),
            hash: Sha256::new(),
            revision: Revision::ZERO,
            records: 0,
            trailer: None,
        };
        let mut magic = [0u8; 16];
        match reader.input.read_exact(&mut magic) {
            Ok(()) if &magic == MAGIC => {}
            Ok(()) => return Err(reader.damaged("it is not a Strata snapshot (wrong magic)")),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(reader.damaged("it is not a Strata snapshot (too short)"))
            }
            Err(e) => return Err(io_error(path, e)),
        }
        reader.hash.update(magic);
        let version = u32::from_be_bytes(reader.array()?);
        if version != FORMAT_VERSION {
            return Err(reader.damaged(&format!(
                "it is snapshot format version {version}; this strata reads version \
                 {FORMAT_VERSION}"
            )));
        }
        reader.revision = Revision::from_be_bytes(reader.array()?);
        Ok(reader)
    }

    fn damaged(&self, what: &str) -> String {
        format!("{}: {what}", self.path.display())
    }

    fn truncated(&self) -> String {
        self.damaged(&format!(
            "the file is truncated (it ends after {} complete records)",
            self.records
        ))
    }

    /// Reads exactly `buf.len()` bytes into the hash.
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), String> {
        match self.input.read_exact(buf) {
            Ok(()) => {
                self.hash.update(&*buf);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(self.truncated()),
            Err(e) => Err(io_error(&self.path, e)),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut buf = [0u8; N];
        self.fill(&mut buf)?;
        Ok(buf)
    }

    /// `len` bytes, read without trusting `len` for an allocation up front.
    fn bytes(&mut self, len: u32) -> Result<Vec<u8>, String> {
        let mut buf = Vec::new();
        (&mut self.input)
            .take(u64::from(len))
            .read_to_end(&mut buf)
            .map_err(|e| io_error(&self.path, e))?;
        if buf.len() != len as usize {
            return Err(self.truncated());
        }
        self.hash.update(&buf);
        Ok(buf)
    }

    /// The next key and value, or `None` after the trailer (which is checked).
    fn next_record(&mut self) -> Result<Option<(String, Bytes)>, String> {
        if self.trailer.is_some() {
            return Ok(None);
        }
        match self.array::<1>()?[0] {
            RECORD => {}
            END => return self.end().map(|()| None),
            other => {
                return Err(self.damaged(&format!(
                    "record {} has an unknown tag {other:#04x}",
                    self.records + 1
                )))
            }
        }
        let key_len = u32::from_be_bytes(self.array()?);
        let key = self.bytes(key_len)?;
        let key = String::from_utf8(key).map_err(|_| {
            self.damaged(&format!(
                "record {} has a key that is not UTF-8",
                self.records + 1
            ))
        })?;
        let value_len = u32::from_be_bytes(self.array()?);
        let value = self.bytes(value_len)?;
        self.records += 1;
        Ok(Some((key, Bytes::from(value))))
    }

    /// The trailer: the count, the checksum, and nothing after them.
    fn end(&mut self) -> Result<(), String> {
        let count = u64::from_be_bytes(self.array()?);
        let expected = self.hash.clone().finalize();
        let mut digest = [0u8; 32];
        match self.input.read_exact(&mut digest) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(self.truncated()),
            Err(e) => return Err(io_error(&self.path, e)),
        }
        if digest[..] != expected[..] {
            return Err(self.damaged("the checksum does not match: the file is damaged"));
        }
        if count != self.records {
            return Err(self.damaged(&format!(
                "the trailer counts {count} records, the file holds {}",
                self.records
            )));
        }
        let mut extra = [0u8; 1];
        match self.input.read(&mut extra) {
            Ok(0) => {}
            Ok(_) => return Err(self.damaged("there are bytes after the end of the snapshot")),
            Err(e) => return Err(io_error(&self.path, e)),
        }
        self.trailer = Some(count);
        Ok(())
    }

    /// What the file held, once it has been read to its end.
    fn summary(&self) -> Result<Summary, String> {
        match self.trailer {
            Some(keys) => Ok(Summary {
                revision: self.revision,
                keys,
            }),
            None => Err(self.truncated()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_store::MemoryStore;

    async fn store_with(keys: &[(&str, &[u8])]) -> Arc<dyn Store> {
        let store = MemoryStore::numbered(Revision(1000), 3);
        for (k, v) in keys {
            store.create(k, Bytes::copy_from_slice(v)).await.unwrap();
        }
        Arc::new(store)
    }

    const KEYS: [(&str, &[u8]); 4] = [
        ("/registry/a/x", b"{\"a\":1}"),
        ("/registry/b/y", b""),
        ("/strata/secret", &[0, 255, 10, 13, 0]),
        ("/registry/a/x-with-a-longer-name", b"binary \0 safe"),
    ];

    #[tokio::test]
    async fn save_and_restore_copy_every_key_and_value() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("snap");
        let source = store_with(&KEYS).await;
        // Paged: more keys than one page.
        for i in 0..(PAGE + 7) {
            source
                .create(
                    &format!("/registry/many/{i:05}"),
                    Bytes::from(vec![i as u8]),
                )
                .await
                .unwrap();
        }
        let saved = save(source.as_ref(), &file).await.unwrap();
        assert_eq!(saved.keys, (KEYS.len() + PAGE + 7) as u64);
        assert_eq!(saved.revision, source.current_revision());
        assert!(!partial_path(&file).exists());
        assert_eq!(verify(&file).unwrap(), saved);

        let target: Arc<dyn Store> = Arc::new(MemoryStore::new());
        assert_eq!(restore(target.clone(), &file).await.unwrap(), saved);
        let all = |s: Arc<dyn Store>| async move {
            s.range(RangeRequest {
                prefix: "/".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .kvs
            .into_iter()
            .map(|kv| (kv.key, kv.value))
            .collect::<Vec<_>>()
        };
        assert_eq!(all(source.clone()).await, all(target.clone()).await);

        // A second restore into the same store is refused and writes nothing.
        let before = target.current_revision();
        let err = restore(target.clone(), &file).await.unwrap_err();
        assert!(err.contains("not empty"), "{err}");
        assert_eq!(target.current_revision(), before);
    }

    #[tokio::test]
    async fn damaged_files_are_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("snap");
        save(store_with(&KEYS).await.as_ref(), &file).await.unwrap();
        let good = std::fs::read(&file).unwrap();
        let mut cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "not a Strata snapshot"),
            (
                b"PK\x03\x04 a zip file, not a snapshot".to_vec(),
                "wrong magic",
            ),
            (good[..good.len() - 1].to_vec(), "truncated"),
            (good[..40].to_vec(), "truncated"),
            (good[..good.len() - 41].to_vec(), "truncated"),
            ([good.clone(), b"x".to_vec()].concat(), "after the end"),
        ];
        let mut flipped = good.clone();
        flipped[40] ^= 0x20;
        cases.push((flipped, "checksum"));
        let mut version = good.clone();
        version[19] = 9;
        cases.push((version, "format version 9"));
        for (bytes, expected) in cases {
            std::fs::write(&file, &bytes).unwrap();
            let err = verify(&file).unwrap_err();
            assert!(err.contains(expected), "{expected:?} not in {err:?}");
            let target: Arc<dyn Store> = Arc::new(MemoryStore::new());
            assert!(restore(target.clone(), &file).await.is_err());
            assert_eq!(target.current_revision(), Revision::ZERO);
        }
    }
}
