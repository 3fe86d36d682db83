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
}
