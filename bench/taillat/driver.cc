// taillat_driver: the workload driver of the tail-latency experiment (PAIO
// paper §9.2, Fig. 5-7), scaled down.  See bench/taillat/README.md.
//
//   taillat_driver preload --db DIR --num N
//   taillat_driver run --db DIR --num N --setup baseline|autotuned|autotuned_all|paio
//                  --workload mixture|readheavy|writeheavy --out FILE.csv ...
//
// `preload` writes keys 0..N-1 (8-byte big-endian ids, 1 KiB values) and
// waits until no flush or compaction is pending.  `run` opens that DB with
// the experiment's options and drives 8 closed-loop client threads at a
// bursty target rate (initial valley, then peaks and valleys), and writes
// one CSV row per second: throughput, latency percentiles (merged over all
// clients, latency = issue to return of one Get/Put), and RocksDB counters.
#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/iostats_context.h>
#include <rocksdb/options.h>
#include <rocksdb/perf_context.h>
#include <rocksdb/perf_level.h>
#include <rocksdb/rate_limiter.h>
#include <rocksdb/sst_file_manager.h>
#include <rocksdb/statistics.h>
#include <rocksdb/table.h>

#ifdef TAILLAT_WITH_PAIO
#include <paio/rocksdb.h>
#endif

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = 1ull << 20;

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "taillat_driver: %s\n", msg.c_str());
  std::exit(2);
}

struct Args {
  std::string mode;
  std::string db;
  uint64_t num = 1000000;
  std::string setup = "baseline";
  std::string workload = "mixture";
  double read_ratio = -1;  // <0: from the workload name
  int clients = 8;
  double valley_kops = 5;
  double peak_kops = 20;
  double initial_valley_s = 75;
  double peak_s = 25;
  double valley_s = 2.5;
  double duration_s = 240;
  double max_lag_ms = 100;  // missed slots older than this are dropped
  std::string out;          // per-second CSV
  std::string paio_socket;  // paio setup: paiod's socket ("" = no control)
  std::string paio_stats;   // paio setup: CollectJson() at the end
  double kvs_mib = 200;     // auto-tuned limiter cap
  uint64_t write_buffer_mib = 32;
  int max_write_buffer_number = 2;
  uint64_t block_cache_mib = 64;
  uint64_t target_file_mib = 16;
  uint64_t level_base_mib = 128;
  int flush_threads = 1;
  int compaction_threads = 7;
  int bloom_bits = 10;
  bool direct = true;
  uint64_t compaction_readahead_kib = 0;  // 0: RocksDB's (2 MiB with direct I/O)
  // Obsolete SST files deleted at this rate, in 4 MiB pieces (RocksDB's
  // SstFileManager; 0: at once, RocksDB's default).
  double delete_rate_mib = 0;
  // paio setup: flush and L0 compaction requests critical while writes are
  // stalled or delayed (the plugin's critical_during_stalls, its default).
  bool paio_stall_critical = true;
  bool quiet = false;
  std::string preload_order = "random";  // random (a permutation of 0..N-1) or seq
  bool preload_wait = false;             // wait for compactions before closing
  // Diagnosis of slow Gets: with slow_get_us > 0, every Get runs under
  // RocksDB's PerfContext (kEnableTime: timers on every Get, mutex waits
  // included, so it costs CPU) and each Get slower than slow_get_us is
  // written to slow_out with where its time went.
  uint64_t slow_get_us = 0;
  std::string slow_out;
};

