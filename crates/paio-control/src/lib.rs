//! paiod, the paio control plane (§3.2, §6.1, §7 of the PAIO paper).
//!
//! Stages register over a Unix domain socket ([`paio::protocol`]), receive
//! housekeeping, differentiation and enforcement rules, and answer collect
//! requests with their statistics. Each control period a [`policy`] sees
//! every registered stage with its latest statistics and emits rules.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cli;
pub mod cluster;
pub mod config;
pub mod conns;
pub mod ctl;
pub mod loopstats;
pub mod metrics;
pub mod outbox;
pub mod peer;
pub mod policy;
pub mod record;
pub mod server;
pub mod unixconn;
