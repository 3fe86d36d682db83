//! The Lua scripts as the nodes receive them: each assembled at build time from its `.lua` file
//! under `src/` (see `build.rs`: a file's header comment is its documentation and is not sent; a
//! line `--- @include "piece.lua"` takes in a shared piece), with its SHA1 digest, for EVALSHA.

/// A script: where it was written, its text as sent, and its digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Script {
    /// Its file, under `src/`.
    path: &'static str,
    text: &'static str,
    /// SHA1 of the text, in lowercase hex.
    digest: &'static str,
}

impl Script {
    /// Made by [`lua!`], from what the build script wrote.
    pub(crate) const fn new(
        path: &'static str,
        text: &'static str,
        digest: &'static str,
    ) -> Script {
        Script { path, text, digest }
    }

    /// The file the script was assembled from, under `src/`.
    #[cfg(test)]
    pub(crate) const fn path(&self) -> &'static str {
        self.path
    }

    /// The text as sent with EVAL and SCRIPT LOAD.
    pub(crate) const fn text(&self) -> &'static str {
        self.text
    }

    /// The digest EVALSHA names the script by.
    pub(crate) const fn digest(&self) -> &'static str {
        self.digest
    }
}

/// How many scripts `lists` hold in all.
pub(crate) const fn count(lists: &[&[Script]]) -> usize {
    let (mut total, mut list) = (0, 0);
    while list < lists.len() {
        total += lists[list].len();
        list += 1;
    }
    total
}

/// The scripts of `lists` in one array, at compile time; `N` is [`count`] of them (checked).
pub(crate) const fn concat<const N: usize>(lists: &[&[Script]]) -> [Script; N] {
    let mut all = [Script::new("", "", ""); N];
    let (mut list, mut next) = (0, 0);
    while list < lists.len() {
        let mut index = 0;
        while index < lists[list].len() {
            all[next] = lists[list][index];
            next += 1;
            index += 1;
        }
        list += 1;
    }
    assert!(next == N, "N is the number of scripts");
    all
}

/// The script assembled from `src/<path>`, a `.lua` file: `lua!("primitives/mutex/release.lua")`.
macro_rules! lua {
    ($path:literal) => {
        $crate::nodes::script::Script::new(
            $path,
            include_str!(concat!(env!("OUT_DIR"), "/lua/", $path)),
            include_str!(concat!(env!("OUT_DIR"), "/lua/", $path, ".sha1")),
        )
    };
}
pub(crate) use lua;

/// Where a script's lines were written, for tests that load scripts into a node.
#[cfg(test)]
impl Script {
    /// A node's error about this script, with the line it names (`user_script:N`) mapped back to
    /// the `.lua` file and line it was assembled from (see `build.rs`).
    pub(crate) fn locate(&self, error: &str) -> String {
        let origins =
            std::fs::read_to_string(format!("{}/lua/{}.origin", env!("OUT_DIR"), self.path))
                .unwrap_or_default();
        match origin(error, &origins) {
            Some(place) => format!("{place}: {error}"),
            None => format!("{}: {error}", self.path),
        }
    }
}

/// The origin of the line that `error` names (`user_script:N:`), from `origins` (one
/// `file:line` per assembled line).
#[cfg(test)]
fn origin<'a>(error: &str, origins: &'a str) -> Option<&'a str> {
    let (_, after) = error.split_once("user_script:")?;
    let digits = after
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(after.len());
    let line: usize = after[..digits].parse().ok()?;
    origins.lines().nth(line.checked_sub(1)?)
}

/// Loads `script` into the node; the error, located in its `.lua` file, if the node refuses it.
#[cfg(test)]
pub(crate) async fn load(
    connection: &mut redis::aio::MultiplexedConnection,
    script: &Script,
) -> Result<(), String> {
    let loaded: redis::RedisResult<String> = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script.text())
        .query_async(connection)
        .await;
    match loaded {
        Ok(digest) if digest == script.digest() => Ok(()),
        Ok(digest) => Err(format!(
            "{}: the node digests it as {digest}, not {}",
            script.path(),
            script.digest()
        )),
        Err(error) => Err(script.locate(&error.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_traced_to_the_file_and_line_it_was_written_on() {
        let origins = "src/a.lua:5\nsrc/piece.lua:3\nsrc/a.lua:7\n";
        let error =
            "ERR Error compiling script (new function): user_script:2: '=' expected near 'x'";
        assert_eq!(origin(error, origins), Some("src/piece.lua:3"));
        assert_eq!(origin("ERR user_script:9: out of range", origins), None);
        assert_eq!(origin("ERR no line", origins), None);
    }

    /// A script broken on purpose: the node's error names its second line, which is the first
    /// line of code of `release.lua`, after its header and the blank line.
    #[tokio::test]
    async fn a_syntax_error_is_reported_where_it_was_written() {
        let cluster = redmutex_testenv::Cluster::start(1);
        let client = redis::Client::open(cluster.urls()[0].as_str()).expect("a URL");
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("the node answers");
        let release = lua!("primitives/mutex/release.lua");
        let broken = Script::new(release.path(), "\nlocal x = = 1\n", "");
        let error = load(&mut connection, &broken)
            .await
            .expect_err("a syntax error");
        let first_code_line = release
            .text()
            .lines()
            .position(|line| !line.is_empty())
            .expect("code");
        let header = include_str!("../primitives/mutex/release.lua")
            .lines()
            .position(|line| !line.starts_with("--"))
            .expect("a blank line after the header");
        assert_eq!(first_code_line, 1);
        let expected = format!("src/primitives/mutex/release.lua:{}: ", header + 2);
        assert!(error.starts_with(&expected), "{error}");
    }
}
