//! Shapes of intent parameter values, checked before any engine sees them.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// One of a fixed set of words.
    OneOf(&'static [&'static str]),
    /// A Kubernetes object name (RFC 1123 subdomain).
    DnsSubdomain,
    /// A CronJob schedule as Kubernetes accepts it: five fields or a `@` descriptor.
    Cron,
    /// A [`ParamKind::Cron`] schedule that runs at most once an hour (for jobs that are costly
    /// or reach out of the cluster).
    HourlyCron,
    /// `host:port`.
    HostPort,
    /// `CVE-<year>-<number>`.
    Cve,
    /// An RBAC subject name; `{namespace}` may appear in it.
    SubjectName,
}

impl fmt::Display for ParamKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamKind::OneOf(words) => write!(f, "one of {}", words.join("|")),
            ParamKind::DnsSubdomain => f.write_str("object name"),
            ParamKind::Cron => f.write_str("cron schedule"),
            ParamKind::HourlyCron => f.write_str("cron schedule, at most hourly"),
            ParamKind::HostPort => f.write_str("host:port"),
            ParamKind::Cve => f.write_str("CVE ID"),
            ParamKind::SubjectName => f.write_str("group name"),
        }
    }
}

/// Checks one value; the error says what is wrong with it.
pub fn check(kind: ParamKind, value: &str) -> Result<(), String> {
    match kind {
        ParamKind::OneOf(words) if words.contains(&value) => Ok(()),
        ParamKind::OneOf(words) => Err(format!("must be one of {}", words.join(", "))),
        ParamKind::DnsSubdomain => dns_subdomain(value),
        ParamKind::Cron => cron(value),
        ParamKind::HourlyCron => cron(value).and_then(|()| at_most_hourly(value)),
        ParamKind::HostPort => host_port(value),
        ParamKind::Cve => cve(value),
        ParamKind::SubjectName if value.trim().is_empty() => Err("must not be empty".into()),
        ParamKind::SubjectName => Ok(()),
    }
}

/// RFC 1123 subdomain: lowercase alphanumerics, `-` and `.`, at most 253 characters, each
/// label starting and ending alphanumeric.
pub fn dns_subdomain(value: &str) -> Result<(), String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if value.len() <= 253 && value.split('.').all(label_ok) {
        Ok(())
    } else {
        Err("must be a lowercase RFC 1123 name (a-z, 0-9, '-', '.')".into())
    }
}

fn host_port(value: &str) -> Result<(), String> {
    let Some((host, port)) = value.rsplit_once(':') else {
        return Err("must be host:port".into());
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err("has no host".into());
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(format!("port `{port}` is not 1-65535")),
    }
}

fn cve(value: &str) -> Result<(), String> {
    let mut parts = value.split('-');
    let ok = parts.next() == Some("CVE")
        && parts
            .next()
            .is_some_and(|y| y.len() == 4 && y.bytes().all(|b| b.is_ascii_digit()))
        && parts
            .next()
            .is_some_and(|n| n.len() >= 4 && n.bytes().all(|b| b.is_ascii_digit()))
        && parts.next().is_none();
    if ok {
        Ok(())
    } else {
        Err("must look like CVE-2024-1234".into())
    }
}

/// The schedule grammar Kubernetes validates CronJobs with (robfig/cron's standard parser):
/// `@yearly`-style descriptors, or minute hour day-of-month month day-of-week, each a `*` or a
/// comma list of values/ranges with an optional `/step`; months and weekdays may be names.
fn cron(value: &str) -> Result<(), String> {
    const DESCRIPTORS: [&str; 7] = [
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
    ];
    const MONTHS: [&str; 12] = [
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ];
    const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
    if value.starts_with('@') {
        return if DESCRIPTORS.contains(&value) {
            Ok(())
        } else {
            Err(format!(
                "unknown descriptor (known: {})",
                DESCRIPTORS.join(", ")
            ))
        };
    }
    let fields: Vec<&str> = value.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "needs 5 fields (minute hour day month weekday), found {}",
            fields.len()
        ));
    }
    let specs: [(&str, u32, u32, &[&str], u32); 5] = [
        ("minute", 0, 59, &[], 0),
        ("hour", 0, 23, &[], 0),
        ("day of month", 1, 31, &[], 0),
        ("month", 1, 12, &MONTHS, 1),
        ("day of week", 0, 6, &DAYS, 0),
    ];
    for (field, (name, min, max, names, first)) in fields.iter().zip(specs) {
        let number = |s: &str| -> Option<u32> {
            let upper = s.to_ascii_uppercase();
            names
                .iter()
                .position(|n| *n == upper)
                .map(|i| i as u32 + first)
                .or_else(|| s.parse().ok())
                .filter(|n| (min..=max).contains(n))
        };
        for item in field.split(',') {
            let (range, step) = match item.split_once('/') {
                Some((r, s)) => (r, Some(s)),
                None => (item, None),
            };
            let range_ok = range == "*"
                || match range.split_once('-') {
                    Some((a, b)) => matches!((number(a), number(b)), (Some(a), Some(b)) if a <= b),
                    None => number(range).is_some(),
                };
            let step_ok = step.is_none_or(|s| s.parse::<u32>().is_ok_and(|s| s > 0));
            if !range_ok || !step_ok {
                return Err(format!("{name} `{item}` is not valid ({min}-{max})"));
            }
        }
    }
    Ok(())
}

