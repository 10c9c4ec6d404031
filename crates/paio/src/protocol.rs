//! The control protocol between stages and the control plane (`paiod`).
//!
//! Specified in `docs/protocol.md`. Over a stream socket, each message is a
//! *frame*: a 4-byte big-endian payload length `N` followed by `N` bytes of
//! UTF-8 JSON, one object whose `"type"` field names the message. A session
//! starts with the stage's [`Message::Hello`] carrying [`VERSION`]; the
//! control plane answers [`Message::Welcome`] or [`Message::Error`].
//!
//! Decoding never panics and never allocates more than the frame limit: a
//! frame longer than the limit is skipped (its bytes are read and dropped)
//! and reported as [`FrameError::TooLarge`], after which the stream is still
//! in sync; a frame that is not a valid message is reported as
//! [`DecodeError`] with the path of the offending field.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use crate::rule::Rule;
use crate::stage::StageInfo;
use crate::stats::StageStats;

/// The protocol version this library speaks.
pub const VERSION: u32 = 1;

/// Default largest payload accepted, in bytes (1 MiB): far above any real
/// message (a stage's statistics with 100 channels is ~100 KiB).
pub const DEFAULT_MAX_FRAME: usize = 1 << 20;

/// Bytes of the length prefix.
pub const HEADER_LEN: usize = 4;

/// Why a request failed, in an [`Message::Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The frame exceeded the receiver's limit (it was skipped).
    TooLarge,
    /// The payload was not a valid message.
    BadMessage,
    /// The message is valid but not expected now (e.g. rules before hello).
    Unexpected,
    /// The peer speaks a protocol version the receiver does not.
    Version,
    /// A rule was rejected; the stage is unchanged (rules are transactional).
    Rule,
    /// The peer is not allowed (credentials or ownership mismatch).
    Denied,
    /// A cap of the receiver's is reached (e.g. paiod's stages per uid);
    /// the message says which and how to raise it. Retry later.
    Limit,
    /// Anything else (the message says what).
    Internal,
}

/// What a stage tells the control plane about itself when it registers
/// (`stage_info`): identity and configuration from [`StageInfo`] plus the
/// process facts the control plane groups and reports by. The control plane
/// takes pid, uid and gid from the kernel (`SO_PEERCRED`), not from here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Must be [`VERSION`].
    pub version: u32,
    /// The parent process id.
    pub ppid: u32,
    /// The user name (or numeric uid) the process runs as.
    pub user: String,
    /// The executable, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    /// Name, pid, host, labels, classifiers, channels and objects.
    pub info: StageInfo,
}

/// One protocol message. JSON objects tagged by `"type"`, e.g.
/// `{"type":"collect","id":7}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    /// Stage → control plane, first message of a session.
    Hello(Box<Hello>),
    /// Control plane → stage: registration accepted.
    Welcome {
        /// The protocol version the control plane speaks.
        version: u32,
        /// The control plane's id for this registration.
        stage_id: u64,
        /// The control period, in milliseconds (informative).
        period_ms: u64,
    },
    /// Control plane → stage: rules applied as one transaction; answered by
    /// [`Message::Ack`] or [`Message::Error`] with code `rule`.
    Rules {
        /// Request id, echoed in the answer.
        id: u64,
        /// The rules, in order.
        rules: Vec<Rule>,
    },
    /// Stage → control plane: the rules of request `id` took effect.
    Ack {
        /// The request's id.
        id: u64,
    },
    /// Control plane → stage: asks for statistics; answered by
    /// [`Message::Stats`].
    Collect {
        /// Request id, echoed in the answer.
        id: u64,
    },
    /// Stage → control plane: statistics since the previous collection.
    Stats {
        /// The request's id.
        id: u64,
        /// The statistics.
        stats: Box<StageStats>,
    },
    /// Either direction: a request failed or a message was refused.
    Error {
        /// The request's id, when the error answers one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<u64>,
        /// What kind of failure.
        code: ErrorCode,
        /// What was expected and what was found.
        message: String,
        /// For `rule` errors: the index of the failing rule.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        index: Option<usize>,
    },
    /// Either direction: the sender closes the session.
    Goodbye {
        /// Why, for the log.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

impl Message {
    /// An error message answering request `id`.
    pub fn error(id: Option<u64>, code: ErrorCode, message: impl Into<String>) -> Message {
        Message::Error {
            id,
            code,
            message: message.into(),
            index: None,
        }
    }
}

/// A frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The announced payload exceeds the limit; the payload was skipped.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Announced payload length.
        len: usize,
        /// The receiver's limit.
        max: usize,
    },
    /// The stream ended in the middle of a frame.
    #[error("connection closed in the middle of a frame ({got} of {want} bytes)")]
    Truncated {
        /// Bytes of the frame received.
        got: usize,
        /// Bytes the frame needed.
        want: usize,
    },
    /// An I/O error of the stream.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// A payload was not a valid message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad message at `{path}`: {message}")]
