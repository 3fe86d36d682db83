//! Which Redis version a node runs, and the gate that refuses what it is too old for.
//!
//! Each connection learns its node's version when it is made (see `reconnect::open`; for
//! connections the caller built, on first use), and a node too old for a primitive gets none of its
//! commands: a script that fails halfway leaves what it wrote before the failing command (Redis
//! does not roll scripts back), so refusing before anything is sent is the only safe answer.

use std::fmt;

use redis::{Cmd, RedisError, Value};

use crate::error::NodeErrorKind;

/// A Redis version, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Version {
    major: u32,
    minor: u32,
    patch: u32,
}

impl Version {
    pub(crate) const fn new(major: u32, minor: u32, patch: u32) -> Version {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// Reads `7.0.15`, `7.2`, or a version with a suffix (`7.4.0-rc1`, read as `7.4.0`); `None`
    /// when the text does not start with a number.
    pub(crate) fn parse(text: &str) -> Option<Version> {
        let mut parts = text.trim().split('.').map(|part| {
            let digits = part
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(part.len());
            part[..digits].parse::<u32>().ok()
        });
        let major = parts.next()??;
        let minor = parts.next().flatten().unwrap_or(0);
        let patch = parts.next().flatten().unwrap_or(0);
        Some(Version::new(major, minor, patch))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// What a primitive, or one part of one, needs of a node: the oldest Redis version that runs
/// every command and script it sends. Each primitive declares its own (`primitives` has the table
/// of what each uses and since when).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Needs {
    /// Its name in messages, plural: "read-write locks need ...".
    pub(crate) what: &'static str,
    /// The oldest version that runs it.
    pub(crate) version: Version,
    /// That version as messages write it, e.g. `"7.0"`.
    pub(crate) text: &'static str,
}

impl Needs {
    pub(crate) const fn new(what: &'static str, version: Version, text: &'static str) -> Needs {
        Needs {
            what,
            version,
            text,
        }
    }
}

/// What release notices need of a Redis Cluster member, beyond what the primitive needs: its
/// scripts publish them by `SPUBLISH` (Redis 7.0), in the name's slot, since a classic `PUBLISH`
/// in a cluster goes to every node over the cluster bus and `SUBSCRIBE` there hears it from any.
/// Wake-up on release and the fair line on a cluster member need it; a standalone member
/// publishes by `PUBLISH` (2.6).
pub(crate) const CLUSTER_NOTICES: Needs = Needs::new(
    "release notices on a Redis Cluster member (wake-up on release, fair waiting)",
    Version::new(7, 0, 0),
    "7.0",
);

/// What a node told us of its version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServerVersion {
    /// `redis_version` of `INFO`, or the version a script saw (`redis.REDIS_VERSION`).
    Redis(Version),
    /// Valkey: its own version (`valkey_version`), and the Redis version whose commands it
    /// serves (`redis_version`, 7.2.4 for every Valkey so far), by which it is judged.
    Valkey { valkey: Version, redis: Version },
    /// `INFO` was refused, and scripts are told no version: Redis before 7.0 (which gave scripts
    /// `redis.REDIS_VERSION`).
    Before(Version),
    /// Neither `INFO` nor the script said (both refused, or not understood): the node is not
    /// judged.
    Unknown,
}

/// The version before which scripts are told no version.
const SCRIPTS_KNOW_VERSION: Version = Version::new(7, 0, 0);

impl ServerVersion {
    /// Refuses what `needs` a newer version than the node surely runs. A node of unknown version
    /// runs everything, as before versions were checked: the scripts' own errors then say what is
    /// missing.
    pub(crate) fn allows(self, needs: &Needs) -> Result<(), NodeErrorKind> {
        let needed = needs.version;
        let too_old = match self {
            ServerVersion::Redis(version) | ServerVersion::Valkey { redis: version, .. } => {
                version < needed
            }
            ServerVersion::Before(bound) => bound <= needed,
            ServerVersion::Unknown => false,
        };
        if too_old {
            Err(NodeErrorKind::TooOld {
                what: needs.what,
                needs: needs.text,
                runs: self.to_string(),
            })
        } else {
            Ok(())
        }
    }

    /// From `INFO`'s text (any sections that include `server`); `None` without `redis_version`.
    pub(crate) fn from_info(text: &str) -> Option<ServerVersion> {
        let field = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .and_then(Version::parse)
        };
        let redis = field("redis_version")?;
        Some(match field("valkey_version") {
            Some(valkey) => ServerVersion::Valkey { valkey, redis },
            None => ServerVersion::Redis(redis),
        })
    }

