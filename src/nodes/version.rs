//! Which Redis version each primitive needs, and which version a node runs.
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

/// The primitives, as far as their needs of a node differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Primitive {
    /// A mutex over one name, fenced or not, with or without wake-up on release.
    Mutex,
    /// A mutex over several names.
    MultiMutex,
    /// A fair mutex's rounds, first tries and hand-offs (its extend is the mutex's).
    FairMutex,
    /// Both sides of a read-write lock.
    RwLock,
    Semaphore,
}

/// What each primitive needs: the newest feature it uses sets its minimum.
///
/// | feature | since | used by |
/// |---|---|---|
/// | `EVAL`, `EVALSHA`, `redis.sha1hex`, `PUBLISH` in scripts | 2.6.0 | every primitive |
/// | `SET ... NX PX` | 2.6.12 | every primitive |
/// | `ZADD ... XX` | 3.0.2 | readers, semaphores |
/// | `EXISTS` of several keys, answering how many exist | 3.0.3 | multi-name locks |
/// | writes after `TIME` in a script (scripts replicated by their effects by default) | 5.0 | the fair line, read-write locks, semaphores |
/// | `SET ... PXAT` | 6.2 | readers |
/// | `PEXPIREAT ... GT` | 7.0 | readers, semaphores |
///
/// Read-write locks are refused as a whole on an older node, writers too, so that one rule says
/// where a name's readers and writers may be counted.
const MINIMUMS: [(Primitive, Version, &str); 5] = [
    (Primitive::Mutex, Version::new(2, 6, 12), "2.6.12"),
    (Primitive::MultiMutex, Version::new(3, 0, 3), "3.0.3"),
    (Primitive::FairMutex, Version::new(5, 0, 0), "5.0"),
    (Primitive::RwLock, Version::new(7, 0, 0), "7.0"),
    (Primitive::Semaphore, Version::new(7, 0, 0), "7.0"),
];

impl Primitive {
    /// Every primitive, in the order of [`MINIMUMS`].
    pub(crate) const ALL: [Primitive; 5] = [
        Primitive::Mutex,
        Primitive::MultiMutex,
        Primitive::FairMutex,
        Primitive::RwLock,
        Primitive::Semaphore,
    ];

    /// The oldest Redis version that runs every command and script of the primitive, and how
    /// messages write it.
    pub(crate) fn minimum(self) -> (Version, &'static str) {
        MINIMUMS
            .iter()
            .find(|(primitive, ..)| *primitive == self)
            .map_or((Version::new(0, 0, 0), "0"), |&(_, version, text)| {
                (version, text)
            })
    }

    /// Its name in messages, plural: "read-write locks need ...".
    pub(crate) fn plural(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutexes",
            Primitive::MultiMutex => "multi-name locks",
            Primitive::FairMutex => "fair mutexes",
            Primitive::RwLock => "read-write locks",
            Primitive::Semaphore => "semaphores",
        }
    }
}

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
    /// Refuses `primitive` where the node surely runs an older version than it needs. A node of
    /// unknown version runs everything, as before versions were checked: the scripts' own errors
    /// then say what is missing.
    pub(crate) fn allows(self, primitive: Primitive) -> Result<(), NodeErrorKind> {
        let (needed, needs) = primitive.minimum();
        let too_old = match self {
            ServerVersion::Redis(version) | ServerVersion::Valkey { redis: version, .. } => {
                version < needed
            }
            ServerVersion::Before(bound) => bound <= needed,
            ServerVersion::Unknown => false,
        };
        if too_old {
            Err(NodeErrorKind::TooOld {
                what: primitive.plural(),
                needs,
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

    #[test]
    fn the_table_of_minimums() {
        let table: Vec<(&str, &str)> = Primitive::ALL
            .iter()
            .map(|p| (p.plural(), p.minimum().1))
            .collect();
        assert_eq!(
            table,
            [
                ("mutexes", "2.6.12"),
                ("multi-name locks", "3.0.3"),
                ("fair mutexes", "5.0"),
                ("read-write locks", "7.0"),
                ("semaphores", "7.0"),
            ]
        );
        for primitive in Primitive::ALL {
            let (version, text) = primitive.minimum();
            assert_eq!(Version::parse(text), Some(version), "{primitive:?}");
        }
    }

    /// Which primitives a node of each kind runs, in the order of `Primitive::ALL`.
    fn runs(node: ServerVersion) -> Vec<bool> {
        Primitive::ALL
            .iter()
            .map(|p| node.allows(*p).is_ok())
            .collect()
    }

    #[test]
    fn each_version_runs_what_it_can() {
        let redis = |text| ServerVersion::Redis(v(text));
        assert_eq!(runs(redis("7.0.0")), [true; 5]);
        assert_eq!(runs(redis("6.2.14")), [true, true, true, false, false]);
        assert_eq!(runs(redis("6.0.9")), [true, true, true, false, false]);
        assert_eq!(runs(redis("4.0.14")), [true, true, false, false, false]);
        assert_eq!(runs(redis("3.0.2")), [true, false, false, false, false]);
        assert_eq!(runs(redis("2.6.11")), [false; 5]);
        // Valkey is judged by the Redis version it serves.
        let valkey = ServerVersion::Valkey {
            valkey: v("9.1.2"),
            redis: v("7.2.4"),
        };
        assert_eq!(runs(valkey), [true; 5]);
        // Only what surely cannot run is refused.
        let before = ServerVersion::Before(v("7.0"));
        assert_eq!(runs(before), [true, true, true, false, false]);
        assert_eq!(runs(ServerVersion::Unknown), [true; 5]);
    }

    #[test]
    fn a_refusal_names_what_is_needed_and_what_runs() {
        let error = ServerVersion::Redis(v("6.2.14"))
            .allows(Primitive::RwLock)
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "read-write locks need Redis 7.0 or later; this node runs Redis 6.2.14"
        );
        assert!(error.is_refusal());
        let error = ServerVersion::Before(v("7.0"))
            .allows(Primitive::Semaphore)
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "semaphores need Redis 7.0 or later; this node runs Redis older than 7.0 \
             (INFO refused; scripts see no version)"
        );
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
