// A RocksDB application using the paio plugin. The lines marked "+paio" are
// everything the application adds (docs/rocksdb.md counts them).
#include <cstdio>
#include <string>

#include <rocksdb/db.h>

#include "paio/rocksdb.h"  // +paio

int main(int argc, char** argv) {
  std::string path = argc > 1 ? argv[1] : "/tmp/paio-rocksdb-example";
  rocksdb::Options options;
  options.create_if_missing = true;

  paio_rocksdb::PluginOptions popts;                          // +paio
  std::string error;                                          // +paio
  auto plugin = paio_rocksdb::Plugin::Create(popts, &error);  // +paio
  if (!plugin) return std::fprintf(stderr, "%s\n", error.c_str()), 1;  // +paio
  plugin->Install(&options);                                  // +paio

  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &db);
  if (!s.ok()) return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
  for (int i = 0; i < 1000; ++i) db->Put(rocksdb::WriteOptions(), "key" + std::to_string(i), std::string(100, 'v'));
  db->Flush(rocksdb::FlushOptions());
  delete db;
  std::printf("%s\n", plugin->CollectJson().c_str());
  rocksdb::DestroyDB(path, rocksdb::Options());
  return 0;
}
