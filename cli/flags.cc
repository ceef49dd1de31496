#include "cli/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace fullband::cli {

StatusOr<Flags> Flags::Parse(const std::vector<std::string>& args,
                             const std::set<std::string>& with_value,
                             const std::set<std::string>& switches) {
  Flags f;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      f.positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (switches.count(name)) {
      if (inline_value) return InvalidArgumentError("--" + name + " takes no value");
      f.values_[name] = "true";
    } else if (with_value.count(name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) return InvalidArgumentError("--" + name + " needs a value");
        value = args[++i];
      }
      f.values_[name] = value;
    } else {
      return InvalidArgumentError("unknown flag " + a);
    }
  }
  return f;
}

StatusOr<std::string> Flags::Required(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return InvalidArgumentError("--" + name + " is required");
  return it->second;
}

std::string Flags::Get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

StatusOr<int64_t> Flags::GetInt(const std::string& name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (errno != 0 || end == it->second.c_str() || *end != '\0') {
    return InvalidArgumentError("--" + name + ": expected an integer, got '" + it->second + "'");
  }
  return static_cast<int64_t>(v);
}

StatusOr<double> Flags::GetDouble(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0' || !std::isfinite(v)) {
    return InvalidArgumentError("--" + name + ": expected a number, got '" + it->second + "'");
  }
  return v;
}

}  // namespace fullband::cli
