// spdlog's implementation, compiled once for the whole program. Every other
// file sees spdlog as a compiled library (SPDLOG_COMPILED_LIB, set by
// ddprun_spdlog in cmake/Dependencies.cmake): declarations only, where the
// header-only mode made each file that logs compile spdlog's registry, pattern
// formatter and sinks again, about a third of its compile time. Linking
// Debian's libspdlog.so instead would cost every start its load
// (cmake/Dependencies.cmake). The definitions are spdlog's own, from the
// -inl.h headers Debian ships, as spdlog's src/*.cpp build them.
#ifndef SPDLOG_COMPILED_LIB
#error "spdlog_compiled.cpp builds spdlog's compiled mode: define SPDLOG_COMPILED_LIB"
#endif

#include <spdlog/common-inl.h>
#include <spdlog/details/backtracer-inl.h>
#include <spdlog/details/log_msg-inl.h>
#include <spdlog/details/log_msg_buffer-inl.h>
#include <spdlog/details/os-inl.h>
#include <spdlog/details/periodic_worker-inl.h>
#include <spdlog/details/registry-inl.h>
#include <spdlog/logger-inl.h>
#include <spdlog/pattern_formatter-inl.h>
#include <spdlog/sinks/ansicolor_sink-inl.h>
#include <spdlog/sinks/base_sink-inl.h>
#include <spdlog/sinks/sink-inl.h>
#include <spdlog/sinks/stdout_sinks-inl.h>
#include <spdlog/spdlog-inl.h>

#include <mutex>

// The sinks ddprun makes (logging.cpp: stderr, unsynchronized) and the one
// spdlog's registry makes for its default logger (a colour sink on stdout).
template class spdlog::sinks::base_sink<std::mutex>;
template class spdlog::sinks::base_sink<spdlog::details::null_mutex>;
template class spdlog::sinks::stdout_sink_base<spdlog::details::console_nullmutex>;
template class spdlog::sinks::stdout_sink_base<spdlog::details::console_mutex>;
template class spdlog::sinks::stderr_sink<spdlog::details::console_nullmutex>;
template class spdlog::sinks::stderr_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_stdout_sink<spdlog::details::console_mutex>;
