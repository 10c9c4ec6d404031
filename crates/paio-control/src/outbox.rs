//! A connection's outgoing frames, bounded in bytes.
//!
//! Everything paiod sends a peer (replies, rules, collect requests) goes
//! through the peer's [`Outbox`] to one writer task. The bytes queued and
//! not yet written are counted:
//!
//! - above [`SOFT_LIMIT`] the connection stops reading the peer's requests
//!   until the queue drains (backpressure: a peer that sends without
//!   reading gets no further replies generated), and is closed if it has
//!   not drained within the configured drain timeout;
//! - a frame that would take the queue above [`HARD_LIMIT`] is not queued
//!   and the connection is closed (frames paiod sends on its own, rules
//!   and collects, to a stage that stopped reading).
//!
//! So a connection never holds more than `HARD_LIMIT` bytes of replies, and
//! in practice `SOFT_LIMIT` plus one reply.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use paio::protocol::{self, Message};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, Notify};

/// Queued bytes above which a connection's requests are no longer read.
pub const SOFT_LIMIT: usize = 1 << 20;

/// Queued bytes a connection may never exceed; a frame that would is
/// dropped with the connection. Leaves room for one status reply of
/// thousands of stages above [`SOFT_LIMIT`].
pub const HARD_LIMIT: usize = 32 << 20;

struct Shared {
    queued: AtomicUsize,
    closed: AtomicBool,
    overflowed: AtomicBool,
    /// Wakes waiters when frames were written or the outbox closed.
    drained: Notify,
    /// Wakes the connection's reader to close the connection.
    kick: Notify,
}

/// The sending side; cheap to clone.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    shared: Arc<Shared>,
}

/// The writer task's side: see [`Outbox::new`].
pub struct Receiver {
    rx: mpsc::UnboundedReceiver<Vec<u8>>,
    shared: Arc<Shared>,
}

impl Outbox {
    /// An empty outbox and the receiver its writer task drains.
    pub fn new() -> (Outbox, Receiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            queued: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            overflowed: AtomicBool::new(false),
            drained: Notify::new(),
            kick: Notify::new(),
        });
        (
            Outbox {
                tx,
                shared: shared.clone(),
            },
            Receiver { rx, shared },
        )
    }

    /// Queues `m`; false (and the connection closing) when it would exceed
    /// [`HARD_LIMIT`] or the connection is gone.
    pub fn send(&self, m: &Message) -> bool {
        self.send_frame(protocol::encode(m))
    }

    /// Queues an encoded frame, as [`Outbox::send`].
    pub fn send_frame(&self, frame: Vec<u8>) -> bool {
        if self.is_closed() {
            return false;
        }
        let len = frame.len();
        let before = self.shared.queued.fetch_add(len, Ordering::AcqRel);
        if before + len > HARD_LIMIT {
            self.shared.queued.fetch_sub(len, Ordering::AcqRel);
            tracing::debug!("outbox over {HARD_LIMIT} bytes; closing the connection");
            self.shared.overflowed.store(true, Ordering::Release);
            self.close();
            return false;
        }
        if self.tx.send(frame).is_err() {
            self.shared.queued.fetch_sub(len, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Bytes queued and not yet written.
    pub fn queued(&self) -> usize {
        self.shared.queued.load(Ordering::Acquire)
    }

    /// Whether a frame was refused for [`HARD_LIMIT`] (and the connection
    /// closed for it).
    pub fn overflowed(&self) -> bool {
        self.shared.overflowed.load(Ordering::Acquire)
    }

    /// Whether the connection is closing or gone.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire) || self.tx.is_closed()
    }

    /// Asks the connection to close (its reader wakes from
    /// [`Outbox::closing`]); frames already queued are still written.
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.kick.notify_one();
        self.shared.drained.notify_waiters();
    }

    /// Completes when [`Outbox::close`] was called (at once if it was
    /// called before).
    pub async fn closing(&self) {
        let notified = self.shared.kick.notified();
        if self.shared.closed.load(Ordering::Acquire) {
            return;
        }
        notified.await;
    }

    /// Waits until at most [`SOFT_LIMIT`] bytes are queued; false if that
    /// took longer than `timeout` or the connection closed meanwhile.
    pub async fn drained(&self, timeout: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.shared.drained.notified();
                if self.is_closed() {
                    return false;
                }
                if self.queued() <= SOFT_LIMIT {
                    return true;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.unwrap_or(false)
    }
}

impl Receiver {
    /// Writes every queued frame to `w` in order until every [`Outbox`] is
    /// dropped or a write fails, then shuts `w` down.
    pub async fn write_all_to(mut self, mut w: impl AsyncWriteExt + Unpin) {
        while let Some(frame) = self.rx.recv().await {
            let ok = w.write_all(&frame).await.is_ok();
            self.shared.queued.fetch_sub(frame.len(), Ordering::AcqRel);
            self.shared.drained.notify_waiters();
            if !ok {
                break;
            }
        }
        self.shared.closed.store(true, Ordering::Release);
        self.shared.kick.notify_one();
        self.shared.drained.notify_waiters();
        let _ = w.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_queue_is_bounded_and_overflow_closes() {
        let (out, _rx) = Outbox::new();
        let frame = vec![0u8; 1 << 20];
        for _ in 0..HARD_LIMIT / frame.len() {
            assert!(out.send_frame(frame.clone()));
        }
        assert_eq!(out.queued(), HARD_LIMIT);
        assert!(!out.is_closed());
        assert!(!out.overflowed());
        assert!(!out.send_frame(vec![0u8; 1]));
        assert!(out.is_closed() && out.overflowed());
        assert_eq!(out.queued(), HARD_LIMIT);
        // Closing wakes the reader even when asked afterwards.
        out.closing().await;
        assert!(!out.send_frame(vec![0u8; 1]));
    }

    #[tokio::test]
    async fn writing_drains_and_wakes_a_waiting_reader() {
        let (out, rx) = Outbox::new();
        for _ in 0..3 {
            assert!(out.send_frame(vec![7u8; SOFT_LIMIT / 2]));
        }
        assert!(!out.drained(Duration::from_millis(20)).await);
        let (client, server) = tokio::io::duplex(64 * 1024);
        let writer = tokio::spawn(rx.write_all_to(server));
        let reader = tokio::spawn(async move {
            let mut client = client;
            let mut got = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut client, &mut got)
                .await
                .unwrap();
            got
        });
        assert!(out.drained(Duration::from_secs(30)).await);
        drop(out);
        writer.await.unwrap();
        let got = reader.await.unwrap();
        assert_eq!(got.len(), 3 * (SOFT_LIMIT / 2));
        assert!(got.iter().all(|&b| b == 7));
    }

    #[tokio::test]
    async fn a_failed_write_closes_the_outbox() {
        let (out, rx) = Outbox::new();
        let (client, server) = tokio::io::duplex(16);
        drop(client);
        assert!(out.send_frame(vec![1u8; 64]));
        rx.write_all_to(server).await;
        assert!(out.is_closed());
        assert_eq!(out.queued(), 0);
        assert!(!out.send(&Message::Collect { id: 1 }));
    }
}
