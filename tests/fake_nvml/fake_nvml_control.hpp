// Test helpers around the fake NVML library: set its environment for one
// test, and keep it loaded to read its counters. Header-only, for the unit
// tests that reach NVML (test_nvml.cpp, test_devices.cpp).
#pragma once

#include <dlfcn.h>
#include <stdlib.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "support/build_paths.hpp"

namespace ddprun::test {

// Sets (or unsets) an environment variable for one test.
class ScopedEnv {
  public:
    ScopedEnv(const char* name, const char* value) : m_name(name) {
        if (const char* old = std::getenv(name)) m_old = old;
        if (value != nullptr)
            ::setenv(name, value, 1);
        else
            ::unsetenv(name);
    }
    ~ScopedEnv() {
        if (m_old)
            ::setenv(m_name.c_str(), m_old->c_str(), 1);
        else
            ::unsetenv(m_name.c_str());
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

  private:
    std::string m_name;
    std::optional<std::string> m_old;
};

// Keeps the fake loaded across query_nvml's own dlopen/dlclose, so its
// counters can be read afterwards.
class FakeNvml {
  public:
    FakeNvml()
        : m_handle(::dlopen(ddprun_test::build_paths::fake_nvml_library, RTLD_NOW | RTLD_LOCAL)) {}
    ~FakeNvml() {
        if (m_handle != nullptr) ::dlclose(m_handle);
    }
    FakeNvml(const FakeNvml&) = delete;
    FakeNvml& operator=(const FakeNvml&) = delete;
    int counter(const char* name) const { return *static_cast<int*>(::dlsym(m_handle, name)); }
    bool loaded() const { return m_handle != nullptr; }

  private:
    void* m_handle;
};

}  // namespace ddprun::test