void Usage() {
  std::fprintf(stderr,
               "usage: taillat_driver preload|run --db DIR --num N [options]\n"
               "  --setup baseline|autotuned|autotuned_all|paio   --workload mixture|readheavy|writeheavy\n"
               "  --read-ratio F  --clients N  --valley-kops X  --peak-kops X\n"
               "  --initial-valley-s S  --peak-s S  --valley-s S  --duration-s S  --max-lag-ms MS\n"
               "  --out FILE.csv  --paio-socket PATH  --paio-stats FILE.json  --kvs-mib X\n"
               "  --write-buffer-mib N  --max-write-buffer-number N  --block-cache-mib N\n"
               "  --target-file-mib N  --level-base-mib N  --flush-threads N  --compaction-threads N\n"
               "  --bloom-bits N  --no-direct  --compaction-readahead-kib N  --delete-rate-mib X  --quiet\n"
               "  --paio-stall-critical 0|1 (paio setup: the plugin's critical_during_stalls, default 1)\n"
               "  --slow-get-us N --slow-out FILE.csv  (diagnosis: where each Get slower than N us spent its time)\n"
               "  preload: --preload-order random|seq (default random)  --preload-wait (let compactions finish)\n");
  std::exit(2);
}

Args ParseArgs(int argc, char** argv) {
  if (argc < 2) Usage();
  Args a;
  a.mode = argv[1];
  if (a.mode != "preload" && a.mode != "run") Usage();
  for (int i = 2; i < argc; i++) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Die("missing value for " + k);
      return argv[++i];
    };
    if (k == "--db") a.db = val();
    else if (k == "--num") a.num = std::stoull(val());
    else if (k == "--setup") a.setup = val();
    else if (k == "--workload") a.workload = val();
    else if (k == "--read-ratio") a.read_ratio = std::stod(val());
    else if (k == "--clients") a.clients = std::stoi(val());
    else if (k == "--valley-kops") a.valley_kops = std::stod(val());
    else if (k == "--peak-kops") a.peak_kops = std::stod(val());
    else if (k == "--initial-valley-s") a.initial_valley_s = std::stod(val());
    else if (k == "--peak-s") a.peak_s = std::stod(val());
    else if (k == "--valley-s") a.valley_s = std::stod(val());
    else if (k == "--duration-s") a.duration_s = std::stod(val());
    else if (k == "--max-lag-ms") a.max_lag_ms = std::stod(val());
    else if (k == "--out") a.out = val();
    else if (k == "--paio-socket") a.paio_socket = val();
    else if (k == "--paio-stats") a.paio_stats = val();
    else if (k == "--kvs-mib") a.kvs_mib = std::stod(val());
    else if (k == "--write-buffer-mib") a.write_buffer_mib = std::stoull(val());
    else if (k == "--max-write-buffer-number") a.max_write_buffer_number = std::stoi(val());
    else if (k == "--block-cache-mib") a.block_cache_mib = std::stoull(val());
    else if (k == "--target-file-mib") a.target_file_mib = std::stoull(val());
    else if (k == "--level-base-mib") a.level_base_mib = std::stoull(val());
    else if (k == "--flush-threads") a.flush_threads = std::stoi(val());
    else if (k == "--compaction-threads") a.compaction_threads = std::stoi(val());
    else if (k == "--bloom-bits") a.bloom_bits = std::stoi(val());
    else if (k == "--no-direct") a.direct = false;
    else if (k == "--compaction-readahead-kib") a.compaction_readahead_kib = std::stoull(val());
    else if (k == "--delete-rate-mib") a.delete_rate_mib = std::stod(val());
    else if (k == "--paio-stall-critical") {
      std::string v = val();
      if (v != "0" && v != "1") Die("--paio-stall-critical " + v + ": expected 0 or 1");
      a.paio_stall_critical = v == "1";
    } else if (k == "--quiet") a.quiet = true;
    else if (k == "--slow-get-us") a.slow_get_us = std::stoull(val());
    else if (k == "--slow-out") a.slow_out = val();
    else if (k == "--preload-order") a.preload_order = val();
    else if (k == "--preload-wait") a.preload_wait = true;
    else Die("unknown option " + k);
  }
  if (a.db.empty()) Die("--db is required");
  if ((a.slow_get_us > 0) != !a.slow_out.empty()) Die("--slow-get-us and --slow-out go together");
  if (a.num == 0) Die("--num must be > 0");
  if (!(a.delete_rate_mib >= 0)) Die("--delete-rate-mib must be >= 0 (0: delete at once)");
  if (a.read_ratio < 0) {
    if (a.workload == "mixture") a.read_ratio = 0.5;
    else if (a.workload == "readheavy") a.read_ratio = 0.9;
    else if (a.workload == "writeheavy") a.read_ratio = 0.1;
    else Die("unknown workload " + a.workload + " (mixture, readheavy, writeheavy)");
  }
  if (a.setup != "baseline" && a.setup != "autotuned" && a.setup != "autotuned_all" &&
      a.setup != "paio")
    Die("unknown setup " + a.setup + " (baseline, autotuned, autotuned_all, paio)");
