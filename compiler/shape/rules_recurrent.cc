// Shape rules for RNN, GRU and LSTM: Y is (seq, dirs, batch, hidden) and Y_h / Y_c
// (dirs, batch, hidden), or (batch, seq, dirs, hidden) and (batch, dirs, hidden) with
// layout 1. dirs comes from `direction`, hidden from `hidden_size` (else from W's gate rows).
#include "compiler/shape/nn_rules.h"
#include "compiler/shape/shape_util.h"

namespace kiln::shape {
namespace {

// W and R stack this many gates per direction.
int64_t GatesOf(const std::string& op) {
  if (op == "GRU") return 3;
  if (op == "LSTM") return 4;
  return 1;
}

// Checks W (dirs, gates * hidden, input) against X and the attributes; returns hidden.
absl::StatusOr<Dim> HiddenDim(const InferContext& ctx, const std::optional<Shape>& x,
                              int64_t dirs, int64_t gates) {
  const Node& n = ctx.node();
  const std::optional<Shape> w = ctx.input_shape(1);
  if (w && w->size() != 3) return ctx.Invalid("W must be (directions, gates*hidden, input)");
  if (w && (*w)[0].known() && (*w)[0].value != dirs) {
    return ctx.Invalid("W has " + std::to_string((*w)[0].value) + " directions, the node " +
                       std::to_string(dirs));
  }
  if (w && x && (*w)[2].known() && (*x)[2].known() && (*w)[2].value != (*x)[2].value) {
    return ctx.Invalid("W's input size " + std::to_string((*w)[2].value) + " differs from X's " +
                       std::to_string((*x)[2].value));
  }
  const int64_t hidden = n.GetInt("hidden_size", 0);
  if (hidden < 0) return ctx.Invalid("hidden_size must be positive");
  if (w && (*w)[1].known()) {
    if ((*w)[1].value % gates != 0) return ctx.Invalid("W's rows are not a whole number of gates");
    if (hidden > 0 && (*w)[1].value != gates * hidden) {
      return ctx.Invalid("W has " + std::to_string((*w)[1].value) + " rows, hidden_size " +
                         std::to_string(hidden) + " needs " + std::to_string(gates * hidden));
    }
    return Dim((*w)[1].value / gates);
  }
  return hidden > 0 ? Dim(hidden) : Dim();
}

absl::Status RecurrentRule(InferContext& ctx) {
  const Node& n = ctx.node();
  const DType dt = ctx.input_dtype(0);
  const std::string direction = n.GetString("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    return ctx.Invalid("direction '" + direction + "' is not forward, reverse or bidirectional");
  }
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const int64_t layout = n.GetInt("layout", 0);
  if (layout != 0 && layout != 1) return ctx.Invalid("layout must be 0 or 1");
  const std::optional<Shape> x = ctx.input_shape(0);
  if (x && x->size() != 3) return ctx.Invalid("X must have rank 3");
  ASSIGN_OR_RETURN(Dim hidden, HiddenDim(ctx, x, dirs, GatesOf(n.op_type)));
  const Dim seq = x ? (*x)[layout == 0 ? 0 : 1] : Dim();
  const Dim batch = x ? (*x)[layout == 0 ? 1 : 0] : Dim();
  const Dim d(dirs);
  const Shape y = layout == 0 ? Shape{seq, d, batch, hidden} : Shape{batch, seq, d, hidden};
  const Shape state = layout == 0 ? Shape{d, batch, hidden} : Shape{batch, d, hidden};
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    if (ctx.has_output(i)) ctx.set_output(i, dt, i == 0 ? y : state);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterRecurrentRules(RuleRegistry& r) {
  for (const char* op : {"RNN", "GRU", "LSTM"}) r.Register("", op, RecurrentRule);
}

}  // namespace kiln::shape
