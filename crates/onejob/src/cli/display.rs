//! How jobs and attempts are shown to a person: a job as an aligned block of fields, an
//! attempt as one short phrase, JSON values on one line, durations rounded for reading.

use std::{fmt::Write, time::Duration};

use onejob_client::{Attempt, Job};
use serde_json::Value;
use time::{OffsetDateTime, format_description::well_known::Rfc3339};

/// A timestamp as RFC 3339.
pub fn timestamp(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_else(|_| at.to_string())
}

/// A duration rounded the way a person reads it: `850ms` under a second, `3.0s` (tenths)
/// under a minute, `1m 12s` under an hour, then `2h 5m` and `3d 4h`.
pub fn duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let tenths = (duration.as_secs_f64() * 10.0).round() as u64;
    if tenths < 600 {
        return format!("{}.{}s", tenths / 10, tenths % 10);
    }
    let seconds = (duration.as_secs_f64()).round() as u64;
    let pair = |big: u64, big_unit: &str, small: u64, small_unit: &str| {
        if small == 0 {
            format!("{big}{big_unit}")
        } else {
            format!("{big}{big_unit} {small}{small_unit}")
        }
    };
    if seconds < 3600 {
        return pair(seconds / 60, "m", seconds % 60, "s");
    }
    let minutes = (seconds + 30) / 60;
    if minutes < 24 * 60 {
        return pair(minutes / 60, "h", minutes % 60, "m");
    }
    let hours = (minutes + 30) / 60;
    pair(hours / 24, "d", hours % 24, "h")
}

/// A JSON value on one line.
pub fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The job as aligned `name  value` lines, with `submitted  created|replayed` first when it
/// was just submitted.
pub fn job_block(job: &Job, replayed: Option<bool>) -> String {
    let mut out = String::new();
    let mut line = |name: &str, value: &str| {
        let _ = writeln!(out, "{name:<13} {value}");
    };
    if let Some(replayed) = replayed {
        line(
            "submitted",
            if replayed {
                "replayed (this key already named the job)"
            } else {
                "created"
            },
        );
    }
    line("job", &job.id.to_string());
    line("kind", &job.kind);
    line("state", job.state.as_str());
    line("attempts", &job.attempts.to_string());
    line("created", &timestamp(job.created_at));
    line("updated", &timestamp(job.updated_at));
    if let Some(result) = &job.result {
        line("result", &compact(result));
    }
    if let Some(error) = &job.error {
        line("error", &compact(error));
    }
    if let Some(winner) = job.completed_by {
        line("completed_by", &winner.to_string());
    }
    out
}

/// An attempt as `#1 fake running` (with `hedge` and the task id where there are).
pub fn attempt_phrase(attempt: &Attempt) -> String {
    let mut phrase = format!("#{} {} {}", attempt.number, attempt.provider, attempt.state);
    if attempt.hedge {
        phrase.push_str(" (hedge)");
    }
    phrase
}

/// All attempts as one phrase: `#1 fake failed, #2 fake-backup running`, or `none`.
pub fn attempts_phrase(attempts: &[Attempt]) -> String {
    if attempts.is_empty() {
        return "none".to_owned();
    }
    attempts
        .iter()
        .map(attempt_phrase)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::duration;

    #[test]
    fn durations_are_rounded_for_reading() {
        let cases = [
            (Duration::from_micros(300), "0ms"),
            (Duration::from_micros(850_400), "850ms"),
            (Duration::from_millis(999), "999ms"),
            (Duration::from_secs(1), "1.0s"),
            (Duration::from_nanos(3_003_859_933), "3.0s"),
            (Duration::from_millis(12_349), "12.3s"),
            (Duration::from_millis(59_940), "59.9s"),
            (Duration::from_millis(59_960), "1m"),
            (Duration::from_secs(72), "1m 12s"),
            (Duration::from_millis(3_599_600), "1h"),
            (Duration::from_secs(3600 + 5 * 60 + 20), "1h 5m"),
            (Duration::from_secs(2 * 86_400 + 3 * 3600 + 10), "2d 3h"),
        ];
        for (given, shown) in cases {
            assert_eq!(duration(given), shown, "{given:?}");
        }
    }
}