    /// From the reply to [`info_server`]: `None` when the node refused the question (then ask
    /// [`script_version`]); `Err` with the error of a reply that says the node does not serve the
    /// connection for now (`LOADING`, say).
    pub(crate) fn from_info_reply(reply: Value) -> Result<Option<ServerVersion>, RedisError> {
        match text(&reply) {
            Some(text) => Ok(Some(
                ServerVersion::from_info(&text).unwrap_or(ServerVersion::Unknown),
            )),
            None => refused(reply).map(|()| None),
        }
    }

    /// From the reply to [`script_version`], as [`from_info_reply`](Self::from_info_reply).
    pub(crate) fn from_script_reply(reply: Value) -> Result<ServerVersion, RedisError> {
        match reply {
            Value::Nil => Ok(ServerVersion::Before(SCRIPTS_KNOW_VERSION)),
            reply => match text(&reply) {
                Some(text) => {
                    Ok(Version::parse(&text).map_or(ServerVersion::Unknown, ServerVersion::Redis))
                }
                None => refused(reply).map(|()| ServerVersion::Unknown),
            },
        }
    }
}

impl ServerVersion {
    /// The lower of two masters' versions, for a cluster member, which runs a primitive only if
    /// every master does: a version known below another's bound wins, and a master whose version
    /// is unknown is not judged, as a standalone node of unknown version is not.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn lowest(self, other: ServerVersion) -> ServerVersion {
        use ServerVersion::{Before, Redis, Unknown, Valkey};
        let known = |version: ServerVersion| match version {
            Redis(version) | Valkey { redis: version, .. } => Some(version),
            Before(_) | Unknown => None,
        };
        match (self, other) {
            (Unknown, version) | (version, Unknown) => version,
            (Before(a), Before(b)) => Before(a.min(b)),
            (Before(bound), version) | (version, Before(bound)) => match known(version) {
                Some(known) if known < bound => version,
                _ => Before(bound),
            },
            (a, b) => {
                if known(b) < known(a) {
                    b
                } else {
                    a
                }
            }
        }
    }
}

/// Whether `INFO cluster`'s reply says the node runs Redis Cluster (`cluster_enabled:1`); a
/// refused question says no, and leaves the first `MOVED` reply to tell.
pub(crate) fn cluster_enabled(reply: &Value) -> bool {
    text(reply).is_some_and(|text| {
        text.lines()
            .any(|line| line.trim_end() == "cluster_enabled:1")
    })
}

/// The question that tells a cluster node: `INFO cluster`, asked beside [`info_server`] (one
/// section per `INFO` before Redis 7.0).
pub(crate) fn info_cluster() -> Cmd {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("cluster");
    cmd
}

/// `Ok` for a reply that says nothing of the version: refused (a missing permission), unknown (a
/// disabled or renamed command), or not understood (a proxy that does not pass it on), whose
/// answer is then looked for elsewhere. The error of a node that does not serve for now
/// (`LOADING`, `BUSY`), which a later question gets past.
fn refused(reply: Value) -> Result<(), RedisError> {
    match reply.extract_error() {
        Err(error) if matches!(error.code(), Some("LOADING" | "BUSY" | "MASTERDOWN")) => Err(error),
        _ => Ok(()),
    }
}

fn text(reply: &Value) -> Option<String> {
    match reply {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::VerbatimString { text, .. } | Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerVersion::Redis(version) => write!(f, "Redis {version}"),
            ServerVersion::Valkey { valkey, redis } => {
                write!(f, "Valkey {valkey} (Redis {redis} compatible)")
            }
            ServerVersion::Before(bound) => write!(
                f,
                "Redis older than {}.{} (INFO refused; scripts see no version)",
                bound.major, bound.minor
            ),
            ServerVersion::Unknown => {
                f.write_str("an unknown version (neither INFO nor a script named it)")
            }
        }
    }
}

/// The `run_id` in the reply to [`info_server`], if it shows one (see `servers`).
pub(crate) fn info_run_id(reply: &Value) -> Option<Box<str>> {
    crate::nodes::servers::run_id(&text(reply)?)
}

/// The question that names the version: `INFO server`, on every Redis since 2.6.
pub(crate) fn info_server() -> Cmd {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("server");
    cmd
}

/// The question for users who may not run `INFO` (the README's least-privilege ACL user): a
/// script, which such users may run, sees `redis.REDIS_VERSION` from Redis 7.0 on and nil
/// before. Touches no key.
pub(crate) const SCRIPT_VERSION: &str = "return redis.REDIS_VERSION";

