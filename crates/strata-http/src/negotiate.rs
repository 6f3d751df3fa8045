//! Content negotiation for resource endpoints: which representation to answer in, and which
//! format a request body is in.

use strata_codec::media::{parse_accept, MediaType};
use strata_object::printer::PrinterColumn;
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

/// What an endpoint can answer in besides JSON, YAML and CBOR (when enabled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer<'a> {
    /// `as=Table` (the endpoint lists or gets a type with the Table conversion).
    pub table: bool,
    /// Protobuf: the type has a protobuf form (custom resources have none).
    pub protobuf: bool,
    /// The type's printer columns, for its Tables (empty: the default columns).
    pub columns: &'a [PrinterColumn],
}

impl Offer<'static> {
    /// A single object or a list of a kind with a protobuf form, no Tables.
    pub const PLAIN: Offer<'static> = Offer {
        table: false,
        protobuf: true,
        columns: &[],
    };
    /// Protobuf and Tables (with the default columns).
    pub const TABLE: Offer<'static> = Offer {
        table: true,
        protobuf: true,
        columns: &[],
    };
}

impl Offer<'_> {
    /// What answers about objects of `info` may be: Tables (of its columns) where `table` and
    /// the type has the conversion, protobuf where the type has a form.
    pub fn for_type(info: &strata_object::ResourceType, table: bool) -> Offer<'_> {
        Offer {
            table: table && info.supports_table,
            protobuf: info.protobuf,
            columns: &info.printer_columns,
        }
    }
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

/// `Accept` headers whose first acceptable clause is JSON for every offer and for watches too.
const JSON_ACCEPTS: [&str; 5] = [
    "",
    "*/*",
    "application/json",
    "application/json, */*",
    "application/json,*/*",
];

const TABLE_GROUPS: [&str; 2] = ["meta.k8s.io", "meta.svc.io"];
const TABLE_VERSIONS: [&str; 2] = ["v1", "v1beta1"];

impl Formats {
    /// Picks the first acceptable representation from `Accept`, or 406. `offer` says whether
    /// the endpoint offers Tables and protobuf; `streaming` restricts the choice to stream
    /// formats (watch).
    fn choose(&self, accept: &str, offer: Offer, streaming: bool) -> Result<Output, Status> {
        // What most clients send (kubectl, the Python client, client-go asking for JSON) means
        // JSON whatever the offer; every request asks at least twice (its answer, its errors).
        if JSON_ACCEPTS.contains(&accept.trim()) {
            return Ok(Output::Json);
        }
        self.choose_parsed(accept, offer, streaming)
    }

