// Where the CUDA libraries that Kiln opens at run time (cuDNN, cuBLASLt, NVRTC) are looked
// for, decided without opening anything (pure, unit-tested). A machine with a driver may
// have them from the toolkit, from pip wheels or PyTorch, or in a mounted driver folder; the
// first file that opens wins, in this order:
//   1. KILN_CUDA_LIBRARY_PATH (colon-separated folders): the override
//   2. the bare soname: the loader's own search (LD_LIBRARY_PATH, RUNPATH, the ld.so cache)
//   3. the pip wheels and PyTorch of the python3 on PATH: site-packages/nvidia/cu13/lib,
//      nvidia/cudnn/lib, nvidia/cublas/lib, nvidia/cuda_nvrtc/lib, torch/lib
//   4. the toolkit: $CUDA_HOME (or $CUDA_PATH), /usr/local/cuda, the distribution's folders
//   5. the toolkit folder this build used
//   6. driver folders (/usr/local/nvidia/lib64, as containers mount them, WSL's)
#pragma once

#include <string>
#include <vector>

namespace kiln::cuda {

struct LibrarySearch {
  std::string override_path;                  // KILN_CUDA_LIBRARY_PATH
  std::vector<std::string> python_site_dirs;  // site-packages of the python3 on PATH
  std::string cuda_home;                      // CUDA_HOME, else CUDA_PATH
  std::string build_dir;                      // where the build found the library
};

// The paths to hand dlopen for `soname`, best first, without duplicates: folder/soname for
// every folder above, and the bare soname in second place.
std::vector<std::string> LibraryCandidates(const std::string& soname, const LibrarySearch& search);

// This process's environment (python3's folders only when `with_python`: asking it runs a
// process, done only when the cheaper places failed).
LibrarySearch SearchFromEnvironment(const std::string& build_dir, bool with_python);

// The site-packages folders of the python3 on PATH (empty without one), from
// `python3 -c "import site; ..."`.
std::vector<std::string> PythonSiteDirs();

}  // namespace kiln::cuda
