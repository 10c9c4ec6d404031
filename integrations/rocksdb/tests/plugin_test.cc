// Tests of the paio RocksDB plugin (GoogleTest). Run by build.sh / ctest.
#include <pthread.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/file_system.h>
#include <rocksdb/listener.h>

#include "internal.h"
#include "paio/rocksdb.h"

using namespace rocksdb;

namespace {

// ---------- a small JSON reader for the stage statistics ----------
struct Json {
  enum Kind { kNull, kBool, kNum, kStr, kArr, kObj } kind = kNull;
  double num = 0;
  std::string str;
  std::vector<Json> arr;
  std::map<std::string, Json> obj;
  const Json& operator[](const std::string& k) const {
    static Json null;
    auto it = obj.find(k);
    return it == obj.end() ? null : it->second;
  }
  uint64_t u() const { return static_cast<uint64_t>(num); }
};

struct Parser {
  const std::string& s;
  size_t i = 0;
  void ws() { while (i < s.size() && isspace(static_cast<unsigned char>(s[i]))) ++i; }
  std::string str() {
    std::string out;
    ++i;  // "
    while (s[i] != '"') {
      if (s[i] == '\\') { ++i; out += s[i] == 'n' ? '\n' : s[i]; if (s[i] == 'u') i += 4; }
      else out += s[i];
      ++i;
    }
    ++i;
    return out;
  }
  Json value() {
    ws();
    Json j;
    char c = s[i];
    if (c == '{') {
      j.kind = Json::kObj; ++i; ws();
      if (s[i] == '}') { ++i; return j; }
      for (;;) {
        ws(); std::string k = str(); ws(); ++i;  // :
        j.obj[k] = value(); ws();
        if (s[i++] == '}') break;
      }
    } else if (c == '[') {
      j.kind = Json::kArr; ++i; ws();
      if (s[i] == ']') { ++i; return j; }
      for (;;) { j.arr.push_back(value()); ws(); if (s[i++] == ']') break; }
    } else if (c == '"') {
      j.kind = Json::kStr; j.str = str();
    } else if (s.compare(i, 4, "null") == 0) { i += 4;
    } else if (s.compare(i, 4, "true") == 0) { j.kind = Json::kBool; j.num = 1; i += 4;
    } else if (s.compare(i, 5, "false") == 0) { j.kind = Json::kBool; i += 5;
    } else {
      size_t end = 0;
      j.kind = Json::kNum; j.num = std::stod(s.substr(i, 40), &end); i += end;
    }
    return j;
  }
};

Json ParseJson(const std::string& s) { Parser p{s}; return p.value(); }

const Json* Channel(const Json& stats, const std::string& name) {
  for (const Json& c : stats["channels"].arr)
    if (c["name"].str == name) return &c;
  return nullptr;
}
const Json* Object(const Json& stats, const std::string& ch, const std::string& obj) {
  const Json* c = Channel(stats, ch);
  if (!c) return nullptr;
  for (const Json& o : (*c)["objects"].arr)
    if (o["name"].str == obj) return &o;
  return nullptr;
}
uint64_t Waited(const Json* j) { return j ? (*j)["wait_total"]["waited_ops"].u() : ~0ull; }
uint64_t Bytes(const Json* j) { return j ? (*j)["bytes"].u() : ~0ull; }

// ---------- a counting FileSystem placed UNDER the paio one ----------
// It classifies independently of the plugin: by file name, by the thread's
// request context (set by the plugin's listener), by RocksDB's thread names
// and by its own copy of the file's IO priority; and tallies bytes per class.
enum Cls { kClsFg, kClsFlush, kClsL0, kClsLn, kClsUnthr, kClsOther, kNumCls };
const char* kClsName[] = {"foreground", "flush", "compaction_l0", "compaction_ln", "unthrottled", "other"};

enum Dir { kWrite, kRead, kNumDir };
struct Tally {
  std::atomic<uint64_t> bytes[kNumCls][kNumDir] = {};
  std::atomic<uint64_t> ops[kNumCls] = {};
  uint64_t Of(Cls c) const { return bytes[c][kWrite].load() + bytes[c][kRead].load(); }
};

bool IsMeta(const std::string& f) {
  std::string b = f.substr(f.find_last_of('/') + 1);
  auto ends = [&](const char* x) { std::string s(x); return b.size() >= s.size() && b.compare(b.size() - s.size(), s.size(), s) == 0; };
  auto starts = [&](const char* x) { return b.rfind(x, 0) == 0; };
  return ends(".log") || ends(".dbtmp") || starts("MANIFEST") || b == "CURRENT" ||
         starts("OPTIONS") || b == "IDENTITY" || b == "LOCK" || starts("LOG");
}

Cls Independent(bool meta, Env::IOPriority pri) {
  if (meta) return kClsUnthr;
  uint16_t tag = 0;
  paio_get_request_context(&tag);
  if (tag != PAIO_CONTEXT_NONE) {
    const auto& ids = paio_rocksdb::internal::Ids();
    if (tag == ids.foreground) return kClsFg;
    if (tag == ids.flush) return kClsFlush;
    if (tag == ids.compaction_l0) return kClsL0;
    if (tag == ids.compaction_ln) return kClsLn;
    if (tag == ids.unthrottled) return kClsUnthr;
    return kClsOther;
  }
  char name[32] = {0};
  pthread_getname_np(pthread_self(), name, sizeof name);
  std::string n(name);
  if (n == "rocksdb:high") return kClsFlush;
  if (n.rfind("rocksdb:low", 0) == 0 || n.rfind("rocksdb:bottom", 0) == 0) return kClsLn;
  if (pri == Env::IO_HIGH) return kClsFlush;
  if (pri == Env::IO_LOW || pri == Env::IO_MID) return kClsLn;
  return kClsFg;
}

void Add(Tally* t, Cls c, uint64_t n, Dir d = kRead) { t->bytes[c][d] += n; t->ops[c] += 1; }

class CountW : public FSWritableFileOwnerWrapper {
 public:
  CountW(std::unique_ptr<FSWritableFile>&& f, Tally* t, bool meta) : FSWritableFileOwnerWrapper(std::move(f)), t_(t), meta_(meta) {}
  IOStatus Append(const Slice& d, const IOOptions& o, IODebugContext* g) override { Add(t_, Independent(meta_, GetIOPriority()), d.size(), kWrite); return target()->Append(d, o, g); }
  IOStatus Append(const Slice& d, const IOOptions& o, const DataVerificationInfo& v, IODebugContext* g) override { Add(t_, Independent(meta_, GetIOPriority()), d.size(), kWrite); return target()->Append(d, o, v, g); }
  IOStatus PositionedAppend(const Slice& d, uint64_t off, const IOOptions& o, IODebugContext* g) override { Add(t_, Independent(meta_, GetIOPriority()), d.size(), kWrite); return target()->PositionedAppend(d, off, o, g); }
  IOStatus PositionedAppend(const Slice& d, uint64_t off, const IOOptions& o, const DataVerificationInfo& v, IODebugContext* g) override { Add(t_, Independent(meta_, GetIOPriority()), d.size(), kWrite); return target()->PositionedAppend(d, off, o, v, g); }
 private:
  Tally* t_; bool meta_;
};
class CountR : public FSRandomAccessFileOwnerWrapper {
 public:
  CountR(std::unique_ptr<FSRandomAccessFile>&& f, Tally* t, bool meta) : FSRandomAccessFileOwnerWrapper(std::move(f)), t_(t), meta_(meta) {}
  // Reads count the bytes the file returned (what the stage counts since
  // requests complete in two phases); ReadAsync the bytes asked for.
  IOStatus Read(uint64_t off, size_t n, const IOOptions& o, Slice* r, char* s, IODebugContext* g) const override { IOStatus st = target()->Read(off, n, o, r, s, g); Add(t_, Independent(meta_, Env::IO_TOTAL), st.ok() ? r->size() : 0); return st; }
  IOStatus MultiRead(FSReadRequest* q, size_t k, const IOOptions& o, IODebugContext* g) override { IOStatus st = target()->MultiRead(q, k, o, g); uint64_t n = 0; for (size_t i = 0; st.ok() && i < k; ++i) if (q[i].status.ok()) n += q[i].result.size(); Add(t_, Independent(meta_, Env::IO_TOTAL), n); return st; }
  IOStatus Prefetch(uint64_t off, size_t n, const IOOptions& o, IODebugContext* g) override { IOStatus st = target()->Prefetch(off, n, o, g); Add(t_, Independent(meta_, Env::IO_TOTAL), st.ok() ? n : 0); return st; }
  IOStatus ReadAsync(FSReadRequest& q, const IOOptions& o, std::function<void(const FSReadRequest&, void*)> cb, void* a, void** h, IOHandleDeleter* d, IODebugContext* g) override { Add(t_, Independent(meta_, Env::IO_TOTAL), q.len); return target()->ReadAsync(q, o, cb, a, h, d, g); }
 private:
  Tally* t_; bool meta_;
};
class CountS : public FSSequentialFileOwnerWrapper {
 public:
  CountS(std::unique_ptr<FSSequentialFile>&& f, Tally* t, bool meta) : FSSequentialFileOwnerWrapper(std::move(f)), t_(t), meta_(meta) {}
  IOStatus Read(size_t n, const IOOptions& o, Slice* r, char* s, IODebugContext* g) override { IOStatus st = target()->Read(n, o, r, s, g); Add(t_, Independent(meta_, Env::IO_TOTAL), st.ok() ? r->size() : 0); return st; }
  IOStatus PositionedRead(uint64_t off, size_t n, const IOOptions& o, Slice* r, char* s, IODebugContext* g) override { IOStatus st = target()->PositionedRead(off, n, o, r, s, g); Add(t_, Independent(meta_, Env::IO_TOTAL), st.ok() ? r->size() : 0); return st; }
 private:
  Tally* t_; bool meta_;
};

class CountingFS : public FileSystemWrapper {
 public:
  explicit CountingFS(Tally* t) : FileSystemWrapper(FileSystem::Default()), t_(t) {}
  const char* Name() const override { return "CountingFS"; }
  IOStatus NewSequentialFile(const std::string& f, const FileOptions& o, std::unique_ptr<FSSequentialFile>* r, IODebugContext* g) override {
    std::unique_ptr<FSSequentialFile> x; IOStatus s = target()->NewSequentialFile(f, o, &x, g);
    if (s.ok()) { r->reset(new CountS(std::move(x), t_, IsMeta(f))); } return s; }
  IOStatus NewRandomAccessFile(const std::string& f, const FileOptions& o, std::unique_ptr<FSRandomAccessFile>* r, IODebugContext* g) override {
    std::unique_ptr<FSRandomAccessFile> x; IOStatus s = target()->NewRandomAccessFile(f, o, &x, g);
    if (s.ok()) { r->reset(new CountR(std::move(x), t_, IsMeta(f))); } return s; }
  IOStatus NewWritableFile(const std::string& f, const FileOptions& o, std::unique_ptr<FSWritableFile>* r, IODebugContext* g) override {
    std::unique_ptr<FSWritableFile> x; IOStatus s = target()->NewWritableFile(f, o, &x, g);
    if (s.ok()) { r->reset(new CountW(std::move(x), t_, IsMeta(f))); } return s; }
  IOStatus ReopenWritableFile(const std::string& f, const FileOptions& o, std::unique_ptr<FSWritableFile>* r, IODebugContext* g) override {
    std::unique_ptr<FSWritableFile> x; IOStatus s = target()->ReopenWritableFile(f, o, &x, g);
    if (s.ok()) { r->reset(new CountW(std::move(x), t_, IsMeta(f))); } return s; }
  IOStatus ReuseWritableFile(const std::string& f, const std::string& old, const FileOptions& o, std::unique_ptr<FSWritableFile>* r, IODebugContext* g) override {
    std::unique_ptr<FSWritableFile> x; IOStatus s = target()->ReuseWritableFile(f, old, o, &x, g);
    if (s.ok()) { r->reset(new CountW(std::move(x), t_, IsMeta(f))); } return s; }
 private:
  Tally* t_;
};

// Records the jobs RocksDB ran.
struct JobCounter : public EventListener {
  const char* Name() const override { return "JobCounter"; }
  std::atomic<int> flushes{0}, l0{0}, l0_to_l0{0}, ln{0};
  void OnFlushCompleted(DB*, const FlushJobInfo&) override { ++flushes; }
  void OnCompactionCompleted(DB*, const CompactionJobInfo& ci) override {
    if (ci.base_input_level == 0) { ++l0; if (ci.output_level == 0) ++l0_to_l0; } else { ++ln; }
  }
};

// The directories TempDir handed out, removed when the test program exits
// (all of them: a failing test's files are gone too, its messages say why).
std::vector<std::string>& TempDirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

void RemoveTempDirs() {
  for (const std::string& d : TempDirs()) {
    std::error_code ec;
    std::filesystem::remove_all(d, ec);
  }
}

std::string TempDir(const char* name) {
  std::string d = "/tmp/paio-rocksdb-test-" + std::to_string(getpid()) + "-" + name;
  DestroyDB(d, Options());
  if (TempDirs().empty()) std::atexit(RemoveTempDirs);
  TempDirs().push_back(d);
  return d;
}

Options SmallDbOptions() {
  Options o;
  o.create_if_missing = true;
  o.write_buffer_size = 1 << 20;
  o.max_write_buffer_number = 3;
  o.level0_file_num_compaction_trigger = 2;
  o.max_bytes_for_level_base = 4 << 20;
  o.target_file_size_base = 1 << 20;
  o.max_background_jobs = 4;
  o.compression = kNoCompression;
  return o;
}

bool WaitIdle(DB* db, int seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    uint64_t flushes = 1, comps = 1, pending = 1, mem = 1;
    db->GetIntProperty("rocksdb.num-running-flushes", &flushes);
    db->GetIntProperty("rocksdb.num-running-compactions", &comps);
    db->GetIntProperty("rocksdb.compaction-pending", &pending);
    db->GetIntProperty("rocksdb.mem-table-flush-pending", &mem);
    if (flushes == 0 && comps == 0 && pending == 0 && mem == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

void Load(DB* db, int threads, int keys_per_thread, size_t value_size) {
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([=] {
      std::string v(value_size, 'a' + t);
      uint64_t x = 88172645463325252ull + t;
      for (int i = 0; i < keys_per_thread; ++i) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        char k[32];
        std::snprintf(k, sizeof k, "key%016llx", static_cast<unsigned long long>(x % 1000000));
        ASSERT_TRUE(db->Put(WriteOptions(), k, v).ok());
        if (i % 16 == 0) { std::string out; db->Get(ReadOptions(), k, &out); }
      }
    });
  }
  for (auto& t : ts) t.join();
}

}  // namespace

