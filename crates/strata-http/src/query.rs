//! Query strings: percent-decoding and the typed parameters of the API, parsed as Kubernetes
//! parses them (Go-style booleans, strict integers).

use strata_object::Status;

/// The decoded `key=value` pairs of a query string, in order. Empty pairs (`?&a=b`) are skipped.
#[derive(Clone, Debug, Default)]
pub struct Query(Vec<(String, String)>);

impl Query {
    /// Parses `application/x-www-form-urlencoded` text (`+` is a space; a malformed `%`
    /// sequence stands for itself).
    pub fn parse(raw: Option<&str>) -> Self {
        let pairs = form_urlencoded::parse(raw.unwrap_or("").as_bytes());
        Self(
            pairs
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `key`.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }

    pub fn string(&self, key: &str) -> String {
        self.get(key).unwrap_or("").to_string()
    }

    /// A boolean as the API reads it: absent, `false` (any case) and `0` are false; anything
    /// else, including an empty value, is true.
    pub fn bool(&self, key: &str) -> bool {
        match self.get(key) {
            None => false,
            Some(v) => !matches!(v.to_ascii_lowercase().as_str(), "false" | "0"),
        }
    }

    /// An integer parameter; a value that does not parse is a 400.
    pub fn int(&self, key: &str) -> Result<Option<i64>, Status> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                Status::bad_request(format!(
                    "invalid value for query parameter {key}: strconv.ParseInt: parsing {v:?}: invalid syntax"
                ))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_style_booleans_and_leading_ampersand() {
        let q = Query::parse(Some(
            "&watch=True&pretty&x=0&fieldSelector=metadata.name%3Dfoo",
        ));
        assert!(q.bool("watch"));
        assert!(q.bool("pretty"));
        assert!(!q.bool("x"));
        assert!(!q.bool("missing"));
        assert_eq!(q.get("fieldSelector"), Some("metadata.name=foo"));
    }

    #[test]
    fn integers_must_parse() {
        let q = Query::parse(Some("limit=abc&n=5"));
        assert_eq!(q.int("limit").unwrap_err().code, 400);
        assert_eq!(q.int("n").unwrap(), Some(5));
        assert_eq!(q.int("none").unwrap(), None);
    }

    #[test]
    fn percent_sequences() {
        let q = Query::parse(Some("a=%41%zz%4&b=1+2"));
        assert_eq!(q.get("a"), Some("A%zz%4"));
        assert_eq!(q.get("b"), Some("1 2"));
    }
}