pub struct DecodeError {
    /// Path of the offending field (`.` for the message itself).
    pub path: String,
    /// What was expected and what was found.
    pub message: String,
}

/// Parses one payload into a [`Message`]. Errors name the message type and,
/// where serde can tell, the path of the offending field.
pub fn decode(payload: &[u8]) -> Result<Message, DecodeError> {
    // Fast paths for valid messages; the slower one below says where an
    // invalid message is wrong. `stats`, the most frequent message, written
    // with its tag first (as every encoder here does), skips the buffering
    // of an internally tagged enum.
    if payload.starts_with(br#"{"type":"stats","#) {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct StatsFrame {
            #[serde(rename = "type")]
            _kind: serde::de::IgnoredAny,
            id: u64,
            stats: Box<StageStats>,
        }
        if let Ok(f) = serde_json::from_slice::<StatsFrame>(payload) {
            return Ok(Message::Stats {
                id: f.id,
                stats: f.stats,
            });
        }
    }
    if let Ok(m) = serde_json::from_slice::<Message>(payload) {
        return Ok(m);
    }
    let value: serde_json::Value = serde_json::from_slice(payload).map_err(|e| DecodeError {
        path: ".".into(),
        message: format!("not JSON: {e}"),
    })?;
    let kind = match value.get("type") {
        Some(serde_json::Value::String(t)) => t.clone(),
        Some(_) => {
            return Err(DecodeError {
                path: "type".into(),
                message: "expected a string naming the message".into(),
            })
        }
        None => {
            return Err(DecodeError {
                path: ".".into(),
                message: "expected a JSON object with a \"type\" field".into(),
            })
        }
    };
    // The tag's buffering hides where a field is wrong: the parts that are
    // types of their own (a hello, a report, a rule list) are decoded again
    // alone, to name the field.
    let located = match kind.as_str() {
        "hello" => {
            let mut rest = value.clone();
            if let Some(o) = rest.as_object_mut() {
                o.remove("type");
            }
            locate::<Hello>(rest, "")
        }
        "stats" => value
            .get("stats")
            .and_then(|v| locate::<StageStats>(v.clone(), "stats")),
        "rules" => value
            .get("rules")
            .and_then(|v| locate::<Vec<Rule>>(v.clone(), "rules")),
        _ => None,
    };
    let e = match serde_path_to_error::deserialize::<_, Message>(value) {
        Ok(m) => return Ok(m),
        Err(e) => e,
    };
    let (path, message) = located.unwrap_or_else(|| (e.path().to_string(), e.inner().to_string()));
    Err(DecodeError {
        path,
        message: format!("in a `{kind}` message: {message}"),
    })
}

/// Where `value` fails to decode as a `T`, the path under `prefix` and the
/// error, or `None` when it decodes.
fn locate<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
    prefix: &str,
) -> Option<(String, String)> {
    let e = serde_path_to_error::deserialize::<_, T>(value).err()?;
    let path = e.path().to_string();
    let path = match (prefix, path.as_str()) {
        ("", p) => p.to_string(),
        (pre, ".") => pre.to_string(),
        (pre, p) if p.starts_with('[') => format!("{pre}{p}"),
        (pre, p) => format!("{pre}.{p}"),
    };
    Some((path, e.inner().to_string()))
}

/// Serializes `msg` as one frame (header and payload).
pub fn encode(msg: &Message) -> Vec<u8> {
    encode_value(msg)
}