// ---------------- tests ----------------

TEST(Layout, EmbeddedPolicyHasTheContractNames) {
  paio_rocksdb::PluginOptions po;
  po.labels = {{"instance", "db1"}};
  std::string err;
  auto p = paio_rocksdb::Plugin::Create(po, &err);
  ASSERT_TRUE(p) << err;
  char* info = nullptr;
  ASSERT_EQ(paio_stage_info(p->stage(), &info), PAIO_OK);
  Json j = ParseJson(info);
  paio_string_free(info);
  EXPECT_EQ(j["name"].str, "rocksdb");
  EXPECT_EQ(j["labels"]["instance"].str, "db1");
  EXPECT_EQ(j["default_channel"].str, "other");
  Json stats = ParseJson(p->CollectJson());
  for (const char* c : {"foreground", "flush", "compaction", "unthrottled", "other"})
    EXPECT_NE(Channel(stats, c), nullptr) << c;
  EXPECT_NE(Object(stats, "flush", "limit"), nullptr);
  EXPECT_NE(Object(stats, "compaction", "l0"), nullptr);
  EXPECT_NE(Object(stats, "compaction", "ln"), nullptr);
  EXPECT_NE(Object(stats, "flush", "reads"), nullptr);
  EXPECT_NE(Object(stats, "compaction", "reads"), nullptr);
  EXPECT_FALSE(p->Connected());
}

