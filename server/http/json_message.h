// Protocol messages as JSON, as the KServe v2 REST binding writes them: proto field names,
// numbers as numbers (int64 included), enums by name, maps as objects, unset messages left
// out.
#pragma once

#include <google/protobuf/message.h>

#include "base/json.h"

namespace kiln::server {

void WriteMessageJson(const google::protobuf::Message& m, json::Writer& w);

}  // namespace kiln::server
