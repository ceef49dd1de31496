// The convention fullband's configuration structs follow: a free function
//
//   template <FieldsOf<Struct> M, typename Visitor> void VisitFields(M& s, Visitor&& visit);
//
// next to the struct calls `visit("name", s.name)` for every field, in file order, so that one
// list of names serves the YAML reader (common/yaml_util.h), the YAML writer and the proto
// conversion (common/config_fields.h) alike.
#pragma once

#include <concepts>
#include <type_traits>

namespace fullband {

// `M` is `T` or `const T`: VisitFields serves readers and writers with one list.
template <typename M, typename T>
concept FieldsOf = std::same_as<std::remove_const_t<M>, T>;

// True for a struct with a VisitFields (found by argument-dependent lookup): a field of such a
// type is a nested mapping.
template <typename T>
concept HasFields = requires(T& t) { VisitFields(t, [](const char*, auto&) {}); };

}  // namespace fullband
