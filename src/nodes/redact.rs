//! Keeping passwords out of errors and `Debug` output.

/// The URL with its credentials replaced by `***`: `redis://user:secret@host/0` -> `redis://***@host/0`.
///
/// Works on any string, parsable or not, because it is used to report URLs that failed to parse:
/// everything from `://` to the **last** `@` is hidden, so a password containing `/`, `#`, `?` or
/// `@` (unencoded, as in a base64 secret) cannot end the user info early and show through. Query
/// strings are hidden whole (`?***`): some clients accept credentials there.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        // Not URL-shaped; it may still be a secret pasted in the wrong place, so show nothing of it.
        return "<not a URL>".to_owned();
    };
    let (scheme, rest) = url.split_at(scheme_end + 3);
    let rest = match rest.rfind('@') {
        Some(at) => format!("***{}", &rest[at..]),
        None => rest.to_owned(),
    };
    match rest.find('?') {
        Some(query) => format!("{scheme}{}?***", &rest[..query]),
        None => format!("{scheme}{rest}"),
    }
}

/// A `--nodes` entry as given, for an error about it: a URL redacted as by [`redact_url`], a bare
/// `host:port` (no `@`, a numeric port: the usual slip of leaving the scheme out) as it is, and
/// anything else hidden, since it may be a secret pasted in the wrong place.
pub(crate) fn redact_entry(entry: &str) -> String {
    if entry.contains("://") {
        return redact_url(entry);
    }
    let host_port = entry.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && host.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'[' | b']' | b':')
            })
    });
    if host_port {
        entry.to_owned()
    } else {
        "<not a URL>".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hides_credentials_and_keeps_the_address() {
        let cases = [
            ("redis://127.0.0.1:6379/", "redis://127.0.0.1:6379/"),
            ("redis://:pw@host:1/0", "redis://***@host:1/0"),
            ("redis://user:pw@host", "redis://***@host"),
            ("rediss://user:p@ss@host/", "rediss://***@host/"),
            ("redis://pw@host/", "redis://***@host/"),
            ("redis://host/?password=x", "redis://host/?***"),
            (
                "redis://:abc/def+ghi=@127.0.0.1:6379",
                "redis://***@127.0.0.1:6379",
            ),
            ("redis://user:p#ss@host:1", "redis://***@host:1"),
            ("redis://:p@ss/word@host/", "redis://***@host/"),
            ("redis://:a?b@host/", "redis://***@host/"),
            ("no url at all: pw", "<not a URL>"),
        ];
        for (url, expected) in cases {
            assert_eq!(redact_url(url), expected, "{url}");
        }
    }

    #[test]
    fn shows_a_bare_host_and_port_and_hides_anything_else() {
        let cases = [
            ("127.0.0.1:7101", "127.0.0.1:7101"),
            ("redis-1.example.org:6379", "redis-1.example.org:6379"),
            ("[::1]:6379", "[::1]:6379"),
            ("redis://:pw@h:1", "redis://***@h:1"),
            (":pw@h:1", "<not a URL>"),
            ("hunter2", "<not a URL>"),
            ("pass word:1", "<not a URL>"),
        ];
        for (entry, expected) in cases {
            assert_eq!(redact_entry(entry), expected, "{entry}");
        }
    }
}
