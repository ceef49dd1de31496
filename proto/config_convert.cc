// Config <-> proto::Config by protobuf reflection over the field list of common/config_fields.h:
// a Config field and its proto field share a name, so neither direction lists the fields again.
// An enum value travels as <ENUM>_<NAME> (FEEDBACK_LOSS_MEAN for `mean`); 0 is UNSPECIFIED.
#include "proto/config_convert.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/reflection.h>

#include <cctype>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/config_fields.h"

namespace fullband {
namespace {

using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

using PassMix = std::vector<std::pair<int64_t, double>>;

const FieldDescriptor* ProtoField(const Message& message, const char* name) {
  const FieldDescriptor* field = message.GetDescriptor()->FindFieldByName(name);
  FB_CHECK(field != nullptr) << message.GetDescriptor()->full_name() << " has no field " << name
                             << " (proto/config.proto must name every field of "
                                "common/config_fields.h)";
  return field;
}

// FEEDBACK_LOSS_ for FeedbackLoss: the name of the enum's value 0, FEEDBACK_LOSS_UNSPECIFIED,
// without UNSPECIFIED.
std::string EnumPrefix(const EnumDescriptor& type) {
  const std::string unspecified = type.FindValueByNumber(0)->name();
  return unspecified.substr(0, unspecified.size() - std::string("UNSPECIFIED").size());
}

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// Writes each visited field into the proto field of the same name.
class ToProtoVisitor {
 public:
  explicit ToProtoVisitor(Message* message)
      : message_(message), reflection_(message->GetReflection()) {}

  template <typename T>
  void operator()(const char* name, const T& value) {
    Set(ProtoField(*message_, name), value);
  }

 private:
  void Set(const FieldDescriptor* f, int64_t v) { reflection_->SetInt64(message_, f, v); }
  void Set(const FieldDescriptor* f, double v) { reflection_->SetDouble(message_, f, v); }
  void Set(const FieldDescriptor* f, bool v) { reflection_->SetBool(message_, f, v); }
  void Set(const FieldDescriptor* f, const std::string& v) {
    reflection_->SetString(message_, f, v);
  }
  template <typename E>
  requires std::is_enum_v<E>
  void Set(const FieldDescriptor* f, E v) {
    const std::string name = EnumPrefix(*f->enum_type()) + Upper(NameOf(v));
    const EnumValueDescriptor* value = f->enum_type()->FindValueByName(name);
    FB_CHECK(value != nullptr) << f->full_name() << " has no value " << name;
    reflection_->SetEnum(message_, f, value);
  }
  void Set(const FieldDescriptor* f, const std::vector<std::string>& items) {
    for (const std::string& item : items) reflection_->AddString(message_, f, item);
  }
  // Each (passes, probability) is a PassProbability.
  void Set(const FieldDescriptor* f, const PassMix& mix) {
    for (const auto& [passes, probability] : mix) {
      Message* entry = reflection_->AddMessage(message_, f);
      ToProtoVisitor to(entry);
      to("passes", passes);
      to("probability", probability);
    }
  }
  template <HasFields T>
  void Set(const FieldDescriptor* f, const std::vector<T>& entries) {
    for (const T& entry : entries)
      VisitFields(entry, ToProtoVisitor(reflection_->AddMessage(message_, f)));
  }
  template <HasFields T>
  void Set(const FieldDescriptor* f, const T& nested) {
    VisitFields(nested, ToProtoVisitor(reflection_->MutableMessage(message_, f)));
  }

  Message* message_;
  const Reflection* reflection_;
};

// Reads each visited field from the proto field of the same name. A field with presence
// (`optional`) is read only when set, an enum only when not UNSPECIFIED, a list only when
// non-empty; otherwise the Config keeps its default. Errors name the field as "section.field".
class FromProtoVisitor {
 public:
  FromProtoVisitor(const Message& message, std::string prefix)
      : message_(message), reflection_(message.GetReflection()), prefix_(std::move(prefix)) {}

  template <typename T>
  void operator()(const char* name, T& value) {
    if (!status_.ok()) return;
    if (!Given(message_, name)) return;
    Get(ProtoField(message_, name), prefix_ + name, value);
  }

