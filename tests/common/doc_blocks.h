// The YAML blocks of a Markdown document that follow a marker line, for tests that check what
// the docs show against the code.
#pragma once

#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace fullband::testing {

// The bodies of the ```yaml blocks of `path` whose opening line follows a line containing
// `marker`.
inline std::vector<std::string> MarkedYamlBlocks(const std::string& path, std::string_view marker) {
  std::ifstream in(path);
  std::vector<std::string> blocks;
  std::string line;
  bool marked = false, inside = false;
  while (std::getline(in, line)) {
    if (inside) {
      if (line == "```") {
        inside = false;
      } else {
        blocks.back() += line + "\n";
      }
    } else if (marked && line == "```yaml") {
      inside = true;
      blocks.emplace_back();
    }
    marked = line.find(marker) != std::string::npos;
  }
  return blocks;
}

}  // namespace fullband::testing
