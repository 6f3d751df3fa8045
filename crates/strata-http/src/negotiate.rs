//! Content negotiation for resource endpoints: which representation to answer in, and which
//! format a request body is in.

use strata_codec::media::{parse_accept, MediaType};
use strata_object::Status;

use crate::table::TableTarget;

/// The protobuf media type of the spec, and Kubernetes' name for the same encoding; a client is
/// answered with the name it asked for.
pub const PROTOBUF: [&str; 2] = [
    "application/vnd.svc.protobuf",
    "application/vnd.kubernetes.protobuf",
];

/// Media types a response can be served in.
pub const SERVED: [&str; 4] = [
    "application/json",
    "application/yaml",
    PROTOBUF[0],
    PROTOBUF[1],
];
/// The same, with CBOR enabled (`CBORServingAndStorage`).
pub const SERVED_CBOR: [&str; 5] = [
    "application/json",
    "application/yaml",
    PROTOBUF[0],
    PROTOBUF[1],
    CBOR,
];
/// Media types a watch can be streamed in.
pub const STREAMED: [&str; 3] = ["application/json", PROTOBUF[0], PROTOBUF[1]];
/// The same, with CBOR enabled.
pub const STREAMED_CBOR: [&str; 5] = ["application/json", PROTOBUF[0], PROTOBUF[1], CBOR, CBOR_SEQ];

/// CBOR (spec §4.3.3): one data item.
pub const CBOR: &str = "application/cbor";
/// CBOR watch streams: a sequence of data items, one event each.
pub const CBOR_SEQ: &str = "application/cbor-seq";

/// Which optional encodings a server offers; negotiation asks it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Formats {
    /// CBOR bodies and responses (the `CBORServingAndStorage` gate).
    pub cbor: bool,
}

/// The representation chosen for a response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    Json,
    Yaml,
    /// `application/cbor` (`application/cbor-seq` for a watch).
    Cbor,
    /// Protobuf, under the media type name the client used.
    Protobuf(&'static str),
    Table(TableTarget),
}

/// The format of a request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFormat {
    Json,
    Yaml,
    Protobuf,
    Cbor,
}

/// The protobuf name matching `essence`, if it is one.
fn protobuf_name(essence: &str) -> Option<&'static str> {
    PROTOBUF.iter().copied().find(|p| *p == essence)
}

const TABLE_GROUPS: [&str; 2] = ["meta.k8s.io", "meta.svc.io"];
const TABLE_VERSIONS: [&str; 2] = ["v1", "v1beta1"];

