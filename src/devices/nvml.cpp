// Queries NVML through dlopen (see nvml.hpp). Only the handful of entry points
// ddprun needs are declared here, with the layouts of NVIDIA's nvml.h, so the
// build needs no CUDA headers.
#include "ddprun/devices/nvml.hpp"

#include <dlfcn.h>

#include <cstring>
#include <memory>

#include "ddprun/devices/topology.hpp"

namespace ddprun {
namespace {

using NvmlReturn = int;  // nvmlReturn_t
constexpr NvmlReturn k_nvml_success = 0;
using NvmlDevice = struct NvmlDeviceOpaque*;  // nvmlDevice_t

constexpr unsigned k_uuid_buffer_size = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

// nvmlPciInfo_t as nvmlDeviceGetPciInfo_v3 (and _v2) fill it.
struct NvmlPciInfo {
    char bus_id_legacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pci_device_id;
    unsigned int pci_subsystem_id;
    char bus_id[32];  // "00000000:3B:00.0"
};

struct LibraryCloser {
    void operator()(void* handle) const { ::dlclose(handle); }
};
using Library = std::unique_ptr<void, LibraryCloser>;

template <typename Function>
Function* symbol(void* library, const char* name) {
    return reinterpret_cast<Function*>(::dlsym(library, name));
}

// A NUL-terminated string from a fixed buffer NVML may have filled to the end.
std::string from_buffer(const char* buffer, std::size_t size) {
    return std::string(buffer, ::strnlen(buffer, size));
}

}  // namespace

std::optional<std::vector<GpuInfo>> query_nvml(const std::string& library) {
    Library handle(::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL));
    if (!handle) return std::nullopt;
    auto init = symbol<NvmlReturn()>(handle.get(), "nvmlInit_v2");
    auto shutdown = symbol<NvmlReturn()>(handle.get(), "nvmlShutdown");
    auto get_count = symbol<NvmlReturn(unsigned*)>(handle.get(), "nvmlDeviceGetCount_v2");
    auto get_handle =
        symbol<NvmlReturn(unsigned, NvmlDevice*)>(handle.get(), "nvmlDeviceGetHandleByIndex_v2");
    auto get_uuid =
        symbol<NvmlReturn(NvmlDevice, char*, unsigned)>(handle.get(), "nvmlDeviceGetUUID");
    // _v3 (R450+) and _v2 fill the same struct; the older one keeps old drivers on NVML.
    auto get_pci =
        symbol<NvmlReturn(NvmlDevice, NvmlPciInfo*)>(handle.get(), "nvmlDeviceGetPciInfo_v3");
    if (!get_pci)
        get_pci =
            symbol<NvmlReturn(NvmlDevice, NvmlPciInfo*)>(handle.get(), "nvmlDeviceGetPciInfo_v2");
    if (!init || !shutdown || !get_count || !get_handle || !get_uuid || !get_pci)
        return std::nullopt;
    if (init() != k_nvml_success) return std::nullopt;

    std::optional<std::vector<GpuInfo>> gpus;
    unsigned count = 0;
    if (get_count(&count) == k_nvml_success) {
        gpus.emplace();
        for (unsigned i = 0; i < count; ++i) {
            GpuInfo gpu;
            gpu.index = static_cast<int>(i);
            // A GPU NVML cannot open (no permission, fallen off the bus) keeps
            // its place, so the indices of the GPUs after it stay right.
            NvmlDevice device = nullptr;
            if (get_handle(i, &device) == k_nvml_success) {
                char uuid[k_uuid_buffer_size] = {};
                if (get_uuid(device, uuid, sizeof uuid) == k_nvml_success)
                    gpu.uuid = from_buffer(uuid, sizeof uuid);
                NvmlPciInfo pci{};
                if (get_pci(device, &pci) == k_nvml_success) {
                    std::string bus = from_buffer(pci.bus_id, sizeof pci.bus_id);
                    if (bus.empty()) bus = from_buffer(pci.bus_id_legacy, sizeof pci.bus_id_legacy);
                    gpu.pci_bus_id = normalize_pci_bus_id(bus);
                }
            }
            gpus->push_back(std::move(gpu));
        }
    }
    shutdown();
    return gpus;
}

}  // namespace ddprun
