//! Encryption at rest: a [`Store`] wrapper that encrypts the values of chosen resources on
//! write and decrypts them on every read, configured by Kubernetes' `EncryptionConfiguration`
//! (`apiserver.config.k8s.io/v1`, the file of `--encryption-provider-config`).
//!
//! The stored layout is kube-apiserver's, so either server reads what the other wrote: a value
//! is `k8s:enc:<provider>:v1:<key name>:` followed by the provider's ciphertext:
//!
//! - `aesgcm`: a random 12-byte nonce, then the AES-GCM sealed data (ciphertext and 16-byte
//!   tag), authenticated with the value's etcd key as additional data, so a value copied to
//!   another key does not decrypt;
//! - `aescbc`: a random 16-byte IV, then AES-CBC ciphertext with PKCS#7 padding;
//! - `secretbox`: a random 24-byte nonce, then NaCl's secretbox (XSalsa20-Poly1305: 16-byte
//!   tag, then ciphertext);
//! - `identity`: the plain value, no prefix.
//!
//! The first provider of a resource's list (its first key) writes; every listed provider and
//! key reads, tried in order among those whose prefix the value carries. A value read with any
//! other than the first is *stale*: [`Store::stale`] says so, and the registry's update then
//! writes it even when nothing changed, which is how `kubectl replace` of every object moves
//! them to a new key. Without `identity` in the list a plain value is refused; `identity`
//! refuses a value with the `k8s:enc:` prefix. Keys of resources the configuration does not
//! name pass through, except that an encrypted value there is refused, as kube-apiserver's
//! default does.
//!
//! A value that does not decrypt is handed up as an undecodable object (see
//! [`transform_error`]): reads report it by key, and the forced deletion of malformed objects
//! can remove it.

use std::fmt;
use std::sync::Arc;

use aes::{Aes128, Aes192, Aes256};
use aes_gcm::aead::consts::U12;
use aes_gcm::aead::generic_array::GenericArray;
use aes_gcm::aead::rand_core::RngCore;
use aes_gcm::aead::{Aead, KeyInit, OsRng, Payload};
use aes_gcm::{Aes128Gcm, Aes256Gcm, AesGcm};
use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::Bytes;
use cbc::cipher::block_padding::Pkcs7;
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use crypto_secretbox::XSalsa20Poly1305;
use serde::Deserialize;
use strata_object::field::{FieldError, FieldErrorKind};
use strata_store::{
    Changes, Event, KeyValue, RangeRequest, RangeResponse, Result, Revision, Store, StoreError,
};

/// The prefix every encrypted value starts with.
const ENCRYPTED: &[u8] = b"k8s:enc:";
/// The root of object keys in the store: an object's etcd key replaces it with the prefix.
const ROOT: &str = "/registry";
/// What a value that did not decrypt is replaced with, followed by the reason. Stored JSON
/// never starts with a NUL byte, so the decoders tell it from any real value.
const UNDECRYPTABLE: &[u8] = b"\0strata:undecryptable\0";
const NO_MATCHING_PREFIX: &str = "no matching prefix found";
const SHORT: &str = "the stored data was shorter than the required size";

/// Why a value handed up by [`EncryptingStore`] could not be decrypted, if it could not: the
/// registry's decoders report it as an undecodable object. An encrypted value read by a server
/// without the wrapper (started without `--encryption-provider-config`) says so too.
pub fn transform_error(value: &[u8]) -> Option<String> {
    if value.starts_with(ENCRYPTED) {
        return Some(
            "identity transformer tried to read encrypted data (no --encryption-provider-config              names this resource)"
                .into(),
        );
    }
    value
        .strip_prefix(UNDECRYPTABLE)
        .map(|reason| String::from_utf8_lossy(reason).into_owned())
}

/// A parsed and validated `EncryptionConfiguration`: which resources are encrypted, and how.
#[derive(Clone)]
pub struct EncryptionConfig {
    /// `(group, resource)` patterns (`*` for any) and their transformers, in file order.
    rules: Vec<((String, String), Transformer)>,
}

impl fmt::Debug for EncryptionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the keys.
        let resources: Vec<String> = self
            .rules
            .iter()
            .map(|((group, resource), t)| format!("{}: {t:?}", yaml_name(group, resource)))
            .collect();
        f.debug_struct("EncryptionConfig")
            .field("resources", &resources)
            .finish()
    }
}

// The file's shape, decoded strictly (an unknown field is an error, as kube-apiserver's strict
// decoding has it).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    resources: Vec<ResourceFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourceFile {
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    providers: Vec<ProviderFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderFile {
    aesgcm: Option<KeysFile>,
    aescbc: Option<KeysFile>,
    secretbox: Option<KeysFile>,
    identity: Option<IdentityFile>,
    kms: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    #[serde(default)]
    keys: Vec<KeyFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    #[serde(default)]
    name: String,
    #[serde(default)]
    secret: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdentityFile {}

const API_VERSION: &str = "apiserver.config.k8s.io/v1";
const KIND: &str = "EncryptionConfiguration";
const AES_SIZES: &[usize] = &[16, 24, 32];
const SECRETBOX_SIZES: &[usize] = &[32];

impl EncryptionConfig {
    /// Reads and validates the file of `--encryption-provider-config` (YAML or JSON).
    pub fn load(path: &std::path::Path) -> Result<EncryptionConfig, String> {
        let text =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| {
            format!(
                "error while parsing encryption provider configuration file {:?}: {e}",
                path.display().to_string()
            )
        })
    }

    /// Parses and validates an `EncryptionConfiguration` document (YAML or JSON). The errors
    /// are Kubernetes' (paths from `resources`, secrets never echoed).
    pub fn parse(text: &[u8]) -> Result<EncryptionConfig, String> {
        let value = strata_codec::yaml::decode(text).map_err(|e| e.to_string())?;
        let file: File = serde_json::from_value(value).map_err(|e| e.to_string())?;
        if file.api_version != API_VERSION || file.kind != KIND {
            return Err(format!(
                "no kind {:?} is registered for version {:?}: expected kind {KIND:?}, apiVersion \
                 {API_VERSION:?}",
                file.kind, file.api_version
            ));
        }
        let errors = validate(&file);
        if !errors.is_empty() {
            let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return Err(list.join(", "));
        }
        let mut rules: Vec<((String, String), Transformer)> = Vec::new();
        for rule in &file.resources {
            let transformer = Transformer::build(&rule.providers)?;
            for name in &rule.resources {
                let (group, resource) = parse_group_resource(name);
                for earlier in [(group.clone(), "*".to_string()), ("*".into(), "*".into())] {
                    if rules.iter().any(|(gr, _)| *gr == earlier) {
                        return Err(format!(
                            "resource {:?} is masked by earlier rule {:?}",
                            yaml_name(&group, &resource),
                            yaml_name(&earlier.0, &earlier.1)
                        ));
                    }
                }
                // A resource named again in a later entry reads with that entry's providers too
                // (after the earlier ones), as in Kubernetes.
                let gr = (group, resource);
                match rules.iter_mut().find(|(known, _)| *known == gr) {
                    Some((_, known)) => known.providers.extend(transformer.providers.clone()),
                    None => rules.push((gr, transformer.clone())),
                }
            }
        }
        Ok(EncryptionConfig { rules })
    }

    /// The transformer of the object stored under `key`, if its resource is configured: the
    /// exact resource first, then `*.<group>`, then `*.*`.
    fn transformer(&self, key: &str) -> Option<&Transformer> {
        let (group, resource) = key_resource(key)?;
        let find = |g: &str, r: &str| {
            self.rules
                .iter()
                .find(|((rg, rr), _)| rg == g && rr == r)
                .map(|(_, t)| t)
        };
        find(group, resource)
            .or_else(|| find(group, "*"))
            .or_else(|| find("*", "*"))
    }
}

