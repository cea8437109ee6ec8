// Reading Kiln's YAML files (the server config and model configs) without exceptions:
// yaml-cpp throws on malformed text and on conversion errors, and both become
// INVALID_ARGUMENT naming the file and the key.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace kiln::server {

// `node` as T; else `bad(key, why)`.
template <class T, class BadFn>
absl::Status ReadYaml(const YAML::Node& node, const std::string& key, T& out, BadFn bad) {
  try {
    out = node.as<T>();
  } catch (const YAML::Exception& e) {
    return bad(key, absl::StrCat("cannot read value (", e.msg, ")"));
  }
  return absl::OkStatus();
}

// Parses `yaml` and gives its root to `apply`; a parse error, an exception `apply` lets
// through (a key that is not a scalar, `{[1, 2]: x}`, throws where it is read as text) or
// `apply`'s error is INVALID_ARGUMENT prefixed by `where`.
inline absl::Status ApplyYamlDocument(const std::string& yaml, const std::string& where,
                                      const std::function<absl::Status(const YAML::Node&)>& apply) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": invalid YAML: ", e.what()));
  }
  absl::Status s;
  try {
    s = apply(root);
  } catch (const YAML::Exception& e) {
    s = absl::InvalidArgumentError(absl::StrCat("unreadable YAML: ", e.what()));
  }
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
  return absl::OkStatus();
}

}  // namespace kiln::server
