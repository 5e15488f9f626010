# `cmake --install build --prefix P`: P/bin/ddprun, the store and OpenSSL
# plugins in P/lib/ddprun (found relative to the binary), ddprun(1), the bash,
# zsh and tcsh completions (P/share/ddprun/completion/ddprun.tcsh), the README,
# the pages of docs/ (P/share/doc/ddprun/docs) and the license. The Debian package
# (scripts/package.sh, cmake/Packaging.cmake) is this same install under /usr.
install(TARGETS ddprun RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ddprun_openssl LIBRARY DESTINATION ${DDPRUN_INSTALL_PLUGINDIR})
if(TARGET ddprun_store)
  # A component of its own: a plugin rebuilt for another torch installs alone
  # (cmake --install build --component store_plugin).
  install(TARGETS ddprun_store LIBRARY DESTINATION ${DDPRUN_INSTALL_PLUGINDIR}
          COMPONENT store_plugin)
endif()
install(FILES ${DDPRUN_DOCS_DIR}/ddprun.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${DDPRUN_DOCS_DIR}/ddprun.bash DESTINATION ${DDPRUN_INSTALL_BASHDIR}
        RENAME ddprun)
install(FILES ${DDPRUN_DOCS_DIR}/_ddprun DESTINATION ${DDPRUN_INSTALL_ZSHDIR})
install(FILES ${DDPRUN_DOCS_DIR}/ddprun.tcsh DESTINATION ${DDPRUN_INSTALL_TCSHDIR})
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
# The manual's pages, beside the README that links them (docs/...).
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
        FILES_MATCHING PATTERN "*.md")
# Debian's name for the license file; as good a name as any elsewhere.
install(FILES LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME copyright)

include(Packaging)