TEST(Layout, InstalledPolicyFileLoadsAndErrorsAreReported) {
  paio_rocksdb::PluginOptions po;
  po.policy_file = PAIO_ROCKSDB_POLICY_FILE;
  po.stage_name = "db-a";
  po.labels = {{"instance", "a"}};
  std::string err;
  auto from_file = paio_rocksdb::Plugin::Create(po, &err);
  ASSERT_TRUE(from_file) << err;
  // The options name and label a stage built from a file too.
  char* info = nullptr;
  ASSERT_EQ(paio_stage_info(from_file->stage(), &info), PAIO_OK);
  Json j = ParseJson(info);
  paio_string_free(info);
  EXPECT_EQ(j["name"].str, "db-a");
  EXPECT_EQ(j["labels"]["instance"].str, "a");
  po.policy_file = "/nonexistent/policy.toml";
  EXPECT_FALSE(paio_rocksdb::Plugin::Create(po, &err));
  EXPECT_NE(err.find("nonexistent"), std::string::npos) << err;
  // A directory reads as nothing: refused, not taken for an empty policy.
  po.policy_file = "/tmp";
  EXPECT_FALSE(paio_rocksdb::Plugin::Create(po, &err));
  EXPECT_NE(err.find("is a directory"), std::string::npos) << err;
  paio_rocksdb::PluginOptions bad;
  bad.rates = {{"flushes", "1MiB/s"}};
  EXPECT_FALSE(paio_rocksdb::Plugin::Create(bad, &err));
  bad.rates = {{"flush", "1MiB"}};
  EXPECT_FALSE(paio_rocksdb::Plugin::Create(bad, &err));
  EXPECT_NE(err.find("rate"), std::string::npos) << err;
}

TEST(Classify, FallbacksAndListener) {
  using paio_rocksdb::ClassifyForTest;
  paio_clear_request_context();
  EXPECT_EQ(ClassifyForTest("/db/000012.sst", Env::IO_TOTAL), "foreground");
  EXPECT_EQ(ClassifyForTest("/db/000012.sst", Env::IO_HIGH), "flush");
  EXPECT_EQ(ClassifyForTest("/db/000012.sst", Env::IO_LOW), "compaction_ln");
  for (const char* f : {"/db/000003.log", "/db/MANIFEST-000005", "/db/CURRENT", "/db/OPTIONS-000007",
                        "/db/000004.dbtmp", "/db/IDENTITY", "/db/LOCK", "/db/LOG"})
    EXPECT_EQ(ClassifyForTest(f, Env::IO_HIGH), "unthrottled") << f;
  std::thread([] {
    pthread_setname_np(pthread_self(), "rocksdb:high");
    EXPECT_EQ(ClassifyForTest("/db/1.sst", Env::IO_TOTAL), "flush");
  }).join();
  std::thread([] {
    pthread_setname_np(pthread_self(), "rocksdb:bottom");
    EXPECT_EQ(ClassifyForTest("/db/1.sst", Env::IO_TOTAL), "compaction_ln");
  }).join();
  std::thread([] {
    pthread_setname_np(pthread_self(), "rocksdb:low");
    paio_rocksdb::internal::PaioListener l;
    CompactionJobInfo ci;
    ci.base_input_level = 0;
    l.OnCompactionBegin(nullptr, ci);
    EXPECT_EQ(ClassifyForTest("/db/1.sst", Env::IO_LOW), "compaction_l0");
    SubcompactionJobInfo si;
    si.base_input_level = 2;
    l.OnSubcompactionBegin(si);
    EXPECT_EQ(ClassifyForTest("/db/1.sst", Env::IO_LOW), "compaction_ln");
    l.OnSubcompactionCompleted(si);
    EXPECT_EQ(ClassifyForTest("/db/1.sst", Env::IO_LOW), "compaction_l0");
    EXPECT_EQ(ClassifyForTest("/db/MANIFEST-000001", Env::IO_LOW), "unthrottled");
    l.OnCompactionCompleted(nullptr, ci);
    EXPECT_EQ(ClassifyForTest("/db/1.sst", Env::IO_TOTAL), "compaction_ln");  // thread name
    FlushJobInfo fi;
    l.OnFlushBegin(nullptr, fi);
    EXPECT_EQ(ClassifyForTest("/db/1.sst", Env::IO_TOTAL), "flush");
    Status s = Status::IOError("x");
    l.OnBackgroundError(BackgroundErrorReason::kFlush, &s);  // no *Completed follows
    uint16_t tag = 1;
    paio_get_request_context(&tag);
    EXPECT_EQ(tag, PAIO_CONTEXT_NONE);
  }).join();
  paio_rocksdb::SetForeground();
  EXPECT_EQ(ClassifyForTest("/db/1.sst", Env::IO_HIGH), "foreground");
  paio_clear_request_context();
}

// Every byte the files received went through the stage, in the right class.
TEST(RocksDB, StageBytesEqualFileBytesPerClass) {
  Tally tally;
  auto counting = std::make_shared<CountingFS>(&tally);
  std::unique_ptr<Env> counting_env = NewCompositeEnv(counting);
  std::string err;
  auto plugin = paio_rocksdb::Plugin::Create(paio_rocksdb::PluginOptions(), &err);
  ASSERT_TRUE(plugin) << err;
  auto jobs = std::make_shared<JobCounter>();
  Options o = SmallDbOptions();
  o.env = counting_env.get();
  o.listeners.push_back(jobs);
  plugin->Install(&o);  // paio FS over the counting FS
  ASSERT_NE(o.env, counting_env.get());
  std::string dir = TempDir("bytes");
  DB* raw = nullptr;
  ASSERT_TRUE(DB::Open(o, dir, &raw).ok());
  std::unique_ptr<DB> db(raw);
  Load(db.get(), 2, 20000, 1000);
  ASSERT_TRUE(db->CompactRange(CompactRangeOptions(), nullptr, nullptr).ok());
  ASSERT_TRUE(WaitIdle(db.get(), 300)) << "background work did not finish";
  {  // foreground reads that reach the SST files (no block cache fill)
    ReadOptions ro;
    ro.fill_cache = false;
    std::unique_ptr<Iterator> it(db->NewIterator(ro));
    int n = 0;
    for (it->SeekToFirst(); it->Valid() && n < 2000; it->Next()) ++n;
    ASSERT_GT(n, 0);
  }
  ASSERT_TRUE(db->Close().ok());
  db.reset();

  Json s = ParseJson(plugin->CollectJson());
  std::printf("jobs: flushes %d, L0 compactions %d (L0->L0 %d), Ln compactions %d\n",
              jobs->flushes.load(), jobs->l0.load(), jobs->l0_to_l0.load(), jobs->ln.load());
  for (int c = 0; c < kNumCls; ++c)
    std::printf("files: %-14s %10llu bytes written %10llu read %8llu ops\n", kClsName[c],
                (unsigned long long)tally.bytes[c][kWrite].load(),
                (unsigned long long)tally.bytes[c][kRead].load(), (unsigned long long)tally.ops[c].load());
  EXPECT_GT(jobs->flushes.load(), 5);
  EXPECT_GT(jobs->l0.load(), 0);
  EXPECT_GT(jobs->ln.load(), 0);
  EXPECT_GT(tally.bytes[kClsFlush][kWrite].load(), 0u);
  EXPECT_GT(tally.bytes[kClsL0][kWrite].load(), 0u);
  EXPECT_GT(tally.bytes[kClsL0][kRead].load(), 0u);
  EXPECT_GT(tally.bytes[kClsLn][kWrite].load(), 0u);
  EXPECT_GT(tally.bytes[kClsLn][kRead].load(), 0u);
  EXPECT_GT(tally.Of(kClsFg), 0u);
  EXPECT_GT(tally.Of(kClsUnthr), 0u);

  EXPECT_EQ(Bytes(Channel(s, "foreground")), tally.Of(kClsFg));
  EXPECT_EQ(Bytes(Channel(s, "flush")), tally.Of(kClsFlush));
  // The DRLs named by the rate keys take writes; each class's reads go to
  // its channel's `reads` object.
  EXPECT_EQ(Bytes(Object(s, "flush", "limit")), tally.bytes[kClsFlush][kWrite].load());
  EXPECT_EQ(Bytes(Object(s, "flush", "reads")), tally.bytes[kClsFlush][kRead].load());
  EXPECT_EQ(Bytes(Object(s, "compaction", "l0")), tally.bytes[kClsL0][kWrite].load());
  EXPECT_EQ(Bytes(Object(s, "compaction", "ln")), tally.bytes[kClsLn][kWrite].load());
  EXPECT_EQ(Bytes(Object(s, "compaction", "reads")),
            tally.bytes[kClsL0][kRead].load() + tally.bytes[kClsLn][kRead].load());
  EXPECT_EQ(Bytes(Object(s, "compaction", "default")), 0u);
  EXPECT_EQ(Bytes(Channel(s, "unthrottled")), tally.Of(kClsUnthr));
  EXPECT_EQ(Bytes(Channel(s, "other")), tally.Of(kClsOther));
  EXPECT_EQ(s["unmatched"]["ops"].u(), 0u);
  EXPECT_EQ(plugin->EnforceErrors(), 0u);
  DestroyDB(dir, Options());
}

