// The IR: a Graph of Nodes over Values in SSA form. Every Value has one producer (a Node, or
// none for graph inputs and constants); nodes are kept in topological order. Shapes may hold
// symbolic dims (the batch dim) until Specialize binds them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "ir/dtype.h"
#include "ir/tensor.h"

namespace kiln {

// One dimension: a known size (>= 0) or a named symbol ("batch", "N"), or unknown.
struct Dim {
  int64_t value = -1;
  std::string param;  // symbol name when value < 0; empty means fully unknown

  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: implicit from sizes keeps shape literals short
  static Dim Symbol(std::string name) {
    Dim d;
    d.param = std::move(name);
    return d;
  }
  bool known() const { return value >= 0; }
  bool operator==(const Dim& o) const { return value == o.value && param == o.param; }
};
using Shape = std::vector<Dim>;

std::string ShapeToString(const Shape& shape);
bool IsStatic(const Shape& shape);
std::vector<int64_t> StaticDims(const Shape& shape);  // precondition: IsStatic
Shape ToShape(const std::vector<int64_t>& dims);

class Node;
class Graph;

struct Value {
  std::string name;
  DType dtype = DType::kUndefined;
  std::optional<Shape> shape;      // nullopt: rank unknown
  Node* producer = nullptr;        // null for graph inputs and constants
  std::optional<Tensor> constant;  // set for initializers and folded values

  bool is_constant() const { return constant.has_value(); }
};

struct Attribute {
  enum class Kind { kInt, kFloat, kString, kTensor, kInts, kFloats, kStrings, kGraph };
  Kind kind = Kind::kInt;
  int64_t i = 0;
  float f = 0.0f;
  std::string s;
  Tensor t;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  // kGraph: a control-flow body (If's branches, Loop's and Scan's body). Immutable once
  // imported, so clones of the node share it; passes never rewrite inside it.
  std::shared_ptr<const Graph> g;

  static Attribute Int(int64_t v);
  static Attribute Float(float v);
  static Attribute String(std::string v);
  static Attribute TensorValue(Tensor v);
  static Attribute Ints(std::vector<int64_t> v);
  static Attribute Floats(std::vector<float> v);
  static Attribute Strings(std::vector<std::string> v);
  static Attribute GraphValue(std::shared_ptr<const Graph> v);
  // Graphs compare by identity (two equal bodies are rarely worth proving equal).
  bool operator==(const Attribute& o) const;
};

inline constexpr char kOnnxDomain[] = "";         // ai.onnx is stored as ""
inline constexpr char kKilnDomain[] = "ai.kiln";  // Kiln's own fused operators

class Node {
 public:
  std::string name;
  std::string op_type;
  std::string domain;           // "" for ai.onnx
  int64_t opset = 0;            // the version of `domain` the model imported (after normalization)
  std::vector<Value*> inputs;   // nullptr for an omitted optional input
  std::vector<Value*> outputs;  // nullptr for an omitted optional output
  std::map<std::string, Attribute> attrs;
  // A control-flow node's bodies read values of the enclosing graph by name. Those values
  // are the node's last captures.size() inputs (so liveness, dead code and memory planning
  // see them as uses), and captures[i] is the name the bodies know the i-th of them by
  // (outer passes may replace the value; the name inside stays).
  std::vector<std::string> captures;

  bool HasAttr(const std::string& key) const { return attrs.count(key) > 0; }
  int64_t GetInt(const std::string& key, int64_t dflt) const;
  float GetFloat(const std::string& key, float dflt) const;
  std::string GetString(const std::string& key, const std::string& dflt) const;
  std::vector<int64_t> GetInts(const std::string& key, std::vector<int64_t> dflt = {}) const;
  std::vector<float> GetFloats(const std::string& key, std::vector<float> dflt = {}) const;
  const Attribute* FindAttr(const std::string& key) const;

  // The enclosing graph's value the bodies know as `name` (one of the trailing capture
  // inputs), or nullptr when the node captures no such name or that input is omitted.
  Value* Captured(const std::string& name) const;
  // Input i if present (index in range and not omitted), else nullptr.
  Value* input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  Value* output(size_t i) const { return i < outputs.size() ? outputs[i] : nullptr; }
  // "Conv 'conv1' (opset 17)": the form every error message names a node in.
  std::string Describe() const;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  std::string name;
  std::map<std::string, int64_t> opsets;  // domain ("" = ai.onnx) -> version
  std::vector<Value*> inputs;             // graph inputs (non-constant)
  std::vector<Value*> outputs;
  // A body graph only: the values it reads from enclosing graphs, bound by name (their
  // producer is null, they are neither inputs nor constants).
  std::vector<Value*> captures;

  // Values: names are unique; AddValue fails (returns nullptr) on a duplicate name.
  Value* AddValue(const std::string& name);
  Value* FindValue(const std::string& name) const;
  // A fresh value named after `hint` with a suffix that makes it unique.
  Value* NewValue(const std::string& hint);
  Value* AddConstant(const std::string& name_hint, Tensor t);
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }

  // Nodes, kept in topological order by the caller (importer sorts, passes insert in place).
  Node* AddNode(std::string op_type, std::vector<Value*> inputs, std::vector<Value*> outputs,
                std::string name = "");
  // Inserts before `before` (nullptr: at the end) and sets producers.
  Node* InsertNode(Node* before, std::unique_ptr<Node> node);
  void RemoveNode(Node* node);  // clears producers of its outputs
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  std::vector<std::unique_ptr<Node>>& mutable_nodes() { return nodes_; }

  std::vector<Node*> Consumers(const Value* v) const;
  bool IsGraphOutput(const Value* v) const;
  void ReplaceAllUses(Value* from, Value* to);  // in node inputs and graph outputs
  // Drops values that nothing references (no producer use, not an input/output).
  void PruneUnusedValues();
  // Re-sorts nodes topologically; fails on a cycle.
  bool TopologicalSort();

  std::unique_ptr<Graph> Clone() const;  // deep copy of structure; constant buffers shared

 private:
  std::vector<std::unique_ptr<Value>> values_;
  std::unordered_map<std::string, Value*> by_name_;
  std::vector<std::unique_ptr<Node>> nodes_;
  int64_t next_id_ = 0;
};

}  // namespace kiln
