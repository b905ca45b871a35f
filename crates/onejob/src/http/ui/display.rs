//! How the dashboard writes values as text: times, durations and JSON documents. The
//! templates escape the results like any other text.

use serde_json::Value;
use time::{Duration, OffsetDateTime, format_description::BorrowedFormatItem, macros};

const TIME: &[BorrowedFormatItem<'static>] = macros::format_description!(
    "[year]-[month]-[day] [hour]:[minute]:[second].[subsecond digits:3]Z"
);

/// A time in UTC with milliseconds: `2026-11-30 03:55:52.090Z`.
pub fn time(at: OffsetDateTime) -> String {
    at.to_offset(time::UtcOffset::UTC)
        .format(TIME)
        .unwrap_or_else(|_| at.to_string())
}

/// An optional time; `—` when absent.
pub fn maybe_time(at: Option<OffsetDateTime>) -> String {
    at.map_or_else(|| "—".to_owned(), time)
}

/// A duration, as precise as its size calls for: `45ms`, `1.25s`, `3m07s`.
pub fn duration(length: Duration) -> String {
    let ms = length.whole_milliseconds().max(0);
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.2}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// A JSON document, pretty-printed.
pub fn json(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_as_precise_as_their_size() {
        assert_eq!(duration(Duration::milliseconds(45)), "45ms");
        assert_eq!(duration(Duration::milliseconds(1250)), "1.25s");
        assert_eq!(duration(Duration::seconds(187)), "3m07s");
        assert_eq!(duration(Duration::milliseconds(-5)), "0ms");
    }

    #[test]
    fn times_are_utc_with_milliseconds() {
        let at = macros::datetime!(2026-11-30 04:55:52.09 +01:00);
        assert_eq!(time(at), "2026-11-30 03:55:52.090Z");
        assert_eq!(maybe_time(None), "—");
    }
}