// A throttled class waits; the others never do; nothing deadlocks.
TEST(RocksDB, ThrottledClassWaitsOthersDoNot) {
  paio_rocksdb::PluginOptions po;
  po.rates = {{"compaction_ln", "8MiB/s"}};
  std::string err;
  auto plugin = paio_rocksdb::Plugin::Create(po, &err);
  ASSERT_TRUE(plugin) << err;
  Options o = SmallDbOptions();
  plugin->Install(&o);
  std::string dir = TempDir("throttle");
  DB* raw = nullptr;
  ASSERT_TRUE(DB::Open(o, dir, &raw).ok());
  std::unique_ptr<DB> db(raw);
  auto t0 = std::chrono::steady_clock::now();
  Load(db.get(), 2, 10000, 1000);
  // Forced: without it RocksDB may move the files down without rewriting
  // them (a trivial move), and the throttled class would do no I/O at all.
  CompactRangeOptions cro;
  cro.bottommost_level_compaction = BottommostLevelCompaction::kForce;
  ASSERT_TRUE(db->CompactRange(cro, nullptr, nullptr).ok());
  ASSERT_TRUE(WaitIdle(db.get(), 300)) << "background work did not finish";
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(db->Close().ok());
  db.reset();
  Json s = ParseJson(plugin->CollectJson());
  const Json* ln = Object(s, "compaction", "ln");
  std::printf("ln: %llu bytes, %llu waited ops in %.2f s; flush waited %llu, l0 waited %llu\n",
              (unsigned long long)Bytes(ln), (unsigned long long)Waited(ln), secs,
              (unsigned long long)Waited(Object(s, "flush", "limit")),
              (unsigned long long)Waited(Object(s, "compaction", "l0")));
  EXPECT_GT(Bytes(ln), 0u);
  EXPECT_GT(Waited(ln), 0u);
  EXPECT_EQ(Waited(Object(s, "flush", "limit")), 0u);
  EXPECT_EQ(Waited(Object(s, "compaction", "l0")), 0u);
  EXPECT_EQ(Waited(Channel(s, "foreground")), 0u);
  EXPECT_EQ(Waited(Channel(s, "unthrottled")), 0u);
  DestroyDB(dir, Options());
}

// The DRL keeps its rate both for 1 MiB appends (flush SST writes) and for
// 4 KiB reads (compaction input). Measured over the whole run as
// stage-counted bytes / elapsed wall time. Bounds are deliberately loose
// (+-15 %): the bucket starts full (10 ms of burst) and the last request's
// debt is not waited for, which biases short runs upwards by a few %; a
// loaded machine can only make the measured rate lower.
TEST(Drl, RateHoldsForLargeAppendsAndSmallReads) {
  const double kFlushRate = 16.0 * (1 << 20), kLnRate = 4.0 * (1 << 20);
  paio_rocksdb::PluginOptions po;
  po.rates = {{"flush", "16MiB/s"}, {"compaction_reads", "4MiB/s"}};
  std::string err;
  auto plugin = paio_rocksdb::Plugin::Create(po, &err);
  ASSERT_TRUE(plugin) << err;
  auto fs = plugin->file_system();
  std::string dir = TempDir("drl");
  fs->CreateDirIfMissing(dir, IOOptions(), nullptr);
  std::string path = dir + "/000001.sst";

  double write_secs = 0, read_secs = 0;
  std::thread([&] {
    paio_set_request_context(paio_rocksdb::internal::Ids().flush);
    std::unique_ptr<FSWritableFile> f;
    ASSERT_TRUE(fs->NewWritableFile(path, FileOptions(), &f, nullptr).ok());
    std::string chunk(1 << 20, 'x');
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 32; ++i) ASSERT_TRUE(f->Append(chunk, IOOptions(), nullptr).ok());
    write_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(f->Close(IOOptions(), nullptr).ok());
  }).join();
  std::thread([&] {
    paio_set_request_context(paio_rocksdb::internal::Ids().compaction_ln);
    std::unique_ptr<FSRandomAccessFile> f;
    ASSERT_TRUE(fs->NewRandomAccessFile(path, FileOptions(), &f, nullptr).ok());
    std::vector<char> buf(4096);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 2048; ++i) {  // 8 MiB in 4 KiB reads
      Slice r;
      ASSERT_TRUE(f->Read(uint64_t(i) * 4096, 4096, IOOptions(), &r, buf.data(), nullptr).ok());
    }
    read_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }).join();
  Json s = ParseJson(plugin->CollectJson());
  double flush_rate = Bytes(Object(s, "flush", "limit")) / write_secs;
  double ln_rate = Bytes(Object(s, "compaction", "reads")) / read_secs;
  std::printf("flush: 1 MiB appends %.2f MiB/s (target 16); compaction_reads: 4 KiB reads %.2f MiB/s (target 4)\n",
              flush_rate / (1 << 20), ln_rate / (1 << 20));
  EXPECT_EQ(Bytes(Object(s, "flush", "limit")), 32u << 20);
  EXPECT_EQ(Bytes(Object(s, "compaction", "reads")), 8u << 20);
  EXPECT_EQ(Bytes(Object(s, "compaction", "ln")), 0u);
  EXPECT_NEAR(flush_rate / kFlushRate, 1.0, 0.15);
  EXPECT_NEAR(ln_rate / kLnRate, 1.0, 0.15);
  fs->DeleteFile(path, IOOptions(), nullptr);
  fs->DeleteDir(dir, IOOptions(), nullptr);
}

