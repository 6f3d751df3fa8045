//! Kubernetes `metav1.Time`: RFC 3339 in UTC with second precision.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// The current time as Kubernetes writes `metav1.Time` (e.g. `2024-05-01T10:00:00Z`).
pub fn now_rfc3339() -> String {
    format_time(OffsetDateTime::now_utc())
}

/// Formats `t` in UTC, truncated to whole seconds.
pub fn format_time(t: OffsetDateTime) -> String {
    let t = t
        .to_offset(time::UtcOffset::UTC)
        .replace_nanosecond(0)
        .unwrap_or(t);
    // Formatting a UTC time with whole seconds into RFC 3339 cannot fail.
    t.format(&Rfc3339).unwrap_or_default()
}

/// Formats `t` as Kubernetes writes `metav1.MicroTime`: in UTC with exactly six fractional
/// digits (`2024-05-01T10:00:00.123456Z`); `""` for years RFC 3339 cannot write.
pub fn format_micro_time(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    match format_time(t).strip_suffix('Z') {
        Some(whole) => format!("{whole}.{:06}Z", t.microsecond()),
        None => String::new(),
    }
}

/// Formats Unix seconds as [`format_time`] does (dates outside what RFC 3339 can write give the
/// epoch).
pub fn format_unix(seconds: i64) -> String {
    format_time(OffsetDateTime::from_unix_timestamp(seconds).unwrap_or(OffsetDateTime::UNIX_EPOCH))
}

/// Parses an RFC 3339 timestamp.
///
/// ```
/// use strata_object::{format_micro_time, format_time, parse_time};
///
/// let t = parse_time("2024-05-01T10:00:00.5+02:00").unwrap();
/// assert_eq!(format_time(t), "2024-05-01T08:00:00Z"); // metav1.Time
/// assert_eq!(format_micro_time(t), "2024-05-01T08:00:00.500000Z"); // metav1.MicroTime
/// assert!(parse_time("yesterday").is_none());
/// ```
pub fn parse_time(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_whole_seconds_in_utc() {
        let s = now_rfc3339();
        assert!(s.ends_with('Z'), "{s}");
        assert_eq!(s.len(), "2024-05-01T10:00:00Z".len(), "{s}");
        assert!(parse_time(&s).is_some());
    }

    #[test]
    fn micro_times_have_six_digits_in_utc() {
        let t = parse_time("2024-05-01T12:00:00.1234567+02:00").unwrap();
        assert_eq!(format_micro_time(t), "2024-05-01T10:00:00.123456Z");
        let whole = parse_time("2024-05-01T10:00:00Z").unwrap();
        assert_eq!(format_micro_time(whole), "2024-05-01T10:00:00.000000Z");
    }
}
