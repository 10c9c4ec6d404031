// The paio RocksDB plugin: a FileSystemWrapper that sends every data request
// through a paio stage, and an EventListener that tags the job threads.
// SPDX-License-Identifier: Apache-2.0
#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "internal.h"
#include "paio/rocksdb.h"

namespace paio_rocksdb {
namespace internal {

using rocksdb::DataVerificationInfo;
using rocksdb::FileOptions;
using rocksdb::FSRandomAccessFile;
using rocksdb::FSRandomRWFile;
using rocksdb::FSReadRequest;
using rocksdb::FSSequentialFile;
using rocksdb::FSWritableFile;
using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;
using Pri = rocksdb::Env::IOPriority;

namespace {

uint16_t Intern(const char* name) {
  uint16_t id = PAIO_CONTEXT_NONE;
  if (paio_request_context(name, &id) != PAIO_OK) {
    std::fprintf(stderr, "paio-rocksdb: cannot intern request context %s: %s\n",
                 name, paio_last_error());
    std::abort();
  }
  return id;
}

bool StartsWith(const std::string& s, const char* p) {
  return s.compare(0, std::strlen(p), p) == 0;
}
bool EndsWith(const std::string& s, const char* p) {
  size_t n = std::strlen(p);
  return s.size() >= n && s.compare(s.size() - n, n, p) == 0;
}

// 0: not a RocksDB background thread; else the context of its pool.
uint16_t ThreadNameClass() {
  thread_local int cached = -1;
  if (cached < 0) {
    char name[32] = {0};
    cached = 0;
    if (pthread_getname_np(pthread_self(), name, sizeof name) == 0) {
      std::string n(name);
      if (n == "rocksdb:high") {
        cached = Ids().flush;
      } else if (StartsWith(n, "rocksdb:low") ||
                 StartsWith(n, "rocksdb:bottom")) {
        cached = Ids().compaction_ln;
      }
    }
  }
  return static_cast<uint16_t>(cached);
}

// The sub-compaction callbacks save the thread's tag here and restore it.
thread_local std::vector<uint16_t> saved_contexts;

}  // namespace

const Contexts& Ids() {
  static const Contexts ids{Intern("foreground"), Intern("flush"),
                            Intern("compaction_l0"), Intern("compaction_ln"),
                            Intern("unthrottled")};
  return ids;
}

FileKind KindOf(const std::string& fname) {
  size_t slash = fname.find_last_of('/');
  std::string base = slash == std::string::npos ? fname : fname.substr(slash + 1);
  // WAL (NNNNNN.log), MANIFEST-NNNNNN, CURRENT, OPTIONS-NNNNNN, their
  // NNNNNN.dbtmp temporaries, IDENTITY, LOCK, the info log LOG / LOG.old.*.
  if (EndsWith(base, ".log") || EndsWith(base, ".dbtmp") ||
      StartsWith(base, "MANIFEST") || base == "CURRENT" ||
      StartsWith(base, "OPTIONS") || base == "IDENTITY" || base == "LOCK" ||
      StartsWith(base, "LOG")) {
    return FileKind::kUnthrottled;
  }
  return FileKind::kData;
}

uint16_t Classify(FileKind kind, Pri write_priority) {
  const Contexts& ids = Ids();
  if (kind == FileKind::kUnthrottled) return ids.unthrottled;
  uint16_t tag = PAIO_CONTEXT_NONE;
  paio_get_request_context(&tag);
  if (tag != PAIO_CONTEXT_NONE) return tag;  // listener or application
  if (uint16_t t = ThreadNameClass()) return t;
  switch (write_priority) {
    case Pri::IO_HIGH:  // flush (e.g. the recovery flush inside DB::Open)
      return ids.flush;
    case Pri::IO_LOW:
    case Pri::IO_MID:
      return ids.compaction_ln;
    default:
      return ids.foreground;
  }
}

namespace {

std::atomic<int> stalled_column_families{0};

// The paio context of a request of `type` and `size` in request context
// `context`, issued now by the calling thread; false (and counted) if libpaio
// could not build it. Foreground requests are critical when the plugin says
// so (PluginOptions::critical_foreground); flush and L0 compaction requests
// while writes are stalled (PluginOptions::critical_during_stalls).
bool MakeContext(Core* core, uint16_t type, uint16_t context, uint64_t size,
                 paio_context* ctx) {
  if (paio_context_new(type, size, ctx) != PAIO_OK) {
    core->enforce_errors.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  ctx->request_context = context;
  const Contexts& ids = Ids();
  if (core->critical_foreground && context == ids.foreground) {
    ctx->criticality = PAIO_CRITICAL;
  } else if (core->critical_during_stalls &&
             (context == ids.flush || context == ids.compaction_l0) &&
             stalled_column_families.load(std::memory_order_relaxed) > 0) {
    ctx->criticality = PAIO_CRITICAL;
  }
  return true;
}

// One-phase enforcement, for calls whose completion the wrapper does not
// see (ReadAsync): charged with the size asked for.
IOStatus Enforce(Core* core, uint16_t type, uint16_t context, uint64_t size) {
  paio_context ctx;
  if (!MakeContext(core, type, context, size, &ctx)) return IOStatus::OK();
  paio_status st = paio_stage_enforce(core->stage, &ctx, nullptr, 0, nullptr);
  if (st == PAIO_OK) return IOStatus::OK();
  core->enforce_errors.fetch_add(1, std::memory_order_relaxed);
  if (st == PAIO_ERR_ENFORCE) {
    return IOStatus::IOError("paio: request refused", paio_last_error());
  }
  return IOStatus::OK();  // fail open on internal errors
}

// The piece size a direct call of `type` (read or write) moving `size`
// bytes in request context `context`, on a file whose direct I/O needs
// `alignment`, is to be issued in, or 0 to issue it whole. Pieces are what
// its object asks for (paio_stage_split_size: a drl or priority object's
// `split`; critical requests go whole) rounded down to the alignment, and
// at least one alignment, since every piece but the last must start and end
// on it. A call of one 4 KiB page or less (a Get's block) or not larger
// than a piece goes whole: no need to ask.
uint64_t PieceSize(Core* core, uint16_t type, uint16_t context, uint64_t size,
                   size_t alignment) {
  if (size <= 4096) return 0;
  paio_context ctx;
  uint64_t piece = 0;
  if (!MakeContext(core, type, context, size, &ctx)) return 0;
  if (paio_stage_split_size(core->stage, &ctx, &piece) != PAIO_OK) {
    core->enforce_errors.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  if (piece == 0) return 0;
  if (alignment > 1) {
    piece = std::max<uint64_t>(alignment, piece - piece % alignment);
  }
  return piece < size ? piece : 0;
}

// A two-phase request: admitted before the wrapped call (where a priority
// object may hold it and a rate limit charges `size`), completed after it
// with the bytes the call really moved (refund of what was not moved, the
// call's latency in the statistics). Complete() runs exactly once: from the
// caller, or from the destructor with 0 bytes on a path that forgot.
class Admission {
 public:
  Admission(Core* core, uint16_t type, uint16_t context, uint64_t size)
      : core_(core) {
    paio_context ctx;
    if (!MakeContext(core, type, context, size, &ctx)) return;
    paio_status st = paio_stage_admit(core->stage, &ctx, &ticket_);
    if (st == PAIO_OK) {
      live_ = true;
      return;
    }
    core->enforce_errors.fetch_add(1, std::memory_order_relaxed);
    if (st == PAIO_ERR_ENFORCE) {
      status_ = IOStatus::IOError("paio: request refused", paio_last_error());
    }  // else fail open on internal errors
  }
  ~Admission() { Complete(0); }
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // OK unless an object refused the request: then the call must not run.
  const IOStatus& status() const { return status_; }

  void Complete(uint64_t moved) {
    if (!live_) return;
    live_ = false;
    if (paio_stage_complete(core_->stage, &ticket_, moved) != PAIO_OK) {
      core_->enforce_errors.fetch_add(1, std::memory_order_relaxed);
    }
  }

 private:
  Core* core_;
  paio_ticket ticket_{};
  bool live_ = false;
  IOStatus status_;
};

class WritableFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  WritableFile(std::unique_ptr<FSWritableFile>&& t, std::shared_ptr<Core> core,
               FileKind kind)
      : FSWritableFileOwnerWrapper(std::move(t)),
        core_(std::move(core)),
        kind_(kind) {}

  IOStatus Append(const Slice& data, const IOOptions& o,
                  IODebugContext* dbg) override {
    return Write(data, [&](const Slice& d, uint64_t) {
      return target()->Append(d, o, dbg);
    });
  }
  // The checksum in `v` covers the whole of `data`: these go whole.
  IOStatus Append(const Slice& data, const IOOptions& o,
                  const DataVerificationInfo& v, IODebugContext* dbg) override {
    return WriteWhole(Context(), data,
                      [&] { return target()->Append(data, o, v, dbg); });
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t off, const IOOptions& o,
                            IODebugContext* dbg) override {
    return Write(data, [&](const Slice& d, uint64_t at) {
      return target()->PositionedAppend(d, off + at, o, dbg);
    });
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t off, const IOOptions& o,
                            const DataVerificationInfo& v,
                            IODebugContext* dbg) override {
    return WriteWhole(Context(), data, [&] {
      return target()->PositionedAppend(data, off, o, v, dbg);
    });
  }
  // RocksDB sets the priority on the outermost wrapper only: keep it here
  // (FSWritableFile's own field, read by Charge) and pass it down too.
  void SetIOPriority(Pri pri) override {
    FSWritableFile::SetIOPriority(pri);
    target()->SetIOPriority(pri);
  }

 private:
  // An append of `data`: `call(piece, at)` writes `piece`, which starts `at`
  // bytes into `data`. A direct write whose object asks for pieces
  // (PieceSize) is written as consecutive appends of at most that many
  // bytes, each admitted and completed on its own, so that what queues
  // behind it below the stage waits behind one piece; the caller sees one
  // append, which fails at the first piece that fails (the pieces before it
  // are written, as a failed pwrite inside RocksDB's own append leaves what
  // it wrote). Buffered writes (absorbed by the page cache), critical ones
  // and small ones go whole.
  template <typename Call>
  IOStatus Write(const Slice& data, Call call) {
    const uint16_t context = Context();
    const uint64_t piece =
        use_direct_io() ? PieceSize(core_.get(), PAIO_REQ_WRITE, context,
                                    data.size(), GetRequiredBufferAlignment())
                        : 0;
    if (piece == 0) {
      return WriteWhole(context, data, [&] { return call(data, 0); });
    }
    for (uint64_t at = 0; at < data.size(); at += piece) {
      const size_t len =
          static_cast<size_t>(std::min<uint64_t>(piece, data.size() - at));
      const Slice part(data.data() + at, len);
      IOStatus s = WriteWhole(context, part, [&] { return call(part, at); });
      if (!s.ok()) return s;
    }
    return IOStatus::OK();
  }

  // Admits the append in request context `context`, runs it, completes it
  // with its size if it succeeded.
  template <typename Call>
  IOStatus WriteWhole(uint16_t context, const Slice& data, Call call) {
    Admission a(core_.get(), PAIO_REQ_WRITE, context, data.size());
    if (!a.status().ok()) return a.status();
    IOStatus s = call();
    a.Complete(s.ok() ? data.size() : 0);
    return s;
  }
  uint16_t Context() { return Classify(kind_, GetIOPriority()); }

  std::shared_ptr<Core> core_;
  FileKind kind_;
};

class RandomAccessFile : public rocksdb::FSRandomAccessFileOwnerWrapper {
 public:
  RandomAccessFile(std::unique_ptr<FSRandomAccessFile>&& t,
                   std::shared_ptr<Core> core, FileKind kind)
      : FSRandomAccessFileOwnerWrapper(std::move(t)),
        core_(std::move(core)),
        kind_(kind) {}

  IOStatus Read(uint64_t off, size_t n, const IOOptions& o, Slice* r,
                char* scratch, IODebugContext* dbg) const override {
    const uint16_t context = Context();
    // Direct reads only: they are what reaches the device's queue as one
    // request per call (a buffered read is served by the page cache and its
    // readahead), and they read into `scratch`.
    if (use_direct_io()) {
      const uint64_t piece = PieceSize(core_.get(), PAIO_REQ_READ, context, n,
                                       GetRequiredBufferAlignment());
      if (piece > 0) {
        return ReadInPieces(off, n, piece, context, o, r, scratch, dbg);
      }
    }
    Admission a(core_.get(), PAIO_REQ_READ, context, n);
    if (!a.status().ok()) return a.status();
    IOStatus s = target()->Read(off, n, o, r, scratch, dbg);
    a.Complete(s.ok() ? r->size() : 0);
    return s;
  }
  IOStatus MultiRead(FSReadRequest* reqs, size_t num, const IOOptions& o,
                     IODebugContext* dbg) override {
    uint64_t n = 0;
    for (size_t i = 0; i < num; ++i) n += reqs[i].len;
    Admission a(core_.get(), PAIO_REQ_READ, Context(), n);
    if (!a.status().ok()) return a.status();
    IOStatus s = target()->MultiRead(reqs, num, o, dbg);
    uint64_t moved = 0;
    if (s.ok()) {
      for (size_t i = 0; i < num; ++i) {
        if (reqs[i].status.ok()) moved += reqs[i].result.size();
      }
    }
    a.Complete(moved);
    return s;
  }
  IOStatus Prefetch(uint64_t off, size_t n, const IOOptions& o,
                    IODebugContext* dbg) override {
    Admission a(core_.get(), PAIO_REQ_READ, Context(), n);
    if (!a.status().ok()) return a.status();
    IOStatus s = target()->Prefetch(off, n, o, dbg);
    a.Complete(s.ok() ? n : 0);
    return s;
  }
  IOStatus ReadAsync(FSReadRequest& req, const IOOptions& o,
                     std::function<void(const FSReadRequest&, void*)> cb,
                     void* cb_arg, void** io_handle,
                     rocksdb::IOHandleDeleter* del_fn,
                     IODebugContext* dbg) override {
    // Completed asynchronously, out of the wrapper's sight: one phase.
    IOStatus s = Enforce(core_.get(), PAIO_REQ_READ, Context(), req.len);
    return s.ok() ? target()->ReadAsync(req, o, cb, cb_arg, io_handle, del_fn,
                                        dbg)
                  : s;
  }

 private:
  // Reads are classified by the calling thread only (table-cache handles
  // are shared between jobs): no per-file priority.
  uint16_t Context() const { return Classify(kind_, Pri::IO_TOTAL); }

  // Read() as consecutive reads of at most `piece` bytes into `scratch`,
  // each admitted and completed on its own, so that what queues behind the
  // call below the stage waits behind one piece. The caller sees one read:
  // a piece that comes back short (end of file) ends it with the bytes done
  // so far; a piece that fails fails the read, as a failed pread inside
  // RocksDB's own Read does.
  IOStatus ReadInPieces(uint64_t off, size_t n, uint64_t piece,
                        uint16_t context, const IOOptions& o, Slice* r,
                        char* scratch, IODebugContext* dbg) const {
    size_t done = 0;
    while (done < n) {
      const size_t len = static_cast<size_t>(std::min<uint64_t>(piece, n - done));
      Admission a(core_.get(), PAIO_REQ_READ, context, len);
      if (!a.status().ok()) return a.status();
      Slice got;
      IOStatus s = target()->Read(off + done, len, o, &got, scratch + done, dbg);
      a.Complete(s.ok() ? got.size() : 0);
      if (!s.ok()) return s;
      if (got.size() > 0 && got.data() != scratch + done) {
        std::memmove(scratch + done, got.data(), got.size());
      }
      done += got.size();
      if (got.size() < len) break;
    }
    *r = Slice(scratch, done);
    return IOStatus::OK();
  }
  std::shared_ptr<Core> core_;
  FileKind kind_;
};

class SequentialFile : public rocksdb::FSSequentialFileOwnerWrapper {
 public:
  SequentialFile(std::unique_ptr<FSSequentialFile>&& t,
                 std::shared_ptr<Core> core, FileKind kind)
      : FSSequentialFileOwnerWrapper(std::move(t)),
        core_(std::move(core)),
        kind_(kind) {}
  IOStatus Read(size_t n, const IOOptions& o, Slice* r, char* scratch,
                IODebugContext* dbg) override {
    Admission a(core_.get(), PAIO_REQ_READ, Classify(kind_, Pri::IO_TOTAL), n);
    if (!a.status().ok()) return a.status();
    IOStatus s = target()->Read(n, o, r, scratch, dbg);
    a.Complete(s.ok() ? r->size() : 0);
    return s;
  }
  IOStatus PositionedRead(uint64_t off, size_t n, const IOOptions& o, Slice* r,
                          char* scratch, IODebugContext* dbg) override {
    Admission a(core_.get(), PAIO_REQ_READ, Classify(kind_, Pri::IO_TOTAL), n);
    if (!a.status().ok()) return a.status();
    IOStatus s = target()->PositionedRead(off, n, o, r, scratch, dbg);
    a.Complete(s.ok() ? r->size() : 0);
    return s;
  }

 private:
  std::shared_ptr<Core> core_;
  FileKind kind_;
};

class RandomRWFile : public rocksdb::FSRandomRWFileOwnerWrapper {
 public:
  RandomRWFile(std::unique_ptr<FSRandomRWFile>&& t, std::shared_ptr<Core> core,
               FileKind kind)
      : FSRandomRWFileOwnerWrapper(std::move(t)),
        core_(std::move(core)),
        kind_(kind) {}
  IOStatus Write(uint64_t off, const Slice& data, const IOOptions& o,
                 IODebugContext* dbg) override {
    Admission a(core_.get(), PAIO_REQ_WRITE, Classify(kind_, Pri::IO_TOTAL),
                data.size());
    if (!a.status().ok()) return a.status();
    IOStatus s = target()->Write(off, data, o, dbg);
    a.Complete(s.ok() ? data.size() : 0);
    return s;
  }
  IOStatus Read(uint64_t off, size_t n, const IOOptions& o, Slice* r,
                char* scratch, IODebugContext* dbg) const override {
    Admission a(core_.get(), PAIO_REQ_READ, Classify(kind_, Pri::IO_TOTAL), n);
    if (!a.status().ok()) return a.status();
    IOStatus s = target()->Read(off, n, o, r, scratch, dbg);
    a.Complete(s.ok() ? r->size() : 0);
    return s;
  }

 private:
  std::shared_ptr<Core> core_;
  FileKind kind_;
};

}  // namespace

PaioFileSystem::PaioFileSystem(const std::shared_ptr<rocksdb::FileSystem>& base,
                               std::shared_ptr<Core> core)
    : FileSystemWrapper(base), core_(std::move(core)) {}

IOStatus PaioFileSystem::NewSequentialFile(
    const std::string& f, const FileOptions& o,
    std::unique_ptr<FSSequentialFile>* r, IODebugContext* dbg) {
  std::unique_ptr<FSSequentialFile> file;
  IOStatus s = target()->NewSequentialFile(f, o, &file, dbg);
  if (s.ok()) r->reset(new SequentialFile(std::move(file), core_, KindOf(f)));
  return s;
}

IOStatus PaioFileSystem::NewRandomAccessFile(
    const std::string& f, const FileOptions& o,
    std::unique_ptr<FSRandomAccessFile>* r, IODebugContext* dbg) {
  std::unique_ptr<FSRandomAccessFile> file;
  IOStatus s = target()->NewRandomAccessFile(f, o, &file, dbg);
  if (s.ok()) r->reset(new RandomAccessFile(std::move(file), core_, KindOf(f)));
  return s;
}

IOStatus PaioFileSystem::NewWritableFile(const std::string& f,
                                         const FileOptions& o,
                                         std::unique_ptr<FSWritableFile>* r,
                                         IODebugContext* dbg) {
  std::unique_ptr<FSWritableFile> file;
  IOStatus s = target()->NewWritableFile(f, o, &file, dbg);
  if (s.ok()) r->reset(new WritableFile(std::move(file), core_, KindOf(f)));
  return s;
}

IOStatus PaioFileSystem::ReopenWritableFile(const std::string& f,
                                            const FileOptions& o,
                                            std::unique_ptr<FSWritableFile>* r,
                                            IODebugContext* dbg) {
  std::unique_ptr<FSWritableFile> file;
  IOStatus s = target()->ReopenWritableFile(f, o, &file, dbg);
  if (s.ok()) r->reset(new WritableFile(std::move(file), core_, KindOf(f)));
  return s;
}

IOStatus PaioFileSystem::ReuseWritableFile(const std::string& f,
                                           const std::string& old_f,
                                           const FileOptions& o,
                                           std::unique_ptr<FSWritableFile>* r,
                                           IODebugContext* dbg) {
  std::unique_ptr<FSWritableFile> file;
  IOStatus s = target()->ReuseWritableFile(f, old_f, o, &file, dbg);
  if (s.ok()) r->reset(new WritableFile(std::move(file), core_, KindOf(f)));
  return s;
}

IOStatus PaioFileSystem::NewRandomRWFile(const std::string& f,
                                         const FileOptions& o,
                                         std::unique_ptr<FSRandomRWFile>* r,
                                         IODebugContext* dbg) {
  std::unique_ptr<FSRandomRWFile> file;
  IOStatus s = target()->NewRandomRWFile(f, o, &file, dbg);
  if (s.ok()) r->reset(new RandomRWFile(std::move(file), core_, KindOf(f)));
  return s;
}

// ---- listener: tags the thread that runs the job (and does its I/O) ----

void PaioListener::OnFlushBegin(rocksdb::DB*, const rocksdb::FlushJobInfo&) {
  paio_set_request_context(Ids().flush);
}
void PaioListener::OnFlushCompleted(rocksdb::DB*,
                                    const rocksdb::FlushJobInfo&) {
  paio_clear_request_context();
}
static uint16_t CompactionContext(int base_input_level) {
  // L0->L0, L0->L1 and L0->Lbase (dynamic level bytes) all start at L0.
  return base_input_level == 0 ? Ids().compaction_l0 : Ids().compaction_ln;
}
void PaioListener::OnCompactionBegin(rocksdb::DB*,
                                     const rocksdb::CompactionJobInfo& ci) {
  paio_set_request_context(CompactionContext(ci.base_input_level));
}
void PaioListener::OnCompactionCompleted(rocksdb::DB*,
                                         const rocksdb::CompactionJobInfo&) {
  paio_clear_request_context();
}
void PaioListener::OnSubcompactionBegin(
    const rocksdb::SubcompactionJobInfo& si) {
  uint16_t cur = PAIO_CONTEXT_NONE;
  paio_get_request_context(&cur);
  saved_contexts.push_back(cur);
  paio_set_request_context(CompactionContext(si.base_input_level));
}
void PaioListener::OnSubcompactionCompleted(
    const rocksdb::SubcompactionJobInfo&) {
  uint16_t prev = PAIO_CONTEXT_NONE;
  if (!saved_contexts.empty()) {
    prev = saved_contexts.back();
    saved_contexts.pop_back();
  }
  paio_set_request_context(prev);
}
int StalledColumnFamilies() {
  return stalled_column_families.load(std::memory_order_relaxed);
}

PaioListener::~PaioListener() {
  std::lock_guard<std::mutex> g(mu_);
  int held = 0;
  for (const auto& cf : stalled_) held += cf.second;
  stalled_column_families.fetch_sub(held, std::memory_order_relaxed);
}

void PaioListener::OnStallConditionsChanged(
    const rocksdb::WriteStallInfo& info) {
  using rocksdb::WriteStallCondition;
  bool now = info.condition.cur != WriteStallCondition::kNormal;
  bool was = info.condition.prev != WriteStallCondition::kNormal;
  std::lock_guard<std::mutex> g(mu_);
  if (now && !was) {
    ++stalled_[info.cf_name];
    stalled_column_families.fetch_add(1, std::memory_order_relaxed);
  } else if (was && !now) {
    // A recovery this listener never saw start (installed mid-stall) has
    // nothing to take back.
    auto it = stalled_.find(info.cf_name);
    if (it == stalled_.end()) return;
    if (--it->second == 0) stalled_.erase(it);
    stalled_column_families.fetch_sub(1, std::memory_order_relaxed);
  }
}

void PaioListener::OnBackgroundError(rocksdb::BackgroundErrorReason,
                                     rocksdb::Status*) {
  // A failed job gets no *Completed callback.
  saved_contexts.clear();
  paio_clear_request_context();
}

}  // namespace internal

// ---- Plugin ----

#include "embedded_policy.inc"

const char* EmbeddedPolicy() { return kEmbeddedPolicy; }

struct Plugin::Impl {
  std::shared_ptr<internal::Core> core;
  std::shared_ptr<rocksdb::FileSystem> fs;  // over FileSystem::Default()
  std::shared_ptr<rocksdb::FileSystem> last_fs;
  std::shared_ptr<rocksdb::EventListener> listener;
  std::vector<std::unique_ptr<rocksdb::Env>> envs;
  std::mutex mu;
};

namespace {

// A JSON string literal for `s`.
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}


// The policy's text and the name errors give it: the file's, or the
// embedded layout.
bool PolicySource(const PluginOptions& o, std::string* text, std::string* origin,
                  std::string* error) {
  if (o.policy_file.empty()) {
    *text = kEmbeddedPolicy;
    *origin = "paio-rocksdb.toml";
    return true;
  }
  const std::string where =
      " (PAIO_ROCKSDB_POLICY, or PluginOptions::policy_file; unset it for "
      "the embedded layout)";
  // A directory opens as a stream and reads as nothing: an empty policy,
  // which would leave every request unenforced without a word.
  std::error_code ec;
  if (std::filesystem::is_directory(o.policy_file, ec)) {
    *error = "paio-rocksdb: the policy file " + o.policy_file +
             " is a directory; name the policy file itself" + where;
    return false;
  }
  errno = 0;
  std::ifstream in(o.policy_file, std::ios::binary);
  if (!in) {
    int e = errno;
    *error = "paio-rocksdb: cannot read the policy file " + o.policy_file +
             ": " + (e != 0 ? std::strerror(e) : "unreadable") + where;
    return false;
  }
  std::ostringstream buf;
  errno = 0;
  buf << in.rdbuf();
  if (in.bad()) {
    int e = errno;
    *error = "paio-rocksdb: reading the policy file " + o.policy_file +
             " failed: " + (e != 0 ? std::strerror(e) : "read error") + where;
    return false;
  }
  *text = buf.str();
  *origin = o.policy_file;
  return true;
}

// ---------- PluginOptions::rates (docs/rocksdb.md, "Rates") ----------

const char kRateKeys[] =
    "flush, flush_reads, compaction_l0, compaction_ln, compaction, "
    "compaction_reads, background or background_reads";

std::string DrlConfig(const std::string& rate) {
  return "{\"kind\":\"drl\",\"rate\":" + JsonString(rate) + "}";
}
std::string ConfigureRule(const char* channel, const char* object,
                          const std::string& rate) {
  return std::string("{\"rule\":\"configure\",\"channel\":\"") + channel +
         "\",\"object\":\"" + object + "\",\"config\":" + DrlConfig(rate) +
         "}";
}
std::string CreateDrlRule(const char* channel, const char* object,
                          const std::string& rate) {
  return std::string("{\"rule\":\"create_object\",\"channel\":\"") +
         channel + "\",\"name\":\"" + object +
         "\",\"config\":" + DrlConfig(rate) + "}";
}
std::string Pattern(const char* context, const char* type) {
  std::string p = "{";
  if (context != nullptr)
    p += std::string("\"request_context\":\"") + context + "\",";
  return p + "\"request_type\":\"" + type + "\"}";
}
std::string MapObjectRule(const char* channel, const std::string& pattern,
                          const char* object) {
  return std::string("{\"rule\":\"map_object\",\"channel\":\"") + channel +
         "\",\"pattern\":" + pattern + ",\"object\":\"" + object + "\"}";
}
std::string MapChannelRule(const std::string& pattern, const char* channel) {
  return "{\"rule\":\"map_channel\",\"pattern\":" + pattern +
         ",\"channel\":\"" + channel + "\"}";
}

// The rules that put `rates` into effect on the embedded layout, or false
// and *error for an unknown key or two keys that limit the same bytes.
// Each key limits writes, or reads with the _reads suffix, as RocksDB's
// own rate limiter does; `compaction` and `background` are one budget for
// several classes (a DRL they share, in an object or channel created here).
bool RateRules(const std::map<std::string, std::string>& rates,
               std::vector<std::string>* rules, std::string* error) {
  static const std::map<std::string, std::pair<const char*, const char*>>
      kObjects = {{"flush", {"flush", "limit"}},
                  {"flush_reads", {"flush", "reads"}},
                  {"compaction_l0", {"compaction", "l0"}},
                  {"compaction_ln", {"compaction", "ln"}},
                  {"compaction_reads", {"compaction", "reads"}}};
  // key -> the keys it covers (giving both would limit bytes twice).
  static const std::map<std::string, std::vector<const char*>> kShared = {
      {"compaction", {"compaction_l0", "compaction_ln"}},
      {"background", {"flush", "compaction_l0", "compaction_ln", "compaction"}},
      {"background_reads", {"flush_reads", "compaction_reads"}}};
  static const char* const kContexts[] = {"flush", "compaction_l0",
                                          "compaction_ln"};
  for (const auto& kv : rates) {
    if (kObjects.count(kv.first) == 0 && kShared.count(kv.first) == 0) {
      *error = "paio-rocksdb: unknown rate key \"" + kv.first +
               "\" (expected " + kRateKeys + ")";
      return false;
    }
    auto shared = kShared.find(kv.first);
    if (shared == kShared.end()) continue;
    for (const char* covered : shared->second) {
      if (rates.count(covered) != 0) {
        *error = "paio-rocksdb: rate keys \"" + kv.first + "\" and \"" +
                 covered + "\" both limit " + covered +
                 " I/O: give one (\"" + kv.first +
                 "\" is one budget for all of its classes)";
        return false;
      }
    }
  }
  bool background_channel = false;
  for (const auto& kv : rates) {
    const std::string& key = kv.first;
    auto object = kObjects.find(key);
    if (object != kObjects.end()) {
      rules->push_back(
          ConfigureRule(object->second.first, object->second.second, kv.second));
    } else if (key == "compaction") {
      rules->push_back(CreateDrlRule("compaction", "writes", kv.second));
      for (const char* ctx : {"compaction_l0", "compaction_ln"})
        rules->push_back(
            MapObjectRule("compaction", Pattern(ctx, "write"), "writes"));
    } else {  // background, background_reads
      const bool reads = key == "background_reads";
      const char* type = reads ? "read" : "write";
      const char* name = reads ? "reads" : "writes";
      if (!background_channel) {
        rules->push_back("{\"rule\":\"create_channel\",\"name\":\"background\"}");
        background_channel = true;
      }
      rules->push_back(CreateDrlRule("background", name, kv.second));
      rules->push_back(
          MapObjectRule("background", Pattern(nullptr, type), name));
      for (const char* ctx : kContexts)
        rules->push_back(MapChannelRule(Pattern(ctx, type), "background"));
    }
  }
  return true;
}

std::string LastError(const char* what) {
  return std::string(what) + ": " + paio_last_error();
}

}  // namespace

Plugin::Plugin() : impl_(new Impl) {}
Plugin::~Plugin() = default;

std::unique_ptr<Plugin> Plugin::Create(const PluginOptions& options,
                                       std::string* error) {
  std::string scratch;
  if (error == nullptr) error = &scratch;
  internal::Ids();
  paio_stage* stage = nullptr;
  std::string text, origin;
  if (!PolicySource(options, &text, &origin, error)) return nullptr;
  // The stage's name and labels come from the options, whatever the policy
  // file says (one policy, many instances).
  std::vector<const char*> keys, values;
  for (const auto& kv : options.labels) {
    keys.push_back(kv.first.c_str());
    values.push_back(kv.second.c_str());
  }
  paio_status st = paio_stage_from_policy_as(
      text.c_str(), origin.c_str(),
      options.stage_name.empty() ? nullptr : options.stage_name.c_str(),
      keys.data(), values.data(), keys.size(), &stage);
  if (st != PAIO_OK) {
    *error = LastError("paio-rocksdb: cannot create the stage");
    return nullptr;
  }
  auto core = std::make_shared<internal::Core>();
  core->stage = stage;
  core->critical_foreground = options.critical_foreground;
  core->critical_during_stalls = options.critical_during_stalls;

  std::vector<std::string> rules;
  if (!RateRules(options.rates, &rules, error)) return nullptr;
  for (const std::string& rule : rules) {
    if (paio_stage_apply(stage, rule.c_str()) != PAIO_OK) {
      *error = LastError(("paio-rocksdb: rates: rule " + rule).c_str());
      return nullptr;
    }
  }
  if (!options.control_socket.empty()) {
    const char* socket = options.control_socket == "default"
                             ? nullptr
                             : options.control_socket.c_str();
    if (paio_stage_connect(stage, socket) != PAIO_OK) {
      *error = LastError("paio-rocksdb: cannot connect to paiod");
      return nullptr;
    }
    // The control thread registers in a few ms when paiod is up; say so
    // when it is not, rather than let "ready" suggest it is connected.
    for (int i = 0; i < 50 && paio_stage_connected(stage) == 0; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (paio_stage_connected(stage) == 0) {
      std::fprintf(stderr,
                   "paio-rocksdb: paiod is not answering at %s: the stage "
                   "runs on its policy and registers when paiod appears (start "
                   "paiod, or unset PAIO_ROCKSDB_SOCKET to run without it)\n",
                   socket != nullptr ? socket : "paiod's default socket");
    }
  }
  std::unique_ptr<Plugin> p(new Plugin());
  p->impl_->core = core;
  p->impl_->fs = std::make_shared<internal::PaioFileSystem>(
      rocksdb::FileSystem::Default(), core);
  p->impl_->last_fs = p->impl_->fs;
  p->impl_->listener = std::make_shared<internal::PaioListener>();
  return p;
}

std::shared_ptr<rocksdb::FileSystem> Plugin::WrapFileSystem(
    const std::shared_ptr<rocksdb::FileSystem>& base) {
  return std::make_shared<internal::PaioFileSystem>(base, impl_->core);
}

void Plugin::Install(rocksdb::Options* options) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::shared_ptr<rocksdb::FileSystem> fs = impl_->fs;
  if (options->env != nullptr && options->env != rocksdb::Env::Default()) {
    const auto& base = options->env->GetFileSystem();
    if (base && base != rocksdb::FileSystem::Default()) {
      fs = WrapFileSystem(base);
    }
  }
  impl_->last_fs = fs;
  impl_->envs.push_back(rocksdb::NewCompositeEnv(fs));
  options->env = impl_->envs.back().get();
  options->listeners.push_back(impl_->listener);
}

std::shared_ptr<rocksdb::FileSystem> Plugin::file_system() const {
  return impl_->last_fs;
}
std::shared_ptr<rocksdb::EventListener> Plugin::listener() const {
  return impl_->listener;
}
paio_stage* Plugin::stage() const { return impl_->core->stage; }

std::string Plugin::CollectJson() const {
  char* json = nullptr;
  if (paio_stage_collect(impl_->core->stage, &json) != PAIO_OK) return "";
  std::string out(json);
  paio_string_free(json);
  return out;
}

bool Plugin::Connected() const {
  return paio_stage_connected(impl_->core->stage) != 0;
}

uint64_t Plugin::EnforceErrors() const {
  return impl_->core->enforce_errors.load(std::memory_order_relaxed);
}

void SetForeground() { paio_set_request_context(internal::Ids().foreground); }

std::string ClassifyForTest(const std::string& fname,
                            rocksdb::Env::IOPriority priority) {
  uint16_t id = internal::Classify(internal::KindOf(fname), priority);
  const auto& ids = internal::Ids();
  if (id == ids.foreground) return "foreground";
  if (id == ids.flush) return "flush";
  if (id == ids.compaction_l0) return "compaction_l0";
  if (id == ids.compaction_ln) return "compaction_ln";
  if (id == ids.unthrottled) return "unthrottled";
  return "context#" + std::to_string(id);
}

}  // namespace paio_rocksdb
