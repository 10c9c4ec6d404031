//! The logic behind the `paio` command (`paio run`), kept out of the binary
//! so it can be unit-tested:
//!
//! - [`args`]: `--limit`, `--label`, `--name` and `--stats` values, and the
//!   policy `--limit` generates (validated with [`paio::Policy`]);
//! - [`preload`]: finding `libpaio_preload.so` and composing `LD_PRELOAD`;
//! - [`exe`]: resolving the command through `PATH` and reading its ELF
//!   headers to warn when the interposer cannot see it (static, Go);
//! - [`summary`]: reading the interposer's statistics files and formatting
//!   the end-of-run summary;
//! - [`admin`]: `paio status` and `paio ctl`, which talk to a running
//!   paiod;
//! - [`child`]: running the command, forwarding signals, and the exit status
//!   `paio` returns;
//! - [`doctor`]: `paio doctor`, why a program is or would not be enforced;
//! - [`top`]: `paio top`, the live view of stages and channels;
//! - [`manuals`]: manual pages and shell completions of `paio` and `paiod`,
//!   generated from their command-line definitions.
//!
//! The guide is `docs/cli.md`.

#![forbid(unsafe_code)]

pub mod admin;
pub mod args;
pub mod child;
pub mod doctor;
pub mod exe;
pub mod manuals;
pub mod plot;
pub mod preload;
pub mod privilege;
pub mod summary;
pub mod top;

/// Exit status for a usage error (bad flag value, invalid policy).
pub const EXIT_USAGE: i32 = 2;
/// Exit status when `paio` itself fails (library not found, temp file).
pub const EXIT_PAIO_FAILED: i32 = 125;
/// Exit status when the command exists but cannot be executed.
pub const EXIT_CANNOT_EXECUTE: i32 = 126;
/// Exit status when the command is not found.
pub const EXIT_NOT_FOUND: i32 = 127;
