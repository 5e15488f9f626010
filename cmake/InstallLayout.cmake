# Where `cmake --install` puts each piece (GNUInstallDirs below the prefix),
# and what the code needs to know about it. Every destination is relative to
# the prefix, so an install can be copied elsewhere and still work: the binary
# finds the store plugin through DDPRUN_PLUGIN_RELATIVE_DIR, a path relative to
# its own directory (src/store.cpp), not through LD_LIBRARY_PATH or a RUNPATH.
set(DDPRUN_INSTALL_PLUGINDIR "${CMAKE_INSTALL_LIBDIR}/ddprun" CACHE STRING
    "Where the store plugin goes, relative to the prefix")
# zsh reads /usr/share/zsh/vendor-completions for packages (Debian) and
# <prefix>/share/zsh/site-functions for local installs.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(default_zsh_dir "${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions")
else()
  set(default_zsh_dir "${CMAKE_INSTALL_DATADIR}/zsh/site-functions")
endif()
set(DDPRUN_INSTALL_ZSHDIR "${default_zsh_dir}" CACHE STRING
    "Where the zsh completion goes, relative to the prefix")
set(DDPRUN_INSTALL_BASHDIR "${CMAKE_INSTALL_DATADIR}/bash-completion/completions" CACHE STRING
    "Where the bash completion goes, relative to the prefix")

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
