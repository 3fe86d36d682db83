//! What `redmutex` and its enforcer say to each other over their socket: fixed frames of nine
//! bytes, a tag and a little-endian number.
//!
//! `redmutex` sends [`Order`]s: the lease's validity after every renewal (as `CLOCK_MONOTONIC`,
//! see [`Mono`]), that it is lost, signals to pass on, Ctrl-Z. The enforcer sends [`Report`]s:
//! COMMAND started (its pid, which is its process group) or could not start, and how it ended.
//! The socket's end of file is a message too: the other process is gone.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::clock::Mono;

/// The size of every frame.
pub const FRAME: usize = 9;

/// From `redmutex` to the enforcer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The lease is valid until then. The first frame, which carries COMMAND's stdin; then
    /// again after every renewal.
    Valid(Mono),
    /// The lease is lost: end COMMAND (SIGTERM now, SIGKILL after the grace, by the validity's
    /// end at the latest).
    Lost,
    /// Pass this signal on to COMMAND's process group.
    Signal(i32),
    /// `redmutex` is being suspended (Ctrl-Z): stop COMMAND's process group too.
    Suspend,
    /// `redmutex` was continued: continue COMMAND's process group, if the lease still holds.
    Resume,
}

/// How the enforcer ended COMMAND, when it did rather than COMMAND exiting by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// After [`Order::Lost`].
    Told,
    /// No renewal reached the enforcer before the lease's end drew near.
    Overdue,
}

/// From the enforcer to `redmutex`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// COMMAND runs, with this pid; it leads its own process group.
    Started(i32),
    /// COMMAND could not be started: the OS error number.
    NotStarted(i32),
    /// COMMAND and every process of its tree are gone: COMMAND's wait status, and whether the
    /// enforcer ended it.
    Exited { status: i32, cut: Option<Cut> },
}

/// A frame that is not one this side understands: the other side is not our enforcer (or not
/// our `redmutex`).
fn unknown(bytes: [u8; FRAME]) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("unknown frame {bytes:?}"),
    )
}

/// Something sent as one frame.
pub trait Frame: Sized {
    fn encode(&self) -> [u8; FRAME];
    fn decode(bytes: [u8; FRAME]) -> io::Result<Self>;
}

fn frame(tag: u8, number: u64) -> [u8; FRAME] {
    let mut bytes = [0; FRAME];
    bytes[0] = tag;
    bytes[1..].copy_from_slice(&number.to_le_bytes());
    bytes
}

fn split(bytes: [u8; FRAME]) -> (u8, u64) {
    let mut number = [0; 8];
    number.copy_from_slice(&bytes[1..]);
    (bytes[0], u64::from_le_bytes(number))
}

/// An `i32` carried in the frame's number (pids, signals, errno and wait statuses all fit).
fn int(number: u64) -> i32 {
    // The low 32 bits, as they were written: a two's complement round trip.
    number as u32 as i32
}

fn wide(value: i32) -> u64 {
    u64::from(value as u32)
}

impl Frame for Order {
    fn encode(&self) -> [u8; FRAME] {
        match *self {
            Order::Valid(until) => frame(1, until.as_nanos()),
            Order::Lost => frame(2, 0),
            Order::Signal(signal) => frame(3, wide(signal)),
            Order::Suspend => frame(4, 0),
            Order::Resume => frame(5, 0),
        }
    }

    fn decode(bytes: [u8; FRAME]) -> io::Result<Self> {
        Ok(match split(bytes) {
            (1, nanos) => Order::Valid(Mono::from_nanos(nanos)),
            (2, _) => Order::Lost,
            (3, signal) => Order::Signal(int(signal)),
            (4, _) => Order::Suspend,
            (5, _) => Order::Resume,
            _ => return Err(unknown(bytes)),
        })
    }
}

impl Frame for Report {
    fn encode(&self) -> [u8; FRAME] {
        match *self {
            Report::Started(pid) => frame(11, wide(pid)),
            Report::NotStarted(errno) => frame(12, wide(errno)),
            Report::Exited { status, cut: None } => frame(13, wide(status)),
            Report::Exited {
                status,
                cut: Some(Cut::Told),
            } => frame(14, wide(status)),
            Report::Exited {
                status,
                cut: Some(Cut::Overdue),
            } => frame(15, wide(status)),
        }
    }

