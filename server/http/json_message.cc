#include "server/http/json_message.h"

#include <google/protobuf/descriptor.h>

namespace kiln::server {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

void WriteScalar(const Message& m, const FieldDescriptor* f, int index, json::Writer& w) {
  const Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      w.Int(rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      w.Int(rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      w.UInt(rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      w.UInt(rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      w.Double(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      w.Float(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      w.Bool(rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      w.String((rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f))->name());
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      w.String(rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f));
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      WriteMessageJson(rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f), w);
      break;
  }
}

void WriteMap(const Message& m, const FieldDescriptor* f, json::Writer& w) {
  const Reflection* r = m.GetReflection();
  w.BeginObject();
  for (int i = 0; i < r->FieldSize(m, f); ++i) {
    const Message& entry = r->GetRepeatedMessage(m, f, i);
    const FieldDescriptor* key = entry.GetDescriptor()->map_key();
    w.Key(entry.GetReflection()->GetString(entry, key));
    WriteScalar(entry, entry.GetDescriptor()->map_value(), -1, w);
  }
  w.EndObject();
}

}  // namespace

void WriteMessageJson(const Message& m, json::Writer& w) {
  const Reflection* r = m.GetReflection();
  w.BeginObject();
  for (int i = 0; i < m.GetDescriptor()->field_count(); ++i) {
    const FieldDescriptor* f = m.GetDescriptor()->field(i);
    const bool unset_message = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
                               !f->is_repeated() && !r->HasField(m, f);
    if (unset_message || (f->containing_oneof() && !r->HasField(m, f))) continue;
    w.Key(f->name());
    if (f->is_map()) {
      WriteMap(m, f, w);
    } else if (f->is_repeated()) {
      w.BeginArray();
      for (int j = 0; j < r->FieldSize(m, f); ++j) WriteScalar(m, f, j, w);
      w.EndArray();
    } else {
      WriteScalar(m, f, -1, w);
    }
  }
  w.EndObject();
}

}  // namespace kiln::server
