// A stand-in for libnvidia-ml.so.1 with the entry points ddprun's query_nvml
// uses, so the dlopen path is tested on machines without a GPU. The GPUs come
// from FAKE_NVML_GPUS, read at nvmlInit_v2:
//   "GPU-aaa@00000000:3B:00.0,GPU-bbb@00000000:5E:00.0"
// an entry "!" is a GPU whose handle cannot be opened. FAKE_NVML_INIT_FAIL=1
// makes nvmlInit_v2 fail as it does without a driver. fake_nvml_active counts
// inits not yet shut down (tests check the pairing), fake_nvml_init_calls all
// calls (tests check NVML is not paid for when it is not needed).
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct FakeGpu {
    bool opens = true;
    std::string uuid;
    std::string bus_id;
};

std::vector<FakeGpu> g_gpus;

constexpr int k_success = 0;
constexpr int k_uninitialized = 1;
constexpr int k_invalid_argument = 2;
constexpr int k_insufficient_size = 7;
constexpr int k_driver_not_loaded = 9;

struct PciInfo {
    char bus_id_legacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pci_device_id;
    unsigned int pci_subsystem_id;
    char bus_id[32];
};

std::vector<FakeGpu> parse(const char* text) {
    std::vector<FakeGpu> gpus;
    std::string value = text == nullptr ? "" : text;
    std::size_t start = 0;
    while (start < value.size()) {
        std::size_t end = value.find(',', start);
        if (end == std::string::npos) end = value.size();
        std::string item = value.substr(start, end - start);
        FakeGpu gpu;
        if (item == "!") {
            gpu.opens = false;
        } else {
            auto at = item.find('@');
            gpu.uuid = item.substr(0, at);
            if (at != std::string::npos) gpu.bus_id = item.substr(at + 1);
        }
        gpus.push_back(gpu);
        start = end + 1;
    }
    return gpus;
}

// A handle is 1 + the index, never null.
const FakeGpu* gpu_of(void* handle) {
    auto index = reinterpret_cast<std::size_t>(handle);
    if (index == 0 || index > g_gpus.size()) return nullptr;
    return &g_gpus[index - 1];
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int fake_nvml_active = 0;
__attribute__((visibility("default"))) int fake_nvml_init_calls = 0;

__attribute__((visibility("default"))) int nvmlInit_v2() {
    ++fake_nvml_init_calls;
    const char* fail = std::getenv("FAKE_NVML_INIT_FAIL");
    if (fail != nullptr && std::strcmp(fail, "1") == 0) return k_driver_not_loaded;
    g_gpus = parse(std::getenv("FAKE_NVML_GPUS"));
    ++fake_nvml_active;
    return k_success;
}

__attribute__((visibility("default"))) int nvmlShutdown() {
    if (fake_nvml_active == 0) return k_uninitialized;
    --fake_nvml_active;
    return k_success;
}

__attribute__((visibility("default"))) int nvmlDeviceGetCount_v2(unsigned int* count) {
    if (fake_nvml_active == 0) return k_uninitialized;
    *count = static_cast<unsigned int>(g_gpus.size());
    return k_success;
}

__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                                         void** device) {
    if (fake_nvml_active == 0) return k_uninitialized;
    if (index >= g_gpus.size() || !g_gpus[index].opens) return k_invalid_argument;
    *device = reinterpret_cast<void*>(static_cast<std::size_t>(index) + 1);
    return k_success;
}

__attribute__((visibility("default"))) int nvmlDeviceGetUUID(void* device, char* uuid,
                                                             unsigned int length) {
    const FakeGpu* gpu = gpu_of(device);
    if (gpu == nullptr) return k_invalid_argument;
    if (gpu->uuid.size() + 1 > length) return k_insufficient_size;
    std::memcpy(uuid, gpu->uuid.c_str(), gpu->uuid.size() + 1);
    return k_success;
}

__attribute__((visibility("default"))) int nvmlDeviceGetPciInfo_v3(void* device, PciInfo* pci) {
    const FakeGpu* gpu = gpu_of(device);
    if (gpu == nullptr || gpu->bus_id.size() >= sizeof pci->bus_id) return k_invalid_argument;
    std::memset(pci, 0, sizeof *pci);
    std::memcpy(pci->bus_id, gpu->bus_id.c_str(), gpu->bus_id.size() + 1);
    return k_success;
}

}  // extern "C"