/// Serializes any serde value as one frame (used for control-plane
/// administration messages, which share the framing).
pub fn encode_value<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_LEN];
    // Serializing these types to a Vec cannot fail: no maps with non-string
    // keys, no non-finite floats rejected by serde_json (they become null).
    serde_json::to_writer(&mut out, value).expect("serializing a protocol value");
    let len = u32::try_from(out.len() - HEADER_LEN).unwrap_or(u32::MAX);
    out[..HEADER_LEN].copy_from_slice(&len.to_be_bytes());
    out
}

/// Incremental frame splitter for non-blocking or async readers: feed it the
/// bytes as they arrive with [`FrameDecoder::push`], take whole payloads with
/// [`FrameDecoder::next_frame`]. Memory is bounded by the limit.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    max: usize,
    /// Bytes of an oversized payload still to drop.
    skip: usize,
}

/// Buffer capacity a [`FrameDecoder`] keeps once it holds no bytes.
const RETAINED_BUF: usize = 64 * 1024;

impl FrameDecoder {
    /// A decoder accepting payloads up to `max` bytes. Its buffer grows to
    /// the largest frame in flight and is released when empty.
    pub fn new(max: usize) -> Self {
        Self {
            buf: Vec::new(),
            max,
            skip: 0,
        }
    }

    /// Appends received bytes (an oversized payload's bytes are dropped as
    /// they arrive, never buffered). The buffer takes a frame longer than
    /// what it holds at its full length at once, as its header says, rather
    /// than doubling past it: an unfinished frame of `n` bytes holds `n`.
    pub fn push(&mut self, mut bytes: &[u8]) {
        if self.skip > 0 {
            let n = self.skip.min(bytes.len());
            self.skip -= n;
            bytes = &bytes[n..];
        }
        let after = self.buf.len() + bytes.len();
        if after > self.buf.capacity() {
            let mut header = [0u8; HEADER_LEN];
            let frame = (after >= HEADER_LEN)
                .then(|| {
                    let have = self.buf.len().min(HEADER_LEN);
                    header[..have].copy_from_slice(&self.buf[..have]);
                    header[have..].copy_from_slice(&bytes[..HEADER_LEN - have]);
                    u32::from_be_bytes(header) as usize
                })
                .filter(|&len| len <= self.max)
                .map_or(0, |len| HEADER_LEN + len);
            if frame > after {
                self.buf.reserve_exact(frame - self.buf.len());
            } else {
                self.buf.reserve(bytes.len());
            }
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole payload, `Ok(None)` when more bytes are needed, or
    /// [`FrameError::TooLarge`] once per oversized frame (whose bytes are
    /// then skipped, so the following frames decode normally).
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        if self.skip > 0 || self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&self.buf[..HEADER_LEN]);
        let len = u32::from_be_bytes(header) as usize;
        if len > self.max {
            let have = self.buf.len() - HEADER_LEN;
            let dropped = have.min(len);
            self.buf.drain(..HEADER_LEN + dropped);
            self.skip = len - dropped;
            return Err(FrameError::TooLarge { len, max: self.max });
        }
        if self.buf.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let payload = self.buf[HEADER_LEN..HEADER_LEN + len].to_vec();
        self.buf.drain(..HEADER_LEN + len);
        if self.buf.is_empty() && self.buf.capacity() > RETAINED_BUF {
            // A large frame's buffer is not kept by an idle connection.
            self.buf = Vec::new();
        }
        Ok(Some(payload))
    }

    /// Bytes of an unfinished frame held (for end-of-stream diagnostics).
    pub fn pending(&self) -> usize {
        self.buf.len() + self.skip
    }

    /// Bytes received and held in the buffer, not yet returned as frames
    /// (an oversized frame's skipped bytes are not held).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Whether the decoder is still discarding the payload of an oversized
    /// frame it already reported (at end of stream: that frame was cut
    /// short).
    pub fn skipping(&self) -> bool {
        self.skip > 0
    }
}

/// Reads one whole frame's payload from a blocking reader. `Ok(None)` at a
/// clean end of stream (no byte of a new frame read). A frame above `max` is
/// read and dropped and reported as [`FrameError::TooLarge`]; the stream
/// stays in sync.
pub fn read_frame<R: Read>(r: &mut R, max: usize) -> Result<Option<Vec<u8>>, FrameError> {
    read_frame_or_drop(r, max, true)
}

