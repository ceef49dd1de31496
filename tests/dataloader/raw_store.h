// Tests that damage a token store behind its back: the store opened as a plain RocksDB
// database (column families [default, sequences, meta]) and a record's value edited or deleted.
#pragma once

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <functional>
#include <string>
#include <vector>

namespace fullband::dataloader::testing {

// Runs `fn` on the store at `path` opened as a plain RocksDB database.
inline void WithRawDb(
    const std::string& path,
    const std::function<void(rocksdb::DB*, const std::vector<rocksdb::ColumnFamilyHandle*>&)>& fn) {
  rocksdb::Options options;
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, options}, {"sequences", options}, {"meta", options}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, path, families, &handles, &db).ok());
  fn(db, handles);
  for (auto* h : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
  delete db;
}

// Overwrites (or, without `edit`, deletes) the value of record `index` (< 256).
inline void TamperRecord(const std::string& path, int64_t index,
                         const std::function<void(std::string*)>& edit) {
  WithRawDb(path, [&](rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& handles) {
    std::string key(8, '\0');
    key[7] = static_cast<char>(index);
    std::string value;
    if (edit) {
      ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), handles[1], key, &value).ok());
      edit(&value);
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), handles[1], key, value).ok());
    } else {
      ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), handles[1], key).ok());
    }
  });
}

}  // namespace fullband::dataloader::testing