impl Formats {
    /// Picks the first acceptable representation from `Accept`, or 406. `table_allowed` says
    /// whether the endpoint offers Tables; `streaming` restricts the choice to stream formats
    /// (watch).
    fn choose(&self, accept: &str, table_allowed: bool, streaming: bool) -> Result<Output, Status> {
        for range in parse_accept(accept) {
            let as_param = range.media.param("as");
            let essence = range.media.essence.as_str();
            if !streaming && as_param.is_none() && essence == "application/yaml" {
                return Ok(Output::Yaml);
            }
            // CBOR is asked for by name only: `*/*` keeps meaning JSON.
            let cbor = essence == CBOR || (streaming && essence == CBOR_SEQ);
            if self.cbor && as_param.is_none() && cbor {
                return Ok(Output::Cbor);
            }
            // Protobuf has no Table form: `as=Table` with protobuf is never acceptable.
            if let Some(name) = protobuf_name(essence) {
                if as_param.is_none() {
                    return Ok(Output::Protobuf(name));
                }
                continue;
            }
            if !range.matches("application/json") {
                continue;
            }
            match as_param {
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
        Err(Status::not_acceptable(match (streaming, self.cbor) {
            (true, false) => &STREAMED[..],
            (true, true) => &STREAMED_CBOR[..],
            (false, false) => &SERVED[..],
            (false, true) => &SERVED_CBOR[..],
        }))
    }

    /// The representation of a response to a single or list request.
    pub fn output(&self, accept: &str, table_allowed: bool) -> Result<Output, Status> {
        self.choose(accept, table_allowed, false)
    }

    /// The representation of a watch stream.
    pub fn stream_output(&self, accept: &str, table_allowed: bool) -> Result<Output, Status> {
        self.choose(accept, table_allowed, true)
    }

    /// The format an error Status is written in: the client's first acceptable plain format.
    pub fn error_output(&self, accept: &str) -> ErrorFormat {
        match self.choose(accept, false, false) {
            Ok(Output::Yaml) => ErrorFormat::Yaml,
            Ok(Output::Protobuf(name)) => ErrorFormat::Protobuf(name),
            Ok(Output::Cbor) => ErrorFormat::Cbor,
            _ => ErrorFormat::Json,
        }
    }

    /// The format of a request body from its `Content-Type` (empty means JSON), or 415.
    pub fn body_format(&self, content_type: &str) -> Result<BodyFormat, Status> {
        if content_type.trim().is_empty() {
            return Ok(BodyFormat::Json);
        }
        match MediaType::parse(content_type).map(|m| m.essence) {
            Some(e) if e == "application/json" => Ok(BodyFormat::Json),
            Some(e) if e == "application/yaml" => Ok(BodyFormat::Yaml),
            Some(e) if protobuf_name(&e).is_some() => Ok(BodyFormat::Protobuf),
            Some(e) if self.cbor && e == CBOR => Ok(BodyFormat::Cbor),
            _ if self.cbor => Err(Status::unsupported_media_type(&SERVED_CBOR)),
            _ => Err(Status::unsupported_media_type(&SERVED)),
        }
    }
}

/// How a Status error is encoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ErrorFormat {
    #[default]
    Json,
    Yaml,
    Protobuf(&'static str),
    Cbor,
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: Formats = Formats { cbor: false };
    const WITH_CBOR: Formats = Formats { cbor: true };

    #[test]
    fn protobuf_under_either_name() {
        let client_go = "application/vnd.kubernetes.protobuf, */*";
        assert_eq!(
            PLAIN.output(client_go, true).unwrap(),
            Output::Protobuf(PROTOBUF[1])
        );
        assert_eq!(
            PLAIN.output("application/vnd.svc.protobuf", false).unwrap(),
            Output::Protobuf(PROTOBUF[0])
        );
        assert_eq!(
            PLAIN
                .stream_output("application/vnd.kubernetes.protobuf;stream=watch", true)
                .unwrap(),
            Output::Protobuf(PROTOBUF[1])
        );
        let table_pb = "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1";
        assert_eq!(PLAIN.output(table_pb, true).unwrap_err().code, 406);
        assert_eq!(
            PLAIN.error_output(client_go),
            ErrorFormat::Protobuf(PROTOBUF[1])
        );
        assert_eq!(
            PLAIN
                .body_format("application/vnd.kubernetes.protobuf")
                .unwrap(),
            BodyFormat::Protobuf
        );
    }

    #[test]
    fn table_then_fallback() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert!(
            matches!(PLAIN.output(kubectl, true).unwrap(), Output::Table(t) if t.group == "meta.k8s.io")
        );
        assert_eq!(PLAIN.output(kubectl, false).unwrap(), Output::Json);
        assert_eq!(
            PLAIN
                .output("application/json;as=Table;g=x;v=v1", true)
                .unwrap_err()
                .code,
            406
        );
        assert_eq!(PLAIN.output("text/html", true).unwrap_err().code, 406);
        assert_eq!(PLAIN.output("*/*", true).unwrap(), Output::Json);
        assert_eq!(PLAIN.output("", true).unwrap(), Output::Json);
    }

    #[test]
    fn cbor_only_when_enabled_and_asked_for_by_name() {
        assert_eq!(
            PLAIN.output("application/cbor", false).unwrap_err().code,
            406
        );
        assert_eq!(PLAIN.body_format("application/cbor").unwrap_err().code, 415);
        assert_eq!(
            WITH_CBOR.output("application/cbor", false).unwrap(),
            Output::Cbor
        );
        assert_eq!(WITH_CBOR.output("*/*", false).unwrap(), Output::Json);
        assert_eq!(
            WITH_CBOR
                .stream_output("application/cbor-seq", true)
                .unwrap(),
            Output::Cbor
        );
        assert_eq!(
            WITH_CBOR.stream_output("application/cbor", true).unwrap(),
            Output::Cbor
        );
        assert_eq!(
            WITH_CBOR
                .output("application/cbor-seq", true)
                .unwrap_err()
                .code,
            406
        );
        assert_eq!(
            WITH_CBOR.error_output("application/cbor"),
            ErrorFormat::Cbor
        );
        assert_eq!(
            WITH_CBOR.body_format("application/cbor").unwrap(),
            BodyFormat::Cbor
        );
        assert_eq!(
            WITH_CBOR
                .output("application/cbor;as=Table;g=meta.k8s.io;v=v1", true)
                .unwrap_err()
                .code,
            406
        );
    }

    #[test]
    fn yaml_where_it_can_be_served() {
        assert_eq!(
            PLAIN.output("application/yaml", true).unwrap(),
            Output::Yaml
        );
        assert_eq!(
            PLAIN
                .output("application/yaml;q=0.5, application/json", true)
                .unwrap(),
            Output::Json
        );
        assert_eq!(
            PLAIN
                .stream_output("application/yaml", true)
                .unwrap_err()
                .code,
            406
        );
        assert_eq!(
            PLAIN
                .stream_output("application/yaml, application/json;q=0.1", true)
                .unwrap(),
            Output::Json
        );
        assert_eq!(PLAIN.error_output("application/yaml"), ErrorFormat::Yaml);
        assert_eq!(PLAIN.error_output("text/html"), ErrorFormat::Json);
        assert_eq!(
            PLAIN
                .body_format("application/yaml; charset=utf-8")
                .unwrap(),
            BodyFormat::Yaml
        );
        assert_eq!(PLAIN.body_format("text/plain").unwrap_err().code, 415);
    }
}