/// [`read_frame`] for a reader that ends the connection after one frame (a
/// client waiting for a reply): a frame above `max` is reported as
/// [`FrameError::TooLarge`] at once, without reading it (a server that is
/// not a paio peer may announce gigabytes).
pub fn read_one_frame<R: Read>(r: &mut R, max: usize) -> Result<Option<Vec<u8>>, FrameError> {
    read_frame_or_drop(r, max, false)
}

fn read_frame_or_drop<R: Read>(
    r: &mut R,
    max: usize,
    drop_oversized: bool,
) -> Result<Option<Vec<u8>>, FrameError> {
    let mut header = [0u8; HEADER_LEN];
    let got = read_full(r, &mut header)?;
    if got == 0 {
        return Ok(None);
    }
    if got < HEADER_LEN {
        return Err(FrameError::Truncated {
            got,
            want: HEADER_LEN,
        });
    }
    let len = u32::from_be_bytes(header) as usize;
    if len > max && !drop_oversized {
        return Err(FrameError::TooLarge { len, max });
    }
    if len > max {
        let copied = io::copy(&mut r.take(len as u64), &mut io::sink())? as usize;
        if copied < len {
            return Err(FrameError::Truncated {
                got: HEADER_LEN + copied,
                want: HEADER_LEN + len,
            });
        }
        return Err(FrameError::TooLarge { len, max });
    }
    let mut payload = vec![0u8; len];
    let got = read_full(r, &mut payload)?;
    if got < len {
        return Err(FrameError::Truncated {
            got: HEADER_LEN + got,
            want: HEADER_LEN + len,
        });
    }
    Ok(Some(payload))
}

