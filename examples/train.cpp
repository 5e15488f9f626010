// examples/train: a small C++ data-parallel trainer (libtorch, c10d gloo, CPU)
// that checks itself. It exists to show ddprun launching a real native job,
// not a Python one: ranks that were started with wrong RANK, WORLD_SIZE,
// MASTER_ADDR or MASTER_PORT never form a process group or end with different
// parameters, and the program says so and exits 1.
//
//     ddprun --nproc_per_node=4 build/examples/train --steps 20
//
// It does by hand what torch's DistributedDataParallel does for a Python
// script: the same initial weights on every rank, per-rank data, gradients
// averaged with one all-reduce per step, so every rank takes the same steps.
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

constexpr std::string_view k_usage =
    "usage: train [--steps N] [--seed N] [--timeout SECONDS]\n"
    "Run under a launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (ddprun).\n";

struct Options {
    int steps = 20;
    int seed = 1234;
    int timeout_s = 60;
};

// A failed check or a broken environment: one line for the user, exit 1.
struct CheckFailed : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A mistake on the command line: the usage, exit 2.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

int parse_int(std::string_view name, std::string_view text, int min, int max) {
    int value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc{} || end != text.data() + text.size() || value < min || value > max) {
        throw UsageError(std::string(name) + " must be an integer in [" + std::to_string(min) +
                         ", " + std::to_string(max) + "], got '" + std::string(text) + "'");
    }
    return value;
}

Options parse_options(int argc, char** argv) {
    Options options;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i];
        if (arg == "-h" || arg == "--help") {
            std::fputs(k_usage.data(), stdout);
            std::exit(0);
        }
        // Both "--steps 5" and "--steps=5".
        std::string_view name = arg.substr(0, arg.find('='));
        std::optional<std::string_view> value;
        if (name.size() < arg.size()) {
            value = arg.substr(name.size() + 1);
        } else if (i + 1 < argc) {
            value = argv[++i];
        }
        if (name != "--steps" && name != "--seed" && name != "--timeout") {
            throw UsageError("unknown argument '" + std::string(arg) + "'");
        }
        if (!value) throw UsageError(std::string(name) + " needs a value");
        if (name == "--steps") options.steps = parse_int(name, *value, 1, 1'000'000);
        if (name == "--seed")
            options.seed = parse_int(name, *value, 0, std::numeric_limits<int>::max());
        if (name == "--timeout") options.timeout_s = parse_int(name, *value, 1, 24 * 3600);
    }
    return options;
}

std::string require_env(const char* name) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') {
        throw CheckFailed(std::string("environment variable ") + name +
                          " is not set; run this under a launcher (ddprun)");
    }
    return value;
}

int env_int(const char* name, int min, int max) {
    std::string text = require_env(name);
    int value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc{} || end != text.data() + text.size() || value < min || value > max) {
        throw CheckFailed(std::string("environment variable ") + name + "='" + text +
                          "' is not an integer in [" + std::to_string(min) + ", " +
                          std::to_string(max) + "]");
    }
    return value;
}

struct Env {
    int rank = 0;
    int world_size = 0;
    std::string master_addr;
    std::uint16_t master_port = 0;
};

Env read_env() {
    Env env;
    env.world_size = env_int("WORLD_SIZE", 1, 1 << 20);
    env.rank = env_int("RANK", 0, env.world_size - 1);
    env.master_addr = require_env("MASTER_ADDR");
    env.master_port = static_cast<std::uint16_t>(env_int("MASTER_PORT", 1, 65535));
    return env;
}

// Where gloo's sockets listen: the interface GLOO_SOCKET_IFNAME names (as
// torch.distributed honours it), else the address this host's name resolves
// to, falling back to loopback.
std::shared_ptr<::gloo::transport::Device> make_gloo_device() {
    if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
        interface != nullptr && *interface != '\0') {
        return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
    }
    return c10d::ProcessGroupGloo::createDefaultDevice();
}

// Whether something accepts TCP connections at host:port, trying for at most
// `timeout`.
bool accepts_connections(const std::string& host, std::uint16_t port,
                         std::chrono::milliseconds timeout) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* addresses = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &addresses) != 0)
        return false;
    bool connected = false;
    for (addrinfo* address = addresses; address != nullptr && !connected;
         address = address->ai_next) {
        int fd = socket(address->ai_family, address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        address->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, address->ai_addr, address->ai_addrlen) == 0) {
            connected = true;
        } else if (errno == EINPROGRESS) {
            pollfd waiting{fd, POLLOUT, 0};
            int error = 0;
            socklen_t length = sizeof(error);
            connected = poll(&waiting, 1, static_cast<int>(timeout.count())) == 1 &&
                        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
        }
        close(fd);
    }
    freeaddrinfo(addresses);
    return connected;
}

