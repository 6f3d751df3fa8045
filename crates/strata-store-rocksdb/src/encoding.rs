//! The byte layout of the column families: pure encode/decode functions, no I/O.
//!
//! See the crate documentation for what each column family holds. Every decoder fails with
//! [`StoreError::Corrupt`] on bytes this module did not write.

use strata_store::{KeyValue, Result, Revision, StoreError};

pub(crate) const CF_HISTORY: &str = "history";
pub(crate) const CF_CHANGES: &str = "changes";
pub(crate) const CF_META: &str = "meta";

pub(crate) const META_FORMAT: &[u8] = b"format";
pub(crate) const META_CURRENT: &[u8] = b"current";
pub(crate) const META_COMPACTED: &[u8] = b"compacted";

/// Bumped whenever the layout changes incompatibly; `open` refuses other versions.
pub(crate) const FORMAT_VERSION: u64 = 1;

/// Separates the user key from the revision in history keys. User keys never contain it, so all
/// versions of one key are contiguous and sort before any longer key sharing the prefix.
const SEP: u8 = 0x00;
const REV_LEN: usize = 8;

const TAG_LIVE: u8 = 0;
const TAG_TOMBSTONE: u8 = 1;

const CHANGE_PUT: u8 = 0;
const CHANGE_DELETE: u8 = 1;

/// Rejects keys the layout cannot represent.
pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.as_bytes().contains(&SEP) {
        return Err(StoreError::Invalid(format!(
            "key {key:?} contains a NUL byte, which this engine cannot store"
        )));
    }
    Ok(())
}

/// The user key of a history key (`<key>` of `<key> 0x00 <rev>`): the prefix the history
/// family keeps bloom filters for, so that finding the versions of a key that has none (every
/// create's check) skips the tables without reading them.
pub(crate) fn history_prefix(raw: &[u8]) -> &[u8] {
    &raw[..raw.len().saturating_sub(1 + REV_LEN)]
}

/// Whether `raw` is long enough to be a history key (see [`history_prefix`]).
pub(crate) fn is_history_key(raw: &[u8]) -> bool {
    raw.len() > REV_LEN
}

/// `<key> 0x00 <rev big-endian>`: the history entry of `key` written at `rev`.
pub(crate) fn history_key(key: &[u8], rev: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 1 + REV_LEN);
    out.extend_from_slice(key);
    out.push(SEP);
    out.extend_from_slice(&rev.to_be_bytes());
    out
}

/// The smallest history key after every version of `key`: `<key> 0x01`. Seeking there skips to
/// the next user key (which is either a longer key continuing with a byte ≥ 0x01 or a larger
/// one).
pub(crate) fn after_key_versions(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 1);
    out.extend_from_slice(key);
    out.push(SEP + 1);
    out
}

/// Splits a history key into the user key and the revision.
pub(crate) fn split_history_key(raw: &[u8]) -> Result<(&[u8], u64)> {
    if raw.len() < 1 + REV_LEN || raw[raw.len() - REV_LEN - 1] != SEP {
        return Err(corrupt("malformed history key", raw));
    }
    let (head, rev) = raw.split_at(raw.len() - REV_LEN);
    Ok((&head[..head.len() - 1], decode_u64(rev)?))
}

/// One version of a key as stored in history.
pub(crate) enum Record<'a> {
    Live { create: u64, value: &'a [u8] },
    Tombstone,
}

impl Record<'_> {
    /// The entry this record describes, or `None` for a deletion.
    pub(crate) fn into_kv(self, key: &[u8], mod_rev: u64) -> Result<Option<KeyValue>> {
        match self {
            Record::Tombstone => Ok(None),
            Record::Live { create, value } => Ok(Some(KeyValue {
                key: key_string(key)?,
                value: bytes::Bytes::copy_from_slice(value),
                create_revision: Revision(create),
                mod_revision: Revision(mod_rev),
            })),
        }
    }
}