/// Kubernetes' parse of a configured resource name: `secrets` is the core group's,
/// `deployments.apps` a group's, `*.` every core resource, `*.apps` a group's every resource,
/// `*.*` everything.
fn parse_group_resource(name: &str) -> (String, String) {
    match name.split_once('.') {
        Some((resource, group)) => (group.to_string(), resource.to_string()),
        None => (String::new(), name.to_string()),
    }
}

/// How Kubernetes writes a group and resource in this file's messages.
fn yaml_name(group: &str, resource: &str) -> String {
    if group.is_empty() {
        if resource == "*" {
            "*.".into()
        } else {
            resource.to_string()
        }
    } else {
        format!("{resource}.{group}")
    }
}

/// The group and resource of a storage key: `/registry/<resource>/…` for the core group,
/// `/registry/<group>/<resource>/…` for the others (every group Strata stores has a dot in its
/// name, and no resource name has one).
fn key_resource(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix(ROOT)?.strip_prefix('/')?;
    let (first, rest) = rest.split_once('/')?;
    if first.contains('.') {
        let (resource, _) = rest.split_once('/')?;
        Some((first, resource))
    } else {
        Some(("", first))
    }
}

/// Kubernetes' validation of the file, with its messages.
fn validate(file: &File) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if file.resources.is_empty() {
        errors.push(FieldError::required(
            "resources",
            "at least one resources is required",
        ));
        return errors;
    }
    for (i, rule) in file.resources.iter().enumerate() {
        let r = format!("resources[{i}].resources");
        let p = format!("resources[{i}].providers");
        if rule.resources.is_empty() {
            errors.push(FieldError::required(
                &r,
                format!("at least one {r} is required"),
            ));
        }
        validate_resource_overlap(&rule.resources, &r, &mut errors);
        validate_resource_names(&rule.resources, &r, &mut errors);
        if rule.providers.is_empty() {
            errors.push(FieldError::required(
                &p,
                format!("at least one {p} is required"),
            ));
        }
        for (j, provider) in rule.providers.iter().enumerate() {
            let path = format!("{p}[{j}]");
            let set = [
                provider.kms.is_some(),
                provider.aesgcm.is_some(),
                provider.aescbc.is_some(),
                provider.secretbox.is_some(),
                provider.identity.is_some(),
            ]
            .iter()
            .filter(|s| **s)
            .count();
            if set == 0 {
                errors.push(FieldError::new(
                    FieldErrorKind::Invalid,
                    &path,
                    Some("{}".into()),
                    "provider does not contain any of the expected providers: KMS, AESGCM, \
                     AESCBC, Secretbox, Identity",
                ));
                continue;
            }
            if set > 1 {
                errors.push(FieldError::new(
                    FieldErrorKind::Invalid,
                    &path,
                    None,
                    "more than one provider specified in a single element, should split into \
                     different list elements",
                ));
                continue;
            }
            for (name, keys, sizes) in [
                ("aesgcm", &provider.aesgcm, AES_SIZES),
                ("aescbc", &provider.aescbc, AES_SIZES),
                ("secretbox", &provider.secretbox, SECRETBOX_SIZES),
            ] {
                if let Some(keys) = keys {
                    validate_keys(
                        &keys.keys,
                        &format!("{path}.{name}.keys"),
                        sizes,
                        &mut errors,
                    );
                }
            }
        }
    }
    errors
}

fn validate_resource_overlap(resources: &[String], path: &str, errors: &mut Vec<FieldError>) {
    let parsed: Vec<(String, String)> = resources.iter().map(|r| parse_group_resource(r)).collect();
    let mut duplicate = false;
    let mut overlap = false;
    for (i, a) in parsed.iter().enumerate() {
        for (j, b) in parsed.iter().enumerate() {
            if i == j {
                continue;
            }
            if a == b {
                duplicate = true;
                continue;
            }
            // `*.*` overlaps everything; `*.<group>` every resource of its group.
            if (a.0 == "*" && a.1 == "*") || (a.0 == b.0 && (a.1 == "*" || b.1 == "*")) {
                overlap = true;
            }
        }
    }
    let value = || Some(format!("{resources:?}"));
    if duplicate {
        errors.push(FieldError::new(
            FieldErrorKind::Invalid,
            path,
            value(),
            "the same resource cannot be specified multiple times",
        ));
    }
    if overlap {
        errors.push(FieldError::new(
            FieldErrorKind::Invalid,
            path,
            value(),
            "using overlapping resources such as 'secrets' and '*.' in the same resource list \
             is not allowed as they will be masked",
        ));
    }
}

fn validate_resource_names(resources: &[String], path: &str, errors: &mut Vec<FieldError>) {
    for (j, name) in resources.iter().enumerate() {
        let (group, resource) = parse_group_resource(name);
        let detail = if name.to_lowercase() != *name {
            "resource name should not contain capital letters"
        } else if name == "*" {
            "use '*.' to encrypt all the resources from core API group or *.* to encrypt all \
             resources"
        } else if group == "events.k8s.io" {
            "'*.events.k8s.io' objects are stored using the 'events' API group in etcd. Use \
             'events' instead in the config file"
        } else if group == "extensions" {
            "'extensions' group has been removed and cannot be used for encryption"
        } else if group == "*" && resource != "*" {
            "encrypting the same resource across groups is not supported"
        } else {
            continue;
        };
        errors.push(FieldError::invalid_string(
            &format!("{path}[{j}]"),
            name,
            detail,
        ));
    }
}