#ifndef TAILLAT_WITH_PAIO
  if (a.setup == "paio")
    Die("built without the paio plugin (integrations/rocksdb/build/libpaio_rocksdb.so was not found "
        "at configure time); rebuild: cmake -S bench/taillat -B bench/taillat/build && "
        "cmake --build bench/taillat/build -j2");
#endif
  if (a.clients < 1) Die("--clients must be >= 1");
  if (a.peak_s <= 0 || a.valley_s < 0) Die("--peak-s must be > 0, --valley-s >= 0");
  return a;
}

std::string Key(uint64_t id) {
  char buf[8];
  for (int i = 7; i >= 0; i--) {
    buf[i] = static_cast<char>(id & 0xff);
    id >>= 8;
  }
  return std::string(buf, 8);
}

constexpr size_t kValueSize = 1024;

// Random bytes; a value is a 1 KiB window at a varying offset.
struct ValuePool {
  std::string data;
  ValuePool() {
    std::mt19937_64 rng(42);
    data.resize(4 * kMiB + kValueSize);
    for (auto& c : data) c = static_cast<char>(rng());
  }
  rocksdb::Slice Get(uint64_t n) const {
    return rocksdb::Slice(data.data() + (n * 4099) % (4 * kMiB), kValueSize);
  }
};

rocksdb::Options MakeOptions(const Args& a) {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.compression = rocksdb::kNoCompression;
  o.bottommost_compression = rocksdb::kNoCompression;
  o.write_buffer_size = a.write_buffer_mib * kMiB;
  o.max_write_buffer_number = a.max_write_buffer_number;
  o.target_file_size_base = a.target_file_mib * kMiB;
  o.max_bytes_for_level_base = a.level_base_mib * kMiB;
  o.max_background_flushes = a.flush_threads;
  o.max_background_compactions = a.compaction_threads;
  o.use_direct_reads = a.direct;
  o.use_direct_io_for_flush_and_compaction = a.direct;
  if (a.compaction_readahead_kib > 0) o.compaction_readahead_size = a.compaction_readahead_kib * 1024;
  o.statistics = rocksdb::CreateDBStatistics();
  o.stats_dump_period_sec = 0;
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = rocksdb::NewLRUCache(a.block_cache_mib * kMiB);
  if (a.bloom_bits > 0) t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(a.bloom_bits, false));
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

void SetThreads(rocksdb::Options* o, const Args& a) {
  // options->env may be the plugin's composite env: it shares Env::Default's pools.
  o->env->SetBackgroundThreads(a.flush_threads, rocksdb::Env::Priority::HIGH);
  o->env->SetBackgroundThreads(a.compaction_threads, rocksdb::Env::Priority::LOW);
}

uint64_t IntProp(rocksdb::DB* db, const char* name) {
  uint64_t v = 0;
  db->GetIntProperty(name, &v);
  return v;
}

// Some properties (num-files-at-level<N>) are string-only.
uint64_t StrIntProp(rocksdb::DB* db, const char* name) {
  std::string v;
  if (!db->GetProperty(name, &v)) return 0;
  return std::strtoull(v.c_str(), nullptr, 10);
}

