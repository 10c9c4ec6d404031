// paio/rocksdb.h: a paio data plane stage for RocksDB, with zero changes to
// RocksDB's source. Guide: docs/rocksdb.md.
//
//   paio_rocksdb::PluginOptions popts;
//   std::string error;
//   auto plugin = paio_rocksdb::Plugin::Create(popts, &error);
//   plugin->Install(&options);            // before rocksdb::DB::Open
//
// SPDX-License-Identifier: Apache-2.0
#ifndef PAIO_ROCKSDB_H
#define PAIO_ROCKSDB_H

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>

#include "paio.h"

namespace paio_rocksdb {

struct PluginOptions {
  std::string policy_file;                    // empty: the embedded layout (paio-rocksdb.toml)
  std::string control_socket;                 // empty: no paiod; "default": paiod's default socket
  std::string stage_name = "rocksdb";
  std::map<std::string, std::string> labels;  // e.g. {"instance","db1"}
  // Optional limits, values like "50MiB/s" (docs/rocksdb.md, "Rates"). Keys
  // limit writes: "flush", "compaction_l0", "compaction_ln", "compaction"
  // (L0 and deeper together), "background" (flush and compaction together,
  // as --rate_limiter_bytes_per_sec); reads: "flush_reads",
  // "compaction_reads", "background_reads". A key and one it covers (e.g.
  // "background" and "flush") cannot both be given.
  std::map<std::string, std::string> rates;
  // Foreground (user) requests are critical (docs/criticality.md): a priority
  // object admits them first, and background programs of the same user under
  // `paio run` hold back while they are in flight. false: every request is
  // normal (nothing of this database ever holds another program back).
  bool critical_foreground = true;
  // Stall inheritance (docs/criticality.md): while RocksDB stalls or delays
  // a column family's writes (the listener's OnStallConditionsChanged), flush
  // and L0 compaction requests are critical too, so a priority object admits
  // them first and its rate does not hold them: the foreground waits for
  // them. false: they stay normal during stalls.
  bool critical_during_stalls = true;
};

class Plugin {
 public:
  // nullptr and *error set on failure (bad policy, paio error).
  static std::unique_ptr<Plugin> Create(const PluginOptions& options, std::string* error);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  // Sets options->env to a composite env over the paio FileSystem (wrapping
  // options->env's FileSystem, or the default one) and appends the listener
  // to options->listeners. The Plugin must outlive the DB.
  void Install(rocksdb::Options* options);
  std::shared_ptr<rocksdb::FileSystem> file_system() const;
  std::shared_ptr<rocksdb::EventListener> listener() const;
  paio_stage* stage() const;
  std::string CollectJson() const;  // paio_stage_collect
  bool Connected() const;           // paio_stage_connected

  // Additions (not in the original contract).
  // A paio FileSystem over `base` (sharing this plugin's stage); for
  // applications that build their own Env (e.g. NewCompositeEnv(fs)).
  std::shared_ptr<rocksdb::FileSystem> WrapFileSystem(
      const std::shared_ptr<rocksdb::FileSystem>& base);
  // Number of requests whose enforcement failed inside libpaio and were
  // let through (fail-open); 0 in normal operation.
  uint64_t EnforceErrors() const;

  struct Impl;

 private:
  Plugin();
  std::unique_ptr<Impl> impl_;
};

// Marks the calling (user) thread's requests as foreground explicitly
// (optional: untagged user threads are foreground anyway).
void SetForeground();

// Additions. The request context the plugin would give an I/O request issued
// now by the calling thread on file `fname` ("foreground", "flush",
// "compaction_l0", "compaction_ln", "unthrottled", or another context the
// application set on the thread). `priority` is the file's IO priority for
// writes, IOOptions::rate_limiter_priority for reads.
std::string ClassifyForTest(const std::string& fname,
                            rocksdb::Env::IOPriority priority);
// The embedded policy text (paio-rocksdb.toml).
const char* EmbeddedPolicy();

}  // namespace paio_rocksdb

#endif  // PAIO_ROCKSDB_H
