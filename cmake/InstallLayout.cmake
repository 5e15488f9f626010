# Where `cmake --install` puts each piece (GNUInstallDirs below the prefix),
# and what the code needs to know about it. Every destination is relative to
# the prefix, so an install can be copied elsewhere and still work: the binary
# finds the store plugin through DDPRUN_PLUGIN_RELATIVE_DIR, a path relative to
# its own directory (src/store/store.cpp), not through LD_LIBRARY_PATH or a RUNPATH.

# Empty: the default, computed at each configure (so that a build reconfigured
# for another prefix, as scripts/package.sh does with /usr, follows it).
set(DDPRUN_INSTALL_PLUGINDIR "" CACHE STRING
    "Where the store plugin goes, relative to the prefix (default lib/ddprun)")
set(DDPRUN_INSTALL_ZSHDIR "" CACHE STRING
    "Where the zsh completion goes, relative to the prefix (default: share/zsh/vendor-completions for /usr, share/zsh/site-functions elsewhere)")
set(DDPRUN_INSTALL_BASHDIR "" CACHE STRING
    "Where the bash completion goes, relative to the prefix (default share/bash-completion/completions)")
set(DDPRUN_INSTALL_TCSHDIR "" CACHE STRING
    "Where the tcsh completion goes, relative to the prefix (default share/ddprun/completion)")
# A directory of the package's own (Debian policy 9.1.1: /usr/lib/<package>),
# the same under every prefix.
if(NOT DDPRUN_INSTALL_PLUGINDIR)
  set(DDPRUN_INSTALL_PLUGINDIR lib/ddprun)
endif()
# zsh reads /usr/share/zsh/vendor-completions for packages (Debian) and
# <prefix>/share/zsh/site-functions for local installs.
if(NOT DDPRUN_INSTALL_ZSHDIR)
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    set(DDPRUN_INSTALL_ZSHDIR "${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions")
  else()
    set(DDPRUN_INSTALL_ZSHDIR "${CMAKE_INSTALL_DATADIR}/zsh/site-functions")
  endif()
endif()
if(NOT DDPRUN_INSTALL_BASHDIR)
  set(DDPRUN_INSTALL_BASHDIR "${CMAKE_INSTALL_DATADIR}/bash-completion/completions")
endif()
# tcsh reads no directory of completions and Debian names none: a user sources
# the file from ~/.tcshrc. The package's own data directory (Debian policy
# 9.1.1: /usr/share/<package>), the same under every prefix.
if(NOT DDPRUN_INSTALL_TCSHDIR)
  set(DDPRUN_INSTALL_TCSHDIR "${CMAKE_INSTALL_DATADIR}/ddprun/completion")
endif()

foreach(dir CMAKE_INSTALL_BINDIR DDPRUN_INSTALL_PLUGINDIR)
  if(IS_ABSOLUTE "${${dir}}")
    message(FATAL_ERROR "${dir}=${${dir}}: must be relative to the prefix (the binary finds "
                        "the plugin relative to itself)")
  endif()
endforeach()
file(RELATIVE_PATH DDPRUN_PLUGIN_RELATIVE_DIR "/prefix/${CMAKE_INSTALL_BINDIR}"
     "/prefix/${DDPRUN_INSTALL_PLUGINDIR}")

# Gives `target` the generated header ddprun_git_commit.hpp, rewritten at every
# build only when the commit changed. -DDDPRUN_GIT_COMMIT=... names it where
# there is no git checkout (a release tarball).
function(ddprun_git_commit_header target)
  set(dir ${CMAKE_BINARY_DIR}/generated)
  set(header ${dir}/ddprun_git_commit.hpp)
  set(command ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DOUTPUT=${header}
              -DDDPRUN_GIT_COMMIT=${DDPRUN_GIT_COMMIT} -P ${PROJECT_SOURCE_DIR}/cmake/GitCommit.cmake)
  file(MAKE_DIRECTORY ${dir})
  execute_process(COMMAND ${command})
  add_custom_target(ddprun_git_commit COMMAND ${command} BYPRODUCTS ${header} VERBATIM)
  add_dependencies(${target} ddprun_git_commit)
  target_include_directories(${target} PRIVATE ${dir})
endfunction()
