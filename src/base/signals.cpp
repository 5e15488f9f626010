// Signal names and masks (see signals.hpp).
#include "ddprun/base/signals.hpp"

#include <fmt/format.h>
#include <pthread.h>

#include <cctype>
#include <system_error>
#include <utility>

namespace ddprun {
namespace {

// A table rather than strsignal(), which gives prose ("Segmentation fault"); the
// macros keep the numbers right on every architecture. The first name of a
// number is the one shown (SIGABRT, not SIGIOT).
constexpr std::pair<int, std::string_view> k_names[] = {
    {SIGHUP, "HUP"},       {SIGINT, "INT"},   {SIGQUIT, "QUIT"},     {SIGILL, "ILL"},
    {SIGTRAP, "TRAP"},     {SIGABRT, "ABRT"}, {SIGIOT, "IOT"},       {SIGBUS, "BUS"},
    {SIGFPE, "FPE"},       {SIGKILL, "KILL"}, {SIGUSR1, "USR1"},     {SIGSEGV, "SEGV"},
    {SIGUSR2, "USR2"},     {SIGPIPE, "PIPE"}, {SIGALRM, "ALRM"},     {SIGTERM, "TERM"},
    {SIGSTKFLT, "STKFLT"}, {SIGCHLD, "CHLD"}, {SIGCONT, "CONT"},     {SIGSTOP, "STOP"},
    {SIGTSTP, "TSTP"},     {SIGTTIN, "TTIN"}, {SIGTTOU, "TTOU"},     {SIGURG, "URG"},
    {SIGXCPU, "XCPU"},     {SIGXFSZ, "XFSZ"}, {SIGVTALRM, "VTALRM"}, {SIGPROF, "PROF"},
    {SIGWINCH, "WINCH"},   {SIGIO, "IO"},     {SIGPOLL, "POLL"},     {SIGPWR, "PWR"},
    {SIGSYS, "SYS"},
};

}  // namespace

std::string signal_name(int signal) {
    for (const auto& [number, name] : k_names)
        if (number == signal) return fmt::format("SIG{}", name);
    return fmt::format("signal {}", signal);
}

std::optional<int> signal_number(std::string_view name) {
    std::string upper;
    for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::string_view bare = upper;
    if (bare.starts_with("SIG")) bare.remove_prefix(3);
    for (const auto& [number, known] : k_names)
        if (known == bare) return number;
    return std::nullopt;
}

sigset_t block_signals(const std::vector<int>& signals) {
    sigset_t set, old;
    sigemptyset(&set);
    for (int sig : signals) sigaddset(&set, sig);
    if (int err = ::pthread_sigmask(SIG_BLOCK, &set, &old); err != 0)
        throw std::system_error(err, std::generic_category(), "pthread_sigmask");
    return old;
}

bool signal_ignored(int signal) {
    struct sigaction current {};
    return ::sigaction(signal, nullptr, &current) == 0 && current.sa_handler == SIG_IGN;
}

int parent_death_signal() {
    return SIGRTMIN;
}

}  // namespace ddprun