// c10d 1.13's client sleeps a whole second after a refused connect before it
// tries again, and the workers of a job start at the same moment as rank 0,
// which needs about half a second to load libtorch and listen: most clients
// would lose that second. Probing every few milliseconds first costs nothing.
void wait_for_server(const std::string& host, std::uint16_t port,
                     std::chrono::milliseconds timeout) {
    constexpr auto k_probe_interval = std::chrono::milliseconds(10);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!accepts_connections(host, port, std::chrono::milliseconds(1000))) {
        // Past the deadline TCPStore's own connect reports the error.
        if (std::chrono::steady_clock::now() + k_probe_interval >= deadline) return;
        std::this_thread::sleep_for(k_probe_interval);
    }
}

// torch 2.4 and later default TCPStore to its libuv server, which builds without
// libuv (Debian's torch among them) cannot start; torch.distributed's env:// honours
// USE_LIBUV=0 for that, and so does this program. The classic server is in every
// build. (A template: the field does not exist before torch 2.2.)
template <class Options>
void choose_store_server(Options& options) {
    if constexpr (requires { options.useLibUV; }) {
        const char* use_libuv = std::getenv("USE_LIBUV");
        options.useLibUV = use_libuv == nullptr || std::string_view(use_libuv) != "0";
    }
}

// env:// as torch.distributed does it: rank 0 hosts the store at
// MASTER_ADDR:MASTER_PORT and the other ranks connect to it, except under
// torchrun, whose agent on node 0 hosts the store for every rank
// (TORCHELASTIC_USE_AGENT_STORE=True).
c10::intrusive_ptr<c10d::Store> connect_store(const Env& env, std::chrono::milliseconds timeout) {
    const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
    bool use_agent_store = agent_store != nullptr && std::string_view(agent_store) == "True";
    c10d::TCPStoreOptions store_options;
    store_options.port = env.master_port;
    store_options.isServer = env.rank == 0 && !use_agent_store;
    store_options.waitWorkers = false;  // the process group's own rendezvous waits for everyone
    store_options.timeout = timeout;
    choose_store_server(store_options);
    if (!store_options.isServer) wait_for_server(env.master_addr, env.master_port, timeout);
    c10::intrusive_ptr<c10d::Store> store =
        c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
    // The namespaces torch.distributed uses, so that keys of other users of
    // the same store (torchrun's agents, a later group) cannot collide.
    if (use_agent_store) {
        const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
        store = c10::make_intrusive<c10d::PrefixStore>(
            std::string("/worker/attempt_") + (attempt != nullptr ? attempt : "0"), store);
    }
    return c10::make_intrusive<c10d::PrefixStore>("default_pg", store);
}

void all_reduce_sum(c10d::ProcessGroupGloo& group, torch::Tensor& tensor) {
    std::vector<torch::Tensor> tensors{tensor};
    group.allreduce(tensors)->wait();
}

// Each rank contributes its rank: the sum 0+1+...+(W-1) proves that every rank
// joined with a distinct RANK value and that collectives work.
void check_ranks(c10d::ProcessGroupGloo& group, const Env& env) {
    auto ranks = torch::tensor({static_cast<double>(env.rank)}, torch::kFloat64);
    all_reduce_sum(group, ranks);
    double expected = env.world_size * (env.world_size - 1.0) / 2.0;
    if (ranks.item<double>() != expected) {
        throw CheckFailed("all-reduce of the ranks gave " + std::to_string(ranks.item<double>()) +
                          ", expected " + std::to_string(expected) +
                          " (duplicate or missing RANK values?)");
    }
}

torch::Tensor flatten(const std::vector<torch::Tensor>& tensors) {
    std::vector<torch::Tensor> flat;
    flat.reserve(tensors.size());
    for (const auto& tensor : tensors) flat.push_back(tensor.detach().reshape(-1));
    return torch::cat(flat);
}

