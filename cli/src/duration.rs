//! Durations on the command line: a whole number and a unit, as in `500ms`, `8s`, `2m`, `1h`.

use std::time::Duration;

/// Reads `500ms`, `8s`, `2m` or `1h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!("'{text}' is not a duration: write a whole number and a unit (500ms, 8s, 2m, 1h)")
    };
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let seconds = |factor: u64| number.checked_mul(factor).map(Duration::from_secs);
    match unit {
        "ms" => Some(Duration::from_millis(number)),
        "s" => seconds(1),
        "m" => seconds(60),
        "h" => seconds(3600),
        _ => None,
    }
    .ok_or_else(bad)
}

/// A duration as people read it in a message: `950ms`, `1.95s`, `2s`, `125s`; not
/// `1.954355901s`.
pub fn shown(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 1000 {
        return format!("{millis}ms");
    }
    if millis >= 60_000 {
        return format!("{}s", duration.as_secs_f64().round());
    }
    let text = format!("{:.2}", duration.as_secs_f64());
    format!("{}s", text.trim_end_matches('0').trim_end_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_rounded() {
        let cases = [
            (Duration::from_nanos(1_954_355_901), "1.95s"),
            (Duration::from_millis(2000), "2s"),
            (Duration::from_millis(2500), "2.5s"),
            (Duration::from_micros(950_400), "950ms"),
            (Duration::ZERO, "0ms"),
            (Duration::from_millis(125_400), "125s"),
        ];
        for (duration, expected) in cases {
            assert_eq!(shown(duration), expected, "{duration:?}");
        }
    }

    #[test]
    fn units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("8s"), Ok(Duration::from_secs(8)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn anything_else_is_refused_with_the_expected_form() {
        for bad in [
            "",
            "8",
            "s",
            "8 s",
            "-1s",
            "1.5s",
            "8sec",
            "8S",
            "99999999999999999999s",
        ] {
            let error = parse_duration(bad).unwrap_err();
            assert!(error.contains("500ms, 8s, 2m, 1h"), "{bad}: {error}");
        }
        assert!(parse_duration(&format!("{}h", u64::MAX)).is_err());
    }
}
