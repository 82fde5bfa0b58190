//! Settings read from the environment (README, "Settings").

use std::time::Duration;

/// `var` as a number of seconds (fractions allowed), or `default` when it is unset, not a
/// number, negative or not finite.
pub fn seconds(var: &str, default: Duration) -> Duration {
    parse_seconds(std::env::var(var).ok().as_deref(), default)
}

fn parse_seconds(value: Option<&str>, default: Duration) -> Duration {
    value
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(default, Duration::from_secs_f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_take_fractions_and_refuse_what_is_not_a_duration() {
        let default = Duration::from_secs(7);
        for (value, want) in [
            (Some("1.5"), Duration::from_millis(1500)),
            (Some(" 3 "), Duration::from_secs(3)),
            (Some("0"), Duration::ZERO),
            (Some("-1"), default),
            (Some("inf"), default),
            (Some("soon"), default),
            (None, default),
        ] {
            assert_eq!(parse_seconds(value, default), want, "{value:?}");
        }
    }
}
