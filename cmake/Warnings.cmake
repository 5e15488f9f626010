# Warnings on everywhere; -Werror when DDPRUN_WERROR is set (CI sets it).
function(ddprun_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
                         -Wnon-virtual-dtor -Wcast-align
                         -Wunused -Woverloaded-virtual -Wconversion
                         -Wdouble-promotion -Wformat=2)
  if(DDPRUN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
