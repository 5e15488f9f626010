// A stand-in for ssh in bench (l): `ddprun --hosts ... --ssh-command
// 'stand_in_ssh {host}'` runs it once per host with the host's command line.
// It plays a remote host without one: it takes the host's latency
// (STAND_IN_SLOWEST_S for the host named "slowest", STAND_IN_DELAY_S for the
// others), then answers a preflight as a ddprun of STAND_IN_VERSION would, and
// a run as a job that succeeded. A small program rather than a shell script,
// so that a thousand of them measure the launcher's fan-out, not this
// machine's cost of starting two thousand shells and sleeps.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: stand_in_ssh HOST COMMAND\n");
        return 2;
    }
    const char* delay = std::getenv(std::strcmp(argv[1], "slowest") == 0 ? "STAND_IN_SLOWEST_S"
                                                                         : "STAND_IN_DELAY_S");
    double seconds = delay != nullptr ? std::atof(delay) : 0.2;
    timespec pause{
        static_cast<time_t>(seconds),
        static_cast<long>((seconds - static_cast<double>(static_cast<time_t>(seconds))) * 1e9)};
    while (nanosleep(&pause, &pause) != 0) {
    }
    if (std::strstr(argv[2], " --preflight ") != nullptr) {
        const char* version = std::getenv("STAND_IN_VERSION");
        std::printf("ddprun-preflight %s nproc=8\n", version != nullptr ? version : "?");
    }
    return 0;
}