  const Status& status() const { return status_; }

 private:
  void Get(const FieldDescriptor* f, const std::string&, int64_t& v) {
    v = reflection_->GetInt64(message_, f);
  }
  void Get(const FieldDescriptor* f, const std::string&, double& v) {
    v = reflection_->GetDouble(message_, f);
  }
  void Get(const FieldDescriptor* f, const std::string&, bool& v) {
    v = reflection_->GetBool(message_, f);
  }
  void Get(const FieldDescriptor* f, const std::string&, std::string& v) {
    v = reflection_->GetString(message_, f);
  }
  template <typename E>
  requires std::is_enum_v<E>
  void Get(const FieldDescriptor* f, const std::string& path, E& v) {
    const int number = reflection_->GetEnumValue(message_, f);
    if (number == 0) return;  // UNSPECIFIED
    const EnumValueDescriptor* value = f->enum_type()->FindValueByNumber(number);
    const std::string prefix = EnumPrefix(*f->enum_type());
    for (const auto& [e, name] : EnumNames(v)) {
      if (value != nullptr && value->name() == prefix + Upper(name)) {
        v = e;
        return;
      }
    }
    status_ = InvalidArgumentError(path + ": unknown enum value " + std::to_string(number));
  }
  void Get(const FieldDescriptor* f, const std::string&, std::vector<std::string>& items) {
    const auto field = reflection_->GetRepeatedFieldRef<std::string>(message_, f);
    items.assign(field.begin(), field.end());
  }
  void Get(const FieldDescriptor* f, const std::string& path, PassMix& mix) {
    mix.clear();
    for (int i = 0; i < reflection_->FieldSize(message_, f); ++i) {
      FromProtoVisitor from(reflection_->GetRepeatedMessage(message_, f, i), path + ".");
      std::pair<int64_t, double> entry;
      from("passes", entry.first);
      from("probability", entry.second);
      mix.push_back(entry);
    }
  }
  template <HasFields T>
  void Get(const FieldDescriptor* f, const std::string& path, std::vector<T>& entries) {
    entries.assign(reflection_->FieldSize(message_, f), T{});
    for (size_t i = 0; i < entries.size() && status_.ok(); ++i) {
      const Message& entry = reflection_->GetRepeatedMessage(message_, f, static_cast<int>(i));
      const std::string here = path + "[" + std::to_string(i) + "].";
      for (std::string_view required : RequiredFields(entries[i])) {
        if (!Given(entry, std::string(required).c_str())) {
          status_ = InvalidArgumentError(here + std::string(required) + " is required");
          return;
        }
      }
      Nested(entry, here, entries[i]);
    }
  }
  // Whether a field is set; a scalar without presence always is.
  static bool Given(const Message& message, const char* name) {
    const FieldDescriptor* f = ProtoField(message, name);
    if (f->is_repeated()) return message.GetReflection()->FieldSize(message, f) > 0;
    return !f->has_presence() || message.GetReflection()->HasField(message, f);
  }
  template <HasFields T>
  void Get(const FieldDescriptor* f, const std::string& path, T& nested) {
    Nested(reflection_->GetMessage(message_, f), path + ".", nested);
  }
  template <HasFields T>
  void Nested(const Message& message, std::string prefix, T& nested) {
    FromProtoVisitor from(message, std::move(prefix));
    VisitFields(nested, from);
    status_ = from.status();
  }

  const Message& message_;
  const Reflection* reflection_;
  std::string prefix_;
  Status status_;
};

}  // namespace

proto::Config ToProto(const Config& config) {
  proto::Config out;
  VisitFields(config, ToProtoVisitor(&out));
  return out;
}

Status CopyFromProto(const proto::Config& message, Config& config) {
  FromProtoVisitor from(message, "");
  VisitFields(config, from);
  return from.status();
}

StatusOr<Config> FromProto(const proto::Config& message) {
  Config config;
  FB_RETURN_IF_ERROR(CopyFromProto(message, config));
  FB_RETURN_IF_ERROR(config.Validate());
  return config;
}

}  // namespace fullband