fn validate_keys(keys: &[KeyFile], path: &str, sizes: &[usize], errors: &mut Vec<FieldError>) {
    if keys.is_empty() {
        errors.push(FieldError::required(path, "at least one keys is required"));
        return;
    }
    for (i, key) in keys.iter().enumerate() {
        let path = format!("{path}[{i}]");
        if key.name.is_empty() {
            errors.push(FieldError::required(
                &format!("{path}.name"),
                "name is a mandatory field for a key",
            ));
        }
        if key.secret.is_empty() {
            errors.push(FieldError::required(
                &format!("{path}.secret"),
                "secret is a mandatory field for a key",
            ));
            continue;
        }
        let secret_path = format!("{path}.secret");
        match BASE64.decode(&key.secret) {
            Err(_) => errors.push(FieldError::invalid_string(
                &secret_path,
                "REDACTED",
                "secrets must be base64 encoded",
            )),
            Ok(secret) if !sizes.contains(&secret.len()) => {
                let expected: Vec<String> = sizes.iter().map(ToString::to_string).collect();
                errors.push(FieldError::invalid_string(
                    &secret_path,
                    "REDACTED",
                    format!(
                        "secret is not of the expected length, got {}, expected one of [{}]",
                        secret.len(),
                        expected.join(" ")
                    ),
                ));
            }
            Ok(_) => {}
        }
    }
}

/// One key of a provider: its name (the prefix `<name>:`) and its cipher.
struct NamedKey {
    prefix: Vec<u8>,
    cipher: Cipher,
}

enum Cipher {
    Gcm128(Box<Aes128Gcm>),
    Gcm192(Box<AesGcm<Aes192, U12>>),
    Gcm256(Box<Aes256Gcm>),
    Cbc(Vec<u8>),
    Secretbox(Box<XSalsa20Poly1305>),
}

fn random<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    OsRng.fill_bytes(&mut out);
    out
}

fn gcm_seal<A: Aead>(aead: &A, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
    let nonce: [u8; 12] = random();
    let sealed = aead
        .encrypt(GenericArray::from_slice(&nonce), Payload { msg: data, aad })
        .map_err(|_| "AES-GCM encryption failed".to_string())?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&sealed);
    Ok(out)
}

fn gcm_open<A: Aead>(aead: &A, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
    if data.len() < 12 {
        return Err(SHORT.into());
    }
    let (nonce, sealed) = data.split_at(12);
    aead.decrypt(
        GenericArray::from_slice(nonce),
        Payload { msg: sealed, aad },
    )
    .map_err(|_| "cipher: message authentication failed".to_string())
}

fn cbc_seal(key: &[u8], data: &[u8]) -> Result<Vec<u8>, String> {
    let iv: [u8; 16] = random();
    let bad = |_| "invalid AES-CBC key".to_string();
    let sealed = match key.len() {
        16 => cbc::Encryptor::<Aes128>::new_from_slices(key, &iv)
            .map_err(bad)?
            .encrypt_padded_vec_mut::<Pkcs7>(data),
        24 => cbc::Encryptor::<Aes192>::new_from_slices(key, &iv)
            .map_err(bad)?
            .encrypt_padded_vec_mut::<Pkcs7>(data),
        _ => cbc::Encryptor::<Aes256>::new_from_slices(key, &iv)
            .map_err(bad)?
            .encrypt_padded_vec_mut::<Pkcs7>(data),
    };
    let mut out = iv.to_vec();
    out.extend_from_slice(&sealed);
    Ok(out)
}

fn cbc_open(key: &[u8], data: &[u8]) -> Result<Vec<u8>, String> {
    if data.len() < 16 {
        return Err(SHORT.into());
    }
    let (iv, sealed) = data.split_at(16);
    if sealed.len() % 16 != 0 {
        return Err("the stored data is not a multiple of the block size".into());
    }
    let bad = |_| "invalid AES-CBC key".to_string();
    let padding = |_| "invalid padding on input".to_string();
    match key.len() {
        16 => cbc::Decryptor::<Aes128>::new_from_slices(key, iv)
            .map_err(bad)?
            .decrypt_padded_vec_mut::<Pkcs7>(sealed),
        24 => cbc::Decryptor::<Aes192>::new_from_slices(key, iv)
            .map_err(bad)?
            .decrypt_padded_vec_mut::<Pkcs7>(sealed),
        _ => cbc::Decryptor::<Aes256>::new_from_slices(key, iv)
            .map_err(bad)?
            .decrypt_padded_vec_mut::<Pkcs7>(sealed),
    }
    .map_err(padding)
}

impl Cipher {
    fn new(provider: &str, secret: &[u8]) -> Result<Cipher, String> {
        let bad = |_| format!("invalid {provider} key of {} bytes", secret.len());
        Ok(match (provider, secret.len()) {
            ("aesgcm", 16) => {
                Cipher::Gcm128(Box::new(Aes128Gcm::new_from_slice(secret).map_err(bad)?))
            }
            ("aesgcm", 24) => Cipher::Gcm192(Box::new(
                AesGcm::<Aes192, U12>::new_from_slice(secret).map_err(bad)?,
            )),
            ("aesgcm", 32) => {
                Cipher::Gcm256(Box::new(Aes256Gcm::new_from_slice(secret).map_err(bad)?))
            }
            ("aescbc", 16 | 24 | 32) => Cipher::Cbc(secret.to_vec()),
            ("secretbox", 32) => Cipher::Secretbox(Box::new(
                XSalsa20Poly1305::new_from_slice(secret).map_err(bad)?,
            )),
            _ => return Err(format!("invalid {provider} key of {} bytes", secret.len())),
        })
    }

