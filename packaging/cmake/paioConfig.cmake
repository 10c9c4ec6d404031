# CMake package of libpaio, the C API (installed by paio's `make install`):
#   find_package(paio REQUIRED)
#   target_link_libraries(app PRIVATE paio::paio)         # libpaio.so.0
#   target_link_libraries(app PRIVATE paio::paio_static)  # libpaio.a
# Relocatable: paths are taken from where this file is
# (PREFIX/lib/cmake/paio/).
get_filename_component(_paio_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
foreach(_paio_file "${_paio_prefix}/lib/libpaio.so.0" "${_paio_prefix}/lib/libpaio.a"
                   "${_paio_prefix}/include/paio.h")
  if(NOT EXISTS "${_paio_file}")
    set(paio_FOUND FALSE)
    set(paio_NOT_FOUND_MESSAGE "${_paio_file} is missing: reinstall paio (make install)")
    return()
  endif()
endforeach()
if(NOT TARGET paio::paio)
  add_library(paio::paio SHARED IMPORTED)
  set_target_properties(paio::paio PROPERTIES
    IMPORTED_LOCATION "${_paio_prefix}/lib/libpaio.so.0"
    IMPORTED_SONAME "libpaio.so.0"
    INTERFACE_INCLUDE_DIRECTORIES "${_paio_prefix}/include")
endif()
if(NOT TARGET paio::paio_static)
  add_library(paio::paio_static STATIC IMPORTED)
  set_target_properties(paio::paio_static PROPERTIES
    IMPORTED_LOCATION "${_paio_prefix}/lib/libpaio.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_paio_prefix}/include"
    INTERFACE_LINK_LIBRARIES "pthread;dl;m")
endif()
unset(_paio_prefix)
unset(_paio_file)
