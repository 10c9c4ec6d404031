// libpaio_rocksdb_preload.so: registers a "paio" FileSystem (and a "paio"
// EventListener) in RocksDB's object registry from a static initializer, so
// an unmodified program that resolves file systems by URI can use paio:
//
//   LD_PRELOAD=libpaio_rocksdb_preload.so db_bench --fs_uri=paio ...
//
// (or --env_uri=paio: an Env over the same file system)
// Configured by environment variables (docs/rocksdb.md; none of them in a
// set-user-ID or set-group-ID program):
//   PAIO_ROCKSDB_POLICY      policy file (default: the embedded layout)
//   PAIO_ROCKSDB_SOCKET      paiod socket ("default" for paiod's default)
//   PAIO_ROCKSDB_STAGE_NAME  stage name (default "rocksdb")
//   PAIO_ROCKSDB_RATES       e.g. "flush=50MiB/s,compaction_ln=10MiB/s"
//   PAIO_ROCKSDB_STATS       write the stage's statistics (JSON) to this file
//                            at exit ("-": stderr)
//   PAIO_ROCKSDB_STALL_INHERIT  0: flush and L0 compaction stay normal during
//                            write stalls (default 1: critical)
// SPDX-License-Identifier: Apache-2.0
#include <sys/auxv.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

#include <rocksdb/utilities/object_registry.h>

#include "internal.h"
#include "paio/rocksdb.h"

namespace {

// A variable of the environment; "" when unset, and always in a program
// that runs with privileges its user does not have (set-user-ID,
// set-group-ID, file capabilities): the paths it names are the invoking
// user's choice and would be read and written with the program's rights.
std::string Getenv(const char* name) {
  const char* v = secure_getenv(name);
  return v ? v : "";
}

// Says once, in such a program, that the PAIO_ROCKSDB_* variables it was
// given are ignored (the plugin then runs with its defaults).
void SayIfIgnored() {
  if (getauxval(AT_SECURE) == 0) return;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "PAIO_ROCKSDB_", 13) == 0) {
      std::fprintf(stderr,
                   "paio-rocksdb preload: this program runs with privileges its "
                   "user does not have (set-user-ID, set-group-ID or file "
                   "capabilities): PAIO_ROCKSDB_* variables are ignored and the "
                   "plugin runs with its defaults\n");
      return;
    }
  }
}

// The process-wide plugin, created on first use and never freed (RocksDB
// objects may use it until the very end of the process).
paio_rocksdb::Plugin* GlobalPlugin(std::string* error) {
  static std::once_flag once;
  static paio_rocksdb::Plugin* plugin = nullptr;
  static std::string create_error;
  std::call_once(once, [] {
    SayIfIgnored();
    paio_rocksdb::PluginOptions o;
    o.policy_file = Getenv("PAIO_ROCKSDB_POLICY");
    o.control_socket = Getenv("PAIO_ROCKSDB_SOCKET");
    std::string name = Getenv("PAIO_ROCKSDB_STAGE_NAME");
    if (!name.empty()) o.stage_name = name;
    o.labels["application"] = "db_bench";
    std::string all_rates = Getenv("PAIO_ROCKSDB_RATES");
    std::stringstream rates(all_rates);
    std::string item;
    while (std::getline(rates, item, ',')) {
      size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
        create_error = "PAIO_ROCKSDB_RATES=\"" + all_rates + "\": \"" + item +
                       "\" is not KEY=RATE (e.g. compaction_ln=10MiB/s; "
                       "several joined by commas)";
        std::fprintf(stderr, "paio-rocksdb preload: %s\n", create_error.c_str());
        return;
      }
      std::string key = item.substr(0, eq);
      if (o.rates.count(key) != 0) {
        create_error = "PAIO_ROCKSDB_RATES=\"" + all_rates + "\": \"" + key +
                       "\" is given twice; give each key once";
        std::fprintf(stderr, "paio-rocksdb preload: %s\n", create_error.c_str());
        return;
      }
      o.rates[key] = item.substr(eq + 1);
    }
    std::string inherit = Getenv("PAIO_ROCKSDB_STALL_INHERIT");
    if (inherit == "0" || inherit == "1") {
      o.critical_during_stalls = inherit == "1";
    } else if (!inherit.empty()) {
      create_error = "PAIO_ROCKSDB_STALL_INHERIT=\"" + inherit +
                     "\": expected 1 (flush and L0 compaction critical during "
                     "write stalls, the default) or 0";
      std::fprintf(stderr, "paio-rocksdb preload: %s\n", create_error.c_str());
      return;
    }
    std::string stats = Getenv("PAIO_ROCKSDB_STATS");
    if (!stats.empty() && stats != "-") {
      // Written at exit: say now if it cannot be, not after the run.
      size_t slash = stats.rfind('/');
      std::string dir = slash == std::string::npos ? "." : stats.substr(0, slash + 1);
      if (access(dir.c_str(), W_OK) != 0) {
        std::fprintf(stderr,
                     "paio-rocksdb preload: PAIO_ROCKSDB_STATS=%s: the directory "
                     "%s is not writable (%s): no statistics will be written\n",
                     stats.c_str(), dir.c_str(), std::strerror(errno));
      }
    }
    plugin = paio_rocksdb::Plugin::Create(o, &create_error).release();
    if (plugin == nullptr) {
      std::fprintf(stderr, "paio-rocksdb preload: %s\n", create_error.c_str());
    } else {
      std::fprintf(stderr, "paio-rocksdb preload: stage \"%s\" ready\n",
                   o.stage_name.c_str());
    }
  });
  if (plugin == nullptr && error != nullptr) *error = create_error;
  return plugin;
}

