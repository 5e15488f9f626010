// Where the build put the programs and files that the tests run and read.
// The values are defined in one source file that CMake writes into the build
// tree (tests/CMakeLists.txt, build_paths.cpp), not passed as -D flags: an
// absolute path on a compiler's command line makes every file that sees it a
// different compilation in each checkout, so a fresh clone could not reuse
// ccache's objects (scripts/test.sh). Empty where the build has no such thing
// (store_client without libtorch).
#pragma once

namespace ddprun_test::build_paths {

extern const char ddprun_binary[];
extern const char fake_worker[];
extern const char fake_nvml_library[];
extern const char store_client[];
extern const char examples_dir[];
extern const char examples_bin_dir[];
extern const char bench_dir[];
extern const char events_doc[];
extern const char stacks_data_dir[];
extern const char fuzz_dir[];
extern const char mpi_rsh_local[];

}  // namespace ddprun_test::build_paths