    fn decode(bytes: [u8; FRAME]) -> io::Result<Self> {
        let exited = |status, cut| Report::Exited {
            status: int(status),
            cut,
        };
        Ok(match split(bytes) {
            (11, pid) => Report::Started(int(pid)),
            (12, errno) => Report::NotStarted(int(errno)),
            (13, status) => exited(status, None),
            (14, status) => exited(status, Some(Cut::Told)),
            (15, status) => exited(status, Some(Cut::Overdue)),
            _ => return Err(unknown(bytes)),
        })
    }
}

/// Reads frames from a stream.
pub struct Reader<R> {
    stream: R,
    buffer: [u8; FRAME],
    filled: usize,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub fn new(stream: R) -> Self {
        Reader {
            stream,
            buffer: [0; FRAME],
            filled: 0,
        }
    }

    /// The next frame; `None` at the end of the stream (the other side is gone).
    ///
    /// Cancel safe: bytes read before a cancellation stay for the next call.
    pub async fn next<F: Frame>(&mut self) -> io::Result<Option<F>> {
        while self.filled < FRAME {
            let read = self.stream.read(&mut self.buffer[self.filled..]).await?;
            if read == 0 {
                if self.filled == 0 {
                    return Ok(None);
                }
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.filled += read;
        }
        self.filled = 0;
        F::decode(self.buffer).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_frame_comes_back_as_it_went() {
        let orders = [
            Order::Valid(Mono::from_nanos(1_234_567_890_123)),
            Order::Valid(Mono::from_nanos(u64::MAX)),
            Order::Lost,
            Order::Signal(15),
            Order::Suspend,
            Order::Resume,
        ];
        for order in orders {
            assert_eq!(Order::decode(order.encode()).unwrap(), order);
        }
        let reports = [
            Report::Started(4_194_304),
            Report::NotStarted(2),
            Report::Exited {
                status: 0x8f00,
                cut: None,
            },
            Report::Exited {
                status: 9,
                cut: Some(Cut::Told),
            },
            Report::Exited {
                status: -1,
                cut: Some(Cut::Overdue),
            },
        ];
        for report in reports {
            assert_eq!(Report::decode(report.encode()).unwrap(), report);
        }
    }

    #[test]
    fn a_frame_of_the_other_direction_is_refused() {
        assert!(Order::decode(Report::Started(1).encode()).is_err());
        assert!(Report::decode(Order::Lost.encode()).is_err());
    }

    #[tokio::test]
    async fn frames_split_across_reads_and_a_torn_end() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&Order::Lost.encode());
        bytes.extend_from_slice(&Order::Signal(2).encode());
        // One byte at a time, as a stream may deliver them.
        let stream = one_byte_at_a_time(&bytes);
        let mut reader = Reader::new(stream);
        assert_eq!(reader.next::<Order>().await.unwrap(), Some(Order::Lost));
        assert_eq!(
            reader.next::<Order>().await.unwrap(),
            Some(Order::Signal(2))
        );
        assert_eq!(reader.next::<Order>().await.unwrap(), None);

        let torn = one_byte_at_a_time(&Order::Lost.encode()[..4]);
        let error = Reader::new(torn).next::<Order>().await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }

    /// A reader that hands out one byte per read.
    fn one_byte_at_a_time(bytes: &[u8]) -> impl AsyncRead + Unpin + use<> {
        struct OneByOne(Vec<u8>, usize);
        impl AsyncRead for OneByOne {
            fn poll_read(
                mut self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<io::Result<()>> {
                if self.1 < self.0.len() && buf.remaining() > 0 {
                    let byte = self.0[self.1];
                    buf.put_slice(&[byte]);
                    self.1 += 1;
                }
                std::task::Poll::Ready(Ok(()))
            }
        }
        OneByOne(bytes.to_vec(), 0)
    }
}
