# Every find_package of the project, in one place. All of these are Debian
# packages installed by scripts/install-deps.sh.
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
# Start-up time: ddprun is exec'd thousands of times a day, and every shared
# library it loads costs its mapping and relocations at each start (about
# 0.2 ms for Boost.Filesystem, 0.5 ms for spdlog with fmt on the 2-CPU build
# machine; bench/run.sh (m)). Boost is used header-only (Asio, Beast, and
# Process v2 with std::filesystem: ddprun_boost below), and fmt and spdlog too
# (ddprun_fmt, ddprun_spdlog below).
# CMake 3.30 and later (Debian 13, sid) use Boost's own BoostConfig.cmake, which
# every supported Boost ships, instead of the removed FindBoost module.
if(POLICY CMP0167)
  cmake_policy(SET CMP0167 NEW)
endif()
# Process v2 (the workers' launcher) is in Boost 1.80 and later: Debian 12's
# libboost1.81-dev, libboost-dev on Debian 13 and sid.
# Up to some 1.8x its implementation comes with the headers (.ipp files, used
# header-only); later Boost (sid's 1.92) ships it only as libboost_process
# (Debian's libboost-process-dev), which is then linked.
find_package(Boost 1.80 REQUIRED OPTIONAL_COMPONENTS process)
add_library(ddprun_boost INTERFACE)
target_link_libraries(ddprun_boost INTERFACE Boost::headers)
target_compile_definitions(ddprun_boost INTERFACE BOOST_ASIO_NO_DEPRECATED
                           BOOST_PROCESS_USE_STD_FS)
find_file(DDPRUN_BOOST_PROCESS_IPP boost/process/v2/posix/detail/close_handles.ipp
          PATHS ${Boost_INCLUDE_DIRS} NO_DEFAULT_PATH)
if(DDPRUN_BOOST_PROCESS_IPP)
  target_compile_definitions(ddprun_boost INTERFACE BOOST_PROCESS_V2_HEADER_ONLY)
elseif(TARGET Boost::process)
  target_link_libraries(ddprun_boost INTERFACE Boost::process)
else()
  message(FATAL_ERROR "Boost ${Boost_VERSION} has Boost.Process only as a library: install "
                      "libboost-process-dev")
endif()
# The command line and the job file (--config): CLI11 is header-only.
find_package(CLI11 2.1 REQUIRED)
# The OpenSSL plugin (etcd's HTTP and TLS, HMAC-SHA256; libssl-dev). Only the
# plugin links it: loading libcrypto.so.3 took about 1.7 ms of every start on
# the build machine (bench/run.sh (m)), and ddprun loads it only for an etcd
# job or a job secret (include/ddprun/store/openssl_plugin.hpp).
find_package(OpenSSL REQUIRED)

# fmt and spdlog without their shared libraries (see Boost above). Debian's
# spdlog::spdlog_header_only would still link the shared fmt. spdlog is used in
# its compiled mode, its implementation built once into libddprun
# (src/base/spdlog_compiled.cpp) rather than in every file that logs.
add_library(ddprun_fmt INTERFACE)
target_link_libraries(ddprun_fmt INTERFACE fmt::fmt-header-only)
add_library(ddprun_spdlog INTERFACE)
get_target_property(spdlog_includes spdlog::spdlog INTERFACE_INCLUDE_DIRECTORIES)
target_include_directories(ddprun_spdlog SYSTEM INTERFACE ${spdlog_includes})
target_compile_definitions(ddprun_spdlog INTERFACE SPDLOG_FMT_EXTERNAL SPDLOG_COMPILED_LIB)
target_link_libraries(ddprun_spdlog INTERFACE ddprun_fmt Threads::Threads)

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
