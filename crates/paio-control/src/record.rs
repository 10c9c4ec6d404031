//! Recordings: a run's channel statistics over time, one JSON line per
//! period, written by `paio run --record FILE` (from the processes'
//! statistics files) and `paiod --record FILE` (from the stages it
//! controls), and read by `paio plot`.
//!
//! A line is a [`Sample`]:
//! `{"v":1,"t_s":2.0,"unix_ms":...,"channels":[{"stage":...,"channel":...,
//! "bytes_per_sec":...,"ops_per_sec":...,"wait":{...},"latency":{...}}]}`.
//! `wait` and `latency` are the period's figures ([`WaitSummary`],
//! [`LatencySummary`]). A channel appears in a sample only when its stage
//! reported a new period since the previous sample, so no period is
//! counted twice.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::time::SystemTime;

use paio::stats::{LatencySummary, WaitSummary};
use serde::{Deserialize, Serialize};

use crate::ctl::StatusReport;

/// The format version written in every line.
pub const VERSION: u32 = 1;

/// Samples a [`Recorder`] holds while its file is slow; more are dropped
/// and counted in the next line written.
pub const QUEUE: usize = 64;

/// One period of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The format version ([`VERSION`]).
    pub v: u32,
    /// Seconds since the recording started.
    pub t_s: f64,
    /// Wall-clock time of the sample, in milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// Samples dropped just before this one because the file could not
    /// keep up (absent when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped: u64,
    /// The channels that reported a new period.
    pub channels: Vec<ChannelSample>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One channel's figures for one period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelSample {
    /// The stage: `name[id] pid` (paiod) or `name[exe] pid` (`paio run`).
    pub stage: String,
    /// The channel's name.
    pub channel: String,
    /// Bytes per second over the period.
    pub bytes_per_sec: f64,
    /// Operations per second over the period.
    pub ops_per_sec: f64,
    /// The period's waits in the channel's objects.
    pub wait: WaitSummary,
    /// The period's call latency.
    pub latency: LatencySummary,
}

impl ChannelSample {
    /// The channels of every stage of paiod's `report`.
    pub fn of_report(report: &StatusReport) -> Vec<ChannelSample> {
        report
            .stages
            .iter()
            .flat_map(|s| {
                s.channels.iter().map(move |c| ChannelSample {
                    stage: s.label(),
                    channel: c.name.clone(),
                    bytes_per_sec: c.bytes_per_sec,
                    ops_per_sec: c.ops_per_sec,
                    wait: c.wait,
                    latency: c.latency,
                })
            })
            .collect()
    }
}

/// Why a recording could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The file could not be created, written or read.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The recording.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Not a text file of at most [`MAX_RECORDING_BYTES`].
    #[error("{}: {source}", .path.display())]
    Text {
        /// The recording.
        path: PathBuf,
        /// Why it could not be read.
        source: paio::textfile::TextFileError,
    },
    /// A line is not a sample of this format.
    #[error(
        "{}:{line}: not a paio recording line ({source}); a recording is what \
         `paio run --record` or `paiod --record` writes, one JSON object per line",
        .path.display()
    )]
    Line {
        /// The recording.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// The error.
        source: serde_json::Error,
    },
    /// A line of another format version.
    #[error(
        "{}:{line}: recording format version {found}, this paio reads version {VERSION}",
        .path.display()
    )]
    Version {
        /// The recording.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// The version found.
        found: u32,
    },
    /// No sample at all.
    #[error("{}: the recording has no sample (did the run last a period?)", .path.display())]
    Empty {
        /// The recording.
        path: PathBuf,
    },
}