// A compaction's direct read through a drl with `split` is issued as
// pieces, each admitted on its own; the caller sees one read, byte-exact,
// short at the end of the file. Buffered reads and reads without a split
// stay whole. The file is on the disk of the build directory (direct I/O).
TEST(Split, DirectReadsOfADrlWithSplitGoInPieces) {
  paio_rocksdb::PluginOptions po;
  std::string err;
  auto plugin = paio_rocksdb::Plugin::Create(po, &err);
  ASSERT_TRUE(plugin) << err;
  std::string dir = (std::filesystem::current_path() /
                     ("paio-split-test-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  std::string path = dir + "/000001.sst";
  const size_t kSize = (1 << 20) + 8192;  // 16 pieces of 64 KiB and 8 KiB
  std::string data(kSize, '\0');
  for (size_t i = 0; i < kSize; ++i) data[i] = static_cast<char>((i * 7 + i / 4096) & 0xff);
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(data.data(), 1, kSize, f), kSize);
    std::fclose(f);
  }
  auto reads = [&](const char* what) {
    Json s = ParseJson(plugin->CollectJson());
    const Json* o = Object(s, "compaction", "reads");
    EXPECT_NE(o, nullptr) << what;
    using Pair = std::pair<uint64_t, uint64_t>;
    return o ? Pair((*o)["ops"].u(), (*o)["bytes"].u()) : Pair(~0ull, ~0ull);
  };
  auto read = [&](bool direct, uint64_t off, size_t n, std::string* out) {
    std::thread([&] {
      paio_set_request_context(paio_rocksdb::internal::Ids().compaction_ln);
      FileOptions fo;
      fo.use_direct_reads = direct;
      std::unique_ptr<FSRandomAccessFile> f;
      ASSERT_TRUE(plugin->file_system()->NewRandomAccessFile(path, fo, &f, nullptr).ok());
      ASSERT_EQ(f->use_direct_io(), direct);
      void* buf = nullptr;
      ASSERT_EQ(posix_memalign(&buf, 4096, n), 0);
      Slice r;
      ASSERT_TRUE(f->Read(off, n, IOOptions(), &r, static_cast<char*>(buf), nullptr).ok());
      out->assign(r.data(), r.size());
      std::free(buf);
    }).join();
  };
  std::string got;
  read(true, 0, 2 << 20, &got);  // no split configured: one read
  EXPECT_EQ(got, data);
  using Pair = std::pair<uint64_t, uint64_t>;
  EXPECT_EQ(reads("whole"), Pair(1, kSize));

  ASSERT_EQ(paio_stage_apply(plugin->stage(),
                             "{\"rule\":\"configure\",\"channel\":\"compaction\",\"object\":\"reads\","
                             "\"config\":{\"kind\":\"drl\",\"rate\":\"1GiB/s\",\"split\":\"64KiB\"}}"),
            PAIO_OK)
      << paio_last_error();
  read(true, 0, 2 << 20, &got);  // 16 full pieces, then one short at the end
  EXPECT_EQ(got, data);
  EXPECT_EQ(reads("split to the end"), Pair(1 + 17, 2 * kSize));
  read(true, 64 << 10, 256 << 10, &got);  // 4 pieces from an offset
  EXPECT_EQ(got, data.substr(64 << 10, 256 << 10));
  EXPECT_EQ(reads("split at an offset"), Pair(1 + 17 + 4, 2 * kSize + (256 << 10)));
  read(true, 0, 64 << 10, &got);  // not larger than a piece: whole
  EXPECT_EQ(got, data.substr(0, 64 << 10));
  read(false, 0, 1 << 20, &got);  // buffered: whole
  EXPECT_EQ(got, data.substr(0, 1 << 20));
  EXPECT_EQ(reads("whole again").first, 1u + 17 + 4 + 2);
  EXPECT_EQ(plugin->EnforceErrors(), 0u);
  std::filesystem::remove_all(dir);
}

// A file system whose writable files fail every PositionedAppend at or
// after byte `fail_at` of the file (an injected I/O error) and ask for
// buffers aligned to `alignment` bytes (0: the default file system's).
class TestWrites : public FileSystemWrapper {
 public:
  TestWrites(uint64_t fail_at, size_t alignment)
      : FileSystemWrapper(FileSystem::Default()), fail_at_(fail_at), alignment_(alignment) {}
  const char* Name() const override { return "TestWrites"; }
  IOStatus NewWritableFile(const std::string& f, const FileOptions& o,
                           std::unique_ptr<FSWritableFile>* r, IODebugContext* dbg) override {
    std::unique_ptr<FSWritableFile> file;
    IOStatus s = target()->NewWritableFile(f, o, &file, dbg);
    if (s.ok()) r->reset(new File(std::move(file), fail_at_, alignment_));
    return s;
  }

 private:
  struct File : FSWritableFileOwnerWrapper {
    File(std::unique_ptr<FSWritableFile>&& t, uint64_t fail_at, size_t alignment)
        : FSWritableFileOwnerWrapper(std::move(t)), fail_at(fail_at), alignment(alignment) {}
    using FSWritableFileOwnerWrapper::PositionedAppend;
    IOStatus PositionedAppend(const Slice& d, uint64_t off, const IOOptions& o,
                              IODebugContext* dbg) override {
      if (off >= fail_at) return IOStatus::IOError("injected write error");
      return target()->PositionedAppend(d, off, o, dbg);
    }
    size_t GetRequiredBufferAlignment() const override {
      return alignment ? alignment : target()->GetRequiredBufferAlignment();
    }
    uint64_t fail_at;
    size_t alignment;
  };
  uint64_t fail_at_;
  size_t alignment_;
};