/// Fills `buf` unless the stream ends first; returns the bytes read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut off = 0;
    while off < buf.len() {
        match r.read(&mut buf[off..]) {
            Ok(0) => break,
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(off)
}

/// Writes `msg` as one frame to a blocking writer.
pub fn write_message<W: Write>(w: &mut W, msg: &Message) -> io::Result<()> {
    w.write_all(&encode(msg))?;
    w.flush()
}

/// Labels as the protocol carries them.
pub type Labels = BTreeMap<String, String>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stage;
    use proptest::prelude::*;

    fn sample_messages() -> Vec<Message> {
        let stage = Stage::from_policy_str(
            r#"
            [[channel]]
            name = "read"
            match = { request_type = "read" }
            "#,
            "<test>",
        )
        .unwrap();
        vec![
            Message::Hello(Box::new(Hello {
                version: VERSION,
                ppid: 1,
                user: "root".into(),
                exe: Some("/bin/dd".into()),
                info: stage.info(),
            })),
            Message::Welcome {
                version: VERSION,
                stage_id: 3,
                period_ms: 100,
            },
            Message::Rules {
                id: 9,
                rules: vec![Rule::CreateChannel { name: "x".into() }],
            },
            Message::Ack { id: 9 },
            Message::Collect { id: 10 },
            Message::Stats {
                id: 10,
                stats: Box::new(stage.collect()),
            },
            Message::error(Some(4), ErrorCode::Rule, "no channel x"),
            Message::Goodbye { reason: None },
        ]
    }

    #[test]
    fn every_message_round_trips_through_a_frame() {
        for m in sample_messages() {
            let frame = encode(&m);
            let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
            assert_eq!(len, frame.len() - 4);
            let back = decode(&frame[4..]).unwrap();
            assert_eq!(back, m);
            let mut r = &frame[..];
            let payload = read_frame(&mut r, DEFAULT_MAX_FRAME).unwrap().unwrap();
            assert_eq!(decode(&payload).unwrap(), m);
            assert!(read_frame(&mut r, DEFAULT_MAX_FRAME).unwrap().is_none());
        }
    }

    #[test]
    fn stats_decode_alike_with_and_without_the_fast_path() {
        let stage =
            crate::Stage::from_policy_str("[[channel]]\nname = \"read\"\nmatch = {}\n", "<t>")
                .unwrap();
        let m = Message::Stats {
            id: 9,
            stats: Box::new(stage.collect()),
        };
        let payload = &encode(&m)[HEADER_LEN..];
        assert!(payload.starts_with(br#"{"type":"stats","#));
        assert_eq!(decode(payload).unwrap(), m);
        // Tag elsewhere: the general path.
        let mut v: serde_json::Value = serde_json::from_slice(payload).unwrap();
        let obj = v.as_object_mut().unwrap();
        let kind = obj.remove("type").unwrap();
        obj.insert("type".into(), kind);
        let moved = serde_json::to_vec(&v).unwrap();
        assert!(!moved.starts_with(br#"{"type""#));
        assert_eq!(decode(&moved).unwrap(), m);
        // An unknown field is refused on both paths, with where it is.
        let bad = [&payload[..payload.len() - 1], br#","extra":1}"#].concat();
        let e = decode(&bad).unwrap_err();
        assert!(e.message.contains("extra"), "{e:?}");
    }

    #[test]
    fn a_large_frames_buffer_is_released_once_handled() {
        let mut d = FrameDecoder::new(DEFAULT_MAX_FRAME);
        let big = encode(&Message::error(
            None,
            ErrorCode::Internal,
            "x".repeat(512 << 10),
        ));
        // Pushed in reads of 64 KiB, it holds its own length, not the
        // next power of two.
        for chunk in big.chunks(64 << 10) {
            d.push(chunk);
            assert_eq!(d.buf.capacity(), big.len());
        }
        assert!(d.next_frame().unwrap().is_some());
        assert_eq!(d.buf.capacity(), 0);
        // Small frames keep their (small) buffer: no reallocation per frame.
        let small = encode(&Message::Collect { id: 1 });
        d.push(&[small.clone(), small].concat());
        assert!(d.next_frame().unwrap().is_some());
        assert!(d.buf.capacity() > 0);
    }

    #[test]
    fn the_wire_format_is_the_documented_one() {
        let frame = encode(&Message::Collect { id: 7 });
        assert_eq!(&frame[..4], &[0, 0, 0, 25]);
        assert_eq!(&frame[4..], br#"{"type":"collect","id":7}"#);
        let m = decode(br#"{"type":"rules","id":1,"rules":[{"rule":"configure","channel":"read","object":"paiod","config":{"kind":"drl","rate":"10MiB/s"}}]}"#).unwrap();
        assert!(matches!(m, Message::Rules { id: 1, ref rules } if rules.len() == 1));
    }

    #[test]
    fn bad_messages_name_the_field() {
        let e = decode(br#"{"type":"collect","id":"x"}"#).unwrap_err();
        assert!(
            e.message.contains("`collect`") && e.message.contains("u64"),
            "{e}"
        );
        let e = decode(br#"{"type":7}"#).unwrap_err();
        assert_eq!(e.path, "type");
        let e = decode(br#"[1,2]"#).unwrap_err();
        assert!(e.message.contains("\"type\""), "{e}");
        let e = decode(br#"{"type":"launch"}"#).unwrap_err();
        assert!(e.message.contains("launch"), "{e}");
        // Inside a hello, a report and a rule list, the path of the field.
        let stage =
            crate::Stage::from_policy_str("[[channel]]\nname = \"read\"\nmatch = {}\n", "<t>")
                .unwrap();
        let hello = Message::Hello(Box::new(Hello {
            version: VERSION,
            ppid: 1,
            user: "u".into(),
            exe: None,
            info: stage.info(),
        }));
        let stats = Message::Stats {
            id: 1,
            stats: Box::new(stage.collect()),
        };
        let spoiled = |m: &Message, spoil: &dyn Fn(&mut serde_json::Value)| {
            let mut v = serde_json::to_value(m).unwrap();
            spoil(&mut v);
            decode(&serde_json::to_vec(&v).unwrap()).unwrap_err()
        };
        let e = spoiled(&hello, &|v| v["ppid"] = "x".into());
        assert_eq!(e.path, "ppid", "{e}");
        assert!(e.message.contains("`hello`"), "{e}");
        let e = spoiled(&hello, &|v| v["info"]["channels"][0]["name"] = 3.into());
        assert_eq!(e.path, "info.channels[0].name", "{e}");
        let e = spoiled(&stats, &|v| {
            v["stats"]["channels"][0]["ops"] = "many".into()
        });
        // (A channel's counts are flattened into it: serde names the channel.)
        assert_eq!(e.path, "stats.channels[0]", "{e}");
        assert!(e.message.contains("\"many\""), "{e}");
        let e = decode(br#"{"type":"rules","id":1,"rules":[{"rule":"configure","channel":"read","object":"o","config":{"kind":"drl","rate":7}}]}"#).unwrap_err();
        assert!(e.path.starts_with("rules[0]"), "{e}");
        let e = decode(br#"{"type":"ack","id":1,"extra":2}"#).unwrap_err();
        assert!(e.message.contains("extra"), "{e}");
        assert!(decode(b"\xff\xfe").is_err());
        assert!(decode(b"").is_err());
    }

    #[test]
    fn an_oversized_frame_is_skipped_and_the_stream_stays_in_sync() {
        let mut bytes = vec![0, 0, 0, 100];
        bytes.extend(std::iter::repeat_n(b'x', 100));
        bytes.extend(encode(&Message::Ack { id: 5 }));
        // Blocking reader.
        let mut r = &bytes[..];
        assert!(matches!(
            read_frame(&mut r, 50),
            Err(FrameError::TooLarge { len: 100, max: 50 })
        ));
        let p = read_frame(&mut r, 50).unwrap().unwrap();
        assert_eq!(decode(&p).unwrap(), Message::Ack { id: 5 });
        // Incremental decoder, fed one byte at a time.
        let mut d = FrameDecoder::new(50);
        let mut errors = 0;
        let mut frames = Vec::new();
        for b in &bytes {
            d.push(std::slice::from_ref(b));
            loop {
                match d.next_frame() {
                    Ok(Some(p)) => frames.push(p),
                    Ok(None) => break,
                    Err(FrameError::TooLarge { .. }) => errors += 1,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        assert_eq!(errors, 1);
        assert_eq!(frames.len(), 1);
        assert_eq!(d.pending(), 0);
    }

    #[test]
    fn truncated_frames_are_reported() {
        let frame = encode(&Message::Ack { id: 5 });
        let mut r = &frame[..frame.len() - 1];
        assert!(matches!(
            read_frame(&mut r, DEFAULT_MAX_FRAME),
            Err(FrameError::Truncated { .. })
        ));
        let mut r = &frame[..2];
        assert!(matches!(
            read_frame(&mut r, DEFAULT_MAX_FRAME),
            Err(FrameError::Truncated { got: 2, want: 4 })
        ));
    }

    proptest! {
        #[test]
        fn the_decoder_never_panics_and_respects_the_limit(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..32),
        ) {
            let mut d = FrameDecoder::new(128);
            for c in &chunks {
                d.push(c);
                loop {
                    match d.next_frame() {
                        Ok(Some(p)) => {
                            prop_assert!(p.len() <= 128);
                            let _ = decode(&p);
                        }
                        Ok(None) => break,
                        Err(FrameError::TooLarge { len, .. }) => prop_assert!(len > 128),
                        Err(e) => prop_assert!(false, "unexpected {}", e),
                    }
                }
                // Never more than one incomplete frame is buffered.
                prop_assert!(d.buf.len() < HEADER_LEN + 128);
            }
        }

        #[test]
        fn split_points_do_not_change_the_frames(split in 0usize..200) {
            let mut bytes = Vec::new();
            for m in [Message::Ack { id: 1 }, Message::Collect { id: 2 }, Message::Goodbye { reason: Some("bye".into()) }] {
                bytes.extend(encode(&m));
            }
            let split = split.min(bytes.len());
            let mut d = FrameDecoder::new(DEFAULT_MAX_FRAME);
            d.push(&bytes[..split]);
            let mut got = Vec::new();
            while let Some(p) = d.next_frame().unwrap() { got.push(decode(&p).unwrap()); }
            d.push(&bytes[split..]);
            while let Some(p) = d.next_frame().unwrap() { got.push(decode(&p).unwrap()); }
            prop_assert_eq!(got.len(), 3);
        }
    }
}
