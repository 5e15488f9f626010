# Builds through ccache (scripts/test.sh configures CMAKE_CXX_COMPILER_LAUNCHER
# =ccache, with CCACHE_BASEDIR at the checkout): a fresh clone in another
# directory then finds the objects an earlier checkout compiled. ccache leaves
# the working directory out of a -g compilation's hash only when
# -fdebug-prefix-map maps it, so the checkout is mapped to "." in the debug
# information (which then names the same paths in every checkout). ccache's
# own checks stay as they are: a changed header still misses.
if(CMAKE_CXX_COMPILER_LAUNCHER MATCHES "ccache")
  add_compile_options(-fdebug-prefix-map=${PROJECT_SOURCE_DIR}=.)
endif()