/// Milliseconds since the Unix epoch of `t`.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Creates (or truncates) `path` for writing output a user asked for (a
/// recording, a plot), without letting another user choose what is
/// written over: a symbolic link that the kernel's `protected_symlinks`
/// would not follow (in a sticky directory others may write to, such as
/// `/tmp`, owned by neither the caller nor the directory's owner) is
/// refused, whatever that setting is; so is an existing regular file of
/// another user (a 0666 file planted at the name). Devices and FIFOs
/// (`/dev/null`, `/dev/stdout`) are opened as they are, untruncated.
pub fn create_output(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let refused = |why: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
    // Followed only if it was a link that passed the check: one that
    // appears between the check and the open is not.
    let mut follow = false;
    if let Ok(link) = std::fs::symlink_metadata(path) {
        if link.file_type().is_symlink() {
            follow = true;
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
            let dir = std::fs::metadata(dir.unwrap_or(Path::new(".")))?;
            if dir.mode() & 0o1002 == 0o1002 && link.uid() != me && link.uid() != dir.uid() {
                return Err(refused(format!(
                    "a symbolic link of uid {} in a directory others may write to: not \
                     followed (it could point at any of your files); remove it or choose \
                     another path",
                    link.uid()
                )));
            }
        }
    }
    use std::os::unix::fs::OpenOptionsExt;
    let nofollow = if follow {
        0
    } else {
        rustix::fs::OFlags::NOFOLLOW.bits() as i32
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(nofollow)
        .open(path)?;
    let meta = file.metadata()?;
    if meta.is_file() {
        if meta.uid() != me {
            return Err(refused(format!(
                "a file of uid {}, not yours: not overwritten (another user's file at this \
                 name?); remove it or choose another path",
                meta.uid()
            )));
        }
        file.set_len(0)?;
    }
    Ok(file)
}

/// Writes samples to a file from a thread of its own, so that a slow disk
/// never delays the caller: [`Recorder::record`] never blocks; a sample
/// that finds [`QUEUE`] others waiting is dropped and counted in the next
/// line. Each line is flushed when written, so a recording cut short by a
/// crash loses at most the line being written.
pub struct Recorder {
    tx: Option<SyncSender<Sample>>,
    dropped: u64,
    thread: Option<std::thread::JoinHandle<Result<(), RecordError>>>,
}

impl Recorder {
    /// Creates (truncates) `path` and starts the writing thread.
    pub fn create(path: &Path) -> Result<Recorder, RecordError> {
        let io = |source| RecordError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = create_output(path).map_err(io)?;
        let (tx, rx) = sync_channel(QUEUE);
        let path = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("paio-record".into())
            .spawn(move || write_all(&path, file, rx))
            .map_err(io)?;
        Ok(Recorder {
            tx: Some(tx),
            dropped: 0,
            thread: Some(thread),
        })
    }

    /// Queues `sample` (its `dropped` is set here). The writing thread's
    /// error, once, when it stopped on one; later samples are ignored.
    pub fn record(&mut self, mut sample: Sample) -> Result<(), RecordError> {
        let Some(tx) = &self.tx else { return Ok(()) };
        sample.dropped = self.dropped;
        match tx.try_send(sample) {
            Ok(()) => self.dropped = 0,
            Err(TrySendError::Full(_)) => self.dropped += 1,
            Err(TrySendError::Disconnected(_)) => {
                self.tx = None;
                if let Some(Ok(Err(e))) = self.thread.take().map(|t| t.join()) {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Writes what is queued and closes the file; the first write error,
    /// if any.
    pub fn finish(mut self) -> Result<(), RecordError> {
        self.tx = None;
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) | None => Ok(()),
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn write_all(path: &Path, file: File, rx: Receiver<Sample>) -> Result<(), RecordError> {
    let mut out = BufWriter::new(file);
    let io = |source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    };
    for sample in rx {
        serde_json::to_writer(&mut out, &sample).map_err(|e| io(e.into()))?;
        out.write_all(b"\n").map_err(io)?;
        out.flush().map_err(io)?;
    }
    Ok(())
}

/// Largest recording read (hours of a busy machine's periods).
pub const MAX_RECORDING_BYTES: usize = 1 << 30;

/// Reads a recording of at most [`MAX_RECORDING_BYTES`]. An empty last line
/// (a run cut short while writing it) is ignored; any other bad line is an
/// error naming its number.
pub fn read(path: &Path) -> Result<Vec<Sample>, RecordError> {
    let text = paio::textfile::read_bounded(path, MAX_RECORDING_BYTES).map_err(|source| {
        RecordError::Text {
            path: path.to_path_buf(),
            source,
        }
    })?;
    parse(&text, path)
}

/// Parses the text of a recording, as [`read`]; `path` is named in errors.
pub fn parse(text: &str, path: &Path) -> Result<Vec<Sample>, RecordError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut samples = Vec::with_capacity(lines.len());
    let last = lines.len();
    for (i, text) in lines.iter().enumerate() {
        if text.trim().is_empty() {
            continue;
        }
        // A version check before the full parse, so a newer format is
        // named as such rather than as a missing field.
        #[derive(Deserialize)]
        struct Version {
            v: u32,
        }
        match serde_json::from_str::<Version>(text) {
            Ok(Version { v }) if v != VERSION => {
                return Err(RecordError::Version {
                    path: path.to_path_buf(),
                    line: i + 1,
                    found: v,
                })
            }
            _ => {}
        }
        match serde_json::from_str::<Sample>(text) {
            Ok(s) => samples.push(s),
            // The line being written when the run was killed.
            Err(e) if i + 1 == last && e.is_eof() => {}
            Err(source) => {
                return Err(RecordError::Line {
                    path: path.to_path_buf(),
                    line: i + 1,
                    source,
                })
            }
        }
    }
    if samples.is_empty() {
        return Err(RecordError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {

    /// Output is never written through another user's symbolic link in a
    /// directory others may write to, nor over another user's file; a file
    /// of one's own is truncated, a device opened as it is.
    #[test]
    fn output_files_are_the_users_own() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let shared = d.path().join("tmp");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "keep me").unwrap();
        let link = shared.join("job.jsonl");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(
            rustix::process::geteuid().is_root(),
            "this test makes files of another uid (nobody): run it as root"
        );
        {
            // Another user's link (root's own would be followed).
            rustix::fs::chownat(
                rustix::fs::CWD,
                &link,
                Some(rustix::process::Uid::from_raw(65534)),
                None,
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            .unwrap();
            let e = create_output(&link).unwrap_err();
            assert!(e.to_string().contains("symbolic link of uid 65534"), "{e}");
            assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
            let planted = shared.join("planted.png");
            std::fs::write(&planted, "theirs").unwrap();
            std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
            let e = create_output(&planted).unwrap_err();
            assert!(e.to_string().contains("a file of uid 65534"), "{e}");
            assert_eq!(std::fs::read_to_string(&planted).unwrap(), "theirs");
        }
        let mine = shared.join("mine.jsonl");
        std::fs::write(&mine, "old contents").unwrap();
        drop(create_output(&mine).unwrap());
        assert_eq!(std::fs::read_to_string(&mine).unwrap(), "");
        drop(create_output(Path::new("/dev/null")).unwrap());
    }
    use super::*;

    pub(crate) fn sample(t: f64, bps: f64) -> Sample {
        Sample {
            v: VERSION,
            t_s: t,
            unix_ms: 1,
            dropped: 0,
            channels: vec![ChannelSample {
                stage: "s[1] 42".into(),
                channel: "read".into(),
                bytes_per_sec: bps,
                ops_per_sec: bps / 4096.0,
                wait: WaitSummary::default(),
                latency: LatencySummary::default(),
            }],
        }
    }

    #[test]
    fn round_trip_through_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let mut r = Recorder::create(&path).unwrap();
        for i in 0..10 {
            r.record(sample(i as f64, 1000.0 * i as f64)).unwrap();
        }
        r.finish().unwrap();
        let back = read(&path).unwrap();
        assert_eq!(
            back,
            (0..10)
                .map(|i| sample(i as f64, 1000.0 * i as f64))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_cut_last_line_is_ignored_a_bad_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let good = serde_json::to_string(&sample(1.0, 5.0)).unwrap();
        std::fs::write(&path, format!("{good}\n{}", &good[..good.len() / 2])).unwrap();
        assert_eq!(read(&path).unwrap().len(), 1);
        std::fs::write(&path, format!("{good}\n{{\"v\":1}}\n{good}\n")).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("r.jsonl:2: not a paio recording line"), "{e}");
        std::fs::write(&path, "{\"v\":7,\"x\":1}\n").unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains(":1: recording format version 7"), "{e}");
        std::fs::write(&path, "\n").unwrap();
        assert!(matches!(read(&path), Err(RecordError::Empty { .. })));
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        // A recorder whose thread is not draining: its queue of one is
        // read by hand.
        let (tx, rx) = sync_channel(1);
        let mut r = Recorder {
            tx: Some(tx),
            dropped: 0,
            thread: None,
        };
        for t in 0..3 {
            r.record(sample(t as f64, 1.0)).unwrap();
        }
        assert_eq!(rx.recv().unwrap().dropped, 0);
        r.record(sample(3.0, 1.0)).unwrap();
        let next = rx.recv().unwrap();
        assert_eq!((next.t_s, next.dropped), (3.0, 2));
    }

    #[test]
    fn a_write_error_is_said_once() {
        // /dev/full fails every write with ENOSPC.
        let mut r = Recorder::create(Path::new("/dev/full")).unwrap();
        let mut errors = Vec::new();
        for t in 0..200 {
            if let Err(e) = r.record(sample(t as f64, 1.0)) {
                errors.push(e.to_string());
            }
            if !errors.is_empty() && r.tx.is_none() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with("/dev/full: "), "{errors:?}");
        assert!(r.record(sample(0.0, 1.0)).is_ok());
        assert!(r.finish().is_ok());
    }

    #[test]
    fn an_unwritable_path_is_an_error_naming_it() {
        let e = Recorder::create(Path::new("/nonexistent-dir/r.jsonl"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("/nonexistent-dir/r.jsonl: "), "{e}");
    }
}