void WaitQuiet(rocksdb::DB* db, bool quiet) {
  for (int i = 0;; i++) {
    uint64_t pending = IntProp(db, "rocksdb.compaction-pending");
    uint64_t running = IntProp(db, "rocksdb.num-running-compactions");
    uint64_t flushes = IntProp(db, "rocksdb.num-running-flushes") + IntProp(db, "rocksdb.mem-table-flush-pending");
    if (!pending && !running && !flushes) return;
    if (!quiet && i % 10 == 0)
      std::fprintf(stderr, "preload: waiting for compactions (pending %" PRIu64 ", running %" PRIu64 ")\n",
                   pending, running);
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

int Preload(const Args& a) {
  rocksdb::Options o = MakeOptions(a);
  SetThreads(&o, a);
  o.error_if_exists = true;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, a.db, &raw);
  if (!s.ok()) Die("open " + a.db + ": " + s.ToString());
  std::unique_ptr<rocksdb::DB> db(raw);
  ValuePool pool;
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  auto t0 = Clock::now();
  // Every key 0..N-1 exactly once; in random order (uniform, like db_bench
  // fillrandom) by default, which leaves a compaction backlog as in the paper.
  std::vector<uint32_t> order;
  if (a.preload_order == "random") {
    order.resize(a.num);
    for (uint64_t i = 0; i < a.num; i++) order[i] = static_cast<uint32_t>(i);
    std::mt19937_64 rng(7);
    std::shuffle(order.begin(), order.end(), rng);
  } else if (a.preload_order != "seq") {
    Die("--preload-order must be random or seq");
  }
  const uint64_t batch = 100;
  for (uint64_t i = 0; i < a.num; i += batch) {
    rocksdb::WriteBatch wb;
    for (uint64_t j = i; j < std::min(a.num, i + batch); j++) {
      uint64_t id = order.empty() ? j : order[j];
      wb.Put(Key(id), pool.Get(id));
    }
    s = db->Write(wo, &wb);
    if (!s.ok()) Die("preload write: " + s.ToString());
    if (!a.quiet && (i / batch) % 10000 == 0 && i)
      std::fprintf(stderr, "preload: %" PRIu64 " / %" PRIu64 " keys, %.0f s\n", i, a.num,
                   std::chrono::duration<double>(Clock::now() - t0).count());
  }
  s = db->Flush(rocksdb::FlushOptions());
  if (!s.ok()) Die("preload flush: " + s.ToString());
  if (a.preload_wait) WaitQuiet(db.get(), a.quiet);
  std::string levels;
  db->GetProperty("rocksdb.levelstats", &levels);
  std::fprintf(stderr,
               "preload: %" PRIu64 " keys (%s order) in %.1f s; left: %.0f MiB pending compaction, %" PRIu64
               " L0 files\n%s",
               a.num, a.preload_order.c_str(), std::chrono::duration<double>(Clock::now() - t0).count(),
               IntProp(db.get(), "rocksdb.estimate-pending-compaction-bytes") / double(kMiB),
               StrIntProp(db.get(), "rocksdb.num-files-at-level0"), levels.c_str());
  rocksdb::CancelAllBackgroundWork(db.get(), /*wait=*/true);
  s = db->Close();
  if (!s.ok()) Die("close: " + s.ToString());
  return 0;
}

// ------------------------------------------------------------------ run

struct Schedule {
  double valley_ops, peak_ops, initial_s, peak_s, valley_s;
  // Target aggregate rate (ops/s) at t seconds after the start.
  double Rate(double t) const {
    if (t < initial_s) return valley_ops;
    double u = std::fmod(t - initial_s, peak_s + valley_s);
    return u < peak_s ? peak_ops : valley_ops;
  }
};

// A Get slower than --slow-get-us: its wall and thread CPU time, and its
// PerfContext / IOStatsContext figures (ns, counts, bytes).
struct SlowGet {
  double at_s;  // completion, seconds since the start
  uint64_t wall_ns, thread_cpu_ns;
  uint64_t mutex_ns, snapshot_ns, memtable_ns, files_ns, find_table_ns;
  uint64_t block_reads, block_read_ns, block_read_bytes, cache_hits, file_read_ns;
};

// Per client thread: latencies (ns, saturated to uint32) of the requests
// that completed in each second, reads and writes apart; its slow Gets.
struct ClientLog {
  std::vector<std::vector<uint32_t>> reads, writes;
  std::vector<SlowGet> slow;  // at most kMaxSlow; the rest only counted
  uint64_t slow_dropped = 0;
  uint64_t errors = 0;
  void Add(size_t sec, bool is_read, uint64_t ns) {
    auto& v = is_read ? reads : writes;
    if (v.size() <= sec) v.resize(sec + 1);
    v[sec].push_back(static_cast<uint32_t>(std::min<uint64_t>(ns, UINT32_MAX)));
  }
};

// Per-second RocksDB state sampled by the monitor thread.
struct DbSample {
  uint64_t l0_files = 0, pending_bytes = 0, running_compactions = 0, running_flushes = 0;
  uint64_t write_stopped = 0, delayed_rate = 0, stall_us = 0;
  uint64_t flush_write = 0, compact_read = 0, compact_write = 0;
  uint64_t imm_memtables = 0;
};

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

constexpr size_t kMaxSlow = 200000;

uint64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

double Percentile(std::vector<uint32_t>& v, double p) {
  if (v.empty()) return 0;
  size_t k = static_cast<size_t>(std::ceil(p * v.size())) ;
  if (k > 0) k--;
  k = std::min(k, v.size() - 1);
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k] / 1000.0;  // us
}

