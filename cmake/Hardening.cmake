# Hardening, as Debian builds its own packages (dpkg-buildflags): libc calls
# whose buffer sizes the compiler knows are checked (_FORTIFY_SOURCE, which
# needs optimization, so not in Debug builds), stack canaries, and
# relocations made read-only after start. Not for the fuzzers: ASan checks
# the same and more, and does not mix with _FORTIFY_SOURCE.
if(NOT DDPRUN_BUILD_FUZZERS)
  set(ddprun_optimized $<NOT:$<CONFIG:Debug>>)
  add_compile_options($<${ddprun_optimized}:-U_FORTIFY_SOURCE>
                      $<${ddprun_optimized}:-D_FORTIFY_SOURCE=2> -fstack-protector-strong)
  add_link_options(-Wl,-z,relro)
endif()
