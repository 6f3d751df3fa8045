//! Encodings of Strata objects and the media-type rules that choose them.
//!
//! This crate turns bytes into value trees and back, and parses `Accept` / `Content-Type`. It
//! knows nothing of HTTP or storage.

pub mod cbor;
pub mod json;
pub mod media;
mod parse;
pub mod proto;
pub mod strict;
pub mod yaml;

pub use media::{MediaRange, MediaType};