// Trains `steps` SGD steps with gradients averaged across ranks; returns the
// loss averaged across ranks at the last step.
double train(c10d::ProcessGroupGloo& group, const Env& env, const Options& options,
             torch::nn::Sequential& model) {
    // Per-rank data, so gradients differ until they are all-reduced: a rank
    // that skipped the all-reduce would end with different parameters.
    torch::manual_seed(static_cast<std::uint64_t>(options.seed) * 1000 +
                       static_cast<std::uint64_t>(env.rank) + 1);
    auto inputs = torch::randn({options.steps, 32, 16});
    auto targets = inputs.sum(2, /*keepdim=*/true);

    auto parameters = model->parameters();
    torch::optim::SGD optimizer(parameters, torch::optim::SGDOptions(0.05));
    double mean_loss = 0.0;
    for (int step = 0; step < options.steps; ++step) {
        optimizer.zero_grad();
        auto loss = torch::mse_loss(model->forward(inputs[step]), targets[step]);
        loss.backward();

        // One all-reduce per step: every gradient and the loss in one buffer.
        std::vector<torch::Tensor> pieces;
        for (const auto& parameter : parameters) pieces.push_back(parameter.grad());
        pieces.push_back(loss.detach());
        auto buffer = flatten(pieces);
        all_reduce_sum(group, buffer);
        buffer.div_(env.world_size);

        std::int64_t offset = 0;
        for (auto& parameter : parameters) {
            auto count = parameter.numel();
            parameter.mutable_grad().copy_(buffer.narrow(0, offset, count).view_as(parameter));
            offset += count;
        }
        mean_loss = buffer[offset].item<double>();
        optimizer.step();
    }
    return mean_loss;
}

// Gathers every rank's flattened parameters: every rank reaches the same
// verdict, so every rank exits with the same code.
void check_parameters_identical(c10d::ProcessGroupGloo& group, const Env& env,
                                torch::nn::Sequential& model) {
    auto local = flatten(model->parameters());
    std::vector<std::vector<torch::Tensor>> gathered(1);
    for (int i = 0; i < env.world_size; ++i) gathered[0].push_back(torch::empty_like(local));
    std::vector<torch::Tensor> inputs{local};
    group.allgather(gathered, inputs)->wait();
    const auto& reference = gathered[0][0];
    for (int other = 1; other < env.world_size; ++other) {
        const auto& parameters = gathered[0][static_cast<std::size_t>(other)];
        if (!torch::equal(parameters, reference)) {
            double diff = (parameters - reference).abs().max().item<double>();
            throw CheckFailed("parameters of rank " + std::to_string(other) +
                              " differ from rank 0 (max abs diff " + std::to_string(diff) + ")");
        }
    }
}

void run(const Options& options) {
    Env env = read_env();
    // One thread per worker: the model is tiny and the launcher may start
    // several workers on a few cores.
    torch::set_num_threads(1);

    std::chrono::milliseconds timeout = std::chrono::seconds(options.timeout_s);
    auto store = connect_store(env, timeout);
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout);
    gloo_options->devices.push_back(make_gloo_device());
    gloo_options->threads = 1;
    auto group =
        c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, gloo_options);

    check_ranks(*group, env);

    // The same initial weights on every rank, from the same seed.
    torch::manual_seed(static_cast<std::uint64_t>(options.seed));
    torch::nn::Sequential model(torch::nn::Linear(16, 32), torch::nn::Tanh(),
                                torch::nn::Linear(32, 1));

    double loss = train(*group, env, options, model);
    check_parameters_identical(*group, env, model);
    if (env.rank == 0) {
        std::printf("train: world_size=%d steps=%d loss=%.6f parameters identical on all ranks\n",
                    env.world_size, options.steps, loss);
        std::fflush(stdout);
    }

    // Everyone leaves together, so no rank closes its gloo connections while
    // another still talks to them; then the group goes before the store
    // (rank 0's store is the server the group rendezvoused through).
    group->barrier()->wait();
    group.reset();
    store.reset();
}

}  // namespace

int main(int argc, char** argv) {
    const char* rank = std::getenv("RANK");
    std::string who = std::string("train: rank ") + (rank != nullptr ? rank : "?") + ": ";
    try {
        run(parse_options(argc, argv));
        return 0;
    } catch (const UsageError& error) {
        std::fprintf(stderr, "train: %s\n%s", error.what(), k_usage.data());
        return 2;
    } catch (const CheckFailed& error) {
        std::fprintf(stderr, "%scheck failed: %s\n", who.c_str(), error.what());
    } catch (const c10::Error& error) {
        // c10 messages carry a backtrace after the first line.
        std::string message = error.what_without_backtrace();
        std::fprintf(stderr, "%s%s\n", who.c_str(), message.substr(0, message.find('\n')).c_str());
    } catch (const std::exception& error) {  // a peer vanished, a timeout, a bad MASTER_PORT...
        std::fprintf(stderr, "%s%s\n", who.c_str(), error.what());
    }
    return 1;
}
