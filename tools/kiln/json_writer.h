// A minimal streaming JSON writer (objects, arrays, strings, numbers) for tool reports.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::tools {

class JsonWriter {
 public:
  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }
  void Key(const std::string& k);
  void String(const std::string& s);
  void Number(double v);
  void Int(int64_t v);
  void Bool(bool v);
  void Field(const std::string& k, const std::string& v) { Key(k); String(v); }
  void Field(const std::string& k, const char* v) { Key(k); String(v); }
  void Field(const std::string& k, double v) { Key(k); Number(v); }
  void Field(const std::string& k, int64_t v) { Key(k); Int(v); }
  const std::string& str() const { return out_; }

 private:
  void Open(char c);
  void Close(char c);
  void Separate();
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

std::string JsonEscape(const std::string& s);

}  // namespace kiln::tools
