dnl config.m4: the mappedcache extension over libmappedcache (mappedcache.h).
dnl
dnl   phpize && ./configure [--with-mappedcache=DIR] && make     -> modules/mappedcache.so
dnl
dnl DIR holds libmappedcache.so (in DIR or DIR/lib) and, optionally, mappedcache.h (in
dnl DIR/include). The default is this checkout's .build/release, built with swift build
dnl when missing, with the header from Sources/CMappedCacheABI/include (or from
dnl $MAPPEDCACHE_INCLUDE_DIR when set). The library's directory is recorded as the
dnl extension's run path, so nothing else is needed at run time.

PHP_ARG_WITH([mappedcache],
  [for MappedCache support],
  [AS_HELP_STRING([[--with-mappedcache[=DIR]]],
    [MappedCache: DIR holds libmappedcache.so (default: the checkout's .build/release)])],
  [yes])

if test "$PHP_MAPPEDCACHE" != "no"; then
  mc_checkout=`cd "$abs_srcdir/../.." && pwd`
  if test "$PHP_MAPPEDCACHE" = "yes"; then
    PHP_MAPPEDCACHE="$mc_checkout/.build/release"
    dnl The default: the checkout's release library, built here when missing.
    if test ! -f "$PHP_MAPPEDCACHE/libmappedcache.so" && test -f "$mc_checkout/Package.swift"; then
      AC_MSG_NOTICE([building libmappedcache.so: swift build -c release --product mappedcache in $mc_checkout])
      (cd "$mc_checkout" && swift build -c release --product mappedcache) ||
        AC_MSG_ERROR([swift build failed; build libmappedcache.so yourself and pass --with-mappedcache=DIR])
    fi
  fi
  PHP_MAPPEDCACHE=`cd "$PHP_MAPPEDCACHE" 2>/dev/null && pwd || echo "$PHP_MAPPEDCACHE"`

  AC_MSG_CHECKING([for libmappedcache.so])
  MC_LIBDIR=""
  for d in "$PHP_MAPPEDCACHE" "$PHP_MAPPEDCACHE/lib"; do
    if test -f "$d/libmappedcache.so"; then MC_LIBDIR="$d"; break; fi
  done
  if test -z "$MC_LIBDIR"; then
    AC_MSG_RESULT([not found])
    AC_MSG_ERROR([libmappedcache.so is not in $PHP_MAPPEDCACHE or $PHP_MAPPEDCACHE/lib: build it first (swift build -c release --product mappedcache in $mc_checkout) or pass --with-mappedcache=DIR])
  fi
  AC_MSG_RESULT([$MC_LIBDIR])

  AC_MSG_CHECKING([for mappedcache.h])
  MC_INCDIR=""
  for d in "$MAPPEDCACHE_INCLUDE_DIR" "$PHP_MAPPEDCACHE/include" "$mc_checkout/Sources/CMappedCacheABI/include"; do
    if test -n "$d" && test -f "$d/mappedcache.h"; then MC_INCDIR="$d"; break; fi
  done
  if test -z "$MC_INCDIR"; then
    AC_MSG_RESULT([not found])
    AC_MSG_ERROR([mappedcache.h is not in $PHP_MAPPEDCACHE/include or $mc_checkout/Sources/CMappedCacheABI/include])
  fi
  AC_MSG_RESULT([$MC_INCDIR])

  PHP_ADD_INCLUDE([$MC_INCDIR])
  PHP_ADD_LIBRARY_WITH_PATH([mappedcache], [$MC_LIBDIR], [MAPPEDCACHE_SHARED_LIBADD])
  PHP_SUBST([MAPPEDCACHE_SHARED_LIBADD])
  PHP_NEW_EXTENSION([mappedcache], [mappedcache.c mappedcache_values.c mappedcache_functions.c], [$ext_shared],, [-std=gnu11 -Wall -Wextra -Wno-unused-parameter])
fi
