// What a job secret costs one record (signed_store.hpp): signing and checking
// a node's join record (about 300 bytes) and the membership of a 1024-node round
// (about 30 KB), next to copying the same record, the least any store write or
// read does with it. Google Benchmark:
//
//   build/bench/record_signing
#include <string>

#include <benchmark/benchmark.h>

#include "ddprun/store/signed_store.hpp"

namespace {

const std::string k_secret(32, 's');
const std::string k_key = "ddprun/job42/r0/info/17";

std::string record(benchmark::State& state) {
    return std::string(static_cast<std::size_t>(state.range(0)), 'r');
}

void copy_record(benchmark::State& state) {
    const std::string value = record(state);
    for (auto _ : state) {
        std::string copy = value;
        benchmark::DoNotOptimize(copy);
    }
    state.SetBytesProcessed(state.iterations() * state.range(0));
}

void sign_record(benchmark::State& state) {
    const std::string value = record(state);
    for (auto _ : state) benchmark::DoNotOptimize(ddprun::sign_record(k_secret, k_key, value));
    state.SetBytesProcessed(state.iterations() * state.range(0));
}

void check_record(benchmark::State& state) {
    const std::string stored = ddprun::sign_record(k_secret, k_key, record(state));
    for (auto _ : state) {
        auto value = ddprun::open_record(k_secret, k_key, stored);
        if (!value) state.SkipWithError("a signed record was refused");
        benchmark::DoNotOptimize(value);
    }
    state.SetBytesProcessed(state.iterations() * state.range(0));
}

BENCHMARK(copy_record)->Arg(300)->Arg(30000);
BENCHMARK(sign_record)->Arg(300)->Arg(30000);
BENCHMARK(check_record)->Arg(300)->Arg(30000);

}  // namespace

BENCHMARK_MAIN();
