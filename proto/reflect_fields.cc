#include "proto/reflect_fields.h"

#include <cctype>

#include "common/check.h"

namespace fullband::reflect_internal {
namespace {

std::string UpperCase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string LowerCase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// FEEDBACK_LOSS_ for FeedbackLoss: the name of the enum's value 0, FEEDBACK_LOSS_UNSPECIFIED,
// without UNSPECIFIED.
std::string EnumPrefix(const FieldDescriptor* field) {
  const std::string unspecified = field->enum_type()->FindValueByNumber(0)->name();
  return unspecified.substr(0, unspecified.size() - std::string_view("UNSPECIFIED").size());
}

}  // namespace

const FieldDescriptor* FieldNamed(const Message& message, const char* name) {
  const FieldDescriptor* field = message.GetDescriptor()->FindFieldByName(name);
  FB_CHECK(field != nullptr) << message.GetDescriptor()->full_name() << " has no field " << name
                             << ", which the struct's VisitFields lists";
  return field;
}

const FieldDescriptor* FieldNumbered(const Message& message, int number) {
  const FieldDescriptor* field = message.GetDescriptor()->FindFieldByNumber(number);
  FB_CHECK(field != nullptr) << message.GetDescriptor()->full_name() << " has no field " << number
                             << " (a key/value entry has fields 1 and 2)";
  return field;
}

bool Given(const Message& message, const FieldDescriptor* field) {
  const Reflection* r = message.GetReflection();
  if (field->is_repeated()) return r->FieldSize(message, field) > 0;
  return !field->has_presence() || r->HasField(message, field);
}

int ProtoEnumNumber(const FieldDescriptor* field, std::string_view name) {
  const std::string proto_name = EnumPrefix(field) + UpperCase(name);
  const auto* value = field->enum_type()->FindValueByName(proto_name);
  FB_CHECK(value != nullptr) << field->full_name() << " has no value " << proto_name;
  return value->number();
}

std::string EnumNameOf(const FieldDescriptor* field, int number) {
  const auto* value = field->enum_type()->FindValueByNumber(number);
  if (value == nullptr) return "";
  return LowerCase(value->name().substr(EnumPrefix(field).size()));
}

}  // namespace fullband::reflect_internal
