//! `libpaio_preload.so`: a paio stage inside unmodified programs, through
//! `LD_PRELOAD` (the paper's §6.2 "Using PAIO transparently").
//!
//! The library defines libc's own file I/O symbols (`read`, `pwrite64`,
//! `openat`, `fread`, ...; the full list is in docs/preload.md). Each one
//! calls the real function (found with `dlsym(RTLD_NEXT, ...)`) and submits a
//! request to a per-process [`paio::Stage`], built in the library's
//! constructor from `PAIO_POLICY` (or the embedded pass-through policy).
//!
//! Rules this crate keeps (each is tested in tests/):
//! - descriptor data calls go through the stage in two phases
//!   ([`rt::data_call`]): admitted before the real call (where a priority
//!   object orders and limits them and a rate limiter charges the requested
//!   size), completed after it with the bytes it really moved (refund, call
//!   latency); large non-critical positional calls may be split into pieces
//!   with the semantics of one call; nothing of the library is held across
//!   the real call. stdio calls are charged after the call, one request per
//!   call that reached the kernel ([`stdio`]), with the bytes stdio's inline
//!   macros moved since the stream's last call ([`streams`]); the printf
//!   family's variadic bodies are C ([`printf`]); copy calls after the call;
//!   open/close/metadata calls before it;
//! - errno is saved and restored around everything the library does itself;
//! - a per-thread depth guard lets the library's own I/O (and Rust std's)
//!   through untouched;
//! - per-thread state is `const`-initialised and has no destructor;
//! - configuration comes from the constructor's `envp`, never `getenv`, and
//!   not at all in secure-execution mode (set-user-ID programs);
//! - a panic never unwinds into C: the hook reports through a raw syscall and
//!   aborts (and `extern "C"` functions abort on unwind anyway).
// The exported functions are libc's, with libc's contracts (man pages).
#![allow(clippy::missing_safety_doc)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod aio;
mod board;
mod buckets;
mod dirty;
mod fdtable;
mod hooks;
mod locks;
mod printf;
mod real;
mod ring;
mod rt;
mod shm;
mod stdio;
mod streams;
mod sys;