    /// Encrypts `data`; `aad` is the value's etcd key (used by AES-GCM only, as Kubernetes).
    fn seal(&self, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            Cipher::Gcm128(a) => gcm_seal(a.as_ref(), data, aad),
            Cipher::Gcm192(a) => gcm_seal(a.as_ref(), data, aad),
            Cipher::Gcm256(a) => gcm_seal(a.as_ref(), data, aad),
            Cipher::Cbc(key) => cbc_seal(key, data),
            Cipher::Secretbox(b) => {
                let nonce: [u8; 24] = random();
                let sealed = b
                    .encrypt(GenericArray::from_slice(&nonce), data)
                    .map_err(|_| "secretbox encryption failed".to_string())?;
                let mut out = nonce.to_vec();
                out.extend_from_slice(&sealed);
                Ok(out)
            }
        }
    }

    fn open(&self, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            Cipher::Gcm128(a) => gcm_open(a.as_ref(), data, aad),
            Cipher::Gcm192(a) => gcm_open(a.as_ref(), data, aad),
            Cipher::Gcm256(a) => gcm_open(a.as_ref(), data, aad),
            Cipher::Cbc(key) => cbc_open(key, data),
            Cipher::Secretbox(b) => {
                // Nonce, then the 16-byte tag.
                if data.len() < 24 + 16 {
                    return Err(SHORT.into());
                }
                let (nonce, sealed) = data.split_at(24);
                b.decrypt(GenericArray::from_slice(nonce), sealed)
                    .map_err(|_| "output array was not large enough for encryption".to_string())
            }
        }
    }
}

/// One provider of a resource's list.
enum Provider {
    /// `k8s:enc:<name>:v1:` and the keys, in order (the first writes).
    Encrypting {
        name: &'static str,
        prefix: Vec<u8>,
        keys: Vec<NamedKey>,
    },
    Identity,
}

/// The providers of one `resources` entry.
#[derive(Clone)]
struct Transformer {
    providers: Vec<Arc<Provider>>,
}

impl fmt::Debug for Transformer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self
            .providers
            .iter()
            .map(|p| match p.as_ref() {
                Provider::Encrypting { name, keys, .. } => {
                    let keys: Vec<String> = keys
                        .iter()
                        .map(|k| {
                            String::from_utf8_lossy(&k.prefix)
                                .trim_end_matches(':')
                                .to_string()
                        })
                        .collect();
                    format!("{name}({})", keys.join(","))
                }
                Provider::Identity => "identity".into(),
            })
            .collect();
        write!(f, "[{}]", names.join(", "))
    }
}

impl Transformer {
    fn build(providers: &[ProviderFile]) -> Result<Transformer, String> {
        let mut out = Vec::new();
        for p in providers {
            if p.kms.is_some() {
                return Err(
                    "the kms provider is not supported by Strata (it needs a KMS plugin \
                            service); use aesgcm, aescbc or secretbox with local keys"
                        .into(),
                );
            }
            if p.identity.is_some() {
                out.push(Arc::new(Provider::Identity));
                continue;
            }
            let (name, keys) = match (&p.aesgcm, &p.aescbc, &p.secretbox) {
                (Some(k), _, _) => ("aesgcm", k),
                (_, Some(k), _) => ("aescbc", k),
                (_, _, Some(k)) => ("secretbox", k),
                _ => continue,
            };
            let mut named = Vec::new();
            for key in &keys.keys {
                let secret = BASE64.decode(&key.secret).map_err(|e| {
                    format!("could not obtain secret for named key {}: {e}", key.name)
                })?;
                named.push(NamedKey {
                    prefix: format!("{}:", key.name).into_bytes(),
                    cipher: Cipher::new(name, &secret)?,
                });
            }
            out.push(Arc::new(Provider::Encrypting {
                name,
                prefix: format!("k8s:enc:{name}:v1:").into_bytes(),
                keys: named,
            }));
        }
        Ok(Transformer { providers: out })
    }

    /// The stored form of `data` under the etcd key `aad`: the first provider's.
    fn write(&self, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
        match self.providers.first().map(AsRef::as_ref) {
            Some(Provider::Encrypting { prefix, keys, .. }) => {
                let key = keys.first().ok_or("the provider has no keys")?;
                let sealed = key.cipher.seal(data, aad)?;
                let mut out = Vec::with_capacity(prefix.len() + key.prefix.len() + sealed.len());
                out.extend_from_slice(prefix);
                out.extend_from_slice(&key.prefix);
                out.extend_from_slice(&sealed);
                Ok(out)
            }
            Some(Provider::Identity) | None => Ok(data.to_vec()),
        }
    }

    /// The plain value of a stored one, and whether it is stale (read by any provider or key
    /// but the first). Every provider whose prefix matches is tried in order: two entries of one
    /// provider kind (a new key's and an old key's) share a prefix.
    fn read(&self, data: &[u8], aad: &[u8]) -> Result<(Vec<u8>, bool), String> {
        let mut errors: Vec<String> = Vec::new();
        for (i, provider) in self.providers.iter().enumerate() {
            match provider.as_ref() {
                Provider::Identity => {
                    if data.starts_with(ENCRYPTED) {
                        // Not an error of its own: a later provider may read it.
                        continue;
                    }
                    return Ok((data.to_vec(), i != 0));
                }
                Provider::Encrypting {
                    name, prefix, keys, ..
                } => {
                    let Some(rest) = data.strip_prefix(prefix.as_slice()) else {
                        continue;
                    };
                    let mut matched = false;
                    let mut key_errors = Vec::new();
                    for (k, key) in keys.iter().enumerate() {
                        let Some(sealed) = rest.strip_prefix(key.prefix.as_slice()) else {
                            continue;
                        };
                        matched = true;
                        match key.cipher.open(sealed, aad) {
                            Ok(plain) => return Ok((plain, i != 0 || k != 0)),
                            Err(e) => key_errors.push(e),
                        }
                    }
                    if !matched {
                        let which = match *name {
                            "secretbox" => "Secretbox",
                            _ => "AES",
                        };
                        errors.push(format!(
                            "no matching key was found for the provided {which} transformer"
                        ));
                    } else {
                        errors.extend(key_errors);
                    }
                }
            }
        }
        match errors.len() {
            0 => Err(NO_MATCHING_PREFIX.into()),
            1 => Err(errors.remove(0)),
            _ => Err(format!("[{}]", errors.join(", "))),
        }
    }
}

/// A [`Store`] that encrypts the values of the configured resources on the way in and
/// decrypts them on every way out (get, range, delete, the change feed), leaving every other
/// key as it is. Revisions, compaction and the feed's progress are the inner store's.
pub struct EncryptingStore {
    inner: Arc<dyn Store>,
    config: EncryptionConfig,
    /// What replaces `/registry` in a key to make the etcd key that AES-GCM authenticates:
    /// `/registry` on the embedded engine, the `--etcd-prefix` on etcd.
    key_root: String,
}

impl fmt::Debug for EncryptingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncryptingStore")
            .field("config", &self.config)
            .field("key_root", &self.key_root)
            .finish()
    }
}