struct StatsAtExit {
  ~StatsAtExit() {
    std::string path = Getenv("PAIO_ROCKSDB_STATS");
    paio_rocksdb::Plugin* p = used ? GlobalPlugin(nullptr) : nullptr;
    if (path.empty() || p == nullptr) return;
    std::string json = p->CollectJson();
    if (path == "-") {
      std::fprintf(stderr, "%s\n", json.c_str());
    } else {
      FILE* f = std::fopen(path.c_str(), "w");
      bool ok = f != nullptr && std::fprintf(f, "%s\n", json.c_str()) > 0;
      int e = errno;
      if (f != nullptr && std::fclose(f) != 0 && ok) {
        ok = false;
        e = errno;
      }
      if (!ok) {
        std::fprintf(stderr,
                     "paio-rocksdb preload: cannot write the statistics to "
                     "PAIO_ROCKSDB_STATS=%s: %s\n",
                     path.c_str(), std::strerror(e));
      }
    }
  }
  bool used = false;
} stats_at_exit;

const bool registered = [] {
  auto lib = rocksdb::ObjectLibrary::Default();
  lib->AddFactory<rocksdb::FileSystem>(
      "paio",
      [](const std::string&, std::unique_ptr<rocksdb::FileSystem>* guard,
         std::string* errmsg) -> rocksdb::FileSystem* {
        paio_rocksdb::Plugin* p = GlobalPlugin(errmsg);
        if (p == nullptr) return nullptr;
        stats_at_exit.used = true;
        // A fresh wrapper over the default file system, sharing the stage.
        auto fs = p->WrapFileSystem(rocksdb::FileSystem::Default());
        // The registry wants ownership through `guard`: wrap the shared
        // pointer in a forwarding FileSystemWrapper.
        struct Holder : rocksdb::FileSystemWrapper {
          explicit Holder(std::shared_ptr<rocksdb::FileSystem> t)
              : FileSystemWrapper(std::move(t)) {}
          const char* Name() const override { return "paio"; }
        };
        guard->reset(new Holder(fs));
        return guard->get();
      });
  // --env_uri=paio (programs that take an Env rather than a FileSystem):
  // the default Env over the paio file system.
  lib->AddFactory<rocksdb::Env>(
      "paio",
      [](const std::string&, std::unique_ptr<rocksdb::Env>* guard,
         std::string* errmsg) -> rocksdb::Env* {
        paio_rocksdb::Plugin* p = GlobalPlugin(errmsg);
        if (p == nullptr) return nullptr;
        stats_at_exit.used = true;
        *guard = rocksdb::NewCompositeEnv(p->WrapFileSystem(rocksdb::FileSystem::Default()));
        return guard->get();
      });
  lib->AddFactory<rocksdb::EventListener>(
      "paio",
      [](const std::string&, std::unique_ptr<rocksdb::EventListener>* guard,
         std::string*) -> rocksdb::EventListener* {
        guard->reset(new paio_rocksdb::internal::PaioListener());
        return guard->get();
      });
  return true;
}();

}  // namespace
