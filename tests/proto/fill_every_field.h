// Fills a protobuf message by reflection, and checks that a conversion to a struct and back
// (proto/reflect_fields.h) returns it unchanged.
#pragma once

#include <google/protobuf/message.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <string>

namespace fullband::testing {

// Sets every field of `message`, nested and repeated ones included (two entries each), to a
// value that is not the field's default, by reflection: a field the message has and the
// struct's VisitFields forgets cannot come back. Each call gives other values.
inline void FillEveryField(google::protobuf::Message* message, int& counter) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = message->GetReflection();
  const google::protobuf::Descriptor* d = message->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    for (int n = 0; n < (f->is_repeated() ? 2 : 1); ++n) {
      const int v = ++counter;
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_INT64:
          f->is_repeated() ? r->AddInt64(message, f, 1000 + v) : r->SetInt64(message, f, 1000 + v);
          break;
        case FieldDescriptor::CPPTYPE_UINT64:
          f->is_repeated() ? r->AddUInt64(message, f, 1000 + v)
                           : r->SetUInt64(message, f, 1000 + v);
          break;
        case FieldDescriptor::CPPTYPE_DOUBLE:
          f->is_repeated() ? r->AddDouble(message, f, v + 0.25)
                           : r->SetDouble(message, f, v + 0.25);
          break;
        case FieldDescriptor::CPPTYPE_BOOL:  // both values: one differs from any default
          f->is_repeated() ? r->AddBool(message, f, v % 2) : r->SetBool(message, f, v % 2);
          break;
        case FieldDescriptor::CPPTYPE_STRING:
          f->is_repeated() ? r->AddString(message, f, "s" + std::to_string(v))
                           : r->SetString(message, f, "s" + std::to_string(v));
          break;
        case FieldDescriptor::CPPTYPE_ENUM: {  // each non-zero value in turn
          const google::protobuf::EnumDescriptor* e = f->enum_type();
          const int number = e->value(1 + v % (e->value_count() - 1))->number();
          f->is_repeated() ? r->AddEnumValue(message, f, number)
                           : r->SetEnumValue(message, f, number);
          break;
        }
        case FieldDescriptor::CPPTYPE_MESSAGE:
          FillEveryField(
              f->is_repeated() ? r->AddMessage(message, f) : r->MutableMessage(message, f),
              counter);
          break;
        default:
          FAIL() << f->full_name() << ": a field type the Config does not use";
      }
    }
  }
}

// Fills a `Message` three times over (every enum value and both bools come round) and expects
// `round_trip(message)`, the message converted to its struct and back, to equal it.
template <typename Message, typename RoundTrip>
void ExpectEveryFieldRoundTrips(RoundTrip&& round_trip) {
  int counter = 0;
  for (int pass = 0; pass < 3; ++pass) {
    Message every;
    FillEveryField(&every, counter);
    google::protobuf::util::MessageDifferencer diff;
    std::string report;
    diff.ReportDifferencesToString(&report);
    EXPECT_TRUE(diff.Compare(every, round_trip(every))) << report;
  }
}

}  // namespace fullband::testing