impl EncryptingStore {
    /// Wraps `inner`. `key_root` is the etcd key prefix objects are stored under
    /// (`/registry` unless `--etcd-prefix` says otherwise): AES-GCM authenticates each value
    /// with its full etcd key, as kube-apiserver does, so that either reads the other's data.
    pub fn new(inner: Arc<dyn Store>, config: EncryptionConfig, key_root: &str) -> Self {
        Self {
            inner,
            config,
            key_root: key_root.trim_end_matches('/').to_string(),
        }
    }

    /// The etcd key of a store key: the authenticated data of its value.
    fn etcd_key(&self, key: &str) -> String {
        match key.strip_prefix(ROOT) {
            Some(rest) if rest.starts_with('/') => format!("{}{rest}", self.key_root),
            _ => key.to_string(),
        }
    }

    fn encrypt(&self, key: &str, value: &Bytes) -> Result<Bytes> {
        match self.config.transformer(key) {
            Some(t) => t
                .write(value, self.etcd_key(key).as_bytes())
                .map(Bytes::from)
                .map_err(|e| StoreError::Invalid(format!("unable to transform key {key:?}: {e}"))),
            None => Ok(value.clone()),
        }
    }

    /// The plain value of a stored one and whether it is stale; an error for a value no
    /// provider reads.
    fn read(&self, key: &str, value: &[u8]) -> Result<(Bytes, bool), String> {
        match self.config.transformer(key) {
            Some(t) => t
                .read(value, self.etcd_key(key).as_bytes())
                .map(|(plain, stale)| (Bytes::from(plain), stale)),
            // Unconfigured resources are plain; an encrypted value there is refused.
            None if value.starts_with(ENCRYPTED) => {
                Err("identity transformer tried to read encrypted data".into())
            }
            None => Ok((Bytes::copy_from_slice(value), false)),
        }
    }

    /// `kv` with its value decrypted, or replaced by the reason it does not decrypt.
    fn decrypt(&self, mut kv: KeyValue) -> KeyValue {
        if self.config.transformer(&kv.key).is_none() && !kv.value.starts_with(ENCRYPTED) {
            return kv;
        }
        kv.value = match self.read(&kv.key, &kv.value) {
            Ok((plain, _)) => plain,
            Err(e) => {
                tracing::warn!(key = %kv.key, error = %e, "a stored value does not decrypt");
                let mut marked = UNDECRYPTABLE.to_vec();
                let reason = format!("unable to transform key {:?}: {e}", kv.key);
                marked.extend_from_slice(reason.as_bytes());
                Bytes::from(marked)
            }
        };
        kv
    }

    fn with_plain(mut kv: KeyValue, plain: Bytes) -> KeyValue {
        kv.value = plain;
        kv
    }
}

