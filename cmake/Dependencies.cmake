# Every find_package of the project, in one place. All of these are Debian
# packages installed by scripts/install-deps.sh.
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(Boost 1.74 REQUIRED COMPONENTS filesystem)
# The etcd backend: base64 now, TLS to the cluster (libssl-dev).
find_package(OpenSSL REQUIRED)

if(DDPRUN_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(DDPRUN_BUILD_BENCH)
  find_package(benchmark QUIET)
endif()

# libtorch is optional: without it ddprun still builds and runs single-node
# jobs. It is only ever linked into the store plugin, never into ddprun itself,
# so a single-node run never loads it.
if(DDPRUN_WITH_TORCH)
  find_package(Torch QUIET)
  if(NOT Torch_FOUND)
    message(STATUS "libtorch not found: building without the multi-node store")
  endif()
endif()
