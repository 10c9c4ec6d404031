//! The `paiod_connection` check: fuzzed bytes are what a peer sends over
//! one connection to paiod's real connection handler
//! (`paio_control::server::serve_stream`), with a peer that reads its
//! replies, never reads them, or reads them slowly. Shared by the fuzz
//! target (`fuzz_targets/paiod_connection.rs`) and the stable replay
//! `crates/paio-control/tests/fuzz_connection.rs`, which includes this file
//! with `#[path]`: only `paio`, `paio_control`, `serde_json` and `tokio`
//! may be used here.
//!
//! Input: byte 0 picks the peer (`% 3`: 0 reads, 1 never reads, 2 reads
//! one small piece per millisecond); byte 1 the size of the pieces the
//! rest is written in (1 to 256 bytes); the rest is the byte stream.
//!
//! Invariants (a panic is a finding):
//! - the handler ends within [`END_WITHIN`] of the peer closing its side,
//!   whatever was sent and whether the peer read (no hang);
//! - afterwards paiod holds nothing of the connection: no stage, no
//!   waiting or ctl slot;
//! - everything paiod sent is whole frames of at most the frame limit, each
//!   a protocol message or a ctl reply, in total bounded by the outbox's
//!   hard limit.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use paio_control::config::ConnectionLimits;
use paio_control::conns::Limits;
use paio_control::server::{serve_stream, Shared, State};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// How long the handler may take to end once the peer closed its side.
pub const END_WITHIN: Duration = Duration::from_secs(5);

/// A paiod state with the short timeouts of a fuzz run.
fn state() -> Shared {
    let limits = Limits::resolve(
        &ConnectionLimits {
            hello_timeout: Some(Duration::from_millis(200)),
            drain_timeout: Some(Duration::from_millis(50)),
            ..Default::default()
        },
        1 << 20,
    )
    .expect("limits fit");
    Arc::new(Mutex::new(State::new(
        paio_control::config::PolicyConfig::default().build(),
        Duration::from_millis(100),
        Duration::from_secs(2),
        limits,
    )))
}

/// Checks one input (see the module's doc).
pub fn check_paiod_connection(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let (mode, piece, stream) = (data[0] % 3, usize::from(data[1]) + 1, &data[2..]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        let state = state();
        let (ours, theirs) = UnixStream::pair().expect("a socket pair");
        let handler = tokio::spawn(serve_stream(theirs, state.clone()));
        let (mut rd, mut wr) = ours.into_split();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            if mode == 1 {
                // Never reads; keeps its side open until the end.
                std::future::pending::<()>().await;
            }
            let mut buf = [0u8; 4096];
            loop {
                let want = if mode == 2 { 64 } else { buf.len() };
                match rd.read(&mut buf[..want]).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
                if mode == 2 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            got
        });
        for chunk in stream.chunks(piece) {
            // paiod may stop reading (backpressure) or close: both are fine.
            match tokio::time::timeout(Duration::from_millis(500), wr.write_all(chunk)).await {
                Ok(Ok(())) => {}
                _ => break,
            }
        }
        let _ = wr.shutdown().await;
        drop(wr);
        let ended = tokio::time::timeout(END_WITHIN, handler).await;
        assert!(
            ended.is_ok(),
            "paiod's handler did not end after the peer closed"
        );
        ended.unwrap().expect("the handler did not panic");
        {
            let st = state.lock().unwrap_or_else(|e| e.into_inner());
            let report = st.status();
            assert!(report.stages.is_empty(), "a stage outlived its connection");
            let c = report.connections.expect("connections reported");
            assert_eq!((c.waiting, c.ctl), (0, 0), "slots outlived the connection");
        }
        if mode == 1 {
            reader.abort();
            return;
        }
        let got = reader.await.expect("the reader did not panic");
        check_replies(&got);
    });
}

/// Everything paiod sent: whole frames, each a message or a ctl reply.
pub fn check_replies(mut got: &[u8]) {
    assert!(
        got.len() <= paio_control::outbox::HARD_LIMIT + paio::protocol::DEFAULT_MAX_FRAME,
        "paiod sent {} bytes to one connection",
        got.len()
    );
    while !got.is_empty() {
        assert!(got.len() >= 4, "a partial frame header at the end");
        let len = u32::from_be_bytes([got[0], got[1], got[2], got[3]]) as usize;
        assert!(
            len <= 16 * paio::protocol::DEFAULT_MAX_FRAME,
            "frame of {len} bytes"
        );
        assert!(got.len() >= 4 + len, "a partial frame at the end");
        let payload = &got[4..4 + len];
        let as_message = paio::protocol::decode(payload).is_ok();
        let as_reply = serde_json::from_slice::<paio_control::ctl::CtlReply>(payload).is_ok();
        assert!(
            as_message || as_reply,
            "paiod sent a frame that is neither a message nor a ctl reply: {}",
            String::from_utf8_lossy(payload)
        );
        got = &got[4 + len..];
    }
}
