//! Content negotiation for resource endpoints: which representation to answer in, and whether a
//! request body's type is one we read.

use strata_codec::media::{parse_accept, MediaType};
use strata_object::Status;

use crate::table::TableTarget;

/// Media types a response can be served in today.
pub const SERVED: [&str; 1] = ["application/json"];
/// Media types a request body can be read from today.
pub const READ: [&str; 1] = ["application/json"];

/// The representation chosen for a response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    Json,
    Table(TableTarget),
}

const TABLE_GROUPS: [&str; 2] = ["meta.k8s.io", "meta.svc.io"];
const TABLE_VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// Picks the first acceptable representation from `Accept`, or 406.
pub fn output(accept: &str, table_allowed: bool) -> Result<Output, Status> {
    for range in parse_accept(accept) {
        if !range.matches("application/json") {
            continue;
        }
        match range.media.param("as") {
            None => return Ok(Output::Json),
            Some("Table") if table_allowed => {
                let g = range.media.param("g").unwrap_or("");
                let v = range.media.param("v").unwrap_or("");
                if TABLE_GROUPS.contains(&g) && TABLE_VERSIONS.contains(&v) {
                    return Ok(Output::Table(TableTarget {
                        group: g.into(),
                        version: v.into(),
                    }));
                }
            }
            // A conversion we do not offer: try the next clause.
            Some(_) => {}
        }
    }
    Err(Status::not_acceptable(&SERVED))
}

/// Checks the `Content-Type` of a request body (empty means JSON).
pub fn check_body_type(content_type: &str) -> Result<(), Status> {
    if content_type.trim().is_empty() {
        return Ok(());
    }
    match MediaType::parse(content_type) {
        Some(m) if READ.contains(&m.essence.as_str()) => Ok(()),
        _ => Err(Status::unsupported_media_type(&READ)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_then_fallback() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert!(
            matches!(output(kubectl, true).unwrap(), Output::Table(t) if t.group == "meta.k8s.io")
        );
        assert_eq!(output(kubectl, false).unwrap(), Output::Json);
        assert_eq!(
            output("application/json;as=Table;g=x;v=v1", true)
                .unwrap_err()
                .code,
            406
        );
        assert_eq!(output("text/html", true).unwrap_err().code, 406);
        assert_eq!(output("*/*", true).unwrap(), Output::Json);
        assert_eq!(output("", true).unwrap(), Output::Json);
    }
}
