//! Keeping passwords out of everything the command prints, including messages it did not write
//! (clap echoes arguments back in its errors).

/// `text` with the credentials of every URL in it replaced by `***`:
/// `redis://user:secret@host` becomes `redis://***@host`.
///
/// A URL's credentials run from its `://` to the last `@` before the next URL's `://` or the next
/// whitespace or quote, so a password containing `@`, `/` or `,` (in a comma-separated list)
/// cannot show through.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("://") {
        let (before, url) = rest.split_at(start + 3);
        out.push_str(before);
        let token_end = url
            .find(|c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '`'))
            .unwrap_or(url.len());
        let end = url[..token_end].find("://").unwrap_or(token_end);
        let (url, after) = url.split_at(end);
        match url.rfind('@') {
            Some(at) => {
                out.push_str("***");
                out.push_str(&url[at..]);
            }
            None => out.push_str(url),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hides_credentials_wherever_urls_appear() {
        let cases = [
            ("redis://127.0.0.1:6379/", "redis://127.0.0.1:6379/"),
            ("redis://:pw@host:1/0", "redis://***@host:1/0"),
            (
                "error: unexpected argument 'redis://u:p@ss/w@h:1' found",
                "error: unexpected argument 'redis://***@h:1' found",
            ),
            (
                "redis://:a@h1,redis://:b@h2 and rediss://x@h3",
                "redis://***@h1,redis://***@h2 and rediss://***@h3",
            ),
            ("redis://:a,b@h1,redis://h2", "redis://***@h1,redis://h2"),
            ("redis://h1,redis://:p@h2", "redis://h1,redis://***@h2"),
            ("no url: pw", "no url: pw"),
            ("trailing ://", "trailing ://"),
        ];
        for (text, expected) in cases {
            assert_eq!(redact(text), expected, "{text}");
        }
    }
}
