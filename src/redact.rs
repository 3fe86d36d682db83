//! Keeping passwords out of errors and `Debug` output.

/// The URL with any password replaced by `***`: `redis://user:secret@host/` -> `redis://user:***@host/`.
///
/// Query strings are hidden whole (`?***`): some clients accept credentials there.
/// Works on any string, parsable or not, because it is used to report URLs that failed to parse.
pub(crate) fn redact_url(url: &str) -> String {
    match url.find('?') {
        Some(query) => format!("{}?***", redact_userinfo(&url[..query])),
        None => redact_userinfo(url),
    }
}

fn redact_userinfo(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        // Not URL-shaped; it may still be a secret pasted in the wrong place, so show nothing of it.
        return "<not a URL>".to_owned();
    };
    let authority_start = scheme_end + 3;
    let rest = &url[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_len];
    // The last '@' ends the user info: a password may itself contain '@'.
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    let user = match userinfo.find(':') {
        Some(colon) => &userinfo[..colon],
        // `redis://secret@host` means a password without a user name.
        None => "",
    };
    let redacted_userinfo = if user.is_empty() {
        ":***".to_owned()
    } else {
        format!("{user}:***")
    };
    let mut redacted = String::with_capacity(url.len());
    redacted.push_str(&url[..authority_start]);
    redacted.push_str(&redacted_userinfo);
    redacted.push_str(&rest[at..]);
    redacted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hides_passwords_and_keeps_the_rest() {
        let cases = [
            ("redis://127.0.0.1:6379/", "redis://127.0.0.1:6379/"),
            ("redis://:pw@host:1/0", "redis://:***@host:1/0"),
            ("redis://user:pw@host", "redis://user:***@host"),
            ("rediss://user:p@ss@host/", "rediss://user:***@host/"),
            ("redis://pw@host/", "redis://:***@host/"),
            ("redis://host/?password=x", "redis://host/?***"),
            ("no url at all: pw", "<not a URL>"),
        ];
        for (url, expected) in cases {
            assert_eq!(redact_url(url), expected, "{url}");
        }
    }
}
