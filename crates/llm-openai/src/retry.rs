//! When and how long to wait before trying a request again: exponential
//! backoff with jitter, or exactly what the server's `Retry-After` (seconds
//! or HTTP-date) or `retry-after-ms` header asks, within a cap. This module
//! only computes durations; the client does the waiting.

use std::time::{Duration, SystemTime};

use reqwest::StatusCode;
use reqwest::header::HeaderMap;

/// How often and how patiently to retry a request that failed before any
/// output arrived. Output that has begun streaming is never retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (at least 1).
    pub max_attempts: u32,
    /// The backoff before the second attempt; it doubles for each one after.
    pub initial_backoff: Duration,
    /// The longest backoff computed (before jitter).
    pub max_backoff: Duration,
    /// The longest wait a server's `Retry-After` may ask for; a longer one
    /// ends the request with the error instead of waiting.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// Four attempts, backing off 0.5 s, 1 s, 2 s (each jittered down by up to half), `Retry-After` up to 60 s.
    fn default() -> Self {
        Self {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// A policy that makes one attempt only.
    pub fn never() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// The backoff after failed attempt `attempt` (1-based): the doubled
    /// backoff, capped, with "equal jitter" (between half and all of it), so
    /// clients that failed together do not retry together.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(30);
        let full = self
            .initial_backoff
            .saturating_mul(1u32 << doublings)
            .min(self.max_backoff);
        let half = full / 2;
        half + half.mul_f64(fastrand::f64())
    }
}

/// Whether a response with `status` may succeed if tried again: 408, 409
/// (a conflict some gateways return under load), 429 and every 5xx.
pub fn retryable_status(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 409 | 429) || status.is_server_error()
}

/// The wait a response's headers ask for: `retry-after-ms` (OpenAI's
/// millisecond form) first, then `Retry-After` as delay-seconds or as an
/// HTTP-date (a date in the past means now). `None` when neither is present
/// or parses.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = text("retry-after-ms").and_then(|ms| ms.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64((ms / 1000.0).min(1.0e9)));
    }
    let value = text("retry-after")?;
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn retry_after_reads_seconds_dates_and_milliseconds() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        for (pairs, expected) in [
            (vec![("retry-after", "7")], Some(Duration::from_secs(7))),
            (vec![("retry-after", " 0 ")], Some(Duration::ZERO)),
            (
                vec![("retry-after", later.as_str())],
                Some(Duration::from_secs(30)),
            ),
            (
                vec![("retry-after", earlier.as_str())],
                Some(Duration::ZERO),
            ),
            (
                vec![("retry-after-ms", "1500"), ("retry-after", "9")],
                Some(Duration::from_millis(1500)),
            ),
            (
                vec![("retry-after-ms", "-1"), ("retry-after", "9")],
                Some(Duration::from_secs(9)),
            ),
            (vec![("retry-after", "soon")], None),
            (vec![("retry-after", "-3")], None),
            (vec![], None),
        ] {
            assert_eq!(retry_after(&headers(&pairs), now), expected, "{pairs:?}");
        }
    }

    #[test]
    fn backoff_doubles_caps_and_jitters_within_half() {
        let policy = RetryPolicy {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(800),
            max_retry_after: Duration::from_secs(1),
        };
        for (attempt, full) in [(1, 100), (2, 200), (3, 400), (4, 800), (5, 800), (40, 800)] {
            for _ in 0..50 {
                let wait = policy.backoff(attempt);
                let full = Duration::from_millis(full);
                assert!(wait >= full / 2 && wait <= full, "{attempt}: {wait:?}");
            }
        }
    }

    #[test]
    fn retryable_statuses() {
        for (code, retry) in [
            (400, false),
            (401, false),
            (403, false),
            (404, false),
            (408, true),
            (409, true),
            (422, false),
            (429, true),
            (500, true),
            (502, true),
            (503, true),
            (529, true),
        ] {
            assert_eq!(
                retryable_status(StatusCode::from_u16(code).unwrap()),
                retry,
                "{code}"
            );
        }
    }
}
