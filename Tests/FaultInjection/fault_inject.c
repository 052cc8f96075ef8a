// An LD_PRELOAD library that makes chosen file-system calls fail, for the fault tests
// (ReliabilityFaultTests compiles it with `cc -shared -fPIC` when it runs; it is no
// SwiftPM target). Driven by the environment:
//
//   MC_FAULT_CALLS   comma-separated names of the calls to fail: posix_fallocate,
//                    fallocate, ftruncate, pwrite, write, msync, fsync, fdatasync,
//                    or "all". Unset: nothing fails.
//   MC_FAULT_ERRNO   ENOSPC (default) or EIO, or a number.
//   MC_FAULT_AFTER   let this many matching calls succeed first (default 0).
//   MC_FAULT_TIMES   fail at most this many calls (default: every one after AFTER).
//   MC_FAULT_PATH    only calls on a descriptor whose path contains this string
//                    (msync, which has no descriptor, always matches).
//   MC_FAULT_LOG     append one line "NAME errno" per injected failure to this file,
//                    so that a test can prove the fault fired.
//
// A matching call fails without reaching the kernel, as a full or failing disk would
// make it fail: -1 and errno (posix_fallocate returns the error number instead).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static long matched;
static long injected;

static int wants(const char *name, int fd) {
  const char *calls = getenv("MC_FAULT_CALLS");
  if (!calls || !*calls) return 0;
  if (strcmp(calls, "all") != 0) {
    size_t n = strlen(name);
    const char *p = calls;
    int found = 0;
    while ((p = strstr(p, name)) != NULL) {
      if ((p == calls || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) { found = 1; break; }
      p += n;
    }
    if (!found) return 0;
  }
  const char *pattern = getenv("MC_FAULT_PATH");
  if (pattern && *pattern && fd >= 0) {
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(link, target, sizeof target - 1);
    if (len < 0) return 0;
    target[len] = 0;
    if (!strstr(target, pattern)) return 0;
  }
  const char *after = getenv("MC_FAULT_AFTER");
  const char *times = getenv("MC_FAULT_TIMES");
  long a = after ? atol(after) : 0;
  long m = __atomic_add_fetch(&matched, 1, __ATOMIC_RELAXED);
  if (m <= a) return 0;
  if (times && __atomic_load_n(&injected, __ATOMIC_RELAXED) >= atol(times)) return 0;
  __atomic_add_fetch(&injected, 1, __ATOMIC_RELAXED);
  return 1;
}

static int fault_errno(void) {
  const char *e = getenv("MC_FAULT_ERRNO");
  if (!e || !*e || strcmp(e, "ENOSPC") == 0) return ENOSPC;
  if (strcmp(e, "EIO") == 0) return EIO;
  return atoi(e);
}

// Logged with raw system calls: the write wrapper below must not see its own log.
static void note(const char *name, int err) {
  const char *log = getenv("MC_FAULT_LOG");
  if (!log || !*log) return;
  int fd = (int)syscall(SYS_openat, AT_FDCWD, log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  char line[128];
  int n = snprintf(line, sizeof line, "%s %d\n", name, err);
  syscall(SYS_write, fd, line, (size_t)n);
  syscall(SYS_close, fd);
}

#define REAL(name) \
  static __typeof__(&name) real_##name; \
  if (!real_##name) real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

#define FAIL_ERRNO(name, fd) \
  if (wants(#name, fd)) { int e = fault_errno(); note(#name, e); errno = e; return -1; }

int posix_fallocate(int fd, off_t offset, off_t len) {
  REAL(posix_fallocate);
  if (wants("posix_fallocate", fd)) { int e = fault_errno(); note("posix_fallocate", e); return e; }
  return real_posix_fallocate(fd, offset, len);
}

int posix_fallocate64(int fd, off_t offset, off_t len) {
  REAL(posix_fallocate64);
  if (wants("posix_fallocate", fd)) { int e = fault_errno(); note("posix_fallocate", e); return e; }
  return real_posix_fallocate64(fd, offset, len);
}

int fallocate(int fd, int mode, off_t offset, off_t len) {
  REAL(fallocate);
  FAIL_ERRNO(fallocate, fd);
  return real_fallocate(fd, mode, offset, len);
}

int fallocate64(int fd, int mode, off_t offset, off_t len) {
  REAL(fallocate64);
  FAIL_ERRNO(fallocate, fd);
  return real_fallocate64(fd, mode, offset, len);
}

int ftruncate(int fd, off_t len) {
  REAL(ftruncate);
  FAIL_ERRNO(ftruncate, fd);
  return real_ftruncate(fd, len);
}

int ftruncate64(int fd, off_t len) {
  REAL(ftruncate64);
  FAIL_ERRNO(ftruncate, fd);
  return real_ftruncate64(fd, len);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t offset) {
  REAL(pwrite);
  FAIL_ERRNO(pwrite, fd);
  return real_pwrite(fd, buf, n, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t offset) {
  REAL(pwrite64);
  FAIL_ERRNO(pwrite, fd);
  return real_pwrite64(fd, buf, n, offset);
}

ssize_t write(int fd, const void *buf, size_t n) {
  REAL(write);
  FAIL_ERRNO(write, fd);
  return real_write(fd, buf, n);
}

int msync(void *addr, size_t len, int flags) {
  REAL(msync);
  FAIL_ERRNO(msync, -1);
  return real_msync(addr, len, flags);
}

int fsync(int fd) {
  REAL(fsync);
  FAIL_ERRNO(fsync, fd);
  return real_fsync(fd);
}

int fdatasync(int fd) {
  REAL(fdatasync);
  FAIL_ERRNO(fdatasync, fd);
  return real_fdatasync(fd);
}
