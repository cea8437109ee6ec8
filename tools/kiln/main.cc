// kiln: the command line. `kiln check` runs conformance-layout tests, `kiln run` runs a model
// on given inputs.
#include <cstdio>
#include <string>
#include <vector>

#include "base/openmp_env.h"
#include "tools/kiln/commands.h"

namespace {

void Usage() {
  std::fprintf(
      stderr,
      "usage: kiln <command> [options]\n"
      "commands:\n"
      "  check [--backend reference|cpu|cuda] [--rtol R] [--atol A] [--json FILE] [-q]\n"
      "        [--opt O0|O1|O2] [--bisect] [--nonfinite]\n"
      "        [--layout primitive|blocked|all] PATH...\n"
      "      run ONNX backend-test directories (model.onnx + test_data_set_*);\n"
      "      --opt runs the optimized graph, --bisect names the first pass that\n"
      "      moves the answer, --nonfinite also feeds NaN/inf/-0/denormals and\n"
      "      compares with the reference on the raw graph; --backend cpu checks\n"
      "      the engine in every\n"
      "      activation layout it can choose (--layout narrows that); --backend\n"
      "      cuda checks the CUDA engine (--tf32 allows TF32 tensor cores)\n"
      "  compile MODEL [--batch N] [-O0|-O1|-O2] [--disable PASS,...] [--report]\n"
      "        [--json FILE] [-o optimized.onnx] [--dim NAME=N ...] [--bind NAME=V[,V...] ...]\n"
      "      optimize for one batch size, plan memory, print the compile report\n"
      "      (--dim: a value for a symbolic input dim other than the batch; --bind:\n"
      "      fix an input to values, e.g. a merged decoder's use_cache_branch=true)\n"
      "  run MODEL --input NAME=FILE.pb ... --output-dir DIR [--backend reference|cpu|cuda]\n"
      "        [--tf32]\n"
      "      run a model and write its outputs as TensorProto files (engines run\n"
      "      the O2 graph)\n"
      "  bench MODEL [--backend cpu|cuda] [--tf32] [--batch N] [--threads T] [--runs R] [--json "
      "FILE]\n"
      "        [--layout primitive|blocked|tune] [--opt O0|O1|O2] [--dim NAME=N ...] [--gap-ms G]\n"
      "        [--precision float32|int8|int8-mixed|bf16|bf16-mixed] [--int8-noise F]\n"
      "        [--bind NAME=V[,V...] ...] [--last-position OUTPUT] [--error] [--disable PASS,...]\n"
      "      time an engine on random inputs; prints p50/p99 latency (--gap-ms: idle\n"
      "      G ms before each timed run, as a server between requests; --precision\n"
      "      bf16: the weight products in bfloat16 where the CPU has native bf16;\n"
      "      int8: quantized with ranges calibrated on the bench's random feed;\n"
      "      --last-position: OUTPUT cut to its last position along axis 1, as a\n"
      "      decoder's prefill chunks run; --error: rel_err against the reference\n"
      "      at float32 too, as every lowered precision reports it)\n"
      "  devices [--json]\n"
      "      what Kiln can use here: the CPU's ISA, CUDA (compiled in or not,\n"
      "      NVRTC/cuDNN/cuBLAS versions, GPUs found or why none)\n");
}

}  // namespace

int main(int argc, char** argv) {
  kiln::EnsureOpenMpWaitPolicy(argv);
  if (argc < 2) {
    Usage();
    return 2;
  }
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "check") return kiln::tools::CheckCommand(args);
  if (cmd == "run") return kiln::tools::RunCommand(args);
  if (cmd == "compile") return kiln::tools::CompileCommand(args);
  if (cmd == "bench") return kiln::tools::BenchCommand(args);
  if (cmd == "devices") return kiln::tools::DevicesCommand(args);
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    Usage();
    return 0;
  }
  std::fprintf(stderr, "kiln: unknown command '%s'\n", cmd.c_str());
  Usage();
  return 2;
}
