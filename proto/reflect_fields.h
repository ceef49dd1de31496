// Copies between a struct that lists its fields with VisitFields (common/visit_fields.h) and the
// protobuf message whose fields have the same names, by reflection: the struct's field list is
// the only list, so a field added to the struct and the message but not to VisitFields fails the
// round-trip tests instead of being dropped on the wire.
//
//   proto::Ledger wire;
//   StructToProto(ledger, &wire);
//   Ledger back;
//   FB_RETURN_IF_ERROR(ProtoToStruct(wire, back));
//
// Field types: int64_t, uint64_t, double, bool, std::string, an enum with an EnumNames table
// (travelling as <ENUM>_<NAME>, e.g. FEEDBACK_LOSS_MEAN for `mean`; 0 is UNSPECIFIED), a list
// of strings or doubles, a nested struct, a list of structs, and pairs (a vector of pairs or a
// std::map) as entries whose fields 1 and 2 are the key and the value (a proto map, or a message
// such as config.proto's PassProbability). A field name the message lacks is a programmer error
// (FB_CHECK).
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/reflection.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/visit_fields.h"

namespace fullband {
namespace reflect_internal {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

const FieldDescriptor* FieldNamed(const Message& message, const char* name);
const FieldDescriptor* FieldNumbered(const Message& message, int number);
// Whether a field is set: a field with presence when it is, a list when it is not empty, a
// scalar without presence always.
bool Given(const Message& message, const FieldDescriptor* field);
// The proto number of the enum value named `name` in its EnumNames table, and the name of a
// number ("" when it is no value of the proto enum).
int ProtoEnumNumber(const FieldDescriptor* field, std::string_view name);
std::string EnumNameOf(const FieldDescriptor* field, int number);

template <typename T>
struct IsPairs : std::false_type {};
template <typename K, typename V>
struct IsPairs<std::vector<std::pair<K, V>>> : std::true_type {};
template <typename K, typename V>
struct IsPairs<std::map<K, V>> : std::true_type {};

// Writes each visited field into the message field of the same name.
class Writer {
 public:
  explicit Writer(Message* message) : message_(message), r_(message->GetReflection()) {}

  template <typename T>
  void operator()(const char* name, const T& value) {
    Set(FieldNamed(*message_, name), value);
  }

  void Set(const FieldDescriptor* f, int64_t v) { r_->SetInt64(message_, f, v); }
  void Set(const FieldDescriptor* f, uint64_t v) { r_->SetUInt64(message_, f, v); }
  void Set(const FieldDescriptor* f, double v) { r_->SetDouble(message_, f, v); }
  void Set(const FieldDescriptor* f, bool v) { r_->SetBool(message_, f, v); }
  void Set(const FieldDescriptor* f, const std::string& v) { r_->SetString(message_, f, v); }
  void Set(const FieldDescriptor* f, const std::vector<std::string>& items) {
    for (const std::string& item : items) r_->AddString(message_, f, item);
  }
  void Set(const FieldDescriptor* f, const std::vector<double>& items) {
    for (double item : items) r_->AddDouble(message_, f, item);
  }
  template <typename E>
  requires std::is_enum_v<E>
  void Set(const FieldDescriptor* f, E v) {
    r_->SetEnumValue(message_, f, ProtoEnumNumber(f, NameOf(v)));
  }
  template <typename T>
  requires IsPairs<T>::value void Set(const FieldDescriptor* f, const T& pairs) {
    for (const auto& [key, value] : pairs) {
      Message* entry = r_->AddMessage(message_, f);
      Writer writer(entry);
      writer.Set(FieldNumbered(*entry, 1), key);
      writer.Set(FieldNumbered(*entry, 2), value);
    }
  }
  template <HasFields T>
  void Set(const FieldDescriptor* f, const std::vector<T>& entries) {
    for (const T& entry : entries) VisitFields(entry, Writer(r_->AddMessage(message_, f)));
  }
  template <HasFields T>
  void Set(const FieldDescriptor* f, const T& nested) {
    VisitFields(nested, Writer(r_->MutableMessage(message_, f)));
  }

 private:
  Message* message_;
  const Reflection* r_;
};

// Reads each visited field from the message field of the same name, where Given; otherwise
// the struct keeps its value. Errors name the field as "<prefix><name>".
class Reader {
 public:
  Reader(const Message& message, std::string prefix)
      : message_(message), r_(message.GetReflection()), prefix_(std::move(prefix)) {}

