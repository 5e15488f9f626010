# The Debian package, built by CPack from the install rules (cmake/Install.cmake):
# scripts/package.sh configures with -DCMAKE_INSTALL_PREFIX=/usr, computes
# Depends (ddprun's own shared libraries) and Recommends (the store plugin's:
# libtorch, which single-node jobs never load) with dpkg-shlibdeps, and hands
# them to cpack as CPACK_DEBIAN_PACKAGE_DEPENDS / _RECOMMENDS.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ddprun)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "ddprun authors <ddprun@users.noreply.github.com>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "native launcher for distributed training (torchrun's flags)")
# The extended description: CPack puts the summary first, indents each line
# and writes an empty line as Debian's " .".
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "ddprun starts the workers of a distributed training job on each node with
torchrun's flags and worker environment, without Python: it prefixes every
line of output with the rank, never leaves an orphaned GPU process behind and
stops the whole job, on every node, as soon as one worker fails.

Multi-node jobs meet through libtorch's TCPStore (the store plugin, which
needs libtorch, recommended) or through an etcd v3 cluster.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # ddprun_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# CPack's own dpkg-shlibdeps run would make libtorch a hard dependency.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${DDPRUN_DEB_DEPENDS}")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "${DDPRUN_DEB_RECOMMENDS}")
set(CPACK_SOURCE_IGNORE_FILES "/build.*/;/\\\\.git/")

# A native package carries its changelog (Debian policy 12.7).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  string(TIMESTAMP changelog_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
  file(WRITE ${CMAKE_BINARY_DIR}/debian/changelog
       "ddprun (${PROJECT_VERSION}) unstable; urgency=medium\n\n"
       "  * Built from the ddprun source tree by scripts/package.sh.\n\n"
       " -- ${CPACK_PACKAGE_CONTACT}  ${changelog_date}\n")
  execute_process(COMMAND gzip -9nf ${CMAKE_BINARY_DIR}/debian/changelog)
  install(FILES ${CMAKE_BINARY_DIR}/debian/changelog.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})
endif()

include(CPack)