/// `0x00 <create_revision be> <value>` for a live version.
pub(crate) fn encode_live(create: u64, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + REV_LEN + value.len());
    out.push(TAG_LIVE);
    out.extend_from_slice(&create.to_be_bytes());
    out.extend_from_slice(value);
    out
}

/// `0x01` for a deletion.
pub(crate) fn encode_tombstone() -> Vec<u8> {
    vec![TAG_TOMBSTONE]
}

pub(crate) fn decode_record(raw: &[u8]) -> Result<Record<'_>> {
    match raw.split_first() {
        Some((&TAG_LIVE, rest)) if rest.len() >= REV_LEN => {
            let (create, value) = rest.split_at(REV_LEN);
            Ok(Record::Live {
                create: decode_u64(create)?,
                value,
            })
        }
        Some((&TAG_TOMBSTONE, [])) => Ok(Record::Tombstone),
        _ => Err(corrupt("malformed history record", raw)),
    }
}

/// Whether a history record is a deletion, without decoding the rest.
pub(crate) fn is_tombstone(raw: &[u8]) -> Result<bool> {
    Ok(matches!(decode_record(raw)?, Record::Tombstone))
}

/// `<kind> <key>` in the changes family, where kind says whether the change was a delete.
pub(crate) fn encode_change(delete: bool, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + key.len());
    out.push(if delete { CHANGE_DELETE } else { CHANGE_PUT });
    out.extend_from_slice(key);
    out
}

/// The key of a change and whether it was a delete.
pub(crate) fn decode_change(raw: &[u8]) -> Result<(bool, &[u8])> {
    match raw.split_first() {
        Some((&CHANGE_PUT, key)) => Ok((false, key)),
        Some((&CHANGE_DELETE, key)) => Ok((true, key)),
        _ => Err(corrupt("malformed change record", raw)),
    }
}

pub(crate) fn decode_u64(raw: &[u8]) -> Result<u64> {
    let bytes: [u8; REV_LEN] = raw
        .try_into()
        .map_err(|_| corrupt("expected an 8-byte big-endian integer", raw))?;
    Ok(u64::from_be_bytes(bytes))
}

pub(crate) fn key_string(raw: &[u8]) -> Result<String> {
    String::from_utf8(raw.to_vec()).map_err(|_| corrupt("stored key is not UTF-8", raw))
}

fn corrupt(what: &str, raw: &[u8]) -> StoreError {
    let shown = &raw[..raw.len().min(64)];
    StoreError::Corrupt(format!("{what}: {shown:02x?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_keys_sort_by_key_then_revision() {
        let mut keys = [
            history_key(b"/a/b", 2),
            history_key(b"/a", 300),
            history_key(b"/a/b", 1),
            history_key(b"/a\x01", 1),
            history_key(b"/a", 5),
        ];
        keys.sort();
        let split: Vec<_> = keys.iter().map(|k| split_history_key(k).unwrap()).collect();
        assert_eq!(
            split,
            [
                (&b"/a"[..], 5),
                (&b"/a"[..], 300),
                (&b"/a\x01"[..], 1),
                (&b"/a/b"[..], 1),
                (&b"/a/b"[..], 2),
            ]
        );
        assert!(after_key_versions(b"/a") > history_key(b"/a", u64::MAX));
        assert!(after_key_versions(b"/a") <= history_key(b"/a\x01", 0));
    }

    #[test]
    fn records_round_trip() {
        let raw = encode_live(7, b"value");
        match decode_record(&raw).unwrap() {
            Record::Live { create, value } => {
                assert_eq!(create, 7);
                assert_eq!(value, b"value");
            }
            Record::Tombstone => panic!("expected a live record"),
        }
        assert!(is_tombstone(&encode_tombstone()).unwrap());
        assert!(decode_record(&[9]).is_err());
        assert!(decode_record(&[TAG_LIVE, 1, 2]).is_err());
        assert_eq!(
            decode_change(&encode_change(true, b"/k")).unwrap(),
            (true, &b"/k"[..])
        );
        assert!(split_history_key(b"short").is_err());
        assert!(check_key("/a\0b").is_err());
    }
}