#[async_trait]
impl Store for EncryptingStore {
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let stored = self.encrypt(key, &value)?;
        let kv = self.inner.create(key, stored).await?;
        Ok(Self::with_plain(kv, value))
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        let stored = self.encrypt(key, &value)?;
        let kv = self.inner.update(key, stored, expected).await?;
        Ok(Self::with_plain(kv, value))
    }

    async fn update_chain(
        &self,
        key: &str,
        values: Vec<Bytes>,
        expected: Revision,
    ) -> Result<Vec<KeyValue>> {
        let stored = values
            .iter()
            .map(|value| self.encrypt(key, value))
            .collect::<Result<Vec<_>>>()?;
        let written = self.inner.update_chain(key, stored, expected).await?;
        Ok(written
            .into_iter()
            .zip(values)
            .map(|(kv, plain)| Self::with_plain(kv, plain))
            .collect())
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(KeyValue, Revision)> {
        let (prev, revision) = self.inner.delete(key, expected).await?;
        Ok((self.decrypt(prev), revision))
    }

    async fn get(
        &self,
        key: &str,
        revision: Option<Revision>,
    ) -> Result<(Option<KeyValue>, Revision)> {
        let (kv, at) = self.inner.get(key, revision).await?;
        Ok((kv.map(|kv| self.decrypt(kv)), at))
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let mut resp = self.inner.range(req).await?;
        resp.kvs = std::mem::take(&mut resp.kvs)
            .into_iter()
            .map(|kv| self.decrypt(kv))
            .collect();
        Ok(resp)
    }

    async fn changes(&self, after: Revision, limit: usize) -> Result<Changes> {
        let mut changes = self.inner.changes(after, limit).await?;
        changes.events = std::mem::take(&mut changes.events)
            .into_iter()
            .map(|event| match event {
                Event::Put { kv, prev } => Event::Put {
                    kv: self.decrypt(kv),
                    prev: prev.map(|p| self.decrypt(p)),
                },
                Event::Delete { prev, revision } => Event::Delete {
                    prev: self.decrypt(prev),
                    revision,
                },
            })
            .collect();
        Ok(changes)
    }

    fn current_revision(&self) -> Revision {
        self.inner.current_revision()
    }

    async fn consistent_revision(&self) -> Result<Revision> {
        self.inner.consistent_revision().await
    }

    fn request_progress(&self) -> bool {
        self.inner.request_progress()
    }

    /// A value is stale when the provider and key that read it are not the ones that write:
    /// the stored bytes are looked at again (this runs only for an update that changes
    /// nothing).
    async fn stale(&self, kv: &KeyValue) -> Result<bool> {
        if self.config.transformer(&kv.key).is_none() {
            return self.inner.stale(kv).await;
        }
        let (raw, _) = self.inner.get(&kv.key, None).await?;
        Ok(match raw {
            // Changed meanwhile: the update will conflict and read again.
            Some(raw) if raw.mod_revision == kv.mod_revision => self
                .read(&raw.key, &raw.value)
                .map(|(_, stale)| stale)
                .unwrap_or(false),
            _ => false,
        })
    }

    fn compacted_revision(&self) -> Revision {
        self.inner.compacted_revision()
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    fn subscribe(&self) -> tokio::sync::watch::Receiver<Revision> {
        self.inner.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use strata_store::MemoryStore;

    use super::*;
    use crate::{Registry, RegistryConfig, WriteOptions};

    const KEY32: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const KEY16: &str = "ZGVmZ2hpamtsbW5vcHFycw==";
    const OTHER32: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const PLAIN: &[u8] = br#"{"kind":"Secret","apiVersion":"v1","data":{"k":"dg=="}}"#;
    const KEY: &str = "/registry/secrets/default/s1";

    /// A configuration for secrets with these providers (YAML flow mappings).
    fn config(providers: &[&str]) -> EncryptionConfig {
        let text = format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n\
             resources:\n- resources: [secrets]\n  providers: [{}]\n",
            providers.join(", ")
        );
        EncryptionConfig::parse(text.as_bytes()).unwrap()
    }

    fn aesgcm(name: &str, secret: &str) -> String {
        format!("{{aesgcm: {{keys: [{{name: {name}, secret: \"{secret}\"}}]}}}}")
    }

    fn wrap(inner: &Arc<MemoryStore>, config: EncryptionConfig) -> EncryptingStore {
        EncryptingStore::new(inner.clone(), config, "/registry")
    }

    async fn raw(inner: &MemoryStore, key: &str) -> Bytes {
        inner.get(key, None).await.unwrap().0.unwrap().value
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    #[tokio::test]
    async fn every_provider_round_trips_on_every_read_path() {
        for (provider, prefix) in [
            (aesgcm("k1", KEY32), "k8s:enc:aesgcm:v1:k1:"),
            (aesgcm("k1", KEY16), "k8s:enc:aesgcm:v1:k1:"),
            (
                format!("{{aescbc: {{keys: [{{name: k2, secret: \"{KEY16}\"}}]}}}}"),
                "k8s:enc:aescbc:v1:k2:",
            ),
            (
                format!("{{secretbox: {{keys: [{{name: k3, secret: \"{KEY32}\"}}]}}}}"),
                "k8s:enc:secretbox:v1:k3:",
            ),
        ] {
            let inner = Arc::new(MemoryStore::new());
            let store = wrap(&inner, config(&[&provider]));
            let created = store.create(KEY, Bytes::from_static(PLAIN)).await.unwrap();
            assert_eq!(created.value, PLAIN);
            let stored = raw(&inner, KEY).await;
            assert!(
                stored.starts_with(prefix.as_bytes()),
                "{provider}: {stored:?}"
            );
            assert!(
                !contains(&stored, b"Secret"),
                "{provider}: plaintext stored"
            );
            let (kv, _) = store.get(KEY, None).await.unwrap();
            assert_eq!(kv.unwrap().value, PLAIN, "{provider}");
            let updated = br#"{"kind":"Secret","data":{}}"#;
            let second = store
                .update(KEY, Bytes::from_static(updated), created.mod_revision)
                .await
                .unwrap();
            // History: the first version at its revision.
            let (old, _) = store.get(KEY, Some(created.mod_revision)).await.unwrap();
            assert_eq!(old.unwrap().value, PLAIN);
            let listed = store
                .range(RangeRequest {
                    prefix: "/registry/secrets/".into(),
                    ..Default::default()
                })
                .await
                .unwrap();
            assert_eq!(listed.kvs[0].value, updated.as_slice());
            let feed = store.changes(Revision(0), 0).await.unwrap();
            match &feed.events[..] {
                [Event::Put { kv: first, .. }, Event::Put { kv, prev: Some(p) }] => {
                    assert_eq!(first.value, PLAIN);
                    assert_eq!(kv.value, updated.as_slice());
                    assert_eq!(p.value, PLAIN);
                }
                other => panic!("{other:?}"),
            }
            let (prev, _) = store.delete(KEY, Some(second.mod_revision)).await.unwrap();
            assert_eq!(prev.value, updated.as_slice());
            let feed = store.changes(second.mod_revision, 0).await.unwrap();
            assert!(
                matches!(&feed.events[..], [Event::Delete { prev, .. }] if prev.value == updated.as_slice())
            );
            assert!(!store.stale(&created).await.unwrap());
        }
    }

    /// Values encrypted by another implementation (Python's `cryptography` and PyNaCl) in
    /// kube-apiserver's layout: nonce or IV first, the etcd key as AES-GCM's additional data.
    #[tokio::test]
    async fn reads_values_written_in_kube_apiservers_layout() {
        let vectors = [
            "azhzOmVuYzphZXNnY206djE6azE6AAECAwQFBgcICQoLPCC9cquB4CGvEvLow4wMT6/05kSZLToOSw6K6z9TIsQwMoLey6Bm+VaeBM/jpRIaij5dsHir3pR6Ve8F6/Ncg1+SZd4tHrA=",
            "azhzOmVuYzphZXNjYmM6djE6azI6AAECAwQFBgcICQoLDA0OD+mNQtB9D9+pi2BWsAE9/kWNoaQgGWFA0L2hY06ZzqrjqYkV3gh4c3VhrAk6upfBCsVvCqT3Ms//OaR6CvdNMlA=",
            "azhzOmVuYzpzZWNyZXRib3g6djE6azM6AAECAwQFBgcICQoLDA0ODxAREhMUFRYXOyYhA0P/VnZhE7NDxAaQOiXdUyaproAqmW/qXRrqPrV+hyev5XNanWTLCPp3/YOXsvnZ9yHRgWObt5u7EUSRYUcmVaLR6qE=",
        ];
        let config = config(&[
            &aesgcm("k1", KEY32),
            &format!("{{aescbc: {{keys: [{{name: k2, secret: \"{KEY16}\"}}]}}}}"),
            &format!("{{secretbox: {{keys: [{{name: k3, secret: \"{KEY32}\"}}]}}}}"),
        ]);
        for (i, vector) in vectors.iter().enumerate() {
            let inner = Arc::new(MemoryStore::new());
            inner
                .create(KEY, Bytes::from(BASE64.decode(vector).unwrap()))
                .await
                .unwrap();
            let store = wrap(&inner, config.clone());
            let (kv, _) = store.get(KEY, None).await.unwrap();
            let kv = kv.unwrap();
            assert_eq!(kv.value, PLAIN, "vector {i}");
            // Only the first provider's first key is current.
            assert_eq!(store.stale(&kv).await.unwrap(), i != 0, "vector {i}");
        }
    }

    #[tokio::test]
    async fn aes_gcm_authenticates_the_key() {
        let inner = Arc::new(MemoryStore::new());
        let store = wrap(&inner, config(&[&aesgcm("k1", KEY32)]));
        store.create(KEY, Bytes::from_static(PLAIN)).await.unwrap();
        // The same bytes moved to another object's key do not decrypt there.
        let moved = "/registry/secrets/default/s2";
        inner.create(moved, raw(&inner, KEY).await).await.unwrap();
        let (kv, _) = store.get(moved, None).await.unwrap();
        let reason = transform_error(&kv.unwrap().value).expect("refused");
        assert!(reason.contains("message authentication failed"), "{reason}");
        // The etcd prefix is part of the authenticated key.
        let elsewhere =
            EncryptingStore::new(inner.clone(), config(&[&aesgcm("k1", KEY32)]), "/other");
        let (kv, _) = elsewhere.get(KEY, None).await.unwrap();
        assert!(transform_error(&kv.unwrap().value).is_some());
    }

    #[tokio::test]
    async fn identity_reads_plain_values_only_when_listed() {
        let inner = Arc::new(MemoryStore::new());
        inner.create(KEY, Bytes::from_static(PLAIN)).await.unwrap();
        let with_identity = wrap(&inner, config(&[&aesgcm("k1", KEY32), "{identity: {}}"]));
        let (kv, _) = with_identity.get(KEY, None).await.unwrap();
        let kv = kv.unwrap();
        assert_eq!(kv.value, PLAIN);
        // Plain data read by a later provider: rewritten (encrypted) by the next update.
        assert!(with_identity.stale(&kv).await.unwrap());

        let without = wrap(&inner, config(&[&aesgcm("k1", KEY32)]));
        let (kv, _) = without.get(KEY, None).await.unwrap();
        assert_eq!(
            transform_error(&kv.unwrap().value).unwrap(),
            format!("unable to transform key {KEY:?}: no matching prefix found")
        );

        // identity first: writes plain, still reads what was encrypted (migrating away).
        let encrypted = "/registry/secrets/default/enc";
        wrap(&inner, config(&[&aesgcm("k1", KEY32)]))
            .create(encrypted, Bytes::from_static(PLAIN))
            .await
            .unwrap();
        let decrypting = wrap(&inner, config(&["{identity: {}}", &aesgcm("k1", KEY32)]));
        let (kv, _) = decrypting.get(encrypted, None).await.unwrap();
        let kv = kv.unwrap();
        assert_eq!(kv.value, PLAIN);
        assert!(decrypting.stale(&kv).await.unwrap());
        decrypting
            .update(encrypted, kv.value.clone(), kv.mod_revision)
            .await
            .unwrap();
        assert_eq!(raw(&inner, encrypted).await, PLAIN);
    }

    #[tokio::test]
    async fn a_wrong_or_unknown_key_is_refused_with_the_reason() {
        let inner = Arc::new(MemoryStore::new());
        wrap(&inner, config(&[&aesgcm("k1", KEY32)]))
            .create(KEY, Bytes::from_static(PLAIN))
            .await
            .unwrap();
        let wrong_secret = wrap(&inner, config(&[&aesgcm("k1", OTHER32)]));
        let (kv, _) = wrong_secret.get(KEY, None).await.unwrap();
        let reason = transform_error(&kv.unwrap().value).unwrap();
        assert!(
            reason.ends_with(": cipher: message authentication failed"),
            "{reason}"
        );
        let other_name = wrap(&inner, config(&[&aesgcm("k9", KEY32)]));
        let (kv, _) = other_name.get(KEY, None).await.unwrap();
        let reason = transform_error(&kv.unwrap().value).unwrap();
        assert!(
            reason.ends_with(": no matching key was found for the provided AES transformer"),
            "{reason}"
        );
        // A list still answers, with the value marked for the registry to report by key.
        let listed = other_name
            .range(RangeRequest {
                prefix: "/registry/secrets/".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(transform_error(&listed.kvs[0].value).is_some());
        // Resources the configuration does not name: plain passes, encrypted is refused.
        let cm = "/registry/configmaps/default/c";
        inner.create(cm, Bytes::from_static(b"{}")).await.unwrap();
        assert_eq!(
            other_name.get(cm, None).await.unwrap().0.unwrap().value,
            "{}"
        );
        inner
            .create("/registry/configmaps/default/e", raw(&inner, KEY).await)
            .await
            .unwrap();
        let (kv, _) = other_name
            .get("/registry/configmaps/default/e", None)
            .await
            .unwrap();
        let reason = transform_error(&kv.unwrap().value).unwrap();
        assert!(reason.ends_with("identity transformer tried to read encrypted data"));
    }

    #[tokio::test]
    async fn rotation_marks_values_of_older_keys_stale_until_rewritten() {
        let inner = Arc::new(MemoryStore::new());
        let old = wrap(&inner, config(&[&aesgcm("old", KEY32)]));
        old.create(KEY, Bytes::from_static(PLAIN)).await.unwrap();
        // The new key first, the old one second (one provider with two keys, or two entries).
        for rotated in [
            config(&[&format!(
                "{{aesgcm: {{keys: [{{name: new, secret: \"{OTHER32}\"}}, {{name: old, secret: \"{KEY32}\"}}]}}}}"
            )]),
            config(&[&aesgcm("new", OTHER32), &aesgcm("old", KEY32)]),
        ] {
            let store = wrap(&inner, rotated);
            let (kv, _) = store.get(KEY, None).await.unwrap();
            let kv = kv.unwrap();
            assert_eq!(kv.value, PLAIN);
            assert!(store.stale(&kv).await.unwrap());
            let rewritten = store.update(KEY, kv.value.clone(), kv.mod_revision).await.unwrap();
            assert!(raw(&inner, KEY).await.starts_with(b"k8s:enc:aesgcm:v1:new:"));
            assert!(!store.stale(&rewritten).await.unwrap());
            // Back to the old key for the next round.
            let latest = inner.get(KEY, None).await.unwrap().0.unwrap();
            let back = old.encrypt(KEY, &Bytes::from_static(PLAIN)).unwrap();
            inner.update(KEY, back, latest.mod_revision).await.unwrap();
        }
        // Only the new key: the old values no longer read.
        let only_new = wrap(&inner, config(&[&aesgcm("new", OTHER32)]));
        let (kv, _) = only_new.get(KEY, None).await.unwrap();
        assert!(transform_error(&kv.unwrap().value).is_some());
    }

    /// The registry's update of an unchanged object writes a stale value anyway (Kubernetes'
    /// rotation: `kubectl replace` of every Secret), and writes nothing when it is current.
    #[tokio::test]
    async fn an_unchanged_update_rewrites_a_stale_secret() {
        let inner = Arc::new(MemoryStore::new());
        let start = |config: EncryptionConfig| {
            let store: Arc<dyn Store> = Arc::new(wrap(&inner, config));
            async move {
                let registry = Registry::with_builtin_types(store, RegistryConfig::default());
                registry.start().await.unwrap();
                registry
            }
        };
        let before = start(config(&[&aesgcm("old", KEY32)])).await;
        let namespaces = before.lookup("", "v1", "namespaces").unwrap();
        let opts = WriteOptions::default();
        before
            .create(
                &namespaces,
                "",
                json!({"metadata": {"name": "default"}}),
                &opts,
            )
            .await
            .unwrap();
        let secrets = before.lookup("", "v1", "secrets").unwrap();
        let body = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"},
                          "data": {"password": "aHVudGVyMg=="}});
        before
            .create(&secrets, "default", body.clone(), &opts)
            .await
            .unwrap();
        assert!(raw(&inner, KEY)
            .await
            .starts_with(b"k8s:enc:aesgcm:v1:old:"));

        let rotated = start(config(&[&aesgcm("new", OTHER32), &aesgcm("old", KEY32)])).await;
        let secrets = rotated.lookup("", "v1", "secrets").unwrap();
        let current = rotated.get(&secrets, "default", "s1", "").await.unwrap();
        let rv = current.resource_version().to_string();
        let replaced = rotated
            .update(&secrets, "default", "s1", current.into_value(), &opts)
            .await
            .unwrap();
        assert_ne!(
            replaced.object.resource_version(),
            rv,
            "a stale value is rewritten"
        );
        assert!(raw(&inner, KEY)
            .await
            .starts_with(b"k8s:enc:aesgcm:v1:new:"));
        let again = rotated
            .update(
                &secrets,
                "default",
                "s1",
                replaced.object.clone().into_value(),
                &opts,
            )
            .await
            .unwrap();
        assert_eq!(
            again.object.resource_version(),
            replaced.object.resource_version(),
            "a current value is not"
        );
    }

    #[test]
    fn the_file_is_validated_as_kubernetes_does() {
        let err = |text: &str| EncryptionConfig::parse(text.as_bytes()).unwrap_err();
        let head = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n";
        assert_eq!(
            err(&format!(
                "{head}resources:\n- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys:\n      - name: k\n        secret: c2hvcnQ=\n"
            )),
            "resources[0].providers[0].aesgcm.keys[0].secret: Invalid value: \"REDACTED\": secret \
             is not of the expected length, got 5, expected one of [16 24 32]"
        );
        assert!(err(&format!(
            "{head}resources:\n- resources: [secrets]\n  providers: [{{secretbox: {{keys: [{{name: k, secret: \"{KEY16}\"}}]}}}}]\n"
        ))
        .contains("expected one of [32]"));
        assert!(err(&format!(
            "{head}resources:\n- resources: [secrets]\n  providers: [{{kms: {{name: p, endpoint: unix:///k.sock}}}}]\n"
        ))
        .contains("the kms provider is not supported"));
        assert!(err(&format!(
            "{head}resources:\n- resources: [secrets]\n  providers: []\n"
        ))
        .contains("resources[0].providers: Required value"));
        assert!(err(&format!(
            "{head}resources:\n- resources: [secrets]\n  providers: [{{identity: {{}}, aesgcm: {{keys: []}}}}]\n"
        ))
        .contains("more than one provider specified in a single element"));
        assert!(err(&format!(
            "{head}resources:\n- resources: [secrets]\n  providers: [{{aesgcm: {{keys: [{{name: k, secret: \"not base64!\"}}]}}}}]\n"
        ))
        .contains("secrets must be base64 encoded"));
        assert!(err(&format!(
            "{head}resources:\n- resources: [Secrets]\n  providers: [{{identity: {{}}}}]\n"
        ))
        .contains("resource name should not contain capital letters"));
        assert!(err(&format!(
            "{head}resources:\n- resources: [\"*.*\"]\n  providers: [{{identity: {{}}}}]\n- resources: [secrets]\n  providers: [{{identity: {{}}}}]\n"
        ))
        .contains("resource \"secrets\" is masked by earlier rule \"*.*\""));
        assert!(err(&format!(
            "{head}resources:\n- resources: [secrets]\n  providers: [{{aesgcmm: {{}}}}]\n"
        ))
        .contains("unknown field"));
        assert!(err("apiVersion: v1\nkind: Secret\n").contains("EncryptionConfiguration"));
        // JSON is YAML too.
        let json = format!(
            r#"{{"apiVersion":"apiserver.config.k8s.io/v1","kind":"EncryptionConfiguration","resources":[{{"resources":["secrets"],"providers":[{{"aesgcm":{{"keys":[{{"name":"k","secret":"{KEY32}"}}]}}}},{{"identity":{{}}}}]}}]}}"#
        );
        let parsed = EncryptionConfig::parse(json.as_bytes()).unwrap();
        assert_eq!(
            format!("{parsed:?}"),
            "EncryptionConfig { resources: [\"secrets: [aesgcm(k), identity]\"] }"
        );
    }

    #[test]
    fn resources_match_by_name_group_and_wildcard() {
        let parse = |resources: &str| {
            EncryptionConfig::parse(
                format!(
                    "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n\
                     resources:\n- resources: {resources}\n  providers: [{}]\n",
                    aesgcm("k", KEY32)
                )
                .as_bytes(),
            )
            .unwrap()
        };
        let core = parse("[\"*.\"]");
        assert!(core.transformer("/registry/configmaps/default/c").is_some());
        assert!(core.transformer("/registry/namespaces/default").is_some());
        assert!(core
            .transformer("/registry/coordination.k8s.io/leases/default/l")
            .is_none());
        let group = parse("[\"*.example.com\", leases.coordination.k8s.io]");
        assert!(group
            .transformer("/registry/example.com/widgets/ns/w")
            .is_some());
        assert!(group
            .transformer("/registry/coordination.k8s.io/leases/ns/l")
            .is_some());
        assert!(group.transformer("/registry/secrets/ns/s").is_none());
        // A resource named by two entries reads with both lists, the first one writing.
        let twice = EncryptionConfig::parse(
            format!(
                "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n\
                 resources:\n- resources: [secrets, configmaps]\n  providers: [{}]\n\
                 - resources: [secrets]\n  providers: [{}, {{identity: {{}}}}]\n",
                aesgcm("new", KEY32),
                aesgcm("old", KEY16)
            )
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(
            format!("{twice:?}"),
            "EncryptionConfig { resources: [\"secrets: [aesgcm(new), aesgcm(old), identity]\", \
             \"configmaps: [aesgcm(new)]\"] }"
        );
        let all = parse("[\"*.*\"]");
        assert!(all.transformer("/registry/secrets/ns/s").is_some());
        assert!(all.transformer("/strata/continue-token-key").is_none());
    }
}