/// Whether a valid schedule fires at most once an hour: every descriptor does (`@hourly` is
/// the most frequent), and five fields do when their minute field names one minute only.
fn at_most_hourly(value: &str) -> Result<(), String> {
    let Some(minute) = value
        .split_whitespace()
        .next()
        .filter(|_| !value.starts_with('@'))
    else {
        return Ok(());
    };
    let mut minutes = [false; 60];
    for item in minute.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, s.parse::<usize>().unwrap_or(1).max(1)),
            None => (item, 1),
        };
        // As robfig/cron reads them: `*` is 0-59, and `a/step` runs from a to 59.
        let bounds = match (range, range.split_once('-')) {
            ("*", _) => Some((0, 59)),
            (_, Some((a, b))) => a.parse().ok().zip(b.parse().ok()),
            (single, None) => single
                .parse()
                .ok()
                .map(|a| (a, if item.contains('/') { 59 } else { a })),
        };
        let Some((first, last)) = bounds else {
            return Err(format!("minute `{item}` is not valid"));
        };
        for m in (first..=last.min(59)).step_by(step) {
            minutes[m] = true;
        }
    }
    match minutes.iter().filter(|m| **m).count() {
        0 | 1 => Ok(()),
        n => Err(format!(
            "runs {n} times an hour; at most hourly is allowed (e.g. `0 * * * *` or @daily)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_accepts_what_kubernetes_accepts() {
        for ok in [
            "@weekly",
            "0 0 * * *",
            "0 23 * * SUN",
            "*/5 * * * *",
            "0 9-17/2 1,15 JAN-jun mon-FRI",
        ] {
            assert_eq!(cron(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "@often",
            "* * * *",
            "61 * * * *",
            "0 0 * * 7",
            "*/0 * * * *",
            "a b c d e",
        ] {
            assert!(cron(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hourly_schedules_run_at_most_once_an_hour() {
        for ok in [
            "@hourly",
            "@weekly",
            "0 * * * *",
            "30 */2 * * *",
            "5-5 * * * *",
            "0/60 * * * *",
            "0 3 * * MON",
        ] {
            assert_eq!(check(ParamKind::HourlyCron, ok), Ok(()), "{ok}");
        }
        for bad in [
            "* * * * *",
            "*/5 * * * *",
            "0,30 * * * *",
            "0-1 * * * *",
            "0/30 * * * *",
            "*/59 0 1 1 *",
        ] {
            let err = check(ParamKind::HourlyCron, bad).unwrap_err();
            assert!(err.contains("at most hourly"), "{bad}: {err}");
        }
        // Still a schedule first.
        assert!(check(ParamKind::HourlyCron, "every day").is_err());
        assert_eq!(check(ParamKind::Cron, "* * * * *"), Ok(()));
    }

    #[test]
    fn other_shapes() {
        assert!(host_port("google.com:443").is_ok());
        assert!(host_port("[::1]:8443").is_ok());
        assert!(host_port("google.com").is_err());
        assert!(host_port("google.com:0").is_err());
        assert!(host_port(":443").is_err());
        assert!(cve("CVE-2024-4439").is_ok());
        assert!(cve("cve-2024-4439").is_err());
        assert!(cve("CVE-24-4439").is_err());
        assert!(dns_subdomain("kata-qemu").is_ok());
        assert!(dns_subdomain("Kata").is_err());
        assert!(dns_subdomain("a..b").is_err());
        assert!(check(ParamKind::SubjectName, " ").is_err());
    }
}