// A flush's direct write through a drl with `split` is issued as pieces,
// each admitted on its own; the file holds exactly what was written. Writes
// carrying a checksum (DataVerificationInfo), buffered writes and writes not
// larger than a piece go whole; a failing piece fails the append.
TEST(Split, DirectWritesOfADrlWithSplitGoInPieces) {
  paio_rocksdb::PluginOptions po;
  std::string err;
  auto plugin = paio_rocksdb::Plugin::Create(po, &err);
  ASSERT_TRUE(plugin) << err;
  std::string dir = (std::filesystem::current_path() /
                     ("paio-wsplit-test-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/000007.sst";
  const size_t kSize = 1 << 20;  // 16 pieces of 64 KiB
  void* mem = nullptr;
  ASSERT_EQ(posix_memalign(&mem, 4096, 2 * kSize), 0);
  char* buf = static_cast<char*>(mem);
  for (size_t i = 0; i < 2 * kSize; ++i) buf[i] = static_cast<char>((i * 13 + i / 4096) & 0xff);
  using Pair = std::pair<uint64_t, uint64_t>;
  auto writes = [&](const char* what) {
    Json s = ParseJson(plugin->CollectJson());
    const Json* o = Object(s, "flush", "limit");
    EXPECT_NE(o, nullptr) << what;
    return o ? Pair((*o)["ops"].u(), (*o)["bytes"].u()) : Pair(~0ull, ~0ull);
  };
  // Each call on a flush thread, on a fresh file opened `direct` or not.
  std::shared_ptr<FileSystem> fs_under_test = plugin->file_system();
  auto write = [&](bool direct, auto&& calls) {
    std::thread([&] {
      paio_set_request_context(paio_rocksdb::internal::Ids().flush);
      FileOptions fo;
      fo.use_direct_writes = direct;
      std::unique_ptr<FSWritableFile> f;
      ASSERT_TRUE(fs_under_test->NewWritableFile(path, fo, &f, nullptr).ok());
      ASSERT_EQ(f->use_direct_io(), direct);
      calls(f.get());
      ASSERT_TRUE(f->Close(IOOptions(), nullptr).ok());
    }).join();
  };
  auto contents = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string first(buf, kSize), both(buf, 2 * kSize);
  auto append_twice = [&](FSWritableFile* f) {
    ASSERT_TRUE(f->Append(Slice(buf, kSize), IOOptions(), nullptr).ok());
    ASSERT_TRUE(f->PositionedAppend(Slice(buf + kSize, kSize), kSize, IOOptions(), nullptr).ok());
  };
  write(true, append_twice);  // no split configured: one write each
  EXPECT_EQ(contents(), both);
  EXPECT_EQ(writes("whole"), Pair(2, 2 * kSize));

  ASSERT_EQ(paio_stage_apply(plugin->stage(),
                             "{\"rule\":\"configure\",\"channel\":\"flush\",\"object\":\"limit\","
                             "\"config\":{\"kind\":\"drl\",\"rate\":\"1GiB/s\",\"split\":\"64KiB\"}}"),
            PAIO_OK)
      << paio_last_error();
  write(true, append_twice);  // 16 pieces each
  EXPECT_EQ(contents(), both);
  EXPECT_EQ(writes("split"), Pair(2 + 32, 4 * kSize));
  write(true, [&](FSWritableFile* f) {
    // The last piece shorter than the others; then not larger than a piece.
    ASSERT_TRUE(f->Append(Slice(buf, (256 << 10) + 4096), IOOptions(), nullptr).ok());
    ASSERT_TRUE(f->Append(Slice(buf + (260 << 10), 64 << 10), IOOptions(), nullptr).ok());
  });
  EXPECT_EQ(contents(), std::string(buf, (324 << 10)));
  EXPECT_EQ(writes("a short last piece"), Pair(2 + 32 + 5 + 1, 4 * kSize + (324 << 10)));
  write(true, [&](FSWritableFile* f) {
    DataVerificationInfo v;  // no checksum given: the file system checks none
    ASSERT_TRUE(f->Append(Slice(buf, kSize), IOOptions(), v, nullptr).ok());
    ASSERT_TRUE(f->PositionedAppend(Slice(buf + kSize, kSize), kSize, IOOptions(), v, nullptr).ok());
  });
  EXPECT_EQ(contents(), both);
  write(false, append_twice);  // buffered: whole
  EXPECT_EQ(contents(), both);
  EXPECT_EQ(writes("whole again").first, 2u + 32 + 5 + 1 + 2 + 2);
  EXPECT_EQ(plugin->EnforceErrors(), 0u);

  // A piece that fails fails the append; the pieces before it are written
  // (as a pwrite that fails midway inside RocksDB's own append leaves what
  // it wrote) and counted, the failed one counts no bytes.
  fs_under_test = plugin->WrapFileSystem(std::make_shared<TestWrites>(kSize + (128 << 10), 0));
  const Pair before = writes("before the failure");
  write(true, [&](FSWritableFile* f) {
    ASSERT_TRUE(f->Append(Slice(buf, kSize), IOOptions(), nullptr).ok());
    IOStatus s = f->PositionedAppend(Slice(buf + kSize, kSize), kSize, IOOptions(), nullptr);
    EXPECT_TRUE(s.IsIOError()) << s.ToString();
  });
  EXPECT_EQ(contents(), std::string(buf, kSize + (128 << 10)));
  EXPECT_EQ(writes("a failed piece"), Pair(before.first + 16 + 3, before.second + kSize + (128 << 10)));

  // A file that needs 192 KiB alignment: 64 KiB pieces become 192 KiB ones
  // (5 of them, and the last 64 KiB).
  fs_under_test = plugin->WrapFileSystem(std::make_shared<TestWrites>(~0ull, 192 << 10));
  const Pair aligned = writes("before the aligned file");
  write(true, [&](FSWritableFile* f) {
    ASSERT_TRUE(f->Append(Slice(buf, kSize), IOOptions(), nullptr).ok());
  });
  EXPECT_EQ(contents(), first);
  EXPECT_EQ(writes("pieces of the file's alignment"), Pair(aligned.first + 6, aligned.second + kSize));
  std::free(mem);
  std::filesystem::remove_all(dir);
}

// RocksDB with direct I/O for flush and compaction, its write objects
// asking for 16 KiB pieces: every flush and compaction write goes out in
// pieces (each object's operations cover its bytes in 16 KiB), the stage
// counts exactly the bytes the files got, and every value reads back. The
// load stalls writes, which would make flush and L0 compaction requests
// critical (never split): stall inheritance is off here.
TEST(Split, RocksDbFlushAndCompactionWritesInPieces) {
  Tally tally;
  auto counting = std::make_shared<CountingFS>(&tally);
  std::unique_ptr<Env> counting_env = NewCompositeEnv(counting);
  std::string err;
  paio_rocksdb::PluginOptions po;
  po.critical_during_stalls = false;
  auto plugin = paio_rocksdb::Plugin::Create(po, &err);
  ASSERT_TRUE(plugin) << err;
  for (const char* object : {"flush\",\"object\":\"limit", "compaction\",\"object\":\"l0",
                             "compaction\",\"object\":\"ln"}) {
    std::string rule = std::string("{\"rule\":\"configure\",\"channel\":\"") + object +
                       "\",\"config\":{\"kind\":\"drl\",\"rate\":\"10GiB/s\",\"split\":\"16KiB\"}}";
    ASSERT_EQ(paio_stage_apply(plugin->stage(), rule.c_str()), PAIO_OK) << paio_last_error();
  }
  Options o = SmallDbOptions();
  o.env = counting_env.get();
  o.use_direct_io_for_flush_and_compaction = true;
  o.use_direct_reads = true;
  plugin->Install(&o);
  // Direct I/O needs a disk: the build directory's.
  std::string dir = (std::filesystem::current_path() /
                     ("paio-split-db-" + std::to_string(getpid()))).string();
  DB* raw = nullptr;
  ASSERT_TRUE(DB::Open(o, dir, &raw).ok());
  std::unique_ptr<DB> db(raw);
  auto value_of = [](int i) { return std::string(700 + i % 300, static_cast<char>('a' + i % 26)); };
  const int kKeys = 20000;
  for (int i = 0; i < kKeys; ++i) {
    char k[32];
    std::snprintf(k, sizeof k, "key%08d", (i * 7919) % kKeys);
    ASSERT_TRUE(db->Put(WriteOptions(), k, value_of((i * 7919) % kKeys)).ok());
  }
  ASSERT_TRUE(db->CompactRange(CompactRangeOptions(), nullptr, nullptr).ok());
  ASSERT_TRUE(WaitIdle(db.get(), 300)) << "background work did not finish";
  for (int i = 0; i < kKeys; ++i) {
    char k[32];
    std::snprintf(k, sizeof k, "key%08d", i);
    std::string got;
    ASSERT_TRUE(db->Get(ReadOptions(), k, &got).ok()) << k;
    ASSERT_EQ(got, value_of(i)) << k;
  }
  ASSERT_TRUE(db->Close().ok());
  db.reset();

  Json s = ParseJson(plugin->CollectJson());
  EXPECT_EQ(Bytes(Object(s, "flush", "limit")), tally.bytes[kClsFlush][kWrite].load());
  EXPECT_EQ(Bytes(Object(s, "compaction", "l0")), tally.bytes[kClsL0][kWrite].load());
  EXPECT_EQ(Bytes(Object(s, "compaction", "ln")), tally.bytes[kClsLn][kWrite].load());
  uint64_t written = 0;
  for (const char* o2 : {"limit", "l0", "ln"}) {
    const Json* obj = Object(s, std::string(o2) == "limit" ? "flush" : "compaction", o2);
    ASSERT_NE(obj, nullptr) << o2;
    uint64_t ops = (*obj)["ops"].u(), bytes = (*obj)["bytes"].u();
    std::printf("%-5s %10llu bytes in %6llu writes\n", o2, (unsigned long long)bytes,
                (unsigned long long)ops);
    EXPECT_GE(ops * (16 << 10), bytes) << o2 << ": a write of more than 16 KiB went whole";
    written += bytes;
  }
  EXPECT_GT(written, 20u << 20) << "flush and compaction wrote too little to tell";
  EXPECT_EQ(plugin->EnforceErrors(), 0u);
  DestroyDB(dir, Options());
}

// ---------- the rate keys (docs/rocksdb.md, "Rates") ----------
namespace {
// Writes `writes` bytes then reads `reads` bytes of one file through the
// plugin's file system, on a thread tagged with request context `ctx`, in
// 64 KiB calls.
void TaggedIo(paio_rocksdb::Plugin* plugin, uint16_t ctx, const std::string& path,
              size_t writes, size_t reads) {
  std::thread([&] {
    paio_set_request_context(ctx);
    auto fs = plugin->file_system();
    std::string chunk(64 << 10, 'r');
    std::unique_ptr<FSWritableFile> w;
    ASSERT_TRUE(fs->NewWritableFile(path, FileOptions(), &w, nullptr).ok());
    for (size_t done = 0; done < writes; done += chunk.size())
      ASSERT_TRUE(w->Append(chunk, IOOptions(), nullptr).ok());
    ASSERT_TRUE(w->Close(IOOptions(), nullptr).ok());
    std::unique_ptr<FSRandomAccessFile> r;
    ASSERT_TRUE(fs->NewRandomAccessFile(path, FileOptions(), &r, nullptr).ok());
    std::vector<char> buf(chunk.size());
    for (size_t done = 0; done < reads; done += chunk.size()) {
      Slice got;
      ASSERT_TRUE(r->Read(done % writes, chunk.size(), IOOptions(), &got, buf.data(), nullptr).ok());
    }
  }).join();
}

// The bytes each object received after 1 MiB written and 512 KiB read by
// a flush, an L0 compaction and a deeper compaction, under `rates`.
Json RunTagged(const std::map<std::string, std::string>& rates) {
  paio_rocksdb::PluginOptions po;
  po.rates = rates;
  std::string err;
  auto plugin = paio_rocksdb::Plugin::Create(po, &err);
  EXPECT_TRUE(plugin) << err;
  if (!plugin) return Json();
  std::string dir = TempDir("rates");
  auto fs = plugin->file_system();
  fs->CreateDirIfMissing(dir, IOOptions(), nullptr);
  const auto& ids = paio_rocksdb::internal::Ids();
  int n = 0;
  for (uint16_t ctx : {ids.flush, ids.compaction_l0, ids.compaction_ln}) {
    std::string path = dir + "/00000" + std::to_string(++n) + ".sst";
    TaggedIo(plugin.get(), ctx, path, 1 << 20, 512 << 10);
    fs->DeleteFile(path, IOOptions(), nullptr);
  }
  fs->DeleteDir(dir, IOOptions(), nullptr);
  return ParseJson(plugin->CollectJson());
}
}  // namespace

// Each key limits what RocksDB's own limiter would: writes, or reads with
// _reads; `compaction` and `background` are one DRL for several classes.
TEST(Rates, KeysLimitWritesReadsAndSharedBudgets) {
  const uint64_t kW = 1 << 20, kR = 512 << 10;
  Json s = RunTagged({});
  EXPECT_EQ(Bytes(Object(s, "flush", "limit")), kW);
  EXPECT_EQ(Bytes(Object(s, "flush", "reads")), kR);
  EXPECT_EQ(Bytes(Object(s, "compaction", "l0")), kW);
  EXPECT_EQ(Bytes(Object(s, "compaction", "ln")), kW);
  EXPECT_EQ(Bytes(Object(s, "compaction", "reads")), 2 * kR);

  s = RunTagged({{"compaction", "1GiB/s"}, {"flush_reads", "1GiB/s"}});
  EXPECT_EQ(Bytes(Object(s, "compaction", "writes")), 2 * kW);
  EXPECT_EQ(Bytes(Object(s, "compaction", "l0")), 0u);
  EXPECT_EQ(Bytes(Object(s, "compaction", "ln")), 0u);
  EXPECT_EQ(Bytes(Object(s, "compaction", "reads")), 2 * kR);
  EXPECT_EQ(Bytes(Object(s, "flush", "reads")), kR);

  s = RunTagged({{"background", "1GiB/s"}, {"background_reads", "1GiB/s"}});
  EXPECT_EQ(Bytes(Object(s, "background", "writes")), 3 * kW);
  EXPECT_EQ(Bytes(Object(s, "background", "reads")), 3 * kR);
  EXPECT_EQ(Bytes(Channel(s, "flush")), 0u);
  EXPECT_EQ(Bytes(Channel(s, "compaction")), 0u);

  s = RunTagged({{"background", "1GiB/s"}});  // reads stay in their classes
  EXPECT_EQ(Bytes(Object(s, "background", "writes")), 3 * kW);
  EXPECT_EQ(Object(s, "background", "reads"), nullptr);
  EXPECT_EQ(Bytes(Object(s, "flush", "reads")), kR);
  EXPECT_EQ(Bytes(Object(s, "compaction", "reads")), 2 * kR);
  EXPECT_EQ(Bytes(Object(s, "flush", "limit")), 0u);
}

TEST(Rates, KeysThatLimitTheSameBytesTwiceAreRefused) {
  for (const auto& pair : std::vector<std::pair<std::string, std::string>>{
           {"compaction", "compaction_l0"}, {"compaction", "compaction_ln"},
           {"background", "flush"}, {"background", "compaction"},
           {"background_reads", "compaction_reads"}, {"background_reads", "flush_reads"}}) {
    paio_rocksdb::PluginOptions po;
    po.rates = {{pair.first, "10MiB/s"}, {pair.second, "10MiB/s"}};
    std::string err;
    EXPECT_FALSE(paio_rocksdb::Plugin::Create(po, &err)) << pair.first << "+" << pair.second;
    EXPECT_NE(err.find("\"" + pair.first + "\" and \"" + pair.second + "\""), std::string::npos) << err;
  }
  paio_rocksdb::PluginOptions po;
  po.rates = {{"compaction_l0_reads", "10MiB/s"}};
  std::string err;
  EXPECT_FALSE(paio_rocksdb::Plugin::Create(po, &err));
  EXPECT_NE(err.find("compaction_reads"), std::string::npos) << err;  // the list of keys
}

// A shared budget holds for its classes together: a flush and a deeper
// compaction writing 4 MiB each at once under background=4MiB/s take about
// two seconds (loose bounds, as in the DRL test above).
TEST(Rates, BackgroundIsOneBudgetForFlushAndCompaction) {
  paio_rocksdb::PluginOptions po;
  po.rates = {{"background", "4MiB/s"}};
  std::string err;
  auto plugin = paio_rocksdb::Plugin::Create(po, &err);
  ASSERT_TRUE(plugin) << err;
  std::string dir = TempDir("background");
  plugin->file_system()->CreateDirIfMissing(dir, IOOptions(), nullptr);
  const auto& ids = paio_rocksdb::internal::Ids();
  auto t0 = std::chrono::steady_clock::now();
  std::thread a([&] { TaggedIo(plugin.get(), ids.flush, dir + "/1.sst", 4 << 20, 0); });
  std::thread b([&] { TaggedIo(plugin.get(), ids.compaction_ln, dir + "/2.sst", 4 << 20, 0); });
  a.join();
  b.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Json s = ParseJson(plugin->CollectJson());
  double rate = Bytes(Object(s, "background", "writes")) / secs / (1 << 20);
  std::printf("background: 8 MiB from two classes at %.2f MiB/s (target 4)\n", rate);
  EXPECT_EQ(Bytes(Object(s, "background", "writes")), 8u << 20);
  EXPECT_NEAR(rate / 4.0, 1.0, 0.15);
  DestroyDB(dir, Options());
}

// Foreground requests carry criticality "critical" (a policy routes them by
// it); flush, compaction and the WAL do not. With critical_foreground off,
// nothing is critical. Two phases: a completed request's call latency is in
// the statistics. Stall inheritance is off here: on a slow disk the load
// stalls writes, which rightly makes flushes critical (tested below).
namespace {
void RunCriticalityRouting(bool critical_foreground, uint64_t* critical_ops,
                           uint64_t* normal_bytes, uint64_t* latency_ops) {
  std::string policy_dir = TempDir("crit-policy");
  ::mkdir(policy_dir.c_str(), 0700);
  std::string policy = policy_dir + "/p.toml";
  {
    FILE* f = std::fopen(policy.c_str(), "w");
    ASSERT_TRUE(f != nullptr);
    std::fputs(
        "[[channel]]\nname = \"critical\"\nmatch = { criticality = \"critical\" }\n"
        "[[channel]]\nname = \"normal\"\nmatch = { criticality = \"normal\" }\n",
        f);
    std::fclose(f);
  }
  paio_rocksdb::PluginOptions po;
  po.policy_file = policy;
  po.critical_foreground = critical_foreground;
  po.critical_during_stalls = false;
  std::string err;
  auto plugin = paio_rocksdb::Plugin::Create(po, &err);
  ASSERT_TRUE(plugin) << err;
  Options o = SmallDbOptions();
  plugin->Install(&o);
  std::string dir = TempDir(critical_foreground ? "crit-on" : "crit-off");
  DB* raw = nullptr;
  ASSERT_TRUE(DB::Open(o, dir, &raw).ok());
  std::unique_ptr<DB> db(raw);
  Load(db.get(), 1, 5000, 1000);
  ASSERT_TRUE(db->Flush(FlushOptions()).ok());
  ASSERT_TRUE(WaitIdle(db.get(), 300));
  {  // foreground reads from the SST files
    ReadOptions ro;
    ro.fill_cache = false;
    std::unique_ptr<Iterator> it(db->NewIterator(ro));
    int n = 0;
    for (it->SeekToFirst(); it->Valid() && n < 1000; it->Next()) ++n;
    ASSERT_GT(n, 0);
  }
  ASSERT_TRUE(db->Close().ok());
  db.reset();
  Json s = ParseJson(plugin->CollectJson());
  const Json* crit = Channel(s, "critical");
  const Json* normal = Channel(s, "normal");
  *critical_ops = crit ? (*crit)["ops"].u() : 0;
  *normal_bytes = normal ? (*normal)["bytes"].u() : 0;
  *latency_ops = (crit ? (*crit)["latency_total"]["ops"].u() : 0) +
                 (normal ? (*normal)["latency_total"]["ops"].u() : 0);
  EXPECT_EQ(plugin->EnforceErrors(), 0u);
  DestroyDB(dir, Options());
}
}  // namespace

TEST(Criticality, ForegroundIsCriticalBackgroundIsNot) {
  uint64_t crit = 0, normal = 0, latency = 0;
  RunCriticalityRouting(true, &crit, &normal, &latency);
  EXPECT_GT(crit, 0u) << "foreground reads were not critical";
  EXPECT_GT(normal, 5000u * 1000u / 2) << "flush and WAL bytes must be normal";
  EXPECT_GT(latency, crit) << "completed calls carry their latency";
  RunCriticalityRouting(false, &crit, &normal, &latency);
  EXPECT_EQ(crit, 0u) << "critical_foreground = false marks nothing";
}

// Stall inheritance: while a column family's writes are stalled or delayed,
// flush and L0 compaction writes are critical; compaction of deeper levels
// is not, and nothing is once the stall clears or with the option off.
namespace {
uint64_t CriticalBytesAroundAStall(bool inherit, uint64_t* normal_bytes) {
  std::string policy_dir = TempDir("stall-policy");
  ::mkdir(policy_dir.c_str(), 0700);
  std::string policy = policy_dir + "/p.toml";
  FILE* pf = std::fopen(policy.c_str(), "w");
  EXPECT_TRUE(pf != nullptr);
  std::fputs(
      "[[channel]]\nname = \"critical\"\nmatch = { criticality = \"critical\" }\n"
      "[[channel]]\nname = \"normal\"\nmatch = { criticality = \"normal\" }\n",
      pf);
  std::fclose(pf);
  paio_rocksdb::PluginOptions po;
  po.policy_file = policy;
  po.critical_during_stalls = inherit;
  std::string err;
  auto plugin = paio_rocksdb::Plugin::Create(po, &err);
  EXPECT_TRUE(plugin) << err;
  std::string dir = TempDir(inherit ? "stall-on" : "stall-off");
  ::mkdir(dir.c_str(), 0700);
  auto* listener =
      static_cast<paio_rocksdb::internal::PaioListener*>(plugin->listener().get());
  std::unique_ptr<rocksdb::FSWritableFile> f;
  EXPECT_TRUE(plugin->file_system()
                  ->NewWritableFile(dir + "/000009.sst", rocksdb::FileOptions(), &f, nullptr)
                  .ok());
  std::string block(1 << 16, 'x');
  auto append = [&](size_t n) {
    EXPECT_TRUE(f->Append(rocksdb::Slice(block.data(), n), rocksdb::IOOptions(), nullptr).ok());
  };
  WriteStallInfo stall;
  stall.cf_name = "default";
  std::thread([&] {
    FlushJobInfo fi;
    listener->OnFlushBegin(nullptr, fi);
    append(1000);  // before the stall: normal
    stall.condition.prev = WriteStallCondition::kNormal;
    stall.condition.cur = WriteStallCondition::kStopped;
    listener->OnStallConditionsChanged(stall);
    EXPECT_EQ(paio_rocksdb::internal::StalledColumnFamilies(), 1);
    append(2000);  // flush during the stall: critical when inherited
    listener->OnFlushCompleted(nullptr, fi);
    CompactionJobInfo ci;
    ci.base_input_level = 0;
    listener->OnCompactionBegin(nullptr, ci);
    append(4000);  // L0 compaction during the stall: critical when inherited
    listener->OnCompactionCompleted(nullptr, ci);
    ci.base_input_level = 3;
    listener->OnCompactionBegin(nullptr, ci);
    append(8000);  // deeper compaction: normal
    listener->OnCompactionCompleted(nullptr, ci);
    stall.condition.cur = WriteStallCondition::kDelayed;
    stall.condition.prev = WriteStallCondition::kStopped;
    listener->OnStallConditionsChanged(stall);  // still slowed: one stall
    EXPECT_EQ(paio_rocksdb::internal::StalledColumnFamilies(), 1);
    stall.condition.cur = WriteStallCondition::kNormal;
    listener->OnStallConditionsChanged(stall);
    EXPECT_EQ(paio_rocksdb::internal::StalledColumnFamilies(), 0);
    listener->OnFlushBegin(nullptr, fi);
    append(16000);  // after the stall: normal
    listener->OnFlushCompleted(nullptr, fi);
  }).join();
  EXPECT_TRUE(f->Close(rocksdb::IOOptions(), nullptr).ok());
  Json s = ParseJson(plugin->CollectJson());
  const Json* crit = Channel(s, "critical");
  const Json* normal = Channel(s, "normal");
  *normal_bytes = normal ? (*normal)["bytes"].u() : 0;
  return crit ? (*crit)["bytes"].u() : 0;
}
}  // namespace

TEST(Criticality, StallsMakeFlushAndL0CompactionCritical) {
  uint64_t normal = 0;
  EXPECT_EQ(CriticalBytesAroundAStall(true, &normal), 2000u + 4000u);
  EXPECT_EQ(normal, 1000u + 8000u + 16000u);
  EXPECT_EQ(CriticalBytesAroundAStall(false, &normal), 0u);
  EXPECT_EQ(normal, 1000u + 2000u + 4000u + 8000u + 16000u);
}

// A listener destroyed during a stall leaves no stall behind.
TEST(Criticality, AListenerGoneDuringAStallLeavesNothing) {
  {
    paio_rocksdb::internal::PaioListener l;
    WriteStallInfo stall;
    stall.cf_name = "a";
    stall.condition.prev = WriteStallCondition::kNormal;
    stall.condition.cur = WriteStallCondition::kDelayed;
    l.OnStallConditionsChanged(stall);
    stall.cf_name = "b";
    l.OnStallConditionsChanged(stall);
    EXPECT_EQ(paio_rocksdb::internal::StalledColumnFamilies(), 2);
  }
  EXPECT_EQ(paio_rocksdb::internal::StalledColumnFamilies(), 0);
}

// Several DBs may share one plugin, so one listener can see two "default"
// column families stalled at once: one recovering leaves the other counted,
// a slower stall of a stalled family is still one, and a recovery the
// listener never saw start (installed mid-stall) takes nothing back.
TEST(Criticality, StallsOfTwoDbsWithOneNameAreCountedApart) {
  paio_rocksdb::internal::PaioListener l;
  auto change = [&](WriteStallCondition prev, WriteStallCondition cur) {
    WriteStallInfo info;
    info.cf_name = "default";
    info.condition.prev = prev;
    info.condition.cur = cur;
    l.OnStallConditionsChanged(info);
    return paio_rocksdb::internal::StalledColumnFamilies();
  };
  using C = WriteStallCondition;
  EXPECT_EQ(change(C::kNormal, C::kNormal), 0);
  EXPECT_EQ(change(C::kDelayed, C::kNormal), 0) << "never saw it start";
  EXPECT_EQ(change(C::kNormal, C::kDelayed), 1);   // DB a
  EXPECT_EQ(change(C::kNormal, C::kStopped), 2);   // DB b
  EXPECT_EQ(change(C::kDelayed, C::kStopped), 2);  // DB a, slower
  EXPECT_EQ(change(C::kStopped, C::kNormal), 1);   // DB a recovers
  EXPECT_EQ(change(C::kStopped, C::kDelayed), 1);  // DB b, faster
  EXPECT_EQ(change(C::kDelayed, C::kNormal), 0);   // DB b recovers
  EXPECT_EQ(change(C::kDelayed, C::kNormal), 0) << "not below zero";
}