int Run(const Args& a) {
  rocksdb::Options o = MakeOptions(a);
  o.create_if_missing = false;
#ifdef TAILLAT_WITH_PAIO
  std::unique_ptr<paio_rocksdb::Plugin> plugin;
  if (a.setup == "paio") {
    paio_rocksdb::PluginOptions po;
    po.control_socket = a.paio_socket;
    po.stage_name = "rocksdb";
    po.labels["app"] = "taillat";
    po.labels["workload"] = a.workload;
    po.critical_during_stalls = a.paio_stall_critical;
    std::string err;
    plugin = paio_rocksdb::Plugin::Create(po, &err);
    if (!plugin) Die("paio plugin: " + err);
    plugin->Install(&o);
  }
#endif
  // RocksDB's auto-tuned limiter in both of its useful modes: writes only
  // (its default), and all I/O (compaction reads charged to the same bucket).
  if (a.setup == "autotuned" || a.setup == "autotuned_all") {
    o.rate_limiter.reset(rocksdb::NewGenericRateLimiter(
        static_cast<int64_t>(a.kvs_mib * kMiB), 100000, 10,
        a.setup == "autotuned" ? rocksdb::RateLimiter::Mode::kWritesOnly
                               : rocksdb::RateLimiter::Mode::kAllIo,
        /*auto_tuned=*/true));
  }
  // ext4 mounted with `discard` trims a deleted file's blocks at its next
  // journal commit, so a compaction's inputs deleted at once reach the disk
  // as hundreds of MiB of discards in one second. RocksDB's SstFileManager
  // deletes them at a rate instead, truncating each file 4 MiB at a time.
  if (a.delete_rate_mib > 0) {
    rocksdb::Status st;
    o.sst_file_manager.reset(rocksdb::NewSstFileManager(
        o.env, o.env->GetFileSystem(), nullptr, "", static_cast<int64_t>(a.delete_rate_mib * kMiB),
        true, &st, 0.25, 4 * kMiB));
    if (!st.ok()) Die("sst file manager: " + st.ToString());
  }
  SetThreads(&o, a);
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, a.db, &raw);
  if (!s.ok()) Die("open " + a.db + ": " + s.ToString());
  std::unique_ptr<rocksdb::DB> db(raw);