  template <typename T>
  void operator()(const char* name, T& value) {
    const FieldDescriptor* f = FieldNamed(message_, name);
    if (status_.ok() && Given(message_, f)) Get(f, prefix_ + name, value);
  }

  const Status& status() const { return status_; }

  void Get(const FieldDescriptor* f, const std::string&, int64_t& v) {
    v = r_->GetInt64(message_, f);
  }
  void Get(const FieldDescriptor* f, const std::string&, uint64_t& v) {
    v = r_->GetUInt64(message_, f);
  }
  void Get(const FieldDescriptor* f, const std::string&, double& v) {
    v = r_->GetDouble(message_, f);
  }
  void Get(const FieldDescriptor* f, const std::string&, bool& v) { v = r_->GetBool(message_, f); }
  void Get(const FieldDescriptor* f, const std::string&, std::string& v) {
    v = r_->GetString(message_, f);
  }
  void Get(const FieldDescriptor* f, const std::string&, std::vector<std::string>& items) {
    const auto field = r_->GetRepeatedFieldRef<std::string>(message_, f);
    items.assign(field.begin(), field.end());
  }
  void Get(const FieldDescriptor* f, const std::string&, std::vector<double>& items) {
    const auto field = r_->GetRepeatedFieldRef<double>(message_, f);
    items.assign(field.begin(), field.end());
  }
  template <typename E>
  requires std::is_enum_v<E>
  void Get(const FieldDescriptor* f, const std::string& path, E& v) {
    const int number = r_->GetEnumValue(message_, f);
    if (number == 0) return;  // UNSPECIFIED
    const std::string name = EnumNameOf(f, number);
    for (const auto& [value, value_name] : EnumNames(v)) {
      if (value_name == name) {
        v = value;
        return;
      }
    }
    status_ = InvalidArgumentError(path + ": unknown enum value " + std::to_string(number));
  }
  template <typename T>
  requires IsPairs<T>::value void Get(const FieldDescriptor* f, const std::string& path, T& pairs) {
    pairs.clear();
    for (int i = 0; i < r_->FieldSize(message_, f); ++i) {
      const Message& entry = r_->GetRepeatedMessage(message_, f, i);
      Reader reader(entry, path);
      std::remove_const_t<typename T::value_type::first_type> key{};
      typename T::value_type::second_type value{};
      reader.Get(FieldNumbered(entry, 1), path, key);
      reader.Get(FieldNumbered(entry, 2), path, value);
      pairs.insert(pairs.end(), {key, value});
    }
  }
  template <HasFields T>
  void Get(const FieldDescriptor* f, const std::string& path, std::vector<T>& entries) {
    entries.assign(r_->FieldSize(message_, f), T{});
    for (size_t i = 0; i < entries.size() && status_.ok(); ++i) {
      const Message& entry = r_->GetRepeatedMessage(message_, f, static_cast<int>(i));
      const std::string here = path + "[" + std::to_string(i) + "]";
      CheckRequired(entry, here, entries[i]);
      if (status_.ok()) Nested(entry, here, entries[i]);
    }
  }
  template <HasFields T>
  void Get(const FieldDescriptor* f, const std::string& path, T& nested) {
    Nested(r_->GetMessage(message_, f), path, nested);
  }

 private:
  template <HasFields T>
  void Nested(const Message& message, const std::string& path, T& nested) {
    Reader reader(message, path + ".");
    VisitFields(nested, reader);
    status_ = reader.status();
  }
  // A list entry's RequiredFields, where its type names some.
  template <typename T>
  void CheckRequired(const Message& entry, const std::string& here, const T& value) {
    if constexpr (requires { RequiredFields(value); }) {
      for (std::string_view name : RequiredFields(value)) {
        if (!Given(entry, FieldNamed(entry, std::string(name).c_str()))) {
          status_ = InvalidArgumentError(here + "." + std::string(name) + " is required");
          return;
        }
      }
    }
  }

  const Message& message_;
  const Reflection* r_;
  std::string prefix_;
  Status status_;
};

}  // namespace reflect_internal

template <HasFields T>
void StructToProto(const T& value, google::protobuf::Message* message) {
  VisitFields(value, reflect_internal::Writer(message));
}

// Every Given field of `message` onto `value`. INVALID_ARGUMENT for an enum value the struct's
// enum lacks, or a list entry without one of its RequiredFields.
template <HasFields T>
Status ProtoToStruct(const google::protobuf::Message& message, T& value) {
  reflect_internal::Reader reader(message, "");
  VisitFields(value, reader);
  return reader.status();
}

}  // namespace fullband
