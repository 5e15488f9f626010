// Devices: the GPU list workers are given. The inherited CUDA_VISIBLE_DEVICES
// wins (kept verbatim: indices, GPU-<uuid>, MIG-<uuid>); otherwise the GPUs the
// driver reports under a /proc root (a seam tests point at a fake tree).
#pragma once

#include <string>
#include <vector>

#include "ddprun/cli.hpp"
#include "ddprun/config.hpp"

namespace ddprun {

// Splits a CUDA_VISIBLE_DEVICES value; empty entries are dropped. A value of
// "" or "-1" (no device) gives an empty list that still counts as inherited.
std::vector<std::string> split_visible_devices(const std::string& value);

// Indices "0".."n-1" of the GPUs listed under <proc_root>/driver/nvidia/gpus.
std::vector<std::string> discover_gpus(const std::string& proc_root = "/proc");

// Devices and CPU count of this node.
NodeResources node_resources(const Environment& env, const std::string& proc_root = "/proc");

}  // namespace ddprun
