// Writes ddprun(1) and the bash, zsh and tcsh completions from the option
// table, at build time (CMakeLists.txt): `generate_docs man|bash|zsh|tcsh OUTPUT`.
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>

#include "cli/cli_docs.hpp"

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: generate_docs man|bash|zsh|tcsh OUTPUT\n");
        return 2;
    }
    std::string_view kind = argv[1];
    std::string text;
    if (kind == "man")
        text = ddprun::cli::man_page(DDPRUN_VERSION);
    else if (kind == "bash")
        text = ddprun::cli::bash_completion();
    else if (kind == "zsh")
        text = ddprun::cli::zsh_completion();
    else if (kind == "tcsh")
        text = ddprun::cli::tcsh_completion();
    else {
        std::fprintf(stderr, "generate_docs: unknown kind '%s' (man, bash, zsh or tcsh)\n",
                     argv[1]);
        return 2;
    }
    std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
        std::fprintf(stderr, "generate_docs: cannot write %s\n", argv[2]);
        return 1;
    }
    return 0;
}