#ifdef TAILLAT_WITH_PAIO
  if (plugin) {
    if (!a.paio_socket.empty()) {
      for (int i = 0; i < 50 && !plugin->Connected(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::fprintf(stderr, "paio: stage %s to paiod at %s\n", plugin->Connected() ? "connected" : "NOT connected",
                   a.paio_socket.c_str());
    } else {
      std::fprintf(stderr, "paio: plugin installed without a control plane\n");
    }
  }
#endif

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);

  Schedule sched{a.valley_kops * 1000, a.peak_kops * 1000, a.initial_valley_s, a.peak_s, a.valley_s};
  const size_t nsec = static_cast<size_t>(std::ceil(a.duration_s)) + 2;
  std::vector<ClientLog> logs(a.clients);
  std::vector<DbSample> samples(nsec);
  ValuePool pool;
  std::atomic<uint64_t> done_ops{0};
  const auto t0 = Clock::now() + std::chrono::milliseconds(100);
  const auto t_end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.duration_s));
  const auto max_lag = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(a.max_lag_ms));

  auto client = [&](int id) {
#ifdef TAILLAT_WITH_PAIO
    if (plugin) paio_rocksdb::SetForeground();
#endif
    std::mt19937_64 rng(0x9e3779b97f4a7c15ull * (id + 1));
    std::uniform_int_distribution<uint64_t> key_dist(0, a.num - 1);
    std::uniform_real_distribution<double> coin(0, 1);
    rocksdb::ReadOptions ro;
    rocksdb::WriteOptions wo;
    wo.disableWAL = true;
    rocksdb::PinnableSlice value;
    ClientLog& log = logs[id];
    const bool diagnose = a.slow_get_us > 0;
    if (diagnose) rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableTime);
    // Stagger the clients over one slot.
    double first_gap = a.clients / sched.Rate(0);
    Clock::time_point next = t0 + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(first_gap * id / a.clients));
    uint64_t n = 0;
    while (!g_stop.load(std::memory_order_relaxed)) {
      auto now = Clock::now();
      if (next >= t_end) break;
      if (now < next) {
        std::this_thread::sleep_until(next);
      } else if (now - next > max_lag) {
        next = now - max_lag;  // drop slots missed long ago (token bucket of max_lag)
      }
      bool is_read = coin(rng) < a.read_ratio;
      std::string key = Key(key_dist(rng));
      auto issue = Clock::now();  // latency is measured from issue, not from the slot
      rocksdb::Status st;
      uint64_t cpu0 = 0;
      if (is_read && diagnose) {
        rocksdb::get_perf_context()->Reset();
        rocksdb::get_iostats_context()->Reset();
        cpu0 = ThreadCpuNs();
      }
      if (is_read) {
        value.Reset();
        st = db->Get(ro, db->DefaultColumnFamily(), key, &value);
      } else {
        st = db->Put(wo, key, pool.Get(rng()));
      }
      auto fin = Clock::now();
      if (!st.ok()) log.errors++;
      double sec = std::chrono::duration<double>(fin - t0).count();
      uint64_t wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(fin - issue).count();
      const bool slow = is_read && diagnose && wall_ns > a.slow_get_us * 1000;
      if (slow && log.slow.size() >= kMaxSlow) {
        log.slow_dropped++;
      } else if (slow) {
        const rocksdb::PerfContext* pc = rocksdb::get_perf_context();
        log.slow.push_back({sec, wall_ns, ThreadCpuNs() - cpu0, pc->db_mutex_lock_nanos, pc->get_snapshot_time,
                            pc->get_from_memtable_time, pc->get_from_output_files_time, pc->find_table_nanos,
                            pc->block_read_count, pc->block_read_time, pc->block_read_byte,
                            pc->block_cache_hit_count, rocksdb::get_iostats_context()->read_nanos});
      }
      if (sec >= 0 && sec < nsec) log.Add(static_cast<size_t>(sec), is_read, wall_ns);
      done_ops.fetch_add(1, std::memory_order_relaxed);
      n++;
      double t_rel = std::chrono::duration<double>(next - t0).count();
      double gap = a.clients / sched.Rate(std::max(0.0, t_rel));
      next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap));
    }
  };

  auto ticker = [&](rocksdb::Tickers t) { return o.statistics->getTickerCount(t); };
  auto monitor = [&]() {
    uint64_t prev_ops = 0, prev_stall = ticker(rocksdb::STALL_MICROS);
    uint64_t prev_fw = ticker(rocksdb::FLUSH_WRITE_BYTES), prev_cr = ticker(rocksdb::COMPACT_READ_BYTES),
             prev_cw = ticker(rocksdb::COMPACT_WRITE_BYTES);
    for (size_t sec = 1; sec < nsec; sec++) {
      auto when = t0 + std::chrono::seconds(sec);
      while (Clock::now() < when && !g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (g_stop.load() || Clock::now() > t_end + std::chrono::seconds(1)) break;
      DbSample& d = samples[sec - 1];
      d.l0_files = StrIntProp(db.get(), "rocksdb.num-files-at-level0");
      d.pending_bytes = IntProp(db.get(), "rocksdb.estimate-pending-compaction-bytes");
      d.running_compactions = IntProp(db.get(), "rocksdb.num-running-compactions");
      d.running_flushes = IntProp(db.get(), "rocksdb.num-running-flushes");
      d.write_stopped = IntProp(db.get(), "rocksdb.is-write-stopped");
      d.delayed_rate = IntProp(db.get(), "rocksdb.actual-delayed-write-rate");
      d.imm_memtables = IntProp(db.get(), "rocksdb.num-immutable-mem-table");
      uint64_t st = ticker(rocksdb::STALL_MICROS), fw = ticker(rocksdb::FLUSH_WRITE_BYTES),
               cr = ticker(rocksdb::COMPACT_READ_BYTES), cw = ticker(rocksdb::COMPACT_WRITE_BYTES);
      d.stall_us = st - prev_stall;
      d.flush_write = fw - prev_fw;
      d.compact_read = cr - prev_cr;
      d.compact_write = cw - prev_cw;
      prev_stall = st, prev_fw = fw, prev_cr = cr, prev_cw = cw;
      uint64_t ops = done_ops.load();
      if (!a.quiet)
        std::fprintf(stderr,
                     "[%s/%s] t=%3zu target %5.1f kops/s done %6.2f kops/s L0 %2" PRIu64 " imm %" PRIu64
                     " cmp %" PRIu64 " stall %5.0f ms flushW %4.0f cmpR %4.0f cmpW %4.0f MiB/s\n",
                     a.setup.c_str(), a.workload.c_str(), sec, sched.Rate(sec - 0.5) / 1000,
                     (ops - prev_ops) / 1000.0, d.l0_files, d.imm_memtables, d.running_compactions,
                     d.stall_us / 1000.0, d.flush_write / double(kMiB), d.compact_read / double(kMiB),
                     d.compact_write / double(kMiB));
      prev_ops = ops;
    }
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < a.clients; i++) threads.emplace_back(client, i);
  std::thread mon(monitor);
  for (auto& t : threads) t.join();
  g_stop.store(true);
  mon.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;

  // Merge per second and write the CSV.
  FILE* f = a.out.empty() ? stdout : std::fopen(a.out.c_str(), "w");
  if (!f) Die("cannot write " + a.out);
  std::fprintf(f,
               "time_s,target_kops,kops,reads,writes,p50_us,p99_us,p999_us,max_us,read_p99_us,write_p99_us,"
               "l0_files,imm_memtables,pending_compaction_mib,running_compactions,running_flushes,write_stopped,"
               "delayed_write_rate_mibs,stall_ms,flush_write_mibs,compact_read_mibs,compact_write_mibs\n");
  uint64_t errors = 0, total = 0;
  for (auto& l : logs) errors += l.errors;
  size_t last = static_cast<size_t>(std::min(a.duration_s, elapsed));
  for (size_t sec = 0; sec < last; sec++) {
    std::vector<uint32_t> all, rd, wr;
    for (auto& l : logs) {
      if (sec < l.reads.size()) rd.insert(rd.end(), l.reads[sec].begin(), l.reads[sec].end());
      if (sec < l.writes.size()) wr.insert(wr.end(), l.writes[sec].begin(), l.writes[sec].end());
    }
    all = rd;
    all.insert(all.end(), wr.begin(), wr.end());
    total += all.size();
    const DbSample& d = samples[sec];
    double p50 = Percentile(all, 0.50), p99 = Percentile(all, 0.99), p999 = Percentile(all, 0.999);
    double mx = all.empty() ? 0 : *std::max_element(all.begin(), all.end()) / 1000.0;
    std::fprintf(f,
                 "%zu,%.3f,%.3f,%zu,%zu,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%" PRIu64 ",%" PRIu64 ",%.1f,%" PRIu64
                 ",%" PRIu64 ",%" PRIu64 ",%.1f,%.1f,%.1f,%.1f,%.1f\n",
                 sec + 1, sched.Rate(sec + 0.5) / 1000, all.size() / 1000.0, rd.size(), wr.size(), p50, p99, p999,
                 mx, Percentile(rd, 0.99), Percentile(wr, 0.99), d.l0_files, d.imm_memtables,
                 d.pending_bytes / double(kMiB), d.running_compactions, d.running_flushes, d.write_stopped,
                 d.delayed_rate / double(kMiB), d.stall_us / 1000.0, d.flush_write / double(kMiB),
                 d.compact_read / double(kMiB), d.compact_write / double(kMiB));
  }
  if (f != stdout) std::fclose(f);
  if (a.slow_get_us > 0) {
    FILE* sf = std::fopen(a.slow_out.c_str(), "w");
    if (!sf) Die("cannot write " + a.slow_out);
    std::fprintf(sf,
                 "at_s,client,wall_us,thread_cpu_us,db_mutex_us,snapshot_us,memtable_us,files_us,find_table_us,"
                 "block_reads,block_read_us,block_read_kib,block_cache_hits,file_read_us\n");
    for (size_t c = 0; c < logs.size(); c++)
      for (const SlowGet& g : logs[c].slow)
        std::fprintf(sf, "%.4f,%zu,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%" PRIu64 ",%.1f,%.1f,%" PRIu64 ",%.1f\n",
                     g.at_s, c, g.wall_ns / 1e3, g.thread_cpu_ns / 1e3, g.mutex_ns / 1e3, g.snapshot_ns / 1e3,
                     g.memtable_ns / 1e3, g.files_ns / 1e3, g.find_table_ns / 1e3, g.block_reads,
                     g.block_read_ns / 1e3, g.block_read_bytes / 1024.0, g.cache_hits, g.file_read_ns / 1e3);
    std::fclose(sf);
    uint64_t dropped = 0;
    for (auto& l : logs) dropped += l.slow_dropped;
    if (dropped)
      std::fprintf(stderr, "slow Gets: %" PRIu64 " more than the %zu per client thread kept were not written to %s\n",
                   dropped, kMaxSlow, a.slow_out.c_str());
  }
  std::string levels;
  db->GetProperty("rocksdb.levelstats", &levels);
  std::fprintf(stderr,
               "done: %" PRIu64 " ops in %.1f s (%.2f kops/s), %" PRIu64 " errors, driver CPU %.1f s (%.2f cores)\n%s",
               total, elapsed, total / elapsed / 1000, errors, cpu_s, cpu_s / elapsed, levels.c_str());
#ifdef TAILLAT_WITH_PAIO
  if (plugin && !a.paio_stats.empty()) {
    std::ofstream js(a.paio_stats);
    js << plugin->CollectJson() << "\n";
  }
#endif
  // Do not wait for the backlog: cancel background work and close.
  rocksdb::CancelAllBackgroundWork(db.get(), /*wait=*/true);
  s = db->Close();
  db.reset();
  if (errors) {
    std::fprintf(stderr, "taillat_driver: %" PRIu64 " requests failed\n", errors);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = ParseArgs(argc, argv);
  return a.mode == "preload" ? Preload(a) : Run(a);
}