pub(crate) fn script_version() -> Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(SCRIPT_VERSION).arg(0);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Version {
        Version::parse(text).unwrap()
    }

    #[test]
    fn versions_parse_and_order() {
        assert_eq!(v("6.2.14"), Version::new(6, 2, 14));
        assert_eq!(v("7.0"), Version::new(7, 0, 0));
        assert_eq!(v("7.4.0-rc1"), Version::new(7, 4, 0));
        assert_eq!(v(" 255.255.255\r"), Version::new(255, 255, 255));
        assert_eq!(Version::parse("unstable"), None);
        assert_eq!(Version::parse(""), None);
        assert!(v("6.2.14") < v("7.0.0"));
        assert!(v("6.10.0") > v("6.9.9"));
        assert_eq!(v("6.2.14").to_string(), "6.2.14");
    }

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn error(text: &str) -> Value {
        redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap()
    }

    #[test]
    fn info_names_redis_and_valkey() {
        let redis = "# Server\r\nredis_version:6.2.14\r\nredis_git_sha1:0\r\n";
        assert_eq!(
            ServerVersion::from_info(redis),
            Some(ServerVersion::Redis(v("6.2.14")))
        );
        let valkey = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
                      valkey_version:9.1.2\r\n";
        let valkey = ServerVersion::from_info(valkey).unwrap();
        assert_eq!(
            valkey,
            ServerVersion::Valkey {
                valkey: v("9.1.2"),
                redis: v("7.2.4")
            }
        );
        assert_eq!(valkey.to_string(), "Valkey 9.1.2 (Redis 7.2.4 compatible)");
        assert_eq!(ServerVersion::from_info("# Server\r\n"), None);
    }

    #[test]
    fn a_cluster_runs_what_its_lowest_master_runs() {
        use ServerVersion::{Before, Redis, Unknown, Valkey};
        let valkey = Valkey {
            valkey: v("8.0.1"),
            redis: v("7.2.4"),
        };
        assert_eq!(
            Redis(v("7.0.15")).lowest(Redis(v("6.2.14"))),
            Redis(v("6.2.14"))
        );
        assert_eq!(Redis(v("7.4.0")).lowest(valkey), valkey);
        assert_eq!(valkey.lowest(Redis(v("7.0.0"))), Redis(v("7.0.0")));
        assert_eq!(Unknown.lowest(Redis(v("7.0.0"))), Redis(v("7.0.0")));
        assert_eq!(Redis(v("7.0.0")).lowest(Unknown), Redis(v("7.0.0")));
        assert_eq!(Redis(v("7.2.0")).lowest(Before(v("7.0"))), Before(v("7.0")));
        assert_eq!(
            Before(v("7.0")).lowest(Redis(v("6.2.0"))),
            Redis(v("6.2.0"))
        );
        assert_eq!(Before(v("7.0")).lowest(Before(v("6.0"))), Before(v("6.0")));
        // What the gate then refuses is what the oldest master would refuse.
        let oldest = [Redis(v("7.2.4")), Redis(v("6.2.14")), valkey]
            .into_iter()
            .fold(Unknown, ServerVersion::lowest);
        assert!(oldest.allows(&CLUSTER_NOTICES).is_err());
    }

    #[test]
    fn info_cluster_tells_a_cluster_node() {
        assert!(cluster_enabled(&bulk("# Cluster\r\ncluster_enabled:1\r\n")));
        assert!(!cluster_enabled(&bulk(
            "# Cluster\r\ncluster_enabled:0\r\n"
        )));
        assert!(!cluster_enabled(&error("NOPERM no INFO for you")));
        assert!(!cluster_enabled(&bulk("")));
    }

    #[test]
    fn a_refused_info_asks_the_script() {
        let info = "# Server\r\nredis_version:7.0.15\r\n";
        let from_info = ServerVersion::from_info_reply;
        assert_eq!(
            from_info(bulk(info)).unwrap(),
            Some(ServerVersion::Redis(v("7.0.15")))
        );
        let verbatim = Value::VerbatimString {
            format: redis::VerbatimFormat::Text,
            text: info.to_owned(),
        };
        assert_eq!(
            from_info(verbatim).unwrap(),
            Some(ServerVersion::Redis(v("7.0.15")))
        );
        let noperm = error("NOPERM this user has no permissions to run the 'info' command");
        assert_eq!(from_info(noperm).unwrap(), None);
        let proxy = error("ERR unsupported command 'info'");
        assert_eq!(from_info(proxy).unwrap(), None);
        let from_script = ServerVersion::from_script_reply;
        assert_eq!(
            from_script(bulk("7.2.4")).unwrap(),
            ServerVersion::Redis(v("7.2.4"))
        );
        assert_eq!(
            from_script(Value::Nil).unwrap(),
            ServerVersion::Before(v("7.0"))
        );
        assert_eq!(
            from_script(error("NOPERM no eval")).unwrap(),
            ServerVersion::Unknown
        );
        // A node that does not serve the connection yet says nothing of its version.
        let loading = from_info(error("LOADING loading the dataset"));
        assert_eq!(loading.unwrap_err().code(), Some("LOADING"));
        let loading = from_script(error("LOADING loading the dataset"));
        assert_eq!(loading.unwrap_err().code(), Some("LOADING"));
    }
}
