//! The protected resource's side of fencing: a Redis key that refuses stale holders
//! (`fenced_set.lua`).

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script};

/// Writes `value` only if `token` is at least the highest token accepted so far for this key
/// (`primitives/fenced_set.lua`).
const FENCED_SET: crate::nodes::script::Script =
    crate::nodes::script::lua!("primitives/fenced_set.lua");

/// Built once: `Script` hashes its text, and sends EVALSHA with an EVAL fallback.
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(FENCED_SET.text()));

/// Sets `key` to `value` on the connection's Redis server, unless a write with a higher fencing
/// token was already accepted for `key`; returns whether the write was accepted.
///
/// The highest accepted token is kept in `<key>:last-token`. A holder that paused past its lock's
/// validity, while another holder took the lock and wrote with a newer token, is refused here: the
/// resource itself enforces what the lock alone cannot. The same holder may write several times
/// with its token (equal tokens are accepted).
///
/// This is for the common case where the protected resource is itself a key on some Redis server
/// (any server; not necessarily one of the lock's nodes). Other resources apply the same rule: keep
/// the highest token seen and refuse lower ones, atomically with the write. On a Redis Cluster the
/// two keys must share a slot: give `key` a hash tag (`{account:42}:balance`, whose
/// `{account:42}:balance:last-token` hashes alike).
///
/// # Errors
///
/// The connection's or server's error.
///
/// # Cancel safety
///
/// Dropped once the script was sent, the write may still happen (the server runs it whether or
/// not anyone waits for the reply), and whether it was accepted is not known. Call it again with
/// the same token: an equal token is accepted again, so the retry of one holder is harmless.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use redmutex::fenced_set;
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(1);
/// let client = redis::Client::open(cluster.node(0).url())?;
/// let mut store = client.get_multiplexed_async_connection().await?;
/// assert!(fenced_set(&mut store, "balance", "100", 7).await?);
/// assert!(fenced_set(&mut store, "balance", "90", 8).await?);
/// // A stale holder with an older token is refused; the newer write stays.
/// assert!(!fenced_set(&mut store, "balance", "0", 7).await?);
/// # Ok(())
/// # }
/// ```
#[doc = include_str!("../../doc/rustdoc-links.md")]
#[doc = include_str!("../../doc/fencing.md")]
pub async fn fenced_set<C>(
    connection: &mut C,
    key: &str,
    value: &str,
    token: u64,
) -> RedisResult<bool>
where
    C: ConnectionLike + Send,
{
    let accepted: i64 = SCRIPT
        .key(key)
        .key(format!("{key}:last-token"))
        .arg(value)
        .arg(token)
        .invoke_async(connection)
        .await?;
    Ok(accepted == 1)
}