    /// [`Formats::choose`] by parsing `accept`.
    fn choose_parsed(&self, accept: &str, offer: Offer, streaming: bool) -> Result<Output, Status> {
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
                if as_param.is_none() && offer.protobuf {
                    return Ok(Output::Protobuf(name));
                }
                continue;
            }
            if !range.matches("application/json") {
                continue;
            }
            match as_param {
                None => return Ok(Output::Json),
                Some("Table") if offer.table => {
                    let g = range.media.param("g").unwrap_or("");
                    let v = range.media.param("v").unwrap_or("");
                    if TABLE_GROUPS.contains(&g) && TABLE_VERSIONS.contains(&v) {
                        return Ok(Output::Table(TableTarget {
                            group: g.into(),
                            version: v.into(),
                            columns: offer.columns.to_vec(),
                        }));
                    }
                }
                // A conversion we do not offer: try the next clause.
                Some(_) => {}
            }
        }
        let served = match (streaming, self.cbor) {
            (true, false) => &STREAMED[..],
            (true, true) => &STREAMED_CBOR[..],
            (false, false) => &SERVED[..],
            (false, true) => &SERVED_CBOR[..],
        };
        let served: Vec<&str> = served
            .iter()
            .copied()
            .filter(|m| offer.protobuf || protobuf_name(m).is_none())
            .collect();
        Err(Status::not_acceptable(&served))
    }

    /// The representation of a response to a single or list request.
    pub fn output(&self, accept: &str, offer: Offer) -> Result<Output, Status> {
        self.choose(accept, offer, false)
    }

    /// The representation of a watch stream.
    pub fn stream_output(&self, accept: &str, offer: Offer) -> Result<Output, Status> {
        self.choose(accept, offer, true)
    }

    /// The format an error Status is written in: the client's first acceptable plain format.
    /// `offer` says whether protobuf is one (a type without a protobuf form answers its errors
    /// in the client's next choice, or JSON).
    pub fn error_output(&self, accept: &str, offer: Offer) -> ErrorFormat {
        match self.choose(accept, offer, false) {
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
    fn common_accept_headers_choose_as_parsing_them_does() {
        let custom = Offer {
            table: false,
            protobuf: false,
            columns: &[],
        };
        for formats in [PLAIN, WITH_CBOR] {
            for accept in JSON_ACCEPTS.iter().chain(&[" application/json "]) {
                for offer in [Offer::PLAIN, Offer::TABLE, custom] {
                    for streaming in [false, true] {
                        assert_eq!(
                            formats.choose(accept, offer, streaming),
                            formats.choose_parsed(accept, offer, streaming),
                            "{accept:?}"
                        );
                        assert_eq!(formats.choose(accept, offer, streaming), Ok(Output::Json));
                    }
                }
            }
        }
    }

    #[test]
    fn protobuf_under_either_name() {
        let client_go = "application/vnd.kubernetes.protobuf, */*";
        assert_eq!(
            PLAIN.output(client_go, Offer::TABLE).unwrap(),
            Output::Protobuf(PROTOBUF[1])
        );
        assert_eq!(
            PLAIN
                .output("application/vnd.svc.protobuf", Offer::PLAIN)
                .unwrap(),
            Output::Protobuf(PROTOBUF[0])
        );
        assert_eq!(
            PLAIN
                .stream_output(
                    "application/vnd.kubernetes.protobuf;stream=watch",
                    Offer::TABLE
                )
                .unwrap(),
            Output::Protobuf(PROTOBUF[1])
        );
        // A type without a protobuf form (a custom resource): 406 for protobuf alone, JSON
        // where the client also takes it, and the 406 does not offer protobuf.
        let custom = Offer {
            table: true,
            protobuf: false,
            columns: &[],
        };
        let refused = PLAIN
            .output("application/vnd.kubernetes.protobuf", custom)
            .unwrap_err();
        assert_eq!(refused.code, 406);
        assert!(!refused.message.contains("protobuf"), "{}", refused.message);
        assert_eq!(PLAIN.output(client_go, custom).unwrap(), Output::Json);
        let table_pb = "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1";
        assert_eq!(PLAIN.output(table_pb, Offer::TABLE).unwrap_err().code, 406);
        assert_eq!(
            PLAIN.error_output(client_go, Offer::PLAIN),
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
            matches!(PLAIN.output(kubectl, Offer::TABLE).unwrap(), Output::Table(t) if t.group == "meta.k8s.io")
        );
        assert_eq!(PLAIN.output(kubectl, Offer::PLAIN).unwrap(), Output::Json);
        assert_eq!(
            PLAIN
                .output("application/json;as=Table;g=x;v=v1", Offer::TABLE)
                .unwrap_err()
                .code,
            406
        );
        assert_eq!(
            PLAIN.output("text/html", Offer::TABLE).unwrap_err().code,
            406
        );
        assert_eq!(PLAIN.output("*/*", Offer::TABLE).unwrap(), Output::Json);
        assert_eq!(PLAIN.output("", Offer::TABLE).unwrap(), Output::Json);
    }

    #[test]
    fn cbor_only_when_enabled_and_asked_for_by_name() {
        assert_eq!(
            PLAIN
                .output("application/cbor", Offer::PLAIN)
                .unwrap_err()
                .code,
            406
        );
        assert_eq!(PLAIN.body_format("application/cbor").unwrap_err().code, 415);
        assert_eq!(
            WITH_CBOR.output("application/cbor", Offer::PLAIN).unwrap(),
            Output::Cbor
        );
        assert_eq!(WITH_CBOR.output("*/*", Offer::PLAIN).unwrap(), Output::Json);
        assert_eq!(
            WITH_CBOR
                .stream_output("application/cbor-seq", Offer::TABLE)
                .unwrap(),
            Output::Cbor
        );
        assert_eq!(
            WITH_CBOR
                .stream_output("application/cbor", Offer::TABLE)
                .unwrap(),
            Output::Cbor
        );
        assert_eq!(
            WITH_CBOR
                .output("application/cbor-seq", Offer::TABLE)
                .unwrap_err()
                .code,
            406
        );
        assert_eq!(
            WITH_CBOR.error_output("application/cbor", Offer::PLAIN),
            ErrorFormat::Cbor
        );
        assert_eq!(
            WITH_CBOR.body_format("application/cbor").unwrap(),
            BodyFormat::Cbor
        );
        assert_eq!(
            WITH_CBOR
                .output("application/cbor;as=Table;g=meta.k8s.io;v=v1", Offer::TABLE)
                .unwrap_err()
                .code,
            406
        );
    }

    #[test]
    fn yaml_where_it_can_be_served() {
        assert_eq!(
            PLAIN.output("application/yaml", Offer::TABLE).unwrap(),
            Output::Yaml
        );
        assert_eq!(
            PLAIN
                .output("application/yaml;q=0.5, application/json", Offer::TABLE)
                .unwrap(),
            Output::Json
        );
        assert_eq!(
            PLAIN
                .stream_output("application/yaml", Offer::TABLE)
                .unwrap_err()
                .code,
            406
        );
        assert_eq!(
            PLAIN
                .stream_output("application/yaml, application/json;q=0.1", Offer::TABLE)
                .unwrap(),
            Output::Json
        );
        assert_eq!(
            PLAIN.error_output("application/yaml", Offer::PLAIN),
            ErrorFormat::Yaml
        );
        assert_eq!(
            PLAIN.error_output("text/html", Offer::PLAIN),
            ErrorFormat::Json
        );
        assert_eq!(
            PLAIN
                .body_format("application/yaml; charset=utf-8")
                .unwrap(),
            BodyFormat::Yaml
        );
        assert_eq!(PLAIN.body_format("text/plain").unwrap_err().code, 415);
    }
}
