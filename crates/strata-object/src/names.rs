//! Name rules: DNS-1123 subdomains and labels, and `generateName` suffixes.
//!
//! Each check returns the problems with a name in Kubernetes' words, empty when the name is
//! valid; most kinds name their objects by [`dns1123_subdomain_errors`], namespaces by
//! [`dns1123_label_errors`].
//!
//! ```
//! use strata_object::names;
//!
//! assert!(names::dns1123_subdomain_errors("system:serviceaccounts").len() == 1);
//! assert!(names::dns1123_subdomain_errors("web.example-1").is_empty());
//! assert!(names::dns1123_label_errors("web.example-1")[0].starts_with("a lowercase RFC 1123 label"));
//! assert!(names::dns1035_label_errors("1abc")[0].starts_with("a DNS-1035 label"));
//!
//! // generateName: the prefix and five characters from the randomness given.
//! let mut n = 0;
//! let name = names::generate_name("web-", || { n += 7; n });
//! assert_eq!(name.len(), "web-".len() + 5);
//! assert!(name.starts_with("web-") && names::dns1123_subdomain_errors(&name).is_empty());
//! ```

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;
const LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Problems with `s` as a DNS-1123 label (empty when valid), worded as Kubernetes words them.
pub fn dns1123_label_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_LABEL_MAX {
        errs.push(format!(
            "must be no more than {DNS1123_LABEL_MAX} characters"
        ));
    }
    if !is_label(s) {
        errs.push(format!(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
             and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', \
             regex used for validation is '{LABEL_FMT}')"
        ));
    }
    errs
}

/// Problems with `s` as a DNS-1123 subdomain (empty when valid).
pub fn dns1123_subdomain_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(format!(
            "must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
        ));
    }
    if s.is_empty() || !s.split('.').all(is_label) {
        errs.push(format!(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' \
             or '.', and must start and end with an alphanumeric character (e.g. 'example.com', \
             regex used for validation is '{LABEL_FMT}(\\.{LABEL_FMT})*')"
        ));
    }
    errs
}

/// Characters `generateName` suffixes are drawn from (no vowels, no look-alikes).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const SUFFIX_LEN: usize = 5;
const MAX_GENERATED_NAME_LENGTH: usize = 63 - SUFFIX_LEN;

/// Builds a name from `base` and five random characters; `random` supplies the randomness
/// (one value per character) so this crate needs no RNG.
pub fn generate_name(base: &str, mut random: impl FnMut() -> u32) -> String {
    let mut base = base.to_string();
    if base.len() > MAX_GENERATED_NAME_LENGTH {
        let mut cut = MAX_GENERATED_NAME_LENGTH;
        while !base.is_char_boundary(cut) {
            cut -= 1;
        }
        base.truncate(cut);
    }
    for _ in 0..SUFFIX_LEN {
        let i = random() as usize % SUFFIX_ALPHABET.len();
        base.push(SUFFIX_ALPHABET[i] as char);
    }
    base
}

/// Why `s` is not a DNS-1035 label (Kubernetes' `IsDNS1035Label`), in Kubernetes' words.
pub fn dns1035_label_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    let b = s.as_bytes();
    let ok = !b.is_empty()
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[b.len() - 1] != b'-';
    if !ok {
        errs.push(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start \
             with an alphabetic character, and end with an alphanumeric character (e.g. \
             'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
                .to_string(),
        );
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains() {
        assert!(dns1123_subdomain_errors("a.b-c.d").is_empty());
        assert!(!dns1123_subdomain_errors("A").is_empty());
        assert!(!dns1123_subdomain_errors("a..b").is_empty());
        assert!(!dns1123_subdomain_errors("-a").is_empty());
        assert!(!dns1123_subdomain_errors(&"a".repeat(254)).is_empty());
    }

    #[test]
    fn labels() {
        assert!(dns1123_label_errors("ns-1").is_empty());
        assert!(!dns1123_label_errors("a.b").is_empty());
        assert!(!dns1123_label_errors(&"a".repeat(64)).is_empty());
    }

    #[test]
    fn generated_names_keep_base_and_add_five() {
        let mut n = 0;
        let name = generate_name("web-", || {
            n += 1;
            n
        });
        assert!(name.starts_with("web-"));
        assert_eq!(name.len(), 9);
        assert_eq!(generate_name(&"x".repeat(80), || 0).len(), 63);
    }
}
