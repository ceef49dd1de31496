// A fresh directory for one test process's files. CTest runs the test cases of one binary as
// separate processes at once (ctest -j), so a fixed name under ::testing::TempDir() would be
// rewritten by one process while another reads it; a directory made by mkdtemp is this
// process's alone.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/check.h"

namespace fullband::testing {

// A new directory under ::testing::TempDir(), named <prefix>XXXXXX.
inline std::string MakeTempDir(const std::string& prefix = "fullband_") {
  std::string pattern = ::testing::TempDir() + "/" + prefix + "XXXXXX";
  FB_CHECK(mkdtemp(pattern.data()) != nullptr) << "mkdtemp " << pattern;
  return pattern;
}

// One directory per test process, made on first use and removed when the process exits.
inline const std::string& ProcessTempDir() {
  // Never destroyed: the exit handler runs after static destructors would have.
  static const std::string* const dir = [] {
    const auto* d = new std::string(MakeTempDir());
    std::atexit([] { std::filesystem::remove_all(ProcessTempDir()); });
    return d;
  }();
  return *dir;
}

}  // namespace fullband::testing
