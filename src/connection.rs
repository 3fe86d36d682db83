//! The connection to one node, shared by every mutex and lock of a client.

use std::fmt;

use futures::future::Either;
use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::{Cmd, RedisResult, Value};

use crate::scripts::ALL;

/// A connection to one node, shared by every mutex and lock of a [`Redlock`](crate::Redlock).
///
/// Built from the redis crate's [`ConnectionManager`] (reconnects by itself; recommended) or a plain
/// [`MultiplexedConnection`] (never reconnects). Either way redmutex bounds every call by its own
/// per-node timeout, so build them **without** response and connect timeouts of their own
/// (`set_response_timeout(None)` and `set_connection_timeout(None)` on `ConnectionManagerConfig` or
/// `AsyncConnectionConfig`): the redis crate's defaults (500 ms, 1 s) would cut node calls short.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let cluster = testenv::Cluster::start(3);
/// use redis::aio::{ConnectionManager, ConnectionManagerConfig};
/// use redmutex::{NodeConnection, Redlock};
///
/// let mut connections = Vec::new();
/// for url in cluster.urls() {
///     let config = ConnectionManagerConfig::new()
///         .set_response_timeout(None)
///         .set_connection_timeout(None);
///     let manager = ConnectionManager::new_with_config(redis::Client::open(url)?, config).await?;
///     connections.push(NodeConnection::from(manager));
/// }
/// let redlock = Redlock::new(connections)?;
/// # let lock = redlock.new_mutex("doc:node-connection").lock().await?;
/// # lock.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct NodeConnection(Connection);

#[derive(Clone)]
enum Connection {
    Manager(ConnectionManager),
    Multiplexed(MultiplexedConnection),
}

impl From<ConnectionManager> for NodeConnection {
    fn from(manager: ConnectionManager) -> Self {
        NodeConnection(Connection::Manager(manager))
    }
}

impl From<MultiplexedConnection> for NodeConnection {
    fn from(connection: MultiplexedConnection) -> Self {
        NodeConnection(Connection::Multiplexed(connection))
    }
}

impl fmt::Debug for NodeConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The redis crate's own Debug output may include connection details; show the kind only.
        match self.0 {
            Connection::Manager(_) => f.write_str("NodeConnection(ConnectionManager)"),
            Connection::Multiplexed(_) => f.write_str("NodeConnection(MultiplexedConnection)"),
        }
    }
}

impl NodeConnection {
    /// Sends one command. Not an `async fn`: each async layer around the redis crate's large
    /// future costs a copy of it and a state machine on every node call. Errors the node replied
    /// with come back as [`Value::ServerError`].
    pub(crate) fn send<'a>(
        &'a mut self,
        cmd: &'a Cmd,
    ) -> impl Future<Output = RedisResult<Value>> + Send + 'a {
        match &mut self.0 {
            Connection::Manager(c) => Either::Left(c.send_packed_command(cmd)),
            Connection::Multiplexed(c) => Either::Right(c.send_packed_command(cmd)),
        }
    }

    /// Loads the scripts into the node's cache (SCRIPT LOAD is idempotent).
    pub(crate) async fn load_scripts(&mut self) -> RedisResult<()> {
        for script in ALL {
            self.send(redis::cmd("SCRIPT").arg("LOAD").arg(script))
                .await?
                .extract_error()?;
        }
        Ok(())
    }
}
