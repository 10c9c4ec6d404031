// Internal classes of the paio RocksDB plugin (shared with the preload
// library and the tests). Not a stable API.
#ifndef PAIO_ROCKSDB_INTERNAL_H
#define PAIO_ROCKSDB_INTERNAL_H

#include <atomic>
#include <memory>
#include <mutex>
#include <map>
#include <string>

#include <rocksdb/file_system.h>
#include <rocksdb/listener.h>

#include "paio.h"

namespace paio_rocksdb {
namespace internal {

// Owns the stage; shared by the plugin, its file systems and their files, so
// the stage lives as long as anything can still enforce on it.
struct Core {
  paio_stage* stage = nullptr;
  std::atomic<uint64_t> enforce_errors{0};
  // Foreground requests carry PAIO_CRITICAL (PluginOptions).
  bool critical_foreground = true;
  // Flush and L0 compaction requests carry PAIO_CRITICAL while a column
  // family's writes are stalled or delayed (PluginOptions).
  bool critical_during_stalls = true;
  ~Core() { paio_stage_free(stage); }
};

// Request context ids (process-wide in libpaio).
struct Contexts {
  uint16_t foreground, flush, compaction_l0, compaction_ln, unthrottled;
};
const Contexts& Ids();  // interned on first call

enum class FileKind { kData, kUnthrottled };
FileKind KindOf(const std::string& fname);

// The request context of a request issued now by the calling thread.
// `write_priority` is the written file's IO priority (reads: IO_TOTAL).
uint16_t Classify(FileKind kind, rocksdb::Env::IOPriority write_priority);

class PaioFileSystem : public rocksdb::FileSystemWrapper {
 public:
  PaioFileSystem(const std::shared_ptr<rocksdb::FileSystem>& base,
                 std::shared_ptr<Core> core);
  static const char* kClassName() { return "PaioFileSystem"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewSequentialFile(
      const std::string& f, const rocksdb::FileOptions& o,
      std::unique_ptr<rocksdb::FSSequentialFile>* r,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomAccessFile(
      const std::string& f, const rocksdb::FileOptions& o,
      std::unique_ptr<rocksdb::FSRandomAccessFile>* r,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewWritableFile(const std::string& f,
                                    const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(
      const std::string& f, const rocksdb::FileOptions& o,
      std::unique_ptr<rocksdb::FSWritableFile>* r,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(
      const std::string& f, const std::string& old_f,
      const rocksdb::FileOptions& o,
      std::unique_ptr<rocksdb::FSWritableFile>* r,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomRWFile(const std::string& f,
                                    const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* r,
                                    rocksdb::IODebugContext* dbg) override;

 private:
  std::shared_ptr<Core> core_;
};

// Column families whose writes RocksDB stalls or delays now, over every
// listener of the process (PaioListener::OnStallConditionsChanged).
int StalledColumnFamilies();

class PaioListener : public rocksdb::EventListener {
 public:
  PaioListener() = default;
  // A listener that goes away while its column families are stalled takes
  // its count with it.
  ~PaioListener() override;
  static const char* kClassName() { return "PaioListener"; }
  const char* Name() const override { return kClassName(); }
  void OnFlushBegin(rocksdb::DB*, const rocksdb::FlushJobInfo&) override;
  void OnFlushCompleted(rocksdb::DB*, const rocksdb::FlushJobInfo&) override;
  void OnCompactionBegin(rocksdb::DB*,
                         const rocksdb::CompactionJobInfo& ci) override;
  void OnCompactionCompleted(rocksdb::DB*,
                             const rocksdb::CompactionJobInfo&) override;
  void OnSubcompactionBegin(const rocksdb::SubcompactionJobInfo& si) override;
  void OnSubcompactionCompleted(
      const rocksdb::SubcompactionJobInfo&) override;
  void OnBackgroundError(rocksdb::BackgroundErrorReason,
                         rocksdb::Status*) override;
  // Stall inheritance: while a column family's writes are delayed or
  // stopped, its flush and L0 compaction are what the foreground waits for.
  // Counted by transition (the info's previous and current condition), per
  // column-family name: several DBs sharing this listener may each have a
  // "default" stalled at once, and one recovering leaves the others counted.
  void OnStallConditionsChanged(const rocksdb::WriteStallInfo& info) override;

 private:
  std::mutex mu_;
  // Column families stalled now, by name (a name counts once per DB).
  std::map<std::string, int> stalled_;
};

}  // namespace internal
}  // namespace paio_rocksdb

#endif
