// Flags: `--name value` and `--switch` arguments, parsed against the list of names a program
// accepts; anything else is an error naming the argument. The benchmarks' small parser (bench/);
// the fullband binary declares its flags with CLI11 (cli/commands.h).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace fullband::cli {

class Flags {
 public:
  // `with_value`: flags that take a value; `switches`: flags that do not.
  static StatusOr<Flags> Parse(const std::vector<std::string>& args,
                               const std::set<std::string>& with_value,
                               const std::set<std::string>& switches);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  // The value of a flag that must be present (INVALID_ARGUMENT naming it otherwise).
  StatusOr<std::string> Required(const std::string& name) const;
  std::string Get(const std::string& name, const std::string& fallback) const;
  StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback) const;
  StatusOr<double> GetDouble(const std::string& name, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

}  // namespace fullband::cli
