//! Encodings of Strata objects and the media-type rules that choose them.
//!
//! This crate turns bytes into value trees and back, and parses `Accept` / `Content-Type`. It
//! knows nothing of HTTP or storage.
//!
//! Every codec works on `serde_json::Value` trees, so one object read in one format can be
//! written in any other: [`json`], [`yaml`], [`cbor`] and [`proto`] (Kubernetes' protobuf
//! envelope), with [`strict`] for decoding that reports duplicate fields. [`media`] parses
//! `Content-Type` and `Accept`.
//!
//! ```
//! use strata_codec::{cbor, json, media, proto, yaml, MediaType};
//!
//! // A client sends YAML and asks for protobuf, falling back to JSON.
//! let content_type = MediaType::parse("application/yaml").unwrap();
//! let accept = media::parse_accept("application/vnd.kubernetes.protobuf, application/json;q=0.9");
//! assert_eq!(content_type.essence, "application/yaml");
//!
//! let body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: '1'\n";
//! let object = yaml::decode(body)?;
//!
//! let answer = match accept[0].media.essence.as_str() {
//!     "application/vnd.kubernetes.protobuf" => proto::encode(&object)?,
//!     "application/cbor" => cbor::encode(&object),
//!     _ => json::encode(&object, false),
//! };
//! // The protobuf answer decodes to the same object (`kind` and `apiVersion` first).
//! let back = proto::decode(&answer, "v1", "ConfigMap")?;
//! assert_eq!(back["metadata"]["name"], "settings");
//! assert_eq!(back["data"], object["data"]);
//! # Ok::<(), json::DecodeError>(())
//! ```

#![deny(missing_docs)]

pub mod cbor;
pub mod json;
pub mod media;
mod parse;
pub mod proto;
pub mod strict;
pub mod yaml;

pub use media::{MediaRange, MediaType};

// Dependencies whose types and traits appear in this crate's API, re-exported so that users
// name the same versions without adding them to their own manifests.
/// `prost`, whose `Message` trait the [`proto::generated`] types implement.
pub use prost;
/// `serde_json`, whose `Value` and `Map` every codec reads and writes.
pub use serde_json;

/// The examples of the crate's README.md, run as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// A list's bytes from its codec's parts: `head`, the items as they are, `tail`.
fn joined<I: AsRef<[u8]>>(head: &[u8], items: &[I], tail: &[u8]) -> Vec<u8> {
    let size: usize = items.iter().map(|i| i.as_ref().len()).sum();
    let mut out = Vec::with_capacity(head.len() + size + tail.len());
    out.extend_from_slice(head);
    for item in items {
        out.extend_from_slice(item.as_ref());
    }
    out.extend_from_slice(tail);
    out
}
